// Shared pieces of the eldr Python extension: C status -> Python exception,
// NumPy footprints -> the C API's int16 [layers][experts] view, and the
// Decision value type. Everything here is a thin layer over eldr.h.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <shared_mutex>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "eldr/eldr.h"
#include "eldr/eldr_prompt.h"

namespace eldr_py {

namespace py = pybind11;

// Carries a failed call's status and detail message out of a binding function
// (possibly from a region without the GIL); the registered translator turns it
// into the matching eldr.Error subclass.
class StatusError : public std::runtime_error {
 public:
  StatusError(eldr_status_t status, const std::string& message)
      : std::runtime_error(message), m_status(status) {}
  eldr_status_t status() const noexcept { return m_status; }

 private:
  eldr_status_t m_status;
};

// A failure detected by the binding itself (wrong ndim, NUL in an id...),
// reported with the C API's status codes so callers see one error model.
[[noreturn]] void raise_status(eldr_status_t status, const std::string& message);

// Throws StatusError for a failed C call. The detail message is read here, on
// the thread that made the call and before any other eldr call can replace it.
inline void check(eldr_status_t status) {
  if (status == ELDR_OK) return;
  const char* detail = eldr_last_error_message();
  raise_status(status,
               detail != nullptr && detail[0] != '\0' ? detail : eldr_status_string(status));
}

// Installs the translator for StatusError; the exception classes live in
// eldr/_errors.py so that they are ordinary, picklable Python classes.
void register_error_translator();

// A C handle used from several Python threads. Calls run without the GIL
// under a shared lock (an exclusive one when the C handle is not thread-safe:
// kSerialised); close() takes the lock exclusively, so it waits for calls in
// flight on other threads and never frees the handle under one.
template <typename Handle, void (*Free)(Handle*), bool kSerialised = false>
class SharedHandle {
 public:
  explicit SharedHandle(const char* what) : m_what(what) {}
  ~SharedHandle() { Free(m_handle); }
  SharedHandle(const SharedHandle&) = delete;
  SharedHandle& operator=(const SharedHandle&) = delete;

  // Where the C constructor stores the handle (before any other thread sees it).
  Handle** init_slot() noexcept { return &m_handle; }

  void close() {
    py::gil_scoped_release unlocked;
    std::unique_lock lock(m_mutex);
    Free(m_handle);
    m_handle = nullptr;
    m_closed.store(true, std::memory_order_release);
  }
  // Without the lock: it may be held by a long call, and the GIL is held here.
  bool closed() const { return m_closed.load(std::memory_order_acquire); }

  // fn(handle) under the lock; StatusError(STATE) once closed. For callers
  // that already released the GIL.
  template <typename Fn>
  auto locked(Fn&& fn) {
    using Lock = std::conditional_t<kSerialised, std::unique_lock<std::shared_mutex>,
                                    std::shared_lock<std::shared_mutex>>;
    Lock lock(m_mutex);
    if (m_handle == nullptr)
      raise_status(ELDR_E_STATE, std::string("the ") + m_what + " is closed");
    return fn(m_handle);
  }

  // One C call without the GIL; throws StatusError on failure. The detail
  // message is read inside, on the calling thread, right after the call.
  template <typename Fn>
  void call(Fn&& fn) {
    py::gil_scoped_release unlocked;
    check(locked(std::forward<Fn>(fn)));
  }

 private:
  Handle* m_handle = nullptr;
  std::atomic<bool> m_closed{false};
  const char* m_what;
  mutable std::shared_mutex m_mutex;
};

template <typename T>
using IntArray = py::array_t<T, py::array::c_style>;

// NumPy is imported by the first call that takes or returns an array, never by
// `import eldr` (an engine's venv may have none: the calls without arrays
// work there). Raises ImportError naming `what` (an array argument when
// `is_argument`, else the call) when NumPy cannot be imported; after the first
// success it only reads a flag.
void require_numpy(const char* what, bool is_argument);

// Integer arrays as the C API wants them (footprints: int16 [layers][experts]
// or [requests][layers][experts]; loads: uint32 [workers]). A C-contiguous
// array of the exact dtype is borrowed as is (no copy). Any other integer
// array or nested sequence is converted once, after checking that every value
// fits T (OUT_OF_RANGE otherwise: values are never wrapped or truncated).
// Non-integer dtypes raise TypeError; a wrong number of dimensions raises
// ShapeMismatch. `what` names the argument in messages.
template <typename T>
IntArray<T> as_int_array(const py::handle& obj, py::ssize_t ndim, const char* what);

inline IntArray<int16_t> as_counts(const py::handle& obj, py::ssize_t ndim, const char* what) {
  return as_int_array<int16_t>(obj, ndim, what);
}

// Checked narrowing of an array extent to the C API's uint32_t sizes.
uint32_t extent_u32(const py::array& array, py::ssize_t axis, const char* what);

// Request ids cross the C API as NUL-terminated strings: reject embedded NULs
// (they would silently shorten the id) and accept str (UTF-8) or bytes.
std::string request_id_arg(const py::handle& obj);

// A prompt argument: str (text, sent as UTF-8) or a 1-D integer array (or
// sequence) of token ids. Holds what view() points into.
struct PromptArg {
  std::string text;
  IntArray<uint32_t> tokens;
  bool is_text = false;
  eldr_prompt_t view() const noexcept;
};
PromptArg prompt_arg(const py::handle& obj, const char* what);

// eldr_decision_t as an immutable Python value.
struct Decision {
  int32_t worker = -1;
  float similarity = 0.0f;
  uint32_t band_size = 0;
  uint64_t table_epoch = 0;
  uint32_t policy = 0;
  int32_t status = ELDR_OK;
  uint64_t latency_ns = 0;
  uint64_t completion_token = 0;
  float confidence = 1.0f;

  static Decision from_c(const eldr_decision_t& d) {
    return {d.worker, d.similarity, d.band_size,        d.table_epoch, d.policy,
            d.status, d.latency_ns, d.completion_token, d.confidence};
  }
};

// "eldr", "round_robin"... or the number as text for a policy this library
// does not name.
std::string policy_label(uint32_t policy);

// Runs fn on the C handle of `client` (an eldr.Client) as its own calls do:
// called with the GIL, runs fn without it, under the client's lock; throws
// StatusError on failure (fn may throw it too), TypeError when `client` is
// not an eldr.Client.
void call_with_client(const py::handle& client,
                      const std::function<eldr_status_t(eldr_client_t*)>& fn);

void bind_decision(py::module_& m);
void bind_table(py::module_& m);
void bind_router(py::module_& m);
void bind_client(py::module_& m);
void bind_pool(py::module_& m);
void bind_gpu(py::module_& m);
void bind_engines(py::module_& m);

}  // namespace eldr_py
