// Embedded router: the core eldr::Router behind a C handle.
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "capi_args.hpp"
#include "capi_internal.hpp"

namespace eldr::capi {
namespace {

constexpr uint32_t kPolicyCount = sizeof(kAllPolicies) / sizeof(kAllPolicies[0]);
static_assert(ELDR_POLICY_ELDR == static_cast<uint32_t>(Policy::eldr));
static_assert(ELDR_POLICY_ROUND_ROBIN == static_cast<uint32_t>(Policy::round_robin));
static_assert(ELDR_POLICY_RANDOM == static_cast<uint32_t>(Policy::random));
static_assert(ELDR_POLICY_JSQ == static_cast<uint32_t>(Policy::jsq));
static_assert(ELDR_POLICY_P2C == static_cast<uint32_t>(Policy::p2c));
static_assert(ELDR_POLICY_DOMAIN == static_cast<uint32_t>(Policy::domain));
static_assert(ELDR_POLICY_ELDR_GUARD == static_cast<uint32_t>(Policy::eldr_guard));
static_assert(ELDR_POLICY_ELDR_COST == static_cast<uint32_t>(Policy::eldr_cost));
static_assert(ELDR_WORKER_STATE_ACTIVE == static_cast<uint32_t>(WorkerState::active));
static_assert(ELDR_WORKER_STATE_DRAINING == static_cast<uint32_t>(WorkerState::draining));
static_assert(ELDR_WORKER_STATE_REMOVED == static_cast<uint32_t>(WorkerState::removed));

// The arguments of the calls that fill a decision (route, route_request).
eldr_status_t check_decision_call(const char* fn, const eldr_router_t* router,
                                  const int16_t* counts, uint32_t layers, uint32_t experts,
                                  const eldr_decision_t* out) noexcept {
  if (eldr_status_t s = require(fn, router, "router")) return s;
  if (eldr_status_t s = require(fn, out, "out")) return s;
  if (eldr_status_t s = check_version(fn, "out", out->version, ELDR_DECISION_VERSION)) return s;
  return check_counts(fn, *router, counts, layers, experts);
}

// One decision with `hints`, into *out.
eldr_status_t decide(const char* fn, eldr_router_t& router, const int16_t* counts,
                     const RouteHints& hints, eldr_decision_t* out) {
  auto d = router.router->route({counts, router.geometry.cells()}, hints);
  if (!d) return fail(fn, d.status());
  write_decision({.worker = d->worker_id,
                  .similarity = d->similarity,
                  .band_size = d->band_size,
                  .table_epoch = d->table_epoch,
                  .policy = static_cast<uint32_t>(d->policy)},
                 out);
  return ELDR_OK;
}

// The step constants: all three < 0 = unset (the
// table's, else its geometry's preset), all three >= 0 = these; anything
// else (a mix, a NaN) is refused.
eldr_status_t step_cost_option(const char* fn, const eldr_router_options_t& o,
                               std::optional<StepCost>* out) noexcept {
  const double v[3] = {o.t0_ms, o.tseq_ms, o.alpha_us};
  int unset = 0, set = 0;
  for (double x : v) {
    if (x < 0.0) ++unset;
    if (x >= 0.0) ++set;
  }
  if (unset == 3) {
    if (o.max_batch != 0)
      return fail(ELDR_E_INVALID_ARGUMENT, fn,
                  "max_batch is set but t0_ms, tseq_ms and alpha_us are not (all < 0)");
    *out = std::nullopt;
    return ELDR_OK;
  }
  if (set != 3) {
    char msg[192];
    std::snprintf(msg, sizeof msg,
                  "t0_ms %g, tseq_ms %g, alpha_us %g: set all three (>= 0) or none (< 0)", v[0],
                  v[1], v[2]);
    return fail(ELDR_E_INVALID_ARGUMENT, fn, msg);
  }
  StepCost cost;
  cost.t0_ms = o.t0_ms;
  cost.tseq_ms = o.tseq_ms;
  cost.alpha_us = o.alpha_us;
  cost.max_batch = o.max_batch == 0 ? StepCost{}.max_batch : o.max_batch;
  *out = cost;
  return ELDR_OK;
}

// The worker membership calls share one shape.
template <class Op>
eldr_status_t worker_call(const char* fn, eldr_router_t* router, int32_t worker, Op op) noexcept {
  return guarded(fn, [&]() -> eldr_status_t {
    if (eldr_status_t s = require(fn, router, "router")) return s;
    if (eldr_status_t s = check_worker(fn, worker)) return s;
    if (Status s = op(*router->router); !s) return fail(fn, s);
    return ELDR_OK;
  });
}

}  // namespace
}  // namespace eldr::capi

