// Status and Result<T>: the core's error model. No exception crosses a module
// boundary; every fallible call returns a Status (or a Result carrying one).
// Codes are pinned: the C API exposes the same negative numbers.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <variant>

namespace eldr {

enum class Errc : int32_t {
  ok = 0,
  invalid_argument = -1,  // bad value, NULL, wrong size from the caller
  shape_mismatch = -2,    // footprint / array shape disagrees with the geometry
  out_of_range = -3,      // a value outside its legal range (count, expert id)
  io = -4,                // file could not be opened, read or written
  corrupt = -5,           // malformed or truncated data (npy, table, JSON)
  unsupported = -6,       // version or feature this build does not handle
  not_found = -7,         // unknown worker, missing cache entry
  no_worker = -8,         // no routable worker (all draining / removed)
  capacity = -9,          // a bounded structure is full
  state = -10,            // call not valid in the object's current state
  internal = -11,         // a bug: invariant broken
  // Sidecar and device codes (pinned with the rest).
  ring_full = -12,      // the producer's ring has no room now: retry later, nothing was written
  timeout = -13,        // a bounded wait ended before its event
  no_daemon = -14,      // no ready eldrd segment for this instance (not started, stale, stopping)
  incompatible = -15,   // segment or peer of another format: magic, ABI or layout hash differ
  out_of_memory = -16,  // an allocation failed (host, shared memory or device)
  cuda = -17,           // a CUDA runtime call failed
  permission = -18,     // the OS refused access (segment mode, group, lock file)
};

const char* errc_name(Errc code) noexcept;

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Errc code, std::string message) : m_code(code), m_message(std::move(message)) {}
  static Status ok() { return {}; }

  bool is_ok() const noexcept { return m_code == Errc::ok; }
  explicit operator bool() const noexcept { return is_ok(); }
  Errc code() const noexcept { return m_code; }
  const std::string& message() const noexcept { return m_message; }
  // "name: message", for logs and CLI output.
  std::string to_string() const;

 private:
  Errc m_code = Errc::ok;
  std::string m_message;
};

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : m_v(std::move(value)) {}         // NOLINT(google-explicit-constructor)
  Result(Status status) : m_v(std::move(status)) {}  // NOLINT(google-explicit-constructor)

  bool is_ok() const noexcept { return m_v.index() == 0; }
  explicit operator bool() const noexcept { return is_ok(); }
  T& value() & { return std::get<0>(m_v); }
  const T& value() const& { return std::get<0>(m_v); }
  T&& value() && { return std::get<0>(std::move(m_v)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  // The error; Status::ok() when the result holds a value.
  Status status() const { return is_ok() ? Status::ok() : std::get<1>(m_v); }

 private:
  std::variant<T, Status> m_v;
};

// Early-return helpers for code that threads Status through several steps.
#define ELDR_TRY(expr)                            \
  do {                                            \
    ::eldr::Status eldr_try_s_ = (expr);          \
    if (!eldr_try_s_.is_ok()) return eldr_try_s_; \
  } while (0)

}  // namespace eldr
