//! Sidecar client: push footprints to the node's eldrd and fetch its decisions.

use std::ffi::CString;
use std::os::raw::c_char;
use std::ptr::NonNull;
use std::time::Duration;

use eldr_sys as sys;

use crate::decision::{raw_decision, Decision};
use crate::error::{check, status, Error, Result};
use crate::footprint::{checked_cells, Footprint};
use crate::prompt::Prompt;
use crate::report::WorkerReport;

/// Longest request id the sidecar accepts, in bytes.
pub const MAX_REQUEST_ID_BYTES: usize = 128;

/// Options of [`Client::open`]; `Default` gives the library's defaults.
#[derive(Clone, Copy, Debug)]
pub struct ClientOptions {
    /// How long open waits for a READY segment.
    pub open_timeout: Duration,
    /// A daemon heartbeat older than this means the daemon is gone.
    pub daemon_stale: Duration,
    /// Re-attach by itself to a restarted daemon.
    pub reattach: bool,
}

impl Default for ClientOptions {
    fn default() -> ClientOptions {
        let raw = default_raw_options();
        ClientOptions {
            open_timeout: Duration::from_millis(raw.open_timeout_ms as u64),
            daemon_stale: Duration::from_millis(raw.daemon_stale_ms as u64),
            reattach: raw.reattach != 0,
        }
    }
}

fn default_raw_options() -> sys::eldr_client_options_t {
    let mut raw = std::mem::MaybeUninit::<sys::eldr_client_options_t>::zeroed();
    // SAFETY: init writes the whole struct.
    unsafe {
        sys::eldr_client_options_init(raw.as_mut_ptr());
        raw.assume_init()
    }
}

/// A registered client of one eldrd instance, with its own footprint ring.
///
/// The C library serialises the calls of one handle internally, so a `Client`
/// may be shared between threads (`Sync`); pushes from one handle enter its
/// ring in call order. Dropping it unregisters.
pub struct Client {
    raw: NonNull<sys::eldr_client_t>,
}

// SAFETY: eldr_client_t calls are serialised internally (eldr.h, thread safety).
unsafe impl Send for Client {}
unsafe impl Sync for Client {}

impl Client {
    /// Opens and registers with the daemon of `instance`.
    pub fn open(instance: &str, options: &ClientOptions) -> Result<Client> {
        crate::ensure_abi()?;
        let instance = CString::new(instance).map_err(|_| {
            Error::new(
                status::INVALID_ARGUMENT,
                "instance name contains a NUL byte",
            )
        })?;
        let mut raw_opts = default_raw_options();
        raw_opts.open_timeout_ms = duration_ms(options.open_timeout);
        raw_opts.daemon_stale_ms = duration_ms(options.daemon_stale);
        raw_opts.reattach = options.reattach as u32;
        let mut out: *mut sys::eldr_client_t = std::ptr::null_mut();
        // SAFETY: NUL-terminated name, valid options and out-param.
        check(unsafe { sys::eldr_client_open(instance.as_ptr(), &raw_opts, &mut out) })?;
        let raw = NonNull::new(out).ok_or_else(|| {
            Error::new(
                status::INTERNAL,
                "the library reported success but returned no client",
            )
        })?;
        Ok(Client { raw })
    }

    /// Pushes one footprint for `request_id`; returns once it is in the ring.
    /// `RING_FULL` means nothing was written: retry later.
    pub fn push(&self, request_id: &str, footprint: &Footprint<'_>) -> Result<()> {
        let id = RequestId::new(request_id)?;
        // SAFETY: NUL-terminated id; the footprint's slice matches its shape.
        check(unsafe {
            sys::eldr_client_push(
                self.raw.as_ptr(),
                id.as_ptr(),
                footprint.counts().as_ptr(),
                footprint.layers(),
                footprint.experts(),
            )
        })
    }

