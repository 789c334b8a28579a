//! Embedded router through the safe API: fit, save/load, route, scores, errors, ABI.

mod common;

use common::{fitted_table, footprint, workload, Rng, TempDir, EXPERTS, LAYERS, TOP_K};
use eldr::{status, Calibration, FitOptions, Footprint, Policy, Router, RouterOptions, Table};

#[test]
fn abi_of_loaded_library_matches_the_header() {
    assert_eq!(unsafe { eldr::sys::eldr_abi_version() }, eldr::ABI_VERSION);
    assert!(eldr::ensure_abi().is_ok());
    assert_eq!(
        eldr::version_number(),
        eldr::sys::ELDR_VERSION_NUMBER as u32
    );
    // One version: the loaded library's, eldr.h's and the crate's (eldr-sys's
    // build refuses a crate version other than eldr.h's).
    assert_eq!(eldr::version(), eldr::VERSION);
    assert_eq!(eldr::VERSION, env!("CARGO_PKG_VERSION"));
}

#[test]
fn fit_reports_the_calibration_shape() {
    let sut = fitted_table(4);
    let info = sut.info().unwrap();
    assert_eq!(
        (info.layers, info.experts, info.top_k, info.num_workers),
        (LAYERS, EXPERTS, TOP_K, 4)
    );
    assert_eq!(info.num_selected_layers, LAYERS, "layer selection was off");
    let ids = sut.worker_ids().unwrap();
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, vec![0, 1, 2, 3]);
}

#[test]
fn save_and_load_round_trip_gives_identical_scores() {
    let dir = TempDir::new("table");
    let path = dir.path().join("t.eldr");
    let original = fitted_table(4);
    original.save(&path).unwrap();
    let sut = Table::load(&path).unwrap();
    let counts = footprint(&mut Rng::new(11), 2, 4);
    let fp = Footprint::new(&counts, LAYERS, EXPERTS).unwrap();
    assert_eq!(sut.scores(&fp).unwrap(), original.scores(&fp).unwrap());
    assert_eq!(sut.info().unwrap(), original.info().unwrap());
}

#[test]
fn signature_is_unit_length() {
    let sut = fitted_table(4);
    let counts = footprint(&mut Rng::new(5), 0, 4);
    let sig = sut
        .signature(&Footprint::new(&counts, LAYERS, EXPERTS).unwrap())
        .unwrap();
    assert_eq!(sig.len(), (LAYERS * EXPERTS) as usize);
    let norm: f32 = sig.iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-4, "norm {}", norm);
}

#[test]
fn requests_of_one_task_go_to_the_same_best_worker() {
    // With tau = 0 the band holds only the most similar worker: the decision is
    // pure locality, so every request of a task lands where its scores peak.
    let table = fitted_table(4);
    let options = RouterOptions {
        policy: Policy::Eldr,
        tau: Some(0.0),
        ..RouterOptions::default()
    };
    let sut = Router::new(&table, &options).unwrap();
    let ids = table.worker_ids().unwrap();
    let mut rng = Rng::new(99);
    for task in 0..4 {
        let mut chosen = Vec::new();
        for _ in 0..5 {
            let counts = footprint(&mut rng, task, 4);
            let fp = Footprint::new(&counts, LAYERS, EXPERTS).unwrap();
            let scores = table.scores(&fp).unwrap();
            let best = (0..scores.len())
                .max_by(|&a, &b| scores[a].total_cmp(&scores[b]))
                .unwrap();
            let worker = sut.route(&fp).unwrap().worker;
            assert_eq!(worker, ids[best], "task {} scores {:?}", task, scores);
            chosen.push(worker);
        }
        assert!(
            chosen.windows(2).all(|w| w[0] == w[1]),
            "task {}: {:?}",
            task,
            chosen
        );
    }
}

#[test]
fn route_reports_the_decision_and_honours_loads() {
    let table = fitted_table(4);
    let options = RouterOptions {
        policy: Policy::Eldr,
        ..RouterOptions::default()
    };
    let sut = Router::new(&table, &options).unwrap();
    let counts = footprint(&mut Rng::new(1), 3, 4);
    let fp = Footprint::new(&counts, LAYERS, EXPERTS).unwrap();
    let d = sut.route(&fp).unwrap();
    assert!((0..4).contains(&d.worker));
    assert!(d.band_size >= 1 && d.band_size <= 4);
    assert!(
        d.similarity > 0.0 && d.similarity <= 1.0 + 1e-5,
        "{}",
        d.similarity
    );
    assert_eq!(d.policy(), Some(Policy::Eldr));

    // Scores agree with the decision: the chosen worker is inside the band.
    let scores = sut.scores(&fp).unwrap();
    let slot = scores.iter().position(|s| s.worker == d.worker).unwrap();
    assert!(scores[slot].in_band);
    assert_eq!(
        scores.iter().filter(|s| s.in_band).count() as u32,
        d.band_size
    );
    assert!((scores[slot].similarity - d.similarity).abs() < 1e-5);

    // Loads covering every worker slot: a heavy load on the chosen worker moves
    // the request to another band member when the band has one.
    let slots = sut.worker_slots().unwrap() as usize;
    assert_eq!(slots, 4);
    let mut loads = vec![0u32; slots];
    loads[slot] = 1000;
    let moved = sut.route_with_loads(&fp, &loads).unwrap();
    if d.band_size > 1 {
        assert_ne!(moved.worker, d.worker);
    }
    // Wrong number of loads is rejected, not read past.
    let err = sut.route_with_loads(&fp, &loads[..3]).unwrap_err();
    assert_eq!(err.status(), status::INVALID_ARGUMENT, "{}", err);
}

