//! Routing from the prompt through a live, private eldrd whose table carries
//! a predictor (eldr_client_route_tokens/_text, push_tokens/_text), and the
//! daemon learning from the real footprint pushed later under the same id.
//! Skipped (with a message) only when the eldrd binary is absent ($ELDRD unset).

mod common;

use std::time::Duration;

use common::{
    domain_text, domain_tokens, eldrd_binary, fitted_table, footprint, predictor_table,
    task_worker, Daemon, Rng, EXPERTS, LAYERS,
};
use eldr::{status, Footprint, MAX_VOCABULARY};

const WORKERS: u32 = 4;
const TIMEOUT: Duration = Duration::from_secs(5);

macro_rules! eldrd_or_skip {
    () => {
        match eldrd_binary() {
            Some(bin) => bin,
            None => {
                eprintln!("SKIPPED: eldrd not built ($ELDRD unset or missing)");
                return;
            }
        }
    };
}

#[test]
fn route_text_and_route_tokens_reach_the_domains_worker() {
    let bin = eldrd_or_skip!();
    let table = predictor_table(WORKERS, 6);
    // The paper's rule: the domain's worker wins while loads are equal
    // (eldr_cost would spread these one-at-a-time requests to idle workers).
    let daemon = Daemon::start_with_args(&bin, "prompt-route", &table, &["--policy", "eldr"]);
    let sut = daemon.client();
    for task in 0..4 {
        let want = task_worker(&table, task);
        let id = format!("req-text-{}", task);
        let d = sut
            .route_text(&id, &domain_text(task, 17), TIMEOUT)
            .unwrap();
        assert_eq!(d.worker, want, "text of task {}: {:?}", task, d);
        assert!(d.confidence > 0.5 && d.confidence <= 1.0, "{:?}", d);
        assert_ne!(d.completion_token, 0);
        sut.complete(&id, 0).unwrap();
        let id = format!("req-tokens-{}", task);
        let d = sut
            .route_tokens(&id, &domain_tokens(task, 8), TIMEOUT)
            .unwrap();
        assert_eq!(d.worker, want, "tokens of task {}: {:?}", task, d);
        sut.complete(&id, 0).unwrap();
    }
}

#[test]
fn a_pushed_prompt_is_decided_and_its_real_footprint_is_learned() {
    let bin = eldrd_or_skip!();
    let table = predictor_table(WORKERS, 6);
    let daemon = Daemon::start_with_args(&bin, "prompt-push", &table, &["--policy", "eldr"]);
    let gateway = daemon.client();
    let engine = daemon.client();
    gateway
        .push_text("req-push-text", &domain_text(1, 30))
        .unwrap();
    let d = gateway.wait("req-push-text", TIMEOUT).unwrap();
    assert_eq!(d.worker, task_worker(&table, 1));
    gateway
        .push_tokens("req-push-tokens", &domain_tokens(3, 30))
        .unwrap();
    let d = gateway.wait("req-push-tokens", TIMEOUT).unwrap();
    assert_eq!(d.worker, task_worker(&table, 3));
    // After prefill, the engine pushes the request's real footprint under
    // the same id: the daemon learns from it; the decision stays.
    let counts = footprint(&mut Rng::new(9), 1, 4);
    engine
        .push(
            "req-push-text",
            &Footprint::new(&counts, LAYERS, EXPERTS).unwrap(),
        )
        .unwrap();
    let again = gateway.wait("req-push-text", TIMEOUT).unwrap();
    assert_eq!(again.worker, task_worker(&table, 1));
    gateway.complete("req-push-text", 0).unwrap();
    gateway.complete("req-push-tokens", 0).unwrap();
}

#[test]
fn the_daemons_verdict_on_a_prompt_is_an_error() {
    let bin = eldrd_or_skip!();
    // No predictor in the daemon's table: UNSUPPORTED, from the daemon.
    let daemon = Daemon::start_with(&bin, "prompt-none", &fitted_table(WORKERS));
    let sut = daemon.client();
    let err = sut
        .route_text("req-no-predictor", &domain_text(0, 1), TIMEOUT)
        .unwrap_err();
    assert_eq!(err.status(), status::UNSUPPORTED, "{}", err);
    drop(daemon);

    let table = predictor_table(WORKERS, 4);
    let daemon = Daemon::start_with(&bin, "prompt-bad", &table);
    let sut = daemon.client();
    for (id, tokens) in [
        ("req-empty", &[][..]),
        ("req-past-vocabulary", &[1, MAX_VOCABULARY][..]),
    ] {
        let err = sut.route_tokens(id, tokens, TIMEOUT).unwrap_err();
        assert_eq!(err.status(), status::INVALID_ARGUMENT, "{}: {}", id, err);
    }
    let err = sut.route_text("req-empty-text", "", TIMEOUT).unwrap_err();
    assert_eq!(err.status(), status::INVALID_ARGUMENT, "{}", err);
    // A bad request id is refused before anything is pushed.
    let err = sut.push_text("", "hello").unwrap_err();
    assert_eq!(err.status(), status::INVALID_ARGUMENT, "{}", err);
    // The daemon still routes good prompts.
    sut.route_text("req-good", &domain_text(2, 5), TIMEOUT)
        .unwrap();
}