    /// Pushes a footprint as per-KV-block rows keyed by each block's chained
    /// content hash. `rows` holds one `[layers][experts]` u8 row per block
    /// whose `row_present` entry is true (all blocks when `row_present` is
    /// `None`); the others are looked up in the daemon's signature cache.
    pub fn push_blocks(
        &self,
        request_id: &str,
        block_hashes: &[u64],
        row_present: Option<&[bool]>,
        rows: &[u8],
        layers: u32,
        experts: u32,
    ) -> Result<()> {
        let id = RequestId::new(request_id)?;
        let n_blocks = block_hashes.len();
        let present: Option<Vec<u8>> = row_present.map(|p| p.iter().map(|&b| b as u8).collect());
        let rows_expected = match &present {
            Some(p) if p.len() != n_blocks => {
                return Err(Error::new(
                    status::INVALID_ARGUMENT,
                    format!("{} row_present flags for {} blocks", p.len(), n_blocks),
                ))
            }
            Some(p) => p.iter().filter(|&&b| b != 0).count(),
            None => n_blocks,
        };
        let row_cells = checked_cells(1, layers, experts)?;
        if rows.len() != rows_expected.saturating_mul(row_cells) {
            return Err(Error::new(
                status::INVALID_ARGUMENT,
                format!(
                    "rows holds {} counts, {} present rows of [{}][{}] need {}",
                    rows.len(),
                    rows_expected,
                    layers,
                    experts,
                    rows_expected.saturating_mul(row_cells)
                ),
            ));
        }
        let n_blocks = u32::try_from(n_blocks)
            .map_err(|_| Error::new(status::INVALID_ARGUMENT, "too many blocks"))?;
        // SAFETY: every array holds what n_blocks, layers and experts say (checked above).
        check(unsafe {
            sys::eldr_client_push_blocks(
                self.raw.as_ptr(),
                id.as_ptr(),
                block_hashes.as_ptr(),
                present.as_ref().map_or(std::ptr::null(), |p| p.as_ptr()),
                rows.as_ptr(),
                n_blocks,
                layers,
                experts,
            )
        })
    }

    /// Waits up to `timeout` (zero = just look) for the decision on
    /// `request_id`, pushed by any client of this daemon. A request the daemon
    /// rejected comes back as an error with the daemon's status.
    pub fn wait(&self, request_id: &str, timeout: Duration) -> Result<Decision> {
        let id = RequestId::new(request_id)?;
        let mut out = raw_decision();
        // SAFETY: NUL-terminated id, versioned out struct.
        check(unsafe {
            sys::eldr_client_wait(
                self.raw.as_ptr(),
                id.as_ptr(),
                duration_ms(timeout),
                &mut out,
            )
        })?;
        accepted(request_id, &out)
    }

