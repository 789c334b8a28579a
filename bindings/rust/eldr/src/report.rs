//! A decode engine's report about one of its workers.

use eldr_sys as sys;

/// A decode engine's report about one worker, for [`Client::report`](crate::Client::report) and
/// [`Router::report`](crate::Router::report). `batch_size` and `step_ms` 0 =
/// not reported.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct WorkerReport {
    /// Worker id.
    pub worker: i32,
    /// Requests running (the daemon's liveness signal).
    pub running: u32,
    /// KV-cache usage in [0, 1].
    pub kv_usage: f32,
    /// Requests in its last decode step: replaces the daemon's in-flight count.
    pub batch_size: u32,
    /// That step's duration in ms (finite, >= 0): a sample for the online
    /// fit of the step constants.
    pub step_ms: f32,
}

impl WorkerReport {
    /// The C struct, at this binding's version.
    pub(crate) fn to_raw(self) -> sys::eldr_worker_report_t {
        sys::eldr_worker_report_t {
            version: sys::ELDR_WORKER_REPORT_VERSION as u32,
            worker: self.worker,
            running: self.running,
            kv_usage: self.kv_usage,
            batch_size: self.batch_size,
            step_ms: self.step_ms,
            reserved: [0; 4],
        }
    }
}
