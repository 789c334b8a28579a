//! Routing from the prompt in this process: fit a predictor on 4 synthetic
//! domains, route token ids and text to the domain's worker, learn, errors.

mod common;

use common::{
    domain_text, domain_tokens, fitted_table, footprint, predictor_table, task_worker, Rng,
    TempDir, EXPERTS, LAYERS,
};
use eldr::{
    status, Footprint, Policy, PredictorOptions, Prompt, Router, RouterOptions, Table,
    MAX_VOCABULARY,
};

/// The locality band alone (tau 0): the decision is the best worker, whatever the loads.
fn best_worker_router(table: &Table) -> Router {
    let options = RouterOptions {
        policy: Policy::Eldr,
        tau: Some(0.0),
        ..RouterOptions::default()
    };
    Router::new(table, &options).unwrap()
}

#[test]
fn fit_predictor_gives_a_table_with_a_predictor_for_both_kinds() {
    let plain = fitted_table(4);
    assert_eq!(plain.predictor_info().unwrap(), None);
    let sut = predictor_table(4, 6);
    let info = sut.predictor_info().unwrap().expect("a predictor");
    assert_eq!(info.prototypes, 48);
    assert!(info.tokens() && info.text(), "{:?}", info);
    assert!(info.learned >= 48);
    assert!(
        info.demand_bytes > 0 && info.feature_bytes > 0,
        "{:?}",
        info
    );
    // The copy keeps the clusters.
    assert_eq!(sut.info().unwrap(), plain.info().unwrap());
    assert_eq!(sut.worker_ids().unwrap(), plain.worker_ids().unwrap());
}

#[test]
fn route_text_and_route_tokens_pick_the_domains_worker() {
    let table = predictor_table(4, 6);
    let sut = best_worker_router(&table);
    for task in 0..4 {
        let want = task_worker(&table, task);
        let d = sut.route_text(&domain_text(task, 17), None).unwrap();
        assert_eq!(d.worker, want, "text of task {}: {:?}", task, d);
        assert!(d.confidence > 0.5 && d.confidence <= 1.0, "{:?}", d);
        let d = sut.route_tokens(&domain_tokens(task, 8), None).unwrap();
        assert_eq!(d.worker, want, "tokens of task {}: {:?}", task, d);
        assert!(d.confidence > 0.5, "{:?}", d);
    }
    let stats = sut.prompt_stats().unwrap();
    assert_eq!((stats.routed, stats.rejected), (8, 0));
}

#[test]
fn route_prompt_among_chooses_only_the_given_workers() {
    let table = predictor_table(4, 6);
    let sut = best_worker_router(&table);
    let own = task_worker(&table, 1);
    let mut others: Vec<i32> = table
        .worker_ids()
        .unwrap()
        .into_iter()
        .filter(|&w| w != own)
        .collect();
    others.push(999); // unknown: skipped
    let text = domain_text(1, 30);
    let d = sut
        .route_prompt_among(Prompt::Text(&text), None, &others)
        .unwrap();
    assert!(d.worker != own && others.contains(&d.worker), "{:?}", d);
    let d = sut
        .route_prompt_among(Prompt::Text(&text), Some(3), &[own])
        .unwrap();
    assert_eq!(d.worker, own);
    sut.complete(3).unwrap();
    let err = sut
        .route_prompt_among(Prompt::Text(&text), None, &[])
        .unwrap_err();
    assert_eq!(err.status(), status::NO_WORKER);
    let err = sut
        .route_prompt_among(Prompt::Text(&text), None, &[999])
        .unwrap_err();
    assert_eq!(err.status(), status::NO_WORKER);
}

#[test]
fn an_unfamiliar_prompt_is_unsure_and_a_footprint_is_sure() {
    let table = predictor_table(4, 6);
    let sut = best_worker_router(&table);
    let d = sut
        .route_text("zebra quantum violin marmalade", None)
        .unwrap();
    assert!(d.confidence < 0.3, "{:?}", d);
    let counts = footprint(&mut Rng::new(3), 1, 4);
    let d = sut
        .route(&Footprint::new(&counts, LAYERS, EXPERTS).unwrap())
        .unwrap();
    assert_eq!(d.confidence, 1.0);
}

