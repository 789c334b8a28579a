// Status names and strings, the per-thread last error, version queries.
#include <cstdio>
#include <cstring>

#include "capi_internal.hpp"
#include "eldr/geometry.hpp"

namespace eldr::capi {
namespace {

// A fixed buffer: recording a failure must work when memory is exhausted, and
// a thread-local without a destructor costs nothing at thread exit.
constexpr size_t kMessageBytes = 1024;
thread_local char t_message[kMessageBytes] = {0};
thread_local uint64_t t_failures = 0;

void store(std::string_view message) noexcept {
  const size_t n = message.size() < kMessageBytes - 1 ? message.size() : kMessageBytes - 1;
  std::memcpy(t_message, message.data(), n);
  t_message[n] = '\0';
  ++t_failures;
}

}  // namespace

eldr_status_t fail(eldr_status_t code, std::string_view message) noexcept {
  store(message);
  return code;
}

eldr_status_t fail(const Status& status) noexcept {
  if (status.is_ok()) return fail(ELDR_E_INTERNAL, "internal: an ok status reported as a failure");
  return fail(static_cast<eldr_status_t>(status.code()), status.message());
}

eldr_status_t fail(const char* fn, const Status& status) noexcept {
  if (status.is_ok()) return fail(ELDR_E_INTERNAL, fn, "an ok status reported as a failure");
  return fail(static_cast<eldr_status_t>(status.code()), fn, status.message().c_str());
}

eldr_status_t fail(eldr_status_t code, const char* fn, const char* what) noexcept {
  char message[kMessageBytes];
  std::snprintf(message, sizeof message, "%s: %s", fn, what);
  return fail(code, std::string_view(message));
}

void clear_error() noexcept { t_message[0] = '\0'; }

const char* last_message() noexcept { return t_message; }

uint64_t failure_count() noexcept { return t_failures; }

}  // namespace eldr::capi

namespace {

struct StatusText {
  eldr_status_t code;
  const char* name;
  const char* text;
};

constexpr StatusText kStatusTexts[] = {
    {ELDR_OK, "ELDR_OK", "success"},
    {ELDR_E_INVALID_ARGUMENT, "ELDR_E_INVALID_ARGUMENT",
     "invalid argument (NULL, bad size or bad value)"},
    {ELDR_E_SHAPE_MISMATCH, "ELDR_E_SHAPE_MISMATCH",
     "footprint shape disagrees with the table or geometry"},
    {ELDR_E_OUT_OF_RANGE, "ELDR_E_OUT_OF_RANGE", "value outside its legal range"},
    {ELDR_E_IO, "ELDR_E_IO", "file could not be opened, read or written"},
    {ELDR_E_CORRUPT, "ELDR_E_CORRUPT", "malformed or truncated data"},
    {ELDR_E_UNSUPPORTED, "ELDR_E_UNSUPPORTED", "version or feature not supported by this build"},
    {ELDR_E_NOT_FOUND, "ELDR_E_NOT_FOUND", "unknown worker or request id"},
    {ELDR_E_NO_WORKER, "ELDR_E_NO_WORKER", "no routable worker"},
    {ELDR_E_CAPACITY, "ELDR_E_CAPACITY", "bounded structure full or record too large"},
    {ELDR_E_STATE, "ELDR_E_STATE", "call not valid in the object's current state"},
    {ELDR_E_INTERNAL, "ELDR_E_INTERNAL", "internal error (a bug)"},
    {ELDR_E_RING_FULL, "ELDR_E_RING_FULL", "ring full: nothing written, retry later"},
    {ELDR_E_TIMEOUT, "ELDR_E_TIMEOUT", "timed out"},
    {ELDR_E_NO_DAEMON, "ELDR_E_NO_DAEMON", "no ready eldrd for this instance"},
    {ELDR_E_INCOMPATIBLE, "ELDR_E_INCOMPATIBLE", "incompatible segment format"},
    {ELDR_E_OUT_OF_MEMORY, "ELDR_E_OUT_OF_MEMORY", "out of memory"},
    {ELDR_E_CUDA, "ELDR_E_CUDA", "CUDA runtime call failed"},
    {ELDR_E_PERMISSION, "ELDR_E_PERMISSION", "permission denied"},
};

const StatusText* find_status(eldr_status_t status) noexcept {
  for (const StatusText& t : kStatusTexts) {
    if (t.code == status) return &t;
  }
  return nullptr;
}

}  // namespace

extern "C" {

uint32_t eldr_version_number(void) { return ELDR_VERSION_NUMBER; }
uint32_t eldr_abi_version(void) { return ELDR_ABI_VERSION; }

#define ELDR_STR2(x) #x
#define ELDR_STR(x) ELDR_STR2(x)
const char* eldr_version_string(void) {
  return ELDR_STR(ELDR_VERSION_MAJOR) "." ELDR_STR(ELDR_VERSION_MINOR) "." ELDR_STR(
      ELDR_VERSION_PATCH);
}
#undef ELDR_STR
#undef ELDR_STR2

const char* eldr_status_name(eldr_status_t status) {
  const StatusText* t = find_status(status);
  return t != nullptr ? t->name : "ELDR_E_UNKNOWN";
}

const char* eldr_status_string(eldr_status_t status) {
  const StatusText* t = find_status(status);
  return t != nullptr ? t->text : "unknown status code";
}

const char* eldr_last_error_message(void) { return eldr::capi::last_message(); }

}  // extern "C"