using eldr::capi::check_version;
using eldr::capi::fail;
using eldr::capi::guarded;
using eldr::capi::require;

extern "C" {

const char* eldr_policy_name(uint32_t policy) {
  if (policy >= eldr::capi::kPolicyCount) return nullptr;
  return eldr::policy_name(static_cast<eldr::Policy>(policy));
}

void eldr_decision_init(eldr_decision_t* decision) {
  if (decision == nullptr) return;
  const eldr_decision_t init = ELDR_DECISION_INIT;
  *decision = init;
}

void eldr_router_options_init(eldr_router_options_t* options) {
  if (options == nullptr) return;
  const eldr_router_options_t init = ELDR_ROUTER_OPTIONS_INIT;
  *options = init;
}

void eldr_worker_report_init(eldr_worker_report_t* report) {
  if (report == nullptr) return;
  const eldr_worker_report_t init = ELDR_WORKER_REPORT_INIT;
  *report = init;
}

eldr_status_t eldr_router_new(const eldr_table_t* table, const eldr_router_options_t* opts,
                              eldr_router_t** out) {
  static constexpr const char* fn = "eldr_router_new";
  return guarded(fn, [&]() -> eldr_status_t {
    if (eldr_status_t s = require(fn, table, "table")) return s;
    if (eldr_status_t s = require(fn, out, "out")) return s;
    eldr_router_options_t o = ELDR_ROUTER_OPTIONS_INIT;
    if (opts != nullptr) {
      if (eldr_status_t s = check_version(fn, "opts", opts->version, ELDR_ROUTER_OPTIONS_VERSION))
        return s;
      o = *opts;
    }
    if (o.policy >= eldr::capi::kPolicyCount) {
      char msg[96];
      std::snprintf(msg, sizeof msg, "unknown policy %u", o.policy);
      return fail(ELDR_E_UNSUPPORTED, fn, msg);
    }
    if (std::isnan(o.tau)) return fail(ELDR_E_INVALID_ARGUMENT, fn, "tau is NaN");
    std::optional<eldr::StepCost> step_cost;
    if (eldr_status_t s = eldr::capi::step_cost_option(fn, o, &step_cost)) return s;
    eldr::RouterOptions options;
    options.policy = static_cast<eldr::Policy>(o.policy);
    options.tau = o.tau;
    options.min2_band = o.min2_band != 0;
    options.seed = o.seed;
    options.max_workers = o.max_workers;
    options.step_cost = step_cost;
    options.fit_step_cost = o.fit_step_cost != 0;
    if (o.max_inflight != 0) options.max_inflight = o.max_inflight;
    auto router = eldr::Router::create(table->table, options);
    if (!router) return fail(fn, router.status());
    auto handle = std::make_unique<eldr_router>();
    handle->router = std::move(*router);
    handle->geometry = table->table->geometry;
    *out = handle.release();
    return ELDR_OK;
  });
}

void eldr_router_free(eldr_router_t* router) { delete router; }

eldr_status_t eldr_router_route(eldr_router_t* router, const int16_t* counts, uint32_t layers,
                                uint32_t experts, const uint32_t* loads, uint32_t n_loads,
                                eldr_decision_t* out) {
  static constexpr const char* fn = "eldr_router_route";
  return guarded(fn, [&]() -> eldr_status_t {
    if (eldr_status_t s = eldr::capi::check_decision_call(fn, router, counts, layers, experts, out))
      return s;
    if (loads == nullptr && n_loads != 0)
      return fail(ELDR_E_INVALID_ARGUMENT, fn, "loads is NULL but n_loads is not 0");
    eldr::RouteHints hints;
    if (loads != nullptr) {
      const uint32_t slots = router->router->worker_slots();
      if (n_loads != slots) {
        char msg[128];
        std::snprintf(msg, sizeof msg, "loads holds %u entries, the router has %u worker slots",
                      n_loads, slots);
        return fail(ELDR_E_INVALID_ARGUMENT, fn, msg);
      }
      hints.loads = {loads, n_loads};
    }
    return eldr::capi::decide(fn, *router, counts, hints, out);
  });
}

eldr_status_t eldr_router_route_request(eldr_router_t* router, uint64_t request_id,
                                        const int16_t* counts, uint32_t layers, uint32_t experts,
                                        eldr_decision_t* out) {
  static constexpr const char* fn = "eldr_router_route_request";
  return guarded(fn, [&]() -> eldr_status_t {
    if (eldr_status_t s = eldr::capi::check_decision_call(fn, router, counts, layers, experts, out))
      return s;
    eldr::RouteHints hints;
    hints.request_id = request_id;
    return eldr::capi::decide(fn, *router, counts, hints, out);
  });
}

eldr_status_t eldr_router_score(eldr_router_t* router, const int16_t* counts, uint32_t layers,
                                uint32_t experts, float* out_scores, uint8_t* out_in_band,
                                uint32_t n) {
  static constexpr const char* fn = "eldr_router_score";
  return guarded(fn, [&]() -> eldr_status_t {
    if (eldr_status_t s = require(fn, router, "router")) return s;
    if (eldr_status_t s = require(fn, out_scores, "out_scores")) return s;
    if (eldr_status_t s = require(fn, out_in_band, "out_in_band")) return s;
    if (eldr_status_t s = eldr::capi::check_counts(fn, *router, counts, layers, experts)) return s;
    const uint32_t slots = router->router->worker_slots();
    if (n != slots) {
      char msg[128];
      std::snprintf(msg, sizeof msg, "n is %u, the router has %u worker slots", n, slots);
      return fail(ELDR_E_INVALID_ARGUMENT, fn, msg);
    }
    auto band = router->router->scores({counts, router->geometry.cells()}, {out_scores, n},
                                       {out_in_band, n});
    if (!band) return fail(fn, band.status());
    return ELDR_OK;
  });
}

eldr_status_t eldr_router_complete_worker(eldr_router_t* router, int32_t worker) {
  return eldr::capi::worker_call("eldr_router_complete_worker", router, worker,
                                 [&](eldr::Router& r) { return r.complete(worker); });
}

eldr_status_t eldr_router_complete(eldr_router_t* router, uint64_t request_id) {
  static constexpr const char* fn = "eldr_router_complete";
  return guarded(fn, [&]() -> eldr_status_t {
    if (eldr_status_t s = require(fn, router, "router")) return s;
    if (eldr::Status s = router->router->complete_request(request_id); !s) return fail(fn, s);
    return ELDR_OK;
  });
}

eldr_status_t eldr_router_report(eldr_router_t* router, const eldr_worker_report_t* report) {
  static constexpr const char* fn = "eldr_router_report";
  return guarded(fn, [&]() -> eldr_status_t {
    if (eldr_status_t s = require(fn, router, "router")) return s;
    if (eldr_status_t s = eldr::capi::check_worker_report(fn, report)) return s;
    // 0 = not reported, for both. `running` and kv_usage are the daemon's
    // liveness signals: the embedded router keeps no liveness.
    eldr::WorkerReport r;
    if (report->batch_size != 0) r.batch = report->batch_size;
    if (report->step_ms != 0.0f) r.step_ms = static_cast<double>(report->step_ms);
    const auto worker = static_cast<int32_t>(report->worker);
    if (eldr::Status s = router->router->report(worker, r); !s) return fail(fn, s);
    return ELDR_OK;
  });
}

eldr_status_t eldr_router_get_stats(const eldr_router_t* router, eldr_router_stats_t* out) {
  static constexpr const char* fn = "eldr_router_get_stats";
  return guarded(fn, [&]() -> eldr_status_t {
    if (eldr_status_t s = require(fn, router, "router")) return s;
    if (eldr_status_t s = require(fn, out, "out")) return s;
    if (eldr_status_t s = check_version(fn, "out", out->version, ELDR_ROUTER_STATS_VERSION))
      return s;
    const eldr::RouterStats st = router->router->stats();
    const eldr::StepCost cost = router->router->step_cost();
    eldr_router_stats_t stats = ELDR_ROUTER_STATS_INIT;
    stats.version = out->version;
    stats.routed = st.routed;
    stats.rejected = st.rejected;
    stats.completes_rejected = st.completes_rejected;
    stats.completes_unknown = st.completes_unknown;
    stats.untracked = st.untracked;
    stats.step_samples = st.step_samples;
    stats.t0_ms = cost.t0_ms;
    stats.tseq_ms = cost.tseq_ms;
    stats.alpha_us = cost.alpha_us;
    *out = stats;
    return ELDR_OK;
  });
}

eldr_status_t eldr_router_set_load(eldr_router_t* router, int32_t worker, uint32_t inflight) {
  return eldr::capi::worker_call("eldr_router_set_load", router, worker,
                                 [&](eldr::Router& r) { return r.set_load(worker, inflight); });
}

eldr_status_t eldr_router_add_worker(eldr_router_t* router, int32_t worker) {
  return eldr::capi::worker_call("eldr_router_add_worker", router, worker,
                                 [&](eldr::Router& r) { return r.add_worker(worker); });
}

eldr_status_t eldr_router_drain_worker(eldr_router_t* router, int32_t worker) {
  return eldr::capi::worker_call("eldr_router_drain_worker", router, worker,
                                 [&](eldr::Router& r) { return r.drain_worker(worker); });
}

eldr_status_t eldr_router_remove_worker(eldr_router_t* router, int32_t worker) {
  return eldr::capi::worker_call("eldr_router_remove_worker", router, worker,
                                 [&](eldr::Router& r) { return r.remove_worker(worker); });
}

eldr_status_t eldr_router_swap_table(eldr_router_t* router, const eldr_table_t* table) {
  static constexpr const char* fn = "eldr_router_swap_table";
  return guarded(fn, [&]() -> eldr_status_t {
    if (eldr_status_t s = require(fn, router, "router")) return s;
    if (eldr_status_t s = require(fn, table, "table")) return s;
    if (eldr::Status s = router->router->swap_table(table->table); !s) return fail(fn, s);
    return ELDR_OK;
  });
}

eldr_status_t eldr_router_get_worker_slots(const eldr_router_t* router, uint32_t* out) {
  static constexpr const char* fn = "eldr_router_get_worker_slots";
  return guarded(fn, [&]() -> eldr_status_t {
    if (eldr_status_t s = require(fn, router, "router")) return s;
    if (eldr_status_t s = require(fn, out, "out")) return s;
    *out = router->router->worker_slots();
    return ELDR_OK;
  });
}

eldr_status_t eldr_router_get_workers(const eldr_router_t* router, int32_t* out_ids,
                                      uint32_t* out_states, uint32_t* out_inflight, uint32_t n) {
  static constexpr const char* fn = "eldr_router_get_workers";
  return guarded(fn, [&]() -> eldr_status_t {
    if (eldr_status_t s = require(fn, router, "router")) return s;
    if (eldr_status_t s = require(fn, out_ids, "out_ids")) return s;
    const std::vector<eldr::WorkerInfo> workers = router->router->workers();
    if (n != workers.size()) {
      char msg[128];
      std::snprintf(msg, sizeof msg, "n is %u, the router has %zu worker slots", n, workers.size());
      return fail(ELDR_E_INVALID_ARGUMENT, fn, msg);
    }
    for (uint32_t i = 0; i < n; ++i) {
      out_ids[i] = workers[i].id;
      if (out_states != nullptr) out_states[i] = static_cast<uint32_t>(workers[i].state);
      if (out_inflight != nullptr) {
        const int64_t v = workers[i].inflight;
        out_inflight[i] = v <= 0 ? 0u : v >= UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(v);
      }
    }
    return ELDR_OK;
  });
}

}  // extern "C"