#[test]
fn learn_takes_the_real_footprint_of_a_request_routed_from_its_prompt() {
    let table = predictor_table(4, 6);
    let sut = best_worker_router(&table);
    let d = sut.route_text(&domain_text(2, 30), Some(7)).unwrap();
    assert_eq!(d.worker, task_worker(&table, 2));
    let counts = footprint(&mut Rng::new(4), 2, 4);
    let fp = Footprint::new(&counts, LAYERS, EXPERTS).unwrap();
    sut.learn(7, &fp).unwrap();
    // Learned once; an id never routed from a prompt has nothing to learn.
    assert_eq!(sut.learn(7, &fp).unwrap_err().status(), status::NOT_FOUND);
    assert_eq!(sut.learn(99, &fp).unwrap_err().status(), status::NOT_FOUND);
    // Another geometry is refused.
    let wrong = vec![1i16; ((LAYERS + 1) * EXPERTS) as usize];
    sut.route_tokens(&domain_tokens(1, 3), Some(8)).unwrap();
    let err = sut
        .learn(8, &Footprint::new(&wrong, LAYERS + 1, EXPERTS).unwrap())
        .unwrap_err();
    assert_eq!(err.status(), status::SHAPE_MISMATCH, "{}", err);
    // The request routed with an id is in flight until complete.
    sut.complete(7).unwrap();
    sut.complete(8).unwrap();
    let stats = sut.prompt_stats().unwrap();
    assert_eq!((stats.routed, stats.learned), (2, 1));
    // The two unknown ids at least (the C API refuses the other geometry
    // before the router counts it).
    assert!(stats.learn_rejected >= 2, "{:?}", stats);
}

#[test]
fn learning_teaches_a_new_domain() {
    // Calibrated without task 3: its words are unknown.
    let table = fitted_table(4);
    let mut rng = Rng::new(5);
    let mut texts = Vec::new();
    let mut footprints = Vec::new();
    for task in 0..3 {
        for v in 0..6 {
            texts.push(domain_text(task, v));
            footprints.extend(footprint(&mut rng, task, 4));
        }
    }
    let prompts: Vec<Prompt<'_>> = texts.iter().map(|t| Prompt::Text(t)).collect();
    let (table, _) = table
        .fit_predictor(&prompts, &footprints, &PredictorOptions::default())
        .unwrap();
    let want = task_worker(&table, 3);
    let sut = best_worker_router(&table);
    let before = sut.route_text(&domain_text(3, 40), None).unwrap();
    for v in 0..8u64 {
        sut.route_text(&domain_text(3, v as u32), Some(100 + v))
            .unwrap();
        let counts = footprint(&mut rng, 3, 4);
        sut.learn(100 + v, &Footprint::new(&counts, LAYERS, EXPERTS).unwrap())
            .unwrap();
        sut.complete(100 + v).unwrap();
    }
    let after = sut.route_text(&domain_text(3, 40), None).unwrap();
    assert_eq!(after.worker, want, "before {:?}, after {:?}", before, after);
    assert!(after.confidence > before.confidence);
}

