//! The embedded router's request records and step model through the safe
//! API: the EldrCost default, step constants, route_request / complete
//! (unknown and repeated ids), complete(worker) oldest first, reports, stats.

mod common;

use common::{fitted_table, footprint, Rng, EXPERTS, LAYERS};
use eldr::{status, Footprint, Policy, Router, RouterOptions, StepCost, WorkerReport};

/// tau 0: every request goes to its most similar worker.
fn locality(options: RouterOptions) -> Router {
    let options = RouterOptions {
        policy: Policy::Eldr,
        tau: Some(0.0),
        ..options
    };
    Router::new(&fitted_table(4), &options).unwrap()
}

fn inflight(sut: &Router, worker: i32) -> u32 {
    sut.workers()
        .unwrap()
        .iter()
        .find(|s| s.worker == worker)
        .unwrap()
        .inflight
}

fn counts(seed: u64, task: u32) -> Vec<i16> {
    footprint(&mut Rng::new(seed), task, 4)
}

#[test]
fn the_default_policy_is_eldr_cost() {
    let options = RouterOptions::default();
    assert_eq!(options.policy, Policy::EldrCost);
    assert_eq!(options.step_cost, None);
    assert!(options.fit_step_cost);
    assert_eq!(Policy::from_name("eldr_cost"), Some(Policy::EldrCost));
    assert_eq!(Policy::EldrCost.as_raw(), 7);
    let sut = Router::new(&fitted_table(4), &options).unwrap();
    let c = counts(1, 0);
    let d = sut
        .route(&Footprint::new(&c, LAYERS, EXPERTS).unwrap())
        .unwrap();
    assert_eq!(d.policy(), Some(Policy::EldrCost));
}

#[test]
fn step_constants_as_given_and_a_mix_refused() {
    let table = fitted_table(4);
    let given = StepCost {
        t0_ms: 2.5,
        tseq_ms: 0.125,
        alpha_us: 3.0,
        max_batch: 0,
    };
    let options = RouterOptions {
        step_cost: Some(given),
        ..RouterOptions::default()
    };
    let st = Router::new(&table, &options).unwrap().stats().unwrap();
    assert_eq!((st.t0_ms, st.tseq_ms, st.alpha_us), (2.5, 0.125, 3.0));
    assert_eq!(st.routed + st.rejected + st.step_samples, 0);
    for bad in [
        StepCost {
            tseq_ms: -1.0,
            ..given
        },
        StepCost {
            t0_ms: f64::NAN,
            ..given
        },
        StepCost {
            alpha_us: f64::INFINITY,
            ..given
        },
    ] {
        let options = RouterOptions {
            step_cost: Some(bad),
            ..RouterOptions::default()
        };
        let err = Router::new(&table, &options).unwrap_err();
        assert_eq!(err.status(), status::INVALID_ARGUMENT, "{:?}: {}", bad, err);
    }
}

#[test]
fn route_request_and_complete_keep_the_books() {
    let sut = locality(RouterOptions::default());
    let c = counts(2, 1);
    let fp = Footprint::new(&c, LAYERS, EXPERTS).unwrap();
    let w = sut.route_request(1, &fp).unwrap().worker;
    assert_eq!(sut.route_request(2, &fp).unwrap().worker, w);
    assert_eq!(inflight(&sut, w), 2);
    // An id in flight is refused.
    let err = sut.route_request(2, &fp).unwrap_err();
    assert_eq!(err.status(), status::STATE, "{}", err);
    sut.complete(1).unwrap();
    // Completed already, and never routed: NOT_FOUND, counted, counts unchanged.
    for id in [1, 424242] {
        let err = sut.complete(id).unwrap_err();
        assert_eq!(err.status(), status::NOT_FOUND, "{}", err);
        assert!(err.message().contains("eldr_router_complete"));
    }
    assert_eq!(inflight(&sut, w), 1);
    let st = sut.stats().unwrap();
    assert_eq!(
        (
            st.routed,
            st.rejected,
            st.completes_unknown,
            st.completes_rejected
        ),
        (2, 1, 2, 2)
    );
    sut.complete(2).unwrap();
    assert_eq!(inflight(&sut, w), 0);
}

