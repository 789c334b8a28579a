//! The embedded router: the daemon's routing logic in this process.

use std::ptr::NonNull;

use eldr_sys as sys;

use crate::decision::{raw_decision, Decision};
use crate::error::{check, status, Error, Result};
use crate::footprint::Footprint;
use crate::policy::Policy;
use crate::prompt::{Prompt, PromptStats};
use crate::report::WorkerReport;
use crate::table::Table;

/// The constants of the decode step model that [`Policy::EldrCost`] predicts
/// with: one step of a batch costs `t0_ms + tseq_ms * batch + alpha_us / 1000`
/// per distinct (layer, expert) the batch uses. Every constant finite, >= 0.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepCost {
    pub t0_ms: f64,
    pub tseq_ms: f64,
    pub alpha_us: f64,
    /// 0 = the library's default (64).
    pub max_batch: u32,
}

/// Options of [`Router::new`]; `Default` gives the library's defaults.
#[derive(Clone, Copy, Debug)]
pub struct RouterOptions {
    pub policy: Policy,
    /// Band width; `None` = the table's default.
    pub tau: Option<f32>,
    /// The band holds at least two workers.
    pub min2_band: bool,
    /// Random / p2c / tie breaks.
    pub seed: u64,
    /// Worker slots, fixed at creation.
    pub max_workers: u32,
    /// The step constants; `None` = the table's, else the preset of its geometry.
    pub step_cost: Option<StepCost>,
    /// Refine the step constants from the step times of [`Router::report`].
    pub fit_step_cost: bool,
    /// Request records ([`Router::route_request`]), fixed at creation; 0 = the
    /// library's default (8192).
    pub max_inflight: u32,
}

impl Default for RouterOptions {
    fn default() -> RouterOptions {
        let raw = default_raw_options();
        let step_cost =
            (raw.t0_ms >= 0.0 && raw.tseq_ms >= 0.0 && raw.alpha_us >= 0.0).then_some(StepCost {
                t0_ms: raw.t0_ms,
                tseq_ms: raw.tseq_ms,
                alpha_us: raw.alpha_us,
                max_batch: raw.max_batch,
            });
        RouterOptions {
            policy: Policy::from_raw(raw.policy).unwrap_or(Policy::EldrCost),
            tau: if raw.tau < 0.0 { None } else { Some(raw.tau) },
            min2_band: raw.min2_band != 0,
            seed: raw.seed,
            max_workers: raw.max_workers,
            step_cost,
            fit_step_cost: raw.fit_step_cost != 0,
            max_inflight: raw.max_inflight,
        }
    }
}

/// A router's counters since creation and the step constants in force.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RouterStats {
    pub routed: u64,
    /// Route calls that failed.
    pub rejected: u64,
    /// Completes of nothing in flight, unknown request ids included.
    pub completes_rejected: u64,
    /// [`Router::complete`] with an id not in flight.
    pub completes_unknown: u64,
    /// Routes made with every request record in use.
    pub untracked: u64,
    /// Reports the step-constant fit used.
    pub step_samples: u64,
    /// The step constants in force (configured, or fitted).
    pub t0_ms: f64,
    pub tseq_ms: f64,
    pub alpha_us: f64,
}

fn default_raw_options() -> sys::eldr_router_options_t {
    let mut raw = std::mem::MaybeUninit::<sys::eldr_router_options_t>::zeroed();
    // SAFETY: init writes the whole struct.
    unsafe {
        sys::eldr_router_options_init(raw.as_mut_ptr());
        raw.assume_init()
    }
}

/// One worker slot's similarity to a request and whether it is inside the
/// locality band (draining and removed slots: 0 and not in band).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WorkerScore {
    pub worker: i32,
    pub similarity: f32,
    pub in_band: bool,
}

/// Routing state of a worker slot (`ELDR_WORKER_STATE_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkerState {
    Active,
    Draining,
    Removed,
    /// A state this binding does not know (a newer library).
    Other(u32),
}

