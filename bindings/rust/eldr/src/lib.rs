//! Safe Rust API of eldr: expert-locality-aware decode routing for
//! Mixture-of-Experts serving, over the C library `libeldr.so`.
//!
//! - Embedded: fit or load a [`Table`], build a [`Router`], route
//!   [`Footprint`]s in this process.
//! - Sidecar: a [`Client`] pushes footprints to the node's `eldrd` and fetches
//!   its [`Decision`]s by request id; a [`Pool`] routes through any node of an
//!   eldrd pool over NATS.
//! - From the prompt, before prefill (decode-first gateways): a table fitted
//!   with prompts ([`Table::fit_predictor`]) routes a [`Prompt`]'s token ids or
//!   text ([`Router::route_tokens`], [`Client::route_text`], ...) and learns
//!   from the real footprint afterwards ([`Router::learn`]).
//! - GPU (experimental, a CUDA build of libeldr): [`GpuFootprints`] collects
//!   footprints on the device and hands them to a [`Client`]'s ring from the GPU.
//!
//! Every fallible call returns [`Result`]; the [`Error`] carries the C status,
//! its name and the library's detail message, read on the calling thread right
//! after the failing call. Handles are released in `Drop`.
//!
//! ```no_run
//! let table = eldr::Table::load("table.eldr")?;
//! let router = eldr::Router::new(&table, &eldr::RouterOptions::default())?;
//! let counts = vec![0i16; 48 * 128];
//! let decision = router.route(&eldr::Footprint::new(&counts, 48, 128)?)?;
//! router.complete_worker(decision.worker)?;
//! # Ok::<(), eldr::Error>(())
//! ```

mod client;
mod decision;
mod error;
mod footprint;
mod gpu;
mod policy;
mod pool;
mod prompt;
mod report;
mod routed_experts;
mod router;
mod table;

pub use client::{Client, ClientOptions, MAX_REQUEST_ID_BYTES};
pub use decision::Decision;
pub use error::{status, status_name, status_string, Error, Result};
pub use footprint::Footprint;
pub use gpu::{gpu_error, CudaStream, ExpertIds, GpuFootprints, GpuOptions, Layers};
pub use policy::Policy;
pub use pool::{NatsAuth, Pool};
pub use prompt::{
    PredictorInfo, PredictorOptions, Prompt, PromptStats, MAX_PROMPT_BYTES, MAX_PROMPT_TOKENS,
    MAX_VOCABULARY,
};
pub use report::WorkerReport;
pub use routed_experts::{
    footprint_from_ids, footprint_from_sglang, footprint_from_vllm, npy_shape, IdDtype,
    RoutedExpertsInfo, RoutedExpertsOptions,
};
pub use router::{
    Router, RouterOptions, RouterStats, StepCost, WorkerScore, WorkerSlot, WorkerState,
};
pub use table::{Calibration, FitOptions, Table, TableInfo};

/// Raw bindings, for what the safe API does not cover.
pub use eldr_sys as sys;

/// The ABI this crate was generated for (`ELDR_ABI_VERSION` of its eldr.h).
pub const ABI_VERSION: u32 = eldr_sys::ELDR_ABI_VERSION as u32;

/// The eldr version this crate was built for, `"MAJOR.MINOR.PATCH"`: eldr.h's,
/// the project's one version ([`version`] is the loaded library's).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The loaded library's version string, e.g. `"0.1.0"`.
pub fn version() -> &'static str {
    // SAFETY: static storage.
    unsafe { error::static_cstr(eldr_sys::eldr_version_string()) }
}

/// The loaded library's `MAJOR * 10000 + MINOR * 100 + PATCH`.
pub fn version_number() -> u32 {
    // SAFETY: no arguments, no state.
    unsafe { eldr_sys::eldr_version_number() }
}

/// Fails with `INCOMPATIBLE` unless the loaded libeldr has this crate's ABI.
/// Every constructor (Table, Router, Client) checks it first.
pub fn ensure_abi() -> Result<()> {
    // SAFETY: no arguments, no state.
    let loaded = unsafe { eldr_sys::eldr_abi_version() };
    if loaded == ABI_VERSION {
        Ok(())
    } else {
        Err(Error::new(
            status::INCOMPATIBLE,
            format!(
                "libeldr has ABI {}, this crate was built for ABI {}",
                loaded, ABI_VERSION
            ),
        ))
    }
}