#[test]
fn complete_and_set_load_track_workers() {
    let table = fitted_table(4);
    let sut = Router::new(
        &table,
        &RouterOptions {
            policy: Policy::Jsq,
            ..Default::default()
        },
    )
    .unwrap();
    for w in 0..4 {
        sut.set_load(w, 10).unwrap();
    }
    sut.set_load(2, 0).unwrap();
    let counts = footprint(&mut Rng::new(2), 0, 4);
    let fp = Footprint::new(&counts, LAYERS, EXPERTS).unwrap();
    assert_eq!(
        sut.route(&fp).unwrap().worker,
        2,
        "JSQ picks the idle worker"
    );
    let slot2 = *sut
        .workers()
        .unwrap()
        .iter()
        .find(|w| w.worker == 2)
        .unwrap();
    assert_eq!(slot2.inflight, 1);
    sut.complete_worker(2).unwrap();
    sut.complete_worker(2).unwrap_err(); // nothing left in flight: never below 0
    let err = sut.complete_worker(4000).unwrap_err();
    assert!(
        err.status() == status::NOT_FOUND || err.status() == status::INVALID_ARGUMENT,
        "{}",
        err
    );
    assert!(!err.message().is_empty());
}

#[test]
fn drained_and_removed_workers_get_no_requests() {
    let table = fitted_table(4);
    let sut = Router::new(
        &table,
        &RouterOptions {
            policy: Policy::RoundRobin,
            ..Default::default()
        },
    )
    .unwrap();
    sut.drain_worker(1).unwrap();
    sut.remove_worker(3).unwrap();
    let mut states: Vec<(i32, eldr::WorkerState)> = sut
        .workers()
        .unwrap()
        .iter()
        .map(|w| (w.worker, w.state))
        .collect();
    states.sort_by_key(|s| s.0);
    use eldr::WorkerState::*;
    assert_eq!(
        states,
        vec![(0, Active), (1, Draining), (2, Active), (3, Removed)]
    );
    let counts = footprint(&mut Rng::new(4), 1, 4);
    let fp = Footprint::new(&counts, LAYERS, EXPERTS).unwrap();
    for _ in 0..12 {
        let w = sut.route(&fp).unwrap().worker;
        assert!(w == 0 || w == 2, "routed to {}", w);
    }
    sut.add_worker(1).unwrap();
    let seen: Vec<i32> = (0..12).map(|_| sut.route(&fp).unwrap().worker).collect();
    assert!(seen.contains(&1), "{:?}", seen);
}

#[test]
fn every_policy_routes() {
    let table = fitted_table(4);
    let counts = footprint(&mut Rng::new(8), 2, 4);
    let fp = Footprint::new(&counts, LAYERS, EXPERTS).unwrap();
    for policy in Policy::ALL {
        assert_eq!(Policy::from_name(policy.name()), Some(policy));
        let sut = match Router::new(
            &table,
            &RouterOptions {
                policy,
                ..Default::default()
            },
        ) {
            Ok(r) => r,
            // The domain policy needs labels the table was fitted without.
            Err(e) if policy == Policy::Domain => {
                assert!(e.status() < 0);
                continue;
            }
            Err(e) => panic!("{:?}: {}", policy, e),
        };
        match sut.route(&fp) {
            Ok(d) => assert!((0..4).contains(&d.worker), "{:?} -> {}", policy, d.worker),
            Err(e) => assert_eq!(policy, Policy::Domain, "{:?}: {}", policy, e),
        }
    }
}

