#include "capi_args.hpp"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "eldr/geometry.hpp"

namespace eldr::capi {

eldr_status_t require(const char* fn, const void* p, const char* name) noexcept {
  if (p != nullptr) return ELDR_OK;
  char what[96];
  std::snprintf(what, sizeof what, "%s is NULL", name);
  return fail(ELDR_E_INVALID_ARGUMENT, fn, what);
}

eldr_status_t check_version(const char* fn, const char* what, uint32_t version,
                            uint32_t current) noexcept {
  char msg[160];
  if (version == 0) {
    std::snprintf(msg, sizeof msg, "%s.version is 0: initialise it with its _INIT macro or _init()",
                  what);
    return fail(ELDR_E_INVALID_ARGUMENT, fn, msg);
  }
  if (version > current) {
    std::snprintf(msg, sizeof msg, "%s.version %u is newer than this library's %u", what, version,
                  current);
    return fail(ELDR_E_UNSUPPORTED, fn, msg);
  }
  return ELDR_OK;
}

eldr_status_t check_request_id(const char* fn, const char* request_id,
                               std::string_view* out) noexcept {
  if (eldr_status_t s = require(fn, request_id, "request_id")) return s;
  const size_t len = strnlen(request_id, shm::kMaxRequestId + 1);
  char msg[96];
  if (len == 0) return fail(ELDR_E_INVALID_ARGUMENT, fn, "request_id is empty");
  if (len > shm::kMaxRequestId) {
    std::snprintf(msg, sizeof msg, "request_id is longer than %zu bytes", shm::kMaxRequestId);
    return fail(ELDR_E_INVALID_ARGUMENT, fn, msg);
  }
  *out = std::string_view(request_id, len);
  return ELDR_OK;
}

eldr_status_t check_shape(const char* fn, uint32_t layers, uint32_t experts) noexcept {
  char msg[128];
  if (layers == 0 || layers > kMaxLayers) {
    std::snprintf(msg, sizeof msg, "layers %u outside [1, %u]", layers, kMaxLayers);
    return fail(ELDR_E_INVALID_ARGUMENT, fn, msg);
  }
  if (experts == 0 || experts > kMaxExperts) {
    std::snprintf(msg, sizeof msg, "experts %u outside [1, %u]", experts, kMaxExperts);
    return fail(ELDR_E_INVALID_ARGUMENT, fn, msg);
  }
  return ELDR_OK;
}

eldr_status_t check_worker(const char* fn, int32_t worker) noexcept {
  if (worker >= 0) return ELDR_OK;
  char msg[64];
  std::snprintf(msg, sizeof msg, "worker id %d is negative", worker);
  return fail(ELDR_E_INVALID_ARGUMENT, fn, msg);
}

void write_decision(const DecisionFields& d, eldr_decision_t* out) noexcept {
  eldr_decision_t decision = ELDR_DECISION_INIT;
  decision.version = out->version;
  decision.worker = d.worker;
  decision.similarity = d.similarity;
  decision.band_size = d.band_size;
  decision.table_epoch = d.table_epoch;
  decision.policy = d.policy;
  decision.status = d.status;
  decision.latency_ns = d.latency_ns;
  decision.completion_token = d.completion_token;
  decision.confidence = d.confidence;
  *out = decision;
}

eldr_status_t check_counts(const char* fn, const eldr_router_t& router, const int16_t* counts,
                           uint32_t layers, uint32_t experts) noexcept {
  if (eldr_status_t s = require(fn, counts, "counts")) return s;
  if (layers != router.geometry.layers || experts != router.geometry.experts) {
    if (eldr_status_t s = check_shape(fn, layers, experts)) return s;
    char msg[160];
    std::snprintf(msg, sizeof msg, "footprint is %ux%u, the table's geometry is %ux%u", layers,
                  experts, router.geometry.layers, router.geometry.experts);
    return fail(ELDR_E_SHAPE_MISMATCH, fn, msg);
  }
  return ELDR_OK;
}

eldr_status_t check_worker_report(const char* fn, const eldr_worker_report_t* report) noexcept {
  if (eldr_status_t s = require(fn, report, "report")) return s;
  if (eldr_status_t s = check_version(fn, "report", report->version, ELDR_WORKER_REPORT_VERSION))
    return s;
  if (eldr_status_t s = check_worker(fn, report->worker)) return s;
  if (!(report->kv_usage >= 0.0f && report->kv_usage <= 1.0f))
    return fail(ELDR_E_INVALID_ARGUMENT, fn, "kv_usage must be in [0, 1]");
  if (!(std::isfinite(report->step_ms) && report->step_ms >= 0.0f)) {
    char msg[96];
    std::snprintf(msg, sizeof msg, "step_ms %g must be finite and >= 0 (0 = not reported)",
                  static_cast<double>(report->step_ms));
    return fail(ELDR_E_INVALID_ARGUMENT, fn, msg);
  }
  return ELDR_OK;
}

}  // namespace eldr::capi
