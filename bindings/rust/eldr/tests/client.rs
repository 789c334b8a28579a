//! Sidecar client against a live, private eldrd started by the test. Skipped
//! (with a message) only when the eldrd binary is absent ($ELDRD unset).

mod common;

use std::time::Duration;

use common::{eldrd_binary, footprint, Daemon, Rng, EXPERTS, LAYERS};
use eldr::{status, Client, ClientOptions, Footprint};

const WORKERS: u32 = 4;

macro_rules! daemon_or_skip {
    ($tag:expr) => {
        match eldrd_binary() {
            Some(bin) => Daemon::start(&bin, $tag, WORKERS),
            None => {
                eprintln!("SKIPPED: eldrd not built ($ELDRD unset or missing)");
                return;
            }
        }
    };
}

#[test]
fn route_returns_a_decision_from_the_daemon() {
    let daemon = daemon_or_skip!("route");
    let sut = daemon.client();
    let counts = footprint(&mut Rng::new(1), 2, 4);
    let fp = Footprint::new(&counts, LAYERS, EXPERTS).unwrap();
    let d = sut
        .route("req-route-1", &fp, Duration::from_secs(5))
        .unwrap();
    assert!((0..WORKERS as i32).contains(&d.worker), "{:?}", d);
    assert!(d.band_size >= 1 && d.band_size <= WORKERS);
    assert!(d.similarity > 0.0 && d.similarity <= 1.0 + 1e-5, "{:?}", d);
    sut.complete("req-route-1", 0).unwrap();
}

/// A footprint of another geometry than the daemon's table: eldrd rejects it,
/// and route returns the daemon's status (eldr_client_route does), never a decision.
#[test]
fn route_returns_the_daemons_status_for_a_rejected_footprint() {
    let daemon = daemon_or_skip!("route-rejected");
    let sut = daemon.client();
    let counts = vec![1i16; ((LAYERS + 1) * EXPERTS) as usize];
    let fp = Footprint::new(&counts, LAYERS + 1, EXPERTS).unwrap();
    let err = sut
        .route("req-route-rejected", &fp, Duration::from_secs(5))
        .unwrap_err();
    assert_eq!(err.status(), status::SHAPE_MISMATCH, "{}", err);
    assert!(err.to_string().contains("req-route-rejected"), "{}", err);
    let ok = footprint(&mut Rng::new(2), 1, 4);
    let fp = Footprint::new(&ok, LAYERS, EXPERTS).unwrap();
    sut.route("req-route-accepted", &fp, Duration::from_secs(5))
        .unwrap();
}

#[test]
fn a_second_client_waits_for_the_decision_of_a_pushed_footprint() {
    let daemon = daemon_or_skip!("wait");
    let engine = daemon.client();
    let gateway = daemon.client();
    let counts = footprint(&mut Rng::new(2), 1, 4);
    let fp = Footprint::new(&counts, LAYERS, EXPERTS).unwrap();
    engine.push("req-wait-1", &fp).unwrap();
    let d = gateway.wait("req-wait-1", Duration::from_secs(5)).unwrap();
    assert!((0..WORKERS as i32).contains(&d.worker));
    // The same request id looked up again gives the same decision.
    let again = gateway
        .wait("req-wait-1", Duration::from_millis(0))
        .unwrap();
    assert_eq!(again.worker, d.worker);
    // The gateway presents the decision's token (from another process the
    // daemon refuses a complete without it).
    assert_ne!(d.completion_token, 0);
    assert_eq!(again.completion_token, d.completion_token);
    gateway.complete("req-wait-1", d.completion_token).unwrap();
}

#[test]
fn waiting_for_an_unknown_request_times_out() {
    let daemon = daemon_or_skip!("timeout");
    let sut = daemon.client();
    let err = sut
        .wait("never-pushed", Duration::from_millis(50))
        .unwrap_err();
    assert_eq!(err.status(), status::TIMEOUT, "{}", err);
    assert_eq!(err.name(), "ELDR_E_TIMEOUT");
}

