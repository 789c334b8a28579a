//! The pool over NATS: routing without a local sidecar.

use std::ffi::CString;
use std::os::raw::c_char;
use std::ptr::NonNull;
use std::time::Duration;

use eldr_sys as sys;

use crate::client::{accepted, duration_ms, RequestId};
use crate::decision::{raw_decision, Decision};
use crate::error::{check, status, Error, Result};
use crate::footprint::Footprint;
use crate::prompt::Prompt;

/// How a pool client proves itself to a secured pool's NATS servers, by file
/// (`eldr_nats_auth_t`): `ca_file` turns TLS on (the CAs of the servers'
/// certificates), `cert_file` with `key_file` is a client certificate, then at
/// most one kind of credentials: `creds_file` (JWT and nkey seed), `user` with
/// `password_file`, or `token_file`. Secrets stay in their files.
/// `inbox_prefix` (`None`: libnats' `_INBOX`) is where the answers come
/// (`<prefix>.<random>`): give each gateway user a prefix of its own
/// (`_INBOX.gw-a`) and subscribe rights on it alone.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NatsAuth {
    pub ca_file: Option<String>,
    pub cert_file: Option<String>,
    pub key_file: Option<String>,
    pub creds_file: Option<String>,
    pub user: Option<String>,
    pub password_file: Option<String>,
    pub token_file: Option<String>,
    pub inbox_prefix: Option<String>,
}

/// A connection to a pool of eldrd nodes over NATS (`eldrd --nats ... --pool
/// NAME`), for a gateway with no eldrd on its node: each route is answered by
/// one node, which counts the request in flight until [`Pool::complete`]. A
/// libeldr built without NATS support answers `UNSUPPORTED`.
///
/// The C handle is thread-safe: a `Pool` is `Send + Sync`. Dropping it
/// disconnects.
pub struct Pool {
    raw: NonNull<sys::eldr_pool_t>,
}

// SAFETY: eldr_pool_t is thread-safe (eldr.h, the pool section).
unsafe impl Send for Pool {}
unsafe impl Sync for Pool {}

impl Pool {
    /// Connects to the pool's NATS servers (`"nats://a:4222,nats://b:4222"`);
    /// reconnects by itself afterwards.
    pub fn open(nats_urls: &str, pool: &str, timeout: Duration) -> Result<Pool> {
        Pool::open_with_auth(nats_urls, pool, &NatsAuth::default(), timeout)
    }

    /// [`Pool::open`] with TLS and credentials for a secured pool.
    pub fn open_with_auth(
        nats_urls: &str,
        pool: &str,
        auth: &NatsAuth,
        timeout: Duration,
    ) -> Result<Pool> {
        crate::ensure_abi()?;
        let nul = |what: &str| {
            Error::new(
                status::INVALID_ARGUMENT,
                format!("{what} contains a NUL byte"),
            )
        };
        let urls = CString::new(nats_urls).map_err(|_| nul("nats_urls"))?;
        let name = CString::new(pool).map_err(|_| nul("pool"))?;
        let field = |value: &Option<String>, what: &str| -> Result<Option<CString>> {
            value
                .as_deref()
                .map(|v| CString::new(v).map_err(|_| nul(what)))
                .transpose()
        };
        let files = [
            field(&auth.ca_file, "ca_file")?,
            field(&auth.cert_file, "cert_file")?,
            field(&auth.key_file, "key_file")?,
            field(&auth.creds_file, "creds_file")?,
            field(&auth.user, "user")?,
            field(&auth.password_file, "password_file")?,
            field(&auth.token_file, "token_file")?,
            field(&auth.inbox_prefix, "inbox_prefix")?,
        ];
        let ptr = |i: usize| files[i].as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
        let raw_auth = sys::eldr_nats_auth_t {
            version: sys::ELDR_NATS_AUTH_VERSION as u32,
            ca_file: ptr(0),
            cert_file: ptr(1),
            key_file: ptr(2),
            creds_file: ptr(3),
            user: ptr(4),
            password_file: ptr(5),
            token_file: ptr(6),
            inbox_prefix: ptr(7),
        };
        let mut out: *mut sys::eldr_pool_t = std::ptr::null_mut();
        // SAFETY: NUL-terminated strings that outlive the call, valid out-param.
        check(unsafe {
            sys::eldr_pool_open_auth(
                urls.as_ptr(),
                name.as_ptr(),
                &raw_auth,
                duration_ms(timeout),
                &mut out,
            )
        })?;
        let raw = NonNull::new(out).ok_or_else(|| {
            Error::new(
                status::INTERNAL,
                "the library reported success but returned no pool",
            )
        })?;
        Ok(Pool { raw })
    }

