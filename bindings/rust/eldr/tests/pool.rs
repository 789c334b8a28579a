//! The pool over NATS: what needs no server (a pool with eldrd nodes is
//! exercised by the Go binding's and the gateway's tests).

use std::time::Duration;

use eldr::{status, Pool};

#[test]
fn open_without_a_server_fails_cleanly() {
    // Nothing listens on port 1: IO or TIMEOUT, or UNSUPPORTED in a build
    // without NATS; never a handle.
    let err = Pool::open("nats://127.0.0.1:1", "rs-pool", Duration::from_millis(300)).unwrap_err();
    assert!(
        [status::IO, status::TIMEOUT, status::UNSUPPORTED].contains(&err.status()),
        "{}",
        err
    );
    let err = Pool::open("nats://127.0.0.1:1", "a\0b", Duration::from_millis(300)).unwrap_err();
    assert_eq!(err.status(), status::INVALID_ARGUMENT, "{}", err);
}