#[test]
fn bad_arguments_fail_before_reaching_the_daemon() {
    let daemon = daemon_or_skip!("badargs");
    let sut = daemon.client();
    let counts = footprint(&mut Rng::new(3), 0, 4);
    let fp = Footprint::new(&counts, LAYERS, EXPERTS).unwrap();
    for id in ["", "has\0nul"] {
        let err = sut.push(id, &fp).unwrap_err();
        assert_eq!(err.status(), status::INVALID_ARGUMENT, "{:?}: {}", id, err);
    }
    let long = "x".repeat(eldr::MAX_REQUEST_ID_BYTES + 1);
    assert_eq!(
        sut.push(&long, &fp).unwrap_err().status(),
        status::INVALID_ARGUMENT
    );
    assert!(sut
        .push(&"y".repeat(eldr::MAX_REQUEST_ID_BYTES), &fp)
        .is_ok());
    let err = sut
        .report(&eldr::WorkerReport {
            worker: 0,
            running: 1,
            kv_usage: 2.5,
            ..Default::default()
        })
        .unwrap_err();
    assert_eq!(
        err.status(),
        status::INVALID_ARGUMENT,
        "kv_usage outside [0, 1]: {}",
        err
    );
}

#[test]
fn reports_and_worker_control_are_accepted() {
    let daemon = daemon_or_skip!("control");
    let sut = daemon.client();
    for w in 0..WORKERS {
        let sent = sut.report(&eldr::WorkerReport {
            worker: w as i32,
            running: 1,
            kv_usage: 0.25,
            ..Default::default()
        });
        assert!(sent.is_ok(), "report for worker {}: {:?}", w, sent);
    }
    let drained = sut.drain_worker(1);
    assert!(drained.is_ok(), "drain: {:?}", drained);
    let added = sut.add_worker(1);
    assert!(added.is_ok(), "add: {:?}", added);
    // The daemon took them and still routes: a decision on one of its workers.
    let counts = footprint(&mut Rng::new(3), 1, 4);
    let fp = Footprint::new(&counts, LAYERS, EXPERTS).unwrap();
    let d = sut
        .route("req-after-control", &fp, Duration::from_secs(5))
        .unwrap();
    assert!((0..WORKERS as i32).contains(&d.worker), "{:?}", d);
    assert!(sut.complete("req-after-control", 0).is_ok());
}

#[test]
fn step_reports_are_accepted_and_bad_values_refused() {
    let daemon = daemon_or_skip!("step_report");
    let sut = daemon.client();
    let report = eldr::WorkerReport {
        worker: 0,
        running: 2,
        kv_usage: 0.5,
        batch_size: 3,
        step_ms: 4.5,
    };
    sut.report(&report).unwrap();
    // Without a step: the plain report.
    sut.report(&eldr::WorkerReport {
        worker: 1,
        running: 1,
        ..Default::default()
    })
    .unwrap();
    for bad in [
        eldr::WorkerReport {
            step_ms: -1.0,
            ..report
        },
        eldr::WorkerReport {
            step_ms: f32::NAN,
            ..report
        },
        eldr::WorkerReport {
            step_ms: f32::INFINITY,
            ..report
        },
        eldr::WorkerReport {
            kv_usage: 1.5,
            ..report
        },
        eldr::WorkerReport {
            worker: 1 << 31,
            ..report
        },
    ] {
        let err = sut.report(&bad).unwrap_err();
        assert_eq!(err.status(), status::INVALID_ARGUMENT, "{:?}: {}", bad, err);
    }
}

#[test]
fn a_client_is_shared_by_threads() {
    let daemon = daemon_or_skip!("threads");
    let sut = std::sync::Arc::new(daemon.client());
    let handles: Vec<_> = (0..3)
        .map(|t| {
            let client = sut.clone();
            std::thread::spawn(move || {
                let mut rng = Rng::new(50 + t);
                for i in 0..20 {
                    let counts = footprint(&mut rng, t as u32, 4);
                    let fp = Footprint::new(&counts, LAYERS, EXPERTS).unwrap();
                    let id = format!("t{}-{}", t, i);
                    let d = client.route(&id, &fp, Duration::from_secs(5)).unwrap();
                    assert!((0..WORKERS as i32).contains(&d.worker));
                    client.complete(&id, 0).unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

#[test]
fn opening_an_instance_without_daemon_fails_with_no_daemon() {
    let options = ClientOptions {
        open_timeout: Duration::from_millis(50),
        ..Default::default()
    };
    let err = Client::open(&format!("rs-absent-{}", std::process::id()), &options).unwrap_err();
    assert!(
        err.status() == status::NO_DAEMON || err.status() == status::TIMEOUT,
        "{}",
        err
    );
    assert!(!err.message().is_empty());
}