    /// Routes one footprint through a node of the pool (`timeout` zero: the
    /// library's 2 s). A footprint the node rejects is an `Err` carrying its status.
    pub fn route(
        &self,
        request_id: &str,
        footprint: &Footprint<'_>,
        timeout: Duration,
    ) -> Result<Decision> {
        let id = RequestId::new(request_id)?;
        let mut out = raw_decision();
        // SAFETY: NUL-terminated id; the footprint's slice matches its shape.
        check(unsafe {
            sys::eldr_pool_route(
                self.raw.as_ptr(),
                id.as_ptr(),
                footprint.counts().as_ptr(),
                footprint.layers(),
                footprint.experts(),
                duration_ms(timeout),
                &mut out,
            )
        })?;
        accepted(request_id, &out)
    }

    /// Routes from the prompt's token ids (the prompt is sent whole, up to
    /// [`MAX_PROMPT_TOKENS`](crate::MAX_PROMPT_TOKENS)), as
    /// [`Client::route_tokens`](crate::Client::route_tokens).
    pub fn route_tokens(
        &self,
        request_id: &str,
        tokens: &[u32],
        timeout: Duration,
    ) -> Result<Decision> {
        self.route_prompt(request_id, Prompt::Tokens(tokens), timeout)
    }

    /// Routes from the prompt's UTF-8 text, as [`Pool::route_tokens`].
    pub fn route_text(&self, request_id: &str, text: &str, timeout: Duration) -> Result<Decision> {
        self.route_prompt(request_id, Prompt::Text(text), timeout)
    }

    /// [`route_tokens`](Pool::route_tokens) or [`route_text`](Pool::route_text).
    pub fn route_prompt(
        &self,
        request_id: &str,
        prompt: Prompt<'_>,
        timeout: Duration,
    ) -> Result<Decision> {
        let id = RequestId::new(request_id)?;
        let mut out = raw_decision();
        let ms = duration_ms(timeout);
        // SAFETY: NUL-terminated id; the prompt's slice or str lives for the
        // call and its length is passed with it; versioned out struct.
        check(unsafe {
            match prompt {
                Prompt::Tokens(t) => sys::eldr_pool_route_tokens(
                    self.raw.as_ptr(),
                    id.as_ptr(),
                    t.as_ptr(),
                    t.len(),
                    ms,
                    &mut out,
                ),
                Prompt::Text(s) => sys::eldr_pool_route_text(
                    self.raw.as_ptr(),
                    id.as_ptr(),
                    s.as_ptr() as *const c_char,
                    s.len(),
                    ms,
                    &mut out,
                ),
            }
        })?;
        accepted(request_id, &out)
    }

    /// The request has finished: sent to the node that routed it. `token`: the
    /// decision's `completion_token` (required over NATS).
    pub fn complete(&self, request_id: &str, token: u64) -> Result<()> {
        let id = RequestId::new(request_id)?;
        // SAFETY: NUL-terminated id.
        check(unsafe { sys::eldr_pool_complete(self.raw.as_ptr(), id.as_ptr(), token) })
    }
}

/// Dropping the pool disconnects; the nodes release at once the requests
/// routed through it and not completed.
impl Drop for Pool {
    fn drop(&mut self) {
        // SAFETY: owned handle, freed once.
        unsafe { sys::eldr_pool_free(self.raw.as_ptr()) }
    }
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool").finish_non_exhaustive()
    }
}