    /// Push, then wait for the decision: one round trip through the daemon. A
    /// footprint the daemon rejected (another geometry than its table's, a
    /// count it refuses) is an `Err` carrying the daemon's status (e.g.
    /// `status::SHAPE_MISMATCH`), as `eldr_client_route` returns it.
    pub fn route(
        &self,
        request_id: &str,
        footprint: &Footprint<'_>,
        timeout: Duration,
    ) -> Result<Decision> {
        let id = RequestId::new(request_id)?;
        let mut out = raw_decision();
        // SAFETY: as push() and wait().
        check(unsafe {
            sys::eldr_client_route(
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

    /// Pushes the prompt's token ids for `request_id` (a gateway that picks
    /// the decode worker before prefill): eldrd routes it from the prompt
    /// with its table's predictor, and learns when the same id later pushes
    /// its real footprint ([`push`](Client::push)). Errors as
    /// [`push`](Client::push); the daemon's verdict (no predictor, a bad
    /// prompt) arrives in the decision.
    pub fn push_tokens(&self, request_id: &str, tokens: &[u32]) -> Result<()> {
        self.push_prompt(request_id, Prompt::Tokens(tokens))
    }

    /// As [`push_tokens`](Client::push_tokens), with the prompt's UTF-8 text.
    pub fn push_text(&self, request_id: &str, text: &str) -> Result<()> {
        self.push_prompt(request_id, Prompt::Text(text))
    }

    /// [`push_tokens`](Client::push_tokens) or [`push_text`](Client::push_text).
    pub fn push_prompt(&self, request_id: &str, prompt: Prompt<'_>) -> Result<()> {
        let id = RequestId::new(request_id)?;
        // SAFETY: NUL-terminated id; the prompt's slice or str lives for the
        // call and its length is passed with it.
        check(unsafe {
            match prompt {
                Prompt::Tokens(t) => sys::eldr_client_push_tokens(
                    self.raw.as_ptr(),
                    id.as_ptr(),
                    t.as_ptr(),
                    t.len(),
                ),
                Prompt::Text(s) => sys::eldr_client_push_text(
                    self.raw.as_ptr(),
                    id.as_ptr(),
                    s.as_ptr() as *const c_char,
                    s.len(),
                ),
            }
        })
    }

    /// Push the prompt's token ids, then wait for the decision, as
    /// [`route`](Client::route). A prompt the daemon refused (its table has no
    /// predictor: `UNSUPPORTED`; a bad prompt: `INVALID_ARGUMENT`) is an `Err`
    /// carrying the daemon's status. The decision's
    /// [`confidence`](Decision::confidence) says how sure the prediction was.
    pub fn route_tokens(
        &self,
        request_id: &str,
        tokens: &[u32],
        timeout: Duration,
    ) -> Result<Decision> {
        self.route_prompt(request_id, Prompt::Tokens(tokens), timeout)
    }

    /// As [`route_tokens`](Client::route_tokens), with the prompt's UTF-8 text.
    pub fn route_text(&self, request_id: &str, text: &str, timeout: Duration) -> Result<Decision> {
        self.route_prompt(request_id, Prompt::Text(text), timeout)
    }

    /// [`route_tokens`](Client::route_tokens) or [`route_text`](Client::route_text).
    pub fn route_prompt(
        &self,
        request_id: &str,
        prompt: Prompt<'_>,
        timeout: Duration,
    ) -> Result<Decision> {
        let id = RequestId::new(request_id)?;
        let mut out = raw_decision();
        let ms = duration_ms(timeout);
        // SAFETY: as push_prompt(); versioned out struct.
        check(unsafe {
            match prompt {
                Prompt::Tokens(t) => sys::eldr_client_route_tokens(
                    self.raw.as_ptr(),
                    id.as_ptr(),
                    t.as_ptr(),
                    t.len(),
                    ms,
                    &mut out,
                ),
                Prompt::Text(s) => sys::eldr_client_route_text(
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

    /// The request's decode has finished: its worker's in-flight count drops
    /// by one. `token`: the decision's `completion_token`; 0 = "this process
    /// pushed the footprint" (the daemon refuses it from anyone else).
    pub fn complete(&self, request_id: &str, token: u64) -> Result<()> {
        let id = RequestId::new(request_id)?;
        // SAFETY: NUL-terminated id.
        check(unsafe { sys::eldr_client_complete(self.raw.as_ptr(), id.as_ptr(), token) })
    }

    /// A decode engine's report about one worker. Without `batch_size` and
    /// `step_ms` it is the plain liveness and KV report.
    pub fn report(&self, report: &WorkerReport) -> Result<()> {
        let raw = report.to_raw();
        // SAFETY: valid handle; `raw` outlives the call.
        check(unsafe { sys::eldr_client_report(self.raw.as_ptr(), &raw) })
    }

    /// Admin: the worker is routable again.
    pub fn add_worker(&self, worker: i32) -> Result<()> {
        // SAFETY: valid handle.
        check(unsafe { sys::eldr_client_add_worker(self.raw.as_ptr(), worker) })
    }

    /// Admin: no new requests for the worker.
    pub fn drain_worker(&self, worker: i32) -> Result<()> {
        // SAFETY: valid handle.
        check(unsafe { sys::eldr_client_drain_worker(self.raw.as_ptr(), worker) })
    }

    /// Admin: the worker leaves routing.
    pub fn remove_worker(&self, worker: i32) -> Result<()> {
        // SAFETY: valid handle.
        check(unsafe { sys::eldr_client_remove_worker(self.raw.as_ptr(), worker) })
    }
}

impl Client {
    /// The C handle, for the crate's other wrappers (the GPU push).
    pub(crate) fn raw(&self) -> *mut sys::eldr_client_t {
        self.raw.as_ptr()
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        // SAFETY: owned handle, closed once.
        unsafe { sys::eldr_client_free(self.raw.as_ptr()) }
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").finish_non_exhaustive()
    }
}

pub(crate) fn accepted(request_id: &str, raw: &sys::eldr_decision_t) -> Result<Decision> {
    if raw.status != sys::ELDR_OK {
        return Err(Error::new(
            raw.status,
            format!(
                "eldrd rejected request {:?}: {}",
                request_id,
                crate::error::status_string(raw.status)
            ),
        ));
    }
    Ok(Decision::from_raw(raw))
}

pub(crate) fn duration_ms(d: Duration) -> u32 {
    u32::try_from(d.as_millis()).unwrap_or(u32::MAX)
}

/// A request id as a NUL-terminated C string on the stack (no allocation on
/// the hot path).
pub(crate) struct RequestId {
    buf: [u8; MAX_REQUEST_ID_BYTES + 1],
}

impl RequestId {
    pub(crate) fn new(id: &str) -> Result<RequestId> {
        let bytes = id.as_bytes();
        if bytes.is_empty() || bytes.len() > MAX_REQUEST_ID_BYTES {
            return Err(Error::new(
                status::INVALID_ARGUMENT,
                format!(
                    "request id must be 1..{} bytes, got {}",
                    MAX_REQUEST_ID_BYTES,
                    bytes.len()
                ),
            ));
        }
        if bytes.contains(&0) {
            return Err(Error::new(
                status::INVALID_ARGUMENT,
                "request id contains a NUL byte",
            ));
        }
        let mut buf = [0u8; MAX_REQUEST_ID_BYTES + 1];
        buf[..bytes.len()].copy_from_slice(bytes);
        Ok(RequestId { buf })
    }

    pub(crate) fn as_ptr(&self) -> *const c_char {
        self.buf.as_ptr() as *const c_char
    }
}
