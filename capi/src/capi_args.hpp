// Argument checks shared by the entry points. Each returns ELDR_OK or records
// a message naming the function and the argument ("eldr_router_route: counts
// is NULL") and returns the failing code, so callers write
//   if (eldr_status_t s = require(fn, counts, "counts")) return s;
#pragma once

#include <cstdint>
#include <string_view>

#include "capi_internal.hpp"
#include "eldr/internal/checked_math.hpp"

namespace eldr::capi {

// ELDR_E_INVALID_ARGUMENT when p is NULL.
eldr_status_t require(const char* fn, const void* p, const char* name) noexcept;

// Versioned structs: 0 (never initialised) is INVALID_ARGUMENT, a version
// newer than this library knows is UNSUPPORTED; 1..current are accepted.
eldr_status_t check_version(const char* fn, const char* what, uint32_t version,
                            uint32_t current) noexcept;

// Request ids: 1..shm::kMaxRequestId bytes, NUL-terminated (reads at most one
// byte past the limit). On success *out views the id.
eldr_status_t check_request_id(const char* fn, const char* request_id,
                               std::string_view* out) noexcept;

// A footprint's shape by itself: 1..kMaxLayers layers, 1..kMaxExperts experts.
eldr_status_t check_shape(const char* fn, uint32_t layers, uint32_t experts) noexcept;

// The footprint arguments of a route/scores/learn call against the router's
// fixed geometry. The core then checks the values (OUT_OF_RANGE for a
// negative count).
eldr_status_t check_counts(const char* fn, const eldr_router_t& router, const int16_t* counts,
                           uint32_t layers, uint32_t experts) noexcept;

// A worker id: >= 0 (-1 means "none" only in a decision).
eldr_status_t check_worker(const char* fn, int32_t worker) noexcept;
// An eldr_worker_report_t: not NULL, its version, its worker id, kv_usage in
// [0, 1], and a finite step_ms >= 0 (0 = not reported).
eldr_status_t check_worker_report(const char* fn, const eldr_worker_report_t* report) noexcept;

// Wraps a validated table in a handle (the signature space is derived once).
eldr_status_t make_table(const char* fn, ClusterTable&& table, eldr_table_t** out);

// The fields of a decision, from whichever source (router, daemon, pool).
struct DecisionFields {
  int32_t worker = -1;
  float similarity = 0.0f;
  uint32_t band_size = 0;
  uint64_t table_epoch = 0;
  uint32_t policy = 0;
  eldr_status_t status = ELDR_OK;
  uint64_t latency_ns = 0;
  uint64_t completion_token = 0;
  float confidence = 1.0f;
};
// Every decision the API hands out is written here: out->version (checked by
// the caller) is kept, every other field comes from d.
void write_decision(const DecisionFields& d, eldr_decision_t* out) noexcept;

}  // namespace eldr::capi