#[test]
fn a_router_is_shared_by_threads() {
    const THREADS: u64 = 4;
    const ROUTES: u64 = 50;
    let table = fitted_table(4);
    let sut = std::sync::Arc::new(Router::new(&table, &RouterOptions::default()).unwrap());
    drop(table); // the router keeps its own reference
    let workers: Vec<i32> = sut.workers().unwrap().iter().map(|s| s.worker).collect();
    assert_eq!(workers.len(), 4, "{:?}", workers);
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let router = sut.clone();
            let workers = workers.clone();
            std::thread::spawn(move || {
                let mut rng = Rng::new(100 + t);
                for _ in 0..ROUTES {
                    let counts = footprint(&mut rng, t as u32, 4);
                    let w = router
                        .route(&Footprint::new(&counts, LAYERS, EXPERTS).unwrap())
                        .unwrap()
                        .worker;
                    assert!(
                        workers.contains(&w),
                        "routed to {} outside {:?}",
                        w,
                        workers
                    );
                    router.complete_worker(w).unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    // Every thread's routes and completes counted once; nothing left in flight.
    let stats = sut.stats().unwrap();
    assert_eq!(stats.routed, THREADS * ROUTES, "{:?}", stats);
    assert_eq!(stats.rejected, 0, "{:?}", stats);
    assert_eq!(stats.completes_rejected, 0, "{:?}", stats);
    for slot in sut.workers().unwrap() {
        assert_eq!(slot.inflight, 0, "{:?}", slot);
    }
}

#[test]
fn swap_table_bumps_the_epoch() {
    let sut = Router::new(&fitted_table(4), &RouterOptions::default()).unwrap();
    let counts = footprint(&mut Rng::new(6), 0, 4);
    let fp = Footprint::new(&counts, LAYERS, EXPERTS).unwrap();
    let before = sut.route(&fp).unwrap().table_epoch;
    sut.swap_table(&fitted_table(4)).unwrap();
    let after = sut.route(&fp).unwrap().table_epoch;
    assert!(after > before, "{} -> {}", before, after);
}

#[test]
fn footprint_of_the_wrong_length_is_refused_before_the_call() {
    let counts = vec![0i16; 10];
    let err = Footprint::new(&counts, LAYERS, EXPERTS).unwrap_err();
    assert_eq!(err.status(), status::INVALID_ARGUMENT);
    assert_eq!(err.name(), "ELDR_E_INVALID_ARGUMENT");
    assert!(err.message().contains("10"), "{}", err.message());
    assert!(Footprint::new(&[], 0, EXPERTS).is_err());
}

#[test]
fn shape_disagreeing_with_the_table_is_a_library_error_with_a_message() {
    let table = fitted_table(4);
    let sut = Router::new(&table, &RouterOptions::default()).unwrap();
    let counts = vec![1i16; (LAYERS * 16) as usize];
    let err = sut
        .route(&Footprint::new(&counts, LAYERS, 16).unwrap())
        .unwrap_err();
    assert_eq!(err.status(), status::SHAPE_MISMATCH, "{}", err);
    assert_eq!(err.name(), "ELDR_E_SHAPE_MISMATCH");
    assert!(!err.message().is_empty());
    assert!(
        err.to_string().starts_with("ELDR_E_SHAPE_MISMATCH: "),
        "{}",
        err
    );
}

#[test]
fn negative_counts_are_out_of_range() {
    let table = fitted_table(4);
    let mut counts = footprint(&mut Rng::new(3), 0, 4);
    counts[5] = -7;
    let err = table
        .scores(&Footprint::new(&counts, LAYERS, EXPERTS).unwrap())
        .unwrap_err();
    assert_eq!(err.status(), status::OUT_OF_RANGE, "{}", err);
}

#[test]
fn loading_a_missing_or_corrupt_file_fails_cleanly() {
    let err = Table::load("/nonexistent/eldr/table.eldr").unwrap_err();
    assert_eq!(err.status(), status::IO, "{}", err);
    let dir = TempDir::new("corrupt");
    let path = dir.path().join("garbage.eldr");
    std::fs::write(&path, b"this is not a cluster table at all, just bytes").unwrap();
    let err = Table::load(&path).unwrap_err();
    assert!(
        err.status() == status::CORRUPT || err.status() == status::UNSUPPORTED,
        "{}",
        err
    );
    let err = Table::load("bad\0path").unwrap_err();
    assert_eq!(err.status(), status::INVALID_ARGUMENT);
}

#[test]
fn fit_rejects_inconsistent_calibration() {
    let (prefill, _) = workload(8, 2, 1);
    let data = Calibration {
        prefill: &prefill,
        decode: None,
        n: 9,
        layers: LAYERS,
        experts: EXPERTS,
        top_k: TOP_K,
    };
    let err = Table::fit(&data, &FitOptions::new(2)).unwrap_err();
    assert_eq!(err.status(), status::INVALID_ARGUMENT);
    let data = Calibration { n: 8, ..data };
    let err = Table::fit(&data, &FitOptions::new(0)).unwrap_err();
    assert!(err.status() < 0 && !err.message().is_empty(), "{}", err);
}

#[test]
fn status_names_cover_known_and_unknown_codes() {
    assert_eq!(eldr::status_name(status::TIMEOUT), "ELDR_E_TIMEOUT");
    assert_eq!(eldr::status_name(-12345), "ELDR_E_UNKNOWN");
    assert!(!eldr::status_string(status::NO_DAEMON).is_empty());
}