impl WorkerState {
    fn from_raw(raw: u32) -> WorkerState {
        match raw as i32 {
            sys::ELDR_WORKER_STATE_ACTIVE => WorkerState::Active,
            sys::ELDR_WORKER_STATE_DRAINING => WorkerState::Draining,
            sys::ELDR_WORKER_STATE_REMOVED => WorkerState::Removed,
            _ => WorkerState::Other(raw),
        }
    }
}

/// A worker slot of the router. Slots never move: the table's workers come
/// first in cluster order, workers added at runtime after them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkerSlot {
    pub worker: i32,
    pub state: WorkerState,
    pub inflight: u32,
}

/// An embedded router. Every method takes `&self`: the C router is
/// thread-safe, so one router may be shared (e.g. in an `Arc`) by all threads.
pub struct Router {
    raw: NonNull<sys::eldr_router_t>,
}

// SAFETY: every eldr_router_t call is thread-safe (eldr.h, thread safety).
unsafe impl Send for Router {}
unsafe impl Sync for Router {}

impl Router {
    pub fn new(table: &Table, options: &RouterOptions) -> Result<Router> {
        crate::ensure_abi()?;
        let mut raw_opts = default_raw_options();
        raw_opts.policy = options.policy.as_raw();
        raw_opts.tau = options.tau.unwrap_or(-1.0);
        raw_opts.min2_band = options.min2_band as u32;
        raw_opts.seed = options.seed;
        raw_opts.max_workers = options.max_workers;
        match options.step_cost {
            Some(c) => {
                raw_opts.t0_ms = c.t0_ms;
                raw_opts.tseq_ms = c.tseq_ms;
                raw_opts.alpha_us = c.alpha_us;
                raw_opts.max_batch = c.max_batch;
            }
            None => {
                raw_opts.t0_ms = -1.0;
                raw_opts.tseq_ms = -1.0;
                raw_opts.alpha_us = -1.0;
                raw_opts.max_batch = 0;
            }
        }
        raw_opts.fit_step_cost = options.fit_step_cost as u32;
        raw_opts.max_inflight = options.max_inflight;
        let mut out: *mut sys::eldr_router_t = std::ptr::null_mut();
        // SAFETY: valid table handle, options and out-param.
        check(unsafe { sys::eldr_router_new(table.as_ptr(), &raw_opts, &mut out) })?;
        let raw = NonNull::new(out).ok_or_else(|| {
            Error::new(
                status::INTERNAL,
                "the library reported success but returned no router",
            )
        })?;
        Ok(Router { raw })
    }

    /// Routes one request and counts it in flight on the chosen worker
    /// ([`complete_worker`](Router::complete_worker) ends it).
    #[inline]
    pub fn route(&self, footprint: &Footprint<'_>) -> Result<Decision> {
        self.route_raw(footprint, std::ptr::null(), 0)
    }

    /// As [`route`](Router::route), with `loads` replacing the in-flight count
    /// of every worker slot (one entry per slot, in
    /// [`workers`](Router::workers) order) for this decision only: nothing is
    /// counted in flight.
    pub fn route_with_loads(&self, footprint: &Footprint<'_>, loads: &[u32]) -> Result<Decision> {
        let n = u32::try_from(loads.len()).map_err(|_| {
            Error::new(
                status::INVALID_ARGUMENT,
                format!("{} loads is too many", loads.len()),
            )
        })?;
        self.route_raw(footprint, loads.as_ptr(), n)
    }

    fn route_raw(
        &self,
        footprint: &Footprint<'_>,
        loads: *const u32,
        n_loads: u32,
    ) -> Result<Decision> {
        let mut out = raw_decision();
        // SAFETY: the footprint's slice matches its shape; loads is NULL or
        // holds n_loads entries; valid out-param.
        check(unsafe {
            sys::eldr_router_route(
                self.raw.as_ptr(),
                footprint.counts().as_ptr(),
                footprint.layers(),
                footprint.experts(),
                loads,
                n_loads,
                &mut out,
            )
        })?;
        Ok(Decision::from_raw(&out))
    }

