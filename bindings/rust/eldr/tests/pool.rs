//! The pool over NATS: what needs no server (a pool with eldrd nodes is
//! exercised by the Go binding's and the gateway's tests).

use std::time::Duration;

use eldr::{status, NatsAuth, Pool};

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

#[test]
fn credential_files_are_checked_before_connecting() {
    let dir = std::env::temp_dir().join(format!("eldr-rs-pool-auth-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let missing = dir.join("nope").to_string_lossy().into_owned();
    let auth = NatsAuth {
        user: Some("gw".into()),
        password_file: Some(missing),
        ..NatsAuth::default()
    };
    let url = "nats://127.0.0.1:1";
    let err = Pool::open_with_auth(url, "rs-pool", &auth, Duration::from_millis(200)).unwrap_err();
    if err.status() == status::UNSUPPORTED {
        return; // a build without NATS
    }
    assert_eq!(err.status(), status::IO, "{}", err);
    assert!(err.to_string().contains("nope"), "{}", err);
    let no_password = NatsAuth {
        user: Some("gw".into()),
        ..NatsAuth::default()
    };
    let err =
        Pool::open_with_auth(url, "rs-pool", &no_password, Duration::from_millis(200)).unwrap_err();
    assert_eq!(err.status(), status::INVALID_ARGUMENT, "{}", err);
    let pw = dir.join("pw");
    std::fs::write(&pw, "s3cret\n").unwrap();
    let auth = NatsAuth {
        user: Some("gw".into()),
        password_file: Some(pw.to_string_lossy().into_owned()),
        ..NatsAuth::default()
    };
    let err = Pool::open_with_auth(url, "rs-pool", &auth, Duration::from_millis(200)).unwrap_err();
    assert!(!err.to_string().contains("s3cret"), "{}", err);
    // An inbox prefix under the pool's own subjects is no inbox.
    let inbox = NatsAuth {
        inbox_prefix: Some("eldr.rs-pool".into()),
        ..NatsAuth::default()
    };
    let err = Pool::open_with_auth(url, "rs-pool", &inbox, Duration::from_millis(200)).unwrap_err();
    assert_eq!(err.status(), status::INVALID_ARGUMENT, "{}", err);
    assert!(err.to_string().contains("inbox prefix"), "{}", err);
    std::fs::remove_dir_all(&dir).unwrap();
}