#[test]
fn bad_prompts_are_invalid_arguments() {
    let table = predictor_table(4, 4);
    let sut = best_worker_router(&table);
    let cases: [(&str, Prompt<'_>); 3] = [
        ("empty text", Prompt::Text("")),
        ("no token", Prompt::Tokens(&[])),
        (
            "id past the vocabulary",
            Prompt::Tokens(&[1, MAX_VOCABULARY, 2]),
        ),
    ];
    for (what, prompt) in cases {
        let err = sut.route_prompt(prompt, None).unwrap_err();
        assert_eq!(err.status(), status::INVALID_ARGUMENT, "{}: {}", what, err);
    }
    let long = vec![1u32; eldr::MAX_PROMPT_TOKENS + 1];
    assert_eq!(
        sut.route_tokens(&long, None).unwrap_err().status(),
        status::INVALID_ARGUMENT
    );
    assert_eq!(sut.prompt_stats().unwrap().rejected, 4);
    // A good prompt still routes.
    sut.route_tokens(&[MAX_VOCABULARY - 1, 5], None).unwrap();
}

#[test]
fn a_table_without_a_predictor_is_unsupported() {
    let table = fitted_table(4);
    let sut = best_worker_router(&table);
    let err = sut.route_text(&domain_text(0, 1), None).unwrap_err();
    assert_eq!(err.status(), status::UNSUPPORTED, "{}", err);
    let err = sut.route_tokens(&domain_tokens(0, 1), Some(1)).unwrap_err();
    assert_eq!(err.status(), status::UNSUPPORTED, "{}", err);
    assert_eq!(sut.prompt_stats().unwrap().rejected, 2);
}

#[test]
fn a_text_predictor_does_not_read_token_ids() {
    let table = fitted_table(4);
    let mut rng = Rng::new(6);
    let texts: Vec<String> = (0..8).map(|i| domain_text(i % 4, i)).collect();
    let footprints: Vec<i16> = (0..8).flat_map(|i| footprint(&mut rng, i % 4, 4)).collect();
    let prompts: Vec<Prompt<'_>> = texts.iter().map(|t| Prompt::Text(t)).collect();
    let (table, _) = table
        .fit_predictor(&prompts, &footprints, &PredictorOptions::default())
        .unwrap();
    let info = table.predictor_info().unwrap().unwrap();
    assert!(info.text() && !info.tokens(), "{:?}", info);
    let sut = best_worker_router(&table);
    let err = sut.route_tokens(&domain_tokens(0, 1), None).unwrap_err();
    assert_eq!(err.status(), status::UNSUPPORTED, "{}", err);
}

#[test]
fn fit_predictor_checks_its_input() {
    let table = fitted_table(4);
    let cells = (LAYERS * EXPERTS) as usize;
    let text = domain_text(0, 0);
    // The footprints' length is checked before any C call.
    let err = table
        .fit_predictor(
            &[Prompt::Text(&text)],
            &vec![1i16; cells - 1],
            &PredictorOptions::default(),
        )
        .unwrap_err();
    assert_eq!(err.status(), status::INVALID_ARGUMENT, "{}", err);
    let err = table
        .fit_predictor(&[], &[], &PredictorOptions::default())
        .unwrap_err();
    assert_eq!(err.status(), status::INVALID_ARGUMENT, "{}", err);
    // Bad records are skipped and counted; none usable is an error.
    let counts = footprint(&mut Rng::new(8), 0, 4);
    let mut two = counts.clone();
    two.extend(&counts);
    let (_, skipped) = table
        .fit_predictor(
            &[Prompt::Text(""), Prompt::Text(&text)],
            &two,
            &PredictorOptions::default(),
        )
        .unwrap();
    assert_eq!(skipped, 1);
    let err = table
        .fit_predictor(
            &[Prompt::Tokens(&[MAX_VOCABULARY])],
            &counts,
            &PredictorOptions::default(),
        )
        .unwrap_err();
    assert_eq!(err.status(), status::INVALID_ARGUMENT, "{}", err);
    // Options the library refuses.
    let bad = PredictorOptions {
        neighbours: 0,
        ..PredictorOptions::default()
    };
    let err = table
        .fit_predictor(&[Prompt::Text(&text)], &counts, &bad)
        .unwrap_err();
    assert_eq!(err.status(), status::INVALID_ARGUMENT, "{}", err);
}

#[test]
fn the_predictor_and_what_it_learned_survive_save_and_load() {
    let dir = TempDir::new("predictor");
    let path = dir.path().join("t.eldr");
    let original = predictor_table(4, 4);
    original.save(&path).unwrap();
    let loaded = Table::load(&path).unwrap();
    assert_eq!(
        loaded.predictor_info().unwrap(),
        original.predictor_info().unwrap()
    );
    let sut = best_worker_router(&loaded);
    for task in 0..4 {
        let d = sut.route_text(&domain_text(task, 9), None).unwrap();
        assert_eq!(d.worker, task_worker(&loaded, task));
    }
}

#[test]
fn predictor_options_default_to_the_librarys() {
    let o = PredictorOptions::default();
    assert_eq!((o.capacity, o.neighbours, o.max_features), (4096, 16, 256));
    assert!((o.bandwidth - 0.05).abs() < 1e-6);
}