#[test]
fn complete_takes_the_oldest_request_on_the_worker() {
    let sut = locality(RouterOptions::default());
    let c = counts(3, 2);
    let fp = Footprint::new(&c, LAYERS, EXPERTS).unwrap();
    let w = sut.route_request(10, &fp).unwrap().worker;
    sut.route_request(11, &fp).unwrap();
    sut.route_request(12, &fp).unwrap();
    sut.complete_worker(w).unwrap(); // 10
    assert_eq!(sut.complete(10).unwrap_err().status(), status::NOT_FOUND);
    sut.complete(12).unwrap();
    sut.complete_worker(w).unwrap(); // 11
    assert_eq!(sut.complete(11).unwrap_err().status(), status::NOT_FOUND);
    assert_eq!(sut.complete_worker(w).unwrap_err().status(), status::STATE);
}

#[test]
fn routes_past_max_inflight_are_untracked() {
    let sut = locality(RouterOptions {
        max_inflight: 1,
        ..RouterOptions::default()
    });
    let c = counts(4, 3);
    let fp = Footprint::new(&c, LAYERS, EXPERTS).unwrap();
    let w = sut.route_request(1, &fp).unwrap().worker;
    sut.route_request(2, &fp).unwrap();
    assert_eq!(inflight(&sut, w), 2);
    assert_eq!(sut.stats().unwrap().untracked, 1);
    assert_eq!(sut.complete(2).unwrap_err().status(), status::NOT_FOUND);
    sut.complete(1).unwrap();
    sut.complete_worker(w).unwrap();
    assert_eq!(inflight(&sut, w), 0);
}

#[test]
fn a_report_sets_the_in_flight_count() {
    let sut = locality(RouterOptions::default());
    let c = counts(5, 0);
    let fp = Footprint::new(&c, LAYERS, EXPERTS).unwrap();
    let w = sut.route_request(1, &fp).unwrap().worker;
    let batch = |n| WorkerReport {
        worker: w,
        batch_size: n,
        ..WorkerReport::default()
    };
    sut.report(&batch(6)).unwrap();
    assert_eq!(inflight(&sut, w), 6);
    sut.route_request(2, &fp).unwrap();
    assert_eq!(inflight(&sut, w), 7);
    // Not reported: 0.
    sut.report(&batch(0)).unwrap();
    sut.report(&WorkerReport {
        worker: w,
        step_ms: 3.0,
        ..WorkerReport::default()
    })
    .unwrap();
    assert_eq!(inflight(&sut, w), 7);
    sut.complete(2).unwrap();
    assert_eq!(inflight(&sut, w), 6);
}

#[test]
fn step_reports_feed_the_fit_unless_it_is_off() {
    let table = fitted_table(4);
    for fit in [true, false] {
        let options = RouterOptions {
            step_cost: Some(StepCost {
                t0_ms: 2.0,
                tseq_ms: 0.05,
                alpha_us: 1.5,
                max_batch: 32,
            }),
            fit_step_cost: fit,
            ..RouterOptions::default()
        };
        let sut = Router::new(&table, &options).unwrap();
        let c = counts(6, 1);
        sut.route_request(1, &Footprint::new(&c, LAYERS, EXPERTS).unwrap())
            .unwrap();
        for i in 0..48u32 {
            let r = WorkerReport {
                worker: 0,
                batch_size: 1 + i % 6,
                step_ms: 30.0 + 4.0 * (i % 6) as f32,
                ..WorkerReport::default()
            };
            sut.report(&r).unwrap();
        }
        let st = sut.stats().unwrap();
        if fit {
            assert_eq!(st.step_samples, 48);
            assert_ne!(st.t0_ms, 2.0);
        } else {
            assert_eq!(st.step_samples, 0);
            assert_eq!((st.t0_ms, st.tseq_ms, st.alpha_us), (2.0, 0.05, 1.5));
        }
    }
}

#[test]
fn bad_reports_are_refused() {
    let sut = Router::new(&fitted_table(4), &RouterOptions::default()).unwrap();
    for step in [-1.0f32, f32::NAN, f32::INFINITY] {
        let r = WorkerReport {
            worker: 0,
            batch_size: 2,
            step_ms: step,
            ..WorkerReport::default()
        };
        let err = sut.report(&r).unwrap_err();
        assert_eq!(err.status(), status::INVALID_ARGUMENT, "{}: {}", step, err);
    }
    let r = WorkerReport {
        worker: 4000,
        batch_size: 2,
        ..WorkerReport::default()
    };
    assert_eq!(sut.report(&r).unwrap_err().status(), status::NOT_FOUND);
    let r = WorkerReport {
        worker: -1,
        batch_size: 2,
        ..WorkerReport::default()
    };
    assert_eq!(
        sut.report(&r).unwrap_err().status(),
        status::INVALID_ARGUMENT
    );
    assert!(sut.workers().unwrap().iter().all(|s| s.inflight == 0));
}
