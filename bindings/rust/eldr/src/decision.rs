//! Routing decisions.

use std::time::Duration;

use eldr_sys as sys;

use crate::policy::Policy;

/// Where a request's decode goes, and why.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Decision {
    /// The chosen decode worker id.
    pub worker: i32,
    /// Signature . centroid of the chosen worker.
    pub similarity: f32,
    /// Workers inside the locality band.
    pub band_size: u32,
    /// Cluster table generation used.
    pub table_epoch: u64,
    /// Raw `ELDR_POLICY_*` code; see [`Decision::policy`].
    pub policy_code: u32,
    /// Sidecar: push to publish, measured by the daemon (zero when embedded).
    pub latency: Duration,
    /// Sidecar: what [`crate::Client::complete`] presents for this
    /// request from a process other than the one that pushed its footprint.
    pub completion_token: u64,
    /// Routed from a prompt: how sure the prediction was, in [0, 1] (an
    /// unsure prediction pulls the request towards no worker in particular);
    /// 1 for a decision from a footprint.
    pub confidence: f32,
}

impl Decision {
    /// The policy that decided, `None` for a code this binding does not know.
    pub fn policy(&self) -> Option<Policy> {
        Policy::from_raw(self.policy_code)
    }

    pub(crate) fn from_raw(raw: &sys::eldr_decision_t) -> Decision {
        Decision {
            worker: raw.worker,
            similarity: raw.similarity,
            band_size: raw.band_size,
            table_epoch: raw.table_epoch,
            policy_code: raw.policy,
            latency: Duration::from_nanos(raw.latency_ns),
            completion_token: raw.completion_token,
            confidence: raw.confidence,
        }
    }
}

/// An `eldr_decision_t` ready to pass as an out-param (`ELDR_DECISION_INIT`).
pub(crate) fn raw_decision() -> sys::eldr_decision_t {
    let mut raw = std::mem::MaybeUninit::<sys::eldr_decision_t>::zeroed();
    // SAFETY: init writes the whole struct.
    unsafe {
        sys::eldr_decision_init(raw.as_mut_ptr());
        raw.assume_init()
    }
}