    /// As [`route`](Router::route), remembering `request_id` so that
    /// [`complete`](Router::complete) takes this request, and its experts, out
    /// of its worker's batch. `STATE` when the id is already in flight.
    pub fn route_request(&self, request_id: u64, footprint: &Footprint<'_>) -> Result<Decision> {
        let mut out = raw_decision();
        // SAFETY: the footprint's slice matches its shape; valid out-param.
        check(unsafe {
            sys::eldr_router_route_request(
                self.raw.as_ptr(),
                request_id,
                footprint.counts().as_ptr(),
                footprint.layers(),
                footprint.experts(),
                &mut out,
            )
        })?;
        Ok(Decision::from_raw(&out))
    }

    /// One decision from the prompt's token ids (each below
    /// [`MAX_VOCABULARY`](crate::MAX_VOCABULARY)), for a gateway that picks
    /// the decode worker before prefill; [`Decision::confidence`] says how
    /// sure the prediction was. `request_id`: `None` counts the request in
    /// flight on its worker ([`complete_worker`](Router::complete_worker) ends
    /// it); `Some(id)` tracks it as [`route_request`](Router::route_request)
    /// does and keeps its prompt for [`learn`](Router::learn).
    /// `UNSUPPORTED`: the table has no predictor, or none for token ids;
    /// `INVALID_ARGUMENT`: an empty or too long prompt, an id past the vocabulary.
    pub fn route_tokens(&self, tokens: &[u32], request_id: Option<u64>) -> Result<Decision> {
        self.route_prompt(Prompt::Tokens(tokens), request_id)
    }

    /// As [`route_tokens`](Router::route_tokens), from UTF-8 text (no tokenizer needed).
    pub fn route_text(&self, text: &str, request_id: Option<u64>) -> Result<Decision> {
        self.route_prompt(Prompt::Text(text), request_id)
    }

    /// [`route_tokens`](Router::route_tokens) or [`route_text`](Router::route_text).
    pub fn route_prompt(&self, prompt: Prompt<'_>, request_id: Option<u64>) -> Result<Decision> {
        let mut out = raw_decision();
        let id = request_id.unwrap_or(0);
        let id_ptr = request_id.map_or(std::ptr::null(), |_| &id as *const u64);
        // SAFETY: the prompt's slice or str lives for the call and its length
        // is passed with it; id_ptr is NULL or points at `id`; valid out-param.
        check(unsafe {
            match prompt {
                Prompt::Tokens(t) => sys::eldr_router_route_tokens(
                    self.raw.as_ptr(),
                    t.as_ptr(),
                    t.len(),
                    id_ptr,
                    &mut out,
                ),
                Prompt::Text(s) => sys::eldr_router_route_text(
                    self.raw.as_ptr(),
                    s.as_ptr() as *const std::os::raw::c_char,
                    s.len(),
                    id_ptr,
                    &mut out,
                ),
            }
        })?;
        Ok(Decision::from_raw(&out))
    }

    /// As [`route_prompt`](Router::route_prompt), choosing only among
    /// `workers`: a gateway's candidates for this request (the Gateway API
    /// Inference Extension's subset hint, the endpoints it holds ready). Ids
    /// not active, or unknown, are skipped; `NO_WORKER` when none is left
    /// (an empty slice included).
    pub fn route_prompt_among(
        &self,
        prompt: Prompt<'_>,
        request_id: Option<u64>,
        workers: &[i32],
    ) -> Result<Decision> {
        let mut out = raw_decision();
        let id = request_id.unwrap_or(0);
        let id_ptr = request_id.map_or(std::ptr::null(), |_| &id as *const u64);
        let n = u32::try_from(workers.len()).map_err(|_| {
            Error::new(
                status::INVALID_ARGUMENT,
                format!("{} workers is too many", workers.len()),
            )
        })?;
        let raw = prompt.to_raw();
        // An empty slice's pointer is dangling but non-NULL: the C call reads
        // it as an empty set (NO_WORKER), never dereferencing it.
        // SAFETY: raw borrows the prompt for the call; workers' pointer and
        // length go together; id_ptr is NULL or points at `id`; valid out-param.
        check(unsafe {
            sys::eldr_router_route_prompt_among(
                self.raw.as_ptr(),
                &raw,
                id_ptr,
                workers.as_ptr(),
                n,
                &mut out,
            )
        })?;
        Ok(Decision::from_raw(&out))
    }

