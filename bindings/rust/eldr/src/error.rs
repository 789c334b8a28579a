//! Status codes and the error type every fallible call returns.

use std::ffi::CStr;
use std::fmt;

use eldr_sys as sys;

/// The C API's status codes (`ELDR_E_*`): plain `i32`, pinned forever.
pub mod status {
    use eldr_sys as sys;
    pub const OK: i32 = sys::ELDR_OK;
    pub const INVALID_ARGUMENT: i32 = sys::ELDR_E_INVALID_ARGUMENT;
    pub const SHAPE_MISMATCH: i32 = sys::ELDR_E_SHAPE_MISMATCH;
    pub const OUT_OF_RANGE: i32 = sys::ELDR_E_OUT_OF_RANGE;
    pub const IO: i32 = sys::ELDR_E_IO;
    pub const CORRUPT: i32 = sys::ELDR_E_CORRUPT;
    pub const UNSUPPORTED: i32 = sys::ELDR_E_UNSUPPORTED;
    pub const NOT_FOUND: i32 = sys::ELDR_E_NOT_FOUND;
    pub const NO_WORKER: i32 = sys::ELDR_E_NO_WORKER;
    pub const CAPACITY: i32 = sys::ELDR_E_CAPACITY;
    pub const STATE: i32 = sys::ELDR_E_STATE;
    pub const INTERNAL: i32 = sys::ELDR_E_INTERNAL;
    pub const RING_FULL: i32 = sys::ELDR_E_RING_FULL;
    pub const TIMEOUT: i32 = sys::ELDR_E_TIMEOUT;
    pub const NO_DAEMON: i32 = sys::ELDR_E_NO_DAEMON;
    pub const INCOMPATIBLE: i32 = sys::ELDR_E_INCOMPATIBLE;
    pub const OUT_OF_MEMORY: i32 = sys::ELDR_E_OUT_OF_MEMORY;
    pub const CUDA: i32 = sys::ELDR_E_CUDA;
    pub const PERMISSION: i32 = sys::ELDR_E_PERMISSION;
}

/// A failed eldr call: the status code, its `ELDR_E_*` name and the detail
/// message the library recorded for that call.
#[derive(Clone, PartialEq, Eq)]
pub struct Error {
    status: i32,
    name: &'static str,
    message: String,
}

/// `std::result::Result` with [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// An error raised by the binding itself (caught before the C call).
    pub(crate) fn new(status: i32, message: impl Into<String>) -> Error {
        Error {
            status,
            name: status_name(status),
            message: message.into(),
        }
    }

    /// Builds the error for a failed C call. Must run on the calling thread
    /// right after the call: the message is the thread's last error.
    pub(crate) fn from_last_call(status: i32) -> Error {
        // SAFETY: returns a NUL-terminated thread-local string valid until the
        // next eldr call on this thread; it is copied at once.
        let message = unsafe { cstr_to_string(sys::eldr_last_error_message()) };
        Error::new(status, message)
    }

    /// The `ELDR_E_*` code (negative).
    pub fn status(&self) -> i32 {
        self.status
    }
    /// `"ELDR_E_TIMEOUT"` style name (`"ELDR_E_UNKNOWN"` for a code this library does not know).
    pub fn name(&self) -> &'static str {
        self.name
    }
    /// What went wrong in detail (may be empty).
    pub fn message(&self) -> &str {
        &self.message
    }
    /// One-line English description of the status code.
    pub fn description(&self) -> &'static str {
        status_string(self.status)
    }
}

/// Maps a C status to `Ok(())` or the error of this call.
#[inline]
pub(crate) fn check(status: i32) -> Result<()> {
    if status == sys::ELDR_OK {
        Ok(())
    } else {
        Err(Error::from_last_call(status))
    }
}

/// `"ELDR_E_TIMEOUT"` style name of any status code.
pub fn status_name(status: i32) -> &'static str {
    // SAFETY: the library returns static storage for every input.
    unsafe { static_cstr(sys::eldr_status_name(status)) }
}

/// One-line English description of any status code.
pub fn status_string(status: i32) -> &'static str {
    // SAFETY: as status_name.
    unsafe { static_cstr(sys::eldr_status_string(status)) }
}

pub(crate) unsafe fn static_cstr(p: *const std::os::raw::c_char) -> &'static str {
    if p.is_null() {
        return "";
    }
    CStr::from_ptr(p).to_str().unwrap_or("")
}

pub(crate) unsafe fn cstr_to_string(p: *const std::os::raw::c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    CStr::from_ptr(p).to_string_lossy().into_owned()
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.message.is_empty() {
            write!(f, "{}: {}", self.name, self.description())
        } else {
            write!(f, "{}: {}", self.name, self.message)
        }
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Error {{ status: {} ({}), message: {:?} }}",
            self.status, self.name, self.message
        )
    }
}

impl std::error::Error for Error {}
