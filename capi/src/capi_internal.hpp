// Internal helpers shared by every translation unit of libeldr.so (the C API
// sources and the CUDA glue in cuda/). Not installed.
//
// Each extern "C" entry point has the shape
//
//   eldr_status_t eldr_thing_do(...) {
//     return eldr::capi::guarded("eldr_thing_do", [&]() -> eldr_status_t {
//       ... validate, call the core, write out-params last ...
//       return ELDR_OK;
//     });
//   }
//
// guarded() runs the body and turns any escaping exception into a status: no
// exception crosses the ABI. fail() records the calling thread's message and
// returns the code, so bodies end their error paths with
// `return fail(ELDR_E_..., "...")`.
#pragma once

#include <cstdint>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <string_view>

#include "eldr/cluster_table.hpp"
#include "eldr/eldr.h"
#include "eldr/router.hpp"
#include "eldr/shm.hpp"
#include "eldr/signature.hpp"
#include "eldr/status.hpp"

// The C codes are the core's codes: a Status maps to eldr_status_t by value.
#define ELDR_CAPI_PIN(c_code, errc) \
  static_assert((c_code) == static_cast<int32_t>(::eldr::Errc::errc), #c_code " drifted")
ELDR_CAPI_PIN(ELDR_OK, ok);
ELDR_CAPI_PIN(ELDR_E_INVALID_ARGUMENT, invalid_argument);
ELDR_CAPI_PIN(ELDR_E_SHAPE_MISMATCH, shape_mismatch);
ELDR_CAPI_PIN(ELDR_E_OUT_OF_RANGE, out_of_range);
ELDR_CAPI_PIN(ELDR_E_IO, io);
ELDR_CAPI_PIN(ELDR_E_CORRUPT, corrupt);
ELDR_CAPI_PIN(ELDR_E_UNSUPPORTED, unsupported);
ELDR_CAPI_PIN(ELDR_E_NOT_FOUND, not_found);
ELDR_CAPI_PIN(ELDR_E_NO_WORKER, no_worker);
ELDR_CAPI_PIN(ELDR_E_CAPACITY, capacity);
ELDR_CAPI_PIN(ELDR_E_STATE, state);
ELDR_CAPI_PIN(ELDR_E_INTERNAL, internal);
ELDR_CAPI_PIN(ELDR_E_RING_FULL, ring_full);
ELDR_CAPI_PIN(ELDR_E_TIMEOUT, timeout);
ELDR_CAPI_PIN(ELDR_E_NO_DAEMON, no_daemon);
ELDR_CAPI_PIN(ELDR_E_INCOMPATIBLE, incompatible);
ELDR_CAPI_PIN(ELDR_E_OUT_OF_MEMORY, out_of_memory);
ELDR_CAPI_PIN(ELDR_E_CUDA, cuda);
ELDR_CAPI_PIN(ELDR_E_PERMISSION, permission);
#undef ELDR_CAPI_PIN

// Opaque handles of the public header. Defined at global scope because the
// header declares them there (typedef struct eldr_client eldr_client_t).
struct eldr_client {
  std::unique_ptr<eldr::shm::Client> client;
};

struct eldr_table {
  std::shared_ptr<const eldr::ClusterTable> table;
  eldr::SignatureSpace space;  // built once from the table: signature/scores allocate nothing
};

struct eldr_router {
  std::unique_ptr<eldr::Router> router;
  // Fixed for the router's life (swap_table keeps it): the C shape check
  // needs layers and experts apart, the core only sees the cell count.
  eldr::Geometry geometry;
};

namespace eldr::capi {

// Records `message` as the calling thread's last error and returns `code`.
// Never throws and never allocates (a thread-local fixed buffer; a message
// past its size is cut).
eldr_status_t fail(eldr_status_t code, std::string_view message) noexcept;
// The same for a core Status (its code and message). An ok status is a bug in
// the caller and maps to ELDR_E_INTERNAL.
eldr_status_t fail(const Status& status) noexcept;
// "fn: <status message>" with the status's code.
eldr_status_t fail(const char* fn, const Status& status) noexcept;
// `fn`: `what` (used where building a std::string could itself fail).
eldr_status_t fail(eldr_status_t code, const char* fn, const char* what) noexcept;
// Empties the calling thread's last error message.
void clear_error() noexcept;
// The calling thread's message ("" if none).
const char* last_message() noexcept;
// Counts the failures recorded on this thread; guarded() uses it to make sure
// every failing call leaves a fresh message.
uint64_t failure_count() noexcept;

// The shm::Client behind a handle, or nullptr for NULL / an unopened handle.
inline shm::Client* client_of(eldr_client_t* client) noexcept {
  return client == nullptr ? nullptr : client->client.get();
}

// Runs body() (returning eldr_status_t). std::bad_alloc becomes
// ELDR_E_OUT_OF_MEMORY, any other exception ELDR_E_INTERNAL, both with a
// message naming `fn`. A failure the body returned without a message gets a
// generic one, so eldr_last_error_message() never describes an older call.
// Successful calls leave the last failure's message in place (errno style).
template <class F>
eldr_status_t guarded(const char* fn, F&& body) noexcept {
  const uint64_t failures_before = failure_count();
  eldr_status_t status = ELDR_E_INTERNAL;
  try {
    status = static_cast<F&&>(body)();
  } catch (const std::bad_alloc&) {
    return fail(ELDR_E_OUT_OF_MEMORY, fn, "out of memory");
  } catch (const std::exception& e) {
    return fail(ELDR_E_INTERNAL, fn, e.what());
  } catch (...) {
    return fail(ELDR_E_INTERNAL, fn, "unexpected non-standard exception");
  }
  if (status != ELDR_OK && failure_count() == failures_before) {
    return fail(status, fn, eldr_status_string(status));
  }
  return status;
}

}  // namespace eldr::capi