    /// The real footprint (after prefill) of a request routed from its prompt
    /// with `request_id`: the table's predictor learns from the pair. Routing
    /// never waits for it. `NOT_FOUND`: no prompt is kept for the id (never
    /// routed from a prompt with it, learned already, or dropped).
    pub fn learn(&self, request_id: u64, footprint: &Footprint<'_>) -> Result<()> {
        // SAFETY: the footprint's slice matches its shape.
        check(unsafe {
            sys::eldr_router_learn(
                self.raw.as_ptr(),
                request_id,
                footprint.counts().as_ptr(),
                footprint.layers(),
                footprint.experts(),
            )
        })
    }

    /// The prompt counters since creation.
    pub fn prompt_stats(&self) -> Result<PromptStats> {
        let raw = std::mem::MaybeUninit::<sys::eldr_prompt_stats_t>::zeroed();
        // SAFETY: a zeroed stats struct is valid; the version is set before the call.
        let mut raw = unsafe { raw.assume_init() };
        raw.version = sys::ELDR_PROMPT_STATS_VERSION as u32;
        // SAFETY: valid handle and out-param.
        check(unsafe { sys::eldr_router_get_prompt_stats(self.raw.as_ptr(), &mut raw) })?;
        Ok(PromptStats {
            routed: raw.routed,
            rejected: raw.rejected,
            learned: raw.learned,
            learn_rejected: raw.learn_rejected,
            dropped: raw.dropped,
        })
    }

    /// The request routed with `request_id` finished. `NOT_FOUND` for an id
    /// not in flight (unknown, or completed already): counted in
    /// [`stats`](Router::stats), nothing else changes.
    pub fn complete(&self, request_id: u64) -> Result<()> {
        // SAFETY: valid handle.
        check(unsafe { sys::eldr_router_complete(self.raw.as_ptr(), request_id) })
    }

    /// A decode engine's report (the same [`WorkerReport`] as
    /// [`Client::report`](crate::Client::report)): `batch_size` replaces
    /// the worker's in-flight count, `step_ms` with it feeds the fit of the
    /// step constants; 0 = not reported, `running` is not used here.
    pub fn report(&self, report: &WorkerReport) -> Result<()> {
        let raw = report.to_raw();
        // SAFETY: valid handle and report.
        check(unsafe { sys::eldr_router_report(self.raw.as_ptr(), &raw) })
    }

    /// The counters since creation and the step constants in force.
    pub fn stats(&self) -> Result<RouterStats> {
        let raw = std::mem::MaybeUninit::<sys::eldr_router_stats_t>::zeroed();
        // SAFETY: a zeroed stats struct is valid; the version is set before the call.
        let mut raw = unsafe { raw.assume_init() };
        raw.version = sys::ELDR_ROUTER_STATS_VERSION as u32;
        // SAFETY: valid handle and out-param.
        check(unsafe { sys::eldr_router_get_stats(self.raw.as_ptr(), &mut raw) })?;
        Ok(RouterStats {
            routed: raw.routed,
            rejected: raw.rejected,
            completes_rejected: raw.completes_rejected,
            completes_unknown: raw.completes_unknown,
            untracked: raw.untracked,
            step_samples: raw.step_samples,
            t0_ms: raw.t0_ms,
            tseq_ms: raw.tseq_ms,
            alpha_us: raw.alpha_us,
        })
    }

    /// Every worker slot's similarity and band membership, in slot order.
    /// Nothing is counted in flight.
    pub fn scores(&self, footprint: &Footprint<'_>) -> Result<Vec<WorkerScore>> {
        // A concurrent add_worker can change the slot count between the two
        // calls: the library then refuses the stale size, and we ask again.
        let mut attempts = 0;
        loop {
            let slots = self.workers()?;
            let n = slots.len() as u32;
            let mut similarity = vec![0f32; n as usize];
            let mut in_band = vec![0u8; n as usize];
            // SAFETY: both buffers hold n entries; the library checks n.
            let status = unsafe {
                sys::eldr_router_score(
                    self.raw.as_ptr(),
                    footprint.counts().as_ptr(),
                    footprint.layers(),
                    footprint.experts(),
                    similarity.as_mut_ptr(),
                    in_band.as_mut_ptr(),
                    n,
                )
            };
            attempts += 1;
            if status == sys::ELDR_E_INVALID_ARGUMENT && attempts < 3 && self.worker_slots()? != n {
                continue;
            }
            check(status)?;
            return Ok(slots
                .iter()
                .zip(similarity.into_iter().zip(in_band))
                .map(|(slot, (similarity, b))| WorkerScore {
                    worker: slot.worker,
                    similarity,
                    in_band: b != 0,
                })
                .collect());
        }
    }

    /// Number of worker slots (see [`workers`](Router::workers)).
    pub fn worker_slots(&self) -> Result<u32> {
        let mut n = 0u32;
        // SAFETY: valid handle and out-param.
        check(unsafe { sys::eldr_router_get_worker_slots(self.raw.as_ptr(), &mut n) })?;
        Ok(n)
    }

    /// Every worker slot: id, state and in-flight count, in slot order.
    pub fn workers(&self) -> Result<Vec<WorkerSlot>> {
        let mut attempts = 0;
        loop {
            let n = self.worker_slots()?;
            let mut ids = vec![0i32; n as usize];
            let mut states = vec![0u32; n as usize];
            let mut inflight = vec![0u32; n as usize];
            // SAFETY: the three buffers hold n entries; the library checks n.
            let status = unsafe {
                sys::eldr_router_get_workers(
                    self.raw.as_ptr(),
                    ids.as_mut_ptr(),
                    states.as_mut_ptr(),
                    inflight.as_mut_ptr(),
                    n,
                )
            };
            attempts += 1;
            if status == sys::ELDR_E_INVALID_ARGUMENT && attempts < 3 && self.worker_slots()? != n {
                continue; // a worker was added in between
            }
            check(status)?;
            return Ok((0..n as usize)
                .map(|i| WorkerSlot {
                    worker: ids[i],
                    state: WorkerState::from_raw(states[i]),
                    inflight: inflight[i],
                })
                .collect());
        }
    }

    /// The oldest request still in flight on `worker` finished: its in-flight
    /// count drops by one (never below 0).
    pub fn complete_worker(&self, worker: i32) -> Result<()> {
        // SAFETY: valid handle.
        check(unsafe { sys::eldr_router_complete_worker(self.raw.as_ptr(), worker) })
    }

    /// Sets the in-flight count of `worker` (e.g. from the engine's own accounting).
    pub fn set_load(&self, worker: i32, inflight: u32) -> Result<()> {
        // SAFETY: valid handle.
        check(unsafe { sys::eldr_router_set_load(self.raw.as_ptr(), worker, inflight) })
    }

    /// Makes `worker` routable (again).
    pub fn add_worker(&self, worker: i32) -> Result<()> {
        // SAFETY: valid handle.
        check(unsafe { sys::eldr_router_add_worker(self.raw.as_ptr(), worker) })
    }

    /// No new requests for `worker`; in-flight ones finish.
    pub fn drain_worker(&self, worker: i32) -> Result<()> {
        // SAFETY: valid handle.
        check(unsafe { sys::eldr_router_drain_worker(self.raw.as_ptr(), worker) })
    }

    pub fn remove_worker(&self, worker: i32) -> Result<()> {
        // SAFETY: valid handle.
        check(unsafe { sys::eldr_router_remove_worker(self.raw.as_ptr(), worker) })
    }

    /// Hot swap: routing continues; later decisions carry the new table epoch.
    pub fn swap_table(&self, table: &Table) -> Result<()> {
        // SAFETY: valid handles.
        check(unsafe { sys::eldr_router_swap_table(self.raw.as_ptr(), table.as_ptr()) })
    }

    /// The raw handle, for calls this crate does not wrap. Valid while `self` lives.
    pub fn as_raw(&self) -> *mut sys::eldr_router_t {
        self.raw.as_ptr()
    }
}

impl Drop for Router {
    fn drop(&mut self) {
        // SAFETY: owned handle, freed once.
        unsafe { sys::eldr_router_free(self.raw.as_ptr()) }
    }
}

impl std::fmt::Debug for Router {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Router")
            .field("worker_slots", &self.worker_slots().ok())
            .finish()
    }
}
