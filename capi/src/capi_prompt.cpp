// Routing from the prompt (eldr_prompt.h): the predictor in a table, and the
// embedded router's prompt calls. The client's and the pool's prompt calls
// live beside their other calls (capi_client.cpp, capi_pool.cpp).
#include <cstdio>
#include <memory>
#include <vector>

#include "capi_args.hpp"
#include "capi_internal.hpp"
#include "eldr/eldr_prompt.h"
#include "eldr/predictor.hpp"

using eldr::capi::fail;
using eldr::capi::guarded;
using eldr::capi::require;

namespace eldr::capi {
namespace {

eldr_status_t check_predictor_options(const char* fn, const eldr_predictor_options_t* o,
                                      PredictorOptions* out) {
  if (!o) return ELDR_OK;
  if (eldr_status_t s = check_version(fn, "options", o->version, ELDR_PREDICTOR_OPTIONS_VERSION))
    return s;
  out->capacity = o->capacity;
  out->neighbours = o->neighbours;
  out->bandwidth = o->bandwidth;
  out->max_features = o->max_features;
  if (Status st = out->validate(); !st) return fail(fn, st);
  return ELDR_OK;
}

eldr_status_t route_prompt(const char* fn, eldr_router_t* router, const Prompt& prompt,
                           const uint64_t* request_id, eldr_decision_t* out,
                           std::span<const int32_t> among = {}) {
  if (eldr_status_t s = require(fn, router, "router")) return s;
  if (eldr_status_t s = require(fn, out, "out")) return s;
  if (eldr_status_t s = check_version(fn, "out", out->version, ELDR_DECISION_VERSION)) return s;
  RouteHints hints;
  if (request_id) hints.request_id = *request_id;
  hints.workers = among;
  auto d = router->router->route_prompt(prompt, hints);
  if (!d) return fail(fn, d.status());
  write_decision({.worker = d->worker_id,
                  .similarity = d->similarity,
                  .band_size = d->band_size,
                  .table_epoch = d->table_epoch,
                  .policy = static_cast<uint32_t>(d->policy),
                  .confidence = d->confidence},
                 out);
  return ELDR_OK;
}

}  // namespace
}  // namespace eldr::capi

extern "C" {

void eldr_predictor_options_init(eldr_predictor_options_t* options) {
  if (options) *options = ELDR_PREDICTOR_OPTIONS_INIT;
}

eldr_status_t eldr_table_fit_predictor(const eldr_table_t* table, const eldr_prompt_t* prompts,
                                       const int16_t* footprints, uint64_t n, uint32_t layers,
                                       uint32_t experts, const eldr_predictor_options_t* options,
                                       uint64_t* out_skipped, eldr_table_t** out) {
  static constexpr const char* fn = "eldr_table_fit_predictor";
  return guarded(fn, [&]() -> eldr_status_t {
    if (eldr_status_t s = require(fn, table, "table")) return s;
    if (eldr_status_t s = require(fn, prompts, "prompts")) return s;
    if (eldr_status_t s = require(fn, footprints, "footprints")) return s;
    if (eldr_status_t s = require(fn, out, "out")) return s;
    if (n == 0 || n > (uint64_t{1} << 24))
      return fail(ELDR_E_INVALID_ARGUMENT, fn, "n must be in [1, 16777216]");
    const eldr::ClusterTable& t = *table->table;
    if (layers != t.geometry.layers || experts != t.geometry.experts) {
      char msg[160];
      std::snprintf(msg, sizeof msg, "footprints are %ux%u, the table's geometry is %ux%u", layers,
                    experts, t.geometry.layers, t.geometry.experts);
      return fail(ELDR_E_SHAPE_MISMATCH, fn, msg);
    }
    eldr::PredictorOptions o;
    if (eldr_status_t s = eldr::capi::check_predictor_options(fn, options, &o)) return s;
    // A record with neither or both inputs stays an empty token prompt,
    // which the fit skips and counts like any bad record.
    std::vector<eldr::Prompt> ps(n);
    for (uint64_t i = 0; i < n; ++i) {
      const eldr_prompt_t& p = prompts[i];
      if ((p.tokens != nullptr) != (p.text != nullptr))
        ps[i] = p.tokens ? eldr::Prompt::of_tokens({p.tokens, p.n_tokens})
                         : eldr::Prompt::of_text({p.text, p.text_len});
    }
    uint64_t skipped = 0;
    auto predictor = eldr::Predictor::fit(
        t.geometry, ps, {footprints, static_cast<size_t>(n) * t.geometry.cells()}, o, &skipped);
    if (!predictor) return fail(fn, predictor.status());
    eldr::ClusterTable copy = t;
    copy.predictor = std::move(*predictor);
    if (eldr_status_t s = eldr::capi::make_table(fn, std::move(copy), out)) return s;
    if (out_skipped) *out_skipped = skipped;
    return ELDR_OK;
  });
}

eldr_status_t eldr_table_get_predictor_info(const eldr_table_t* table, eldr_predictor_info_t* out) {
  static constexpr const char* fn = "eldr_table_get_predictor_info";
  return guarded(fn, [&]() -> eldr_status_t {
    if (eldr_status_t s = require(fn, table, "table")) return s;
    if (eldr_status_t s = require(fn, out, "out")) return s;
    if (eldr_status_t s =
            eldr::capi::check_version(fn, "out", out->version, ELDR_PREDICTOR_INFO_VERSION))
      return s;
    const auto& p = table->table->predictor;
    if (!p) return fail(ELDR_E_NOT_FOUND, fn, "the table has no predictor");
    const eldr::PredictorInfo i = p->info();
    eldr_predictor_info_t info = ELDR_PREDICTOR_INFO_INIT;
    info.version = out->version;
    info.prototypes = i.prototypes;
    info.kinds = i.kinds;
    info.learned = i.learned;
    info.demand_bytes = i.demand_bytes;
    info.feature_bytes = i.feature_bytes;
    info.index_bytes = i.index_bytes;
    *out = info;
    return ELDR_OK;
  });
}

eldr_status_t eldr_router_route_tokens(eldr_router_t* router, const uint32_t* tokens,
                                       size_t n_tokens, const uint64_t* request_id,
                                       eldr_decision_t* out) {
  static constexpr const char* fn = "eldr_router_route_tokens";
  return guarded(fn, [&]() -> eldr_status_t {
    if (eldr_status_t s = require(fn, tokens, "tokens")) return s;
    return eldr::capi::route_prompt(fn, router, eldr::Prompt::of_tokens({tokens, n_tokens}),
                                    request_id, out);
  });
}

eldr_status_t eldr_router_route_text(eldr_router_t* router, const char* text, size_t text_len,
                                     const uint64_t* request_id, eldr_decision_t* out) {
  static constexpr const char* fn = "eldr_router_route_text";
  return guarded(fn, [&]() -> eldr_status_t {
    if (eldr_status_t s = require(fn, text, "text")) return s;
    return eldr::capi::route_prompt(fn, router, eldr::Prompt::of_text({text, text_len}), request_id,
                                    out);
  });
}

eldr_status_t eldr_router_route_prompt_among(eldr_router_t* router, const eldr_prompt_t* prompt,
                                             const uint64_t* request_id, const int32_t* workers,
                                             uint32_t n_workers, eldr_decision_t* out) {
  static constexpr const char* fn = "eldr_router_route_prompt_among";
  return guarded(fn, [&]() -> eldr_status_t {
    if (eldr_status_t s = require(fn, prompt, "prompt")) return s;
    if ((prompt->tokens != nullptr) == (prompt->text != nullptr))
      return fail(ELDR_E_INVALID_ARGUMENT, fn, "prompt must hold tokens or text, one of them");
    if (!workers && n_workers > 0)
      return fail(ELDR_E_INVALID_ARGUMENT, fn, "workers is NULL with n_workers > 0");
    if (n_workers > (1u << 16))
      return fail(ELDR_E_INVALID_ARGUMENT, fn, "n_workers must be at most 65536");
    // An empty set would mean "every worker": an explicit empty set picks none.
    if (workers && n_workers == 0)
      return fail(ELDR_E_NO_WORKER, fn, "the set of workers to choose among is empty");
    const eldr::Prompt p = prompt->tokens
                               ? eldr::Prompt::of_tokens({prompt->tokens, prompt->n_tokens})
                               : eldr::Prompt::of_text({prompt->text, prompt->text_len});
    return eldr::capi::route_prompt(fn, router, p, request_id, out,
                                    {workers, workers ? n_workers : 0u});
  });
}

eldr_status_t eldr_router_learn(eldr_router_t* router, uint64_t request_id, const int16_t* counts,
                                uint32_t layers, uint32_t experts) {
  static constexpr const char* fn = "eldr_router_learn";
  return guarded(fn, [&]() -> eldr_status_t {
    if (eldr_status_t s = require(fn, router, "router")) return s;
    if (eldr_status_t s = eldr::capi::check_counts(fn, *router, counts, layers, experts)) return s;
    if (eldr::Status st = router->router->learn(request_id, {counts, router->geometry.cells()});
        !st)
      return fail(fn, st);
    return ELDR_OK;
  });
}

eldr_status_t eldr_router_get_prompt_stats(const eldr_router_t* router, eldr_prompt_stats_t* out) {
  static constexpr const char* fn = "eldr_router_get_prompt_stats";
  return guarded(fn, [&]() -> eldr_status_t {
    if (eldr_status_t s = require(fn, router, "router")) return s;
    if (eldr_status_t s = require(fn, out, "out")) return s;
    if (eldr_status_t s =
            eldr::capi::check_version(fn, "out", out->version, ELDR_PROMPT_STATS_VERSION))
      return s;
    const eldr::RouterStats st = router->router->stats();
    eldr_prompt_stats_t stats = ELDR_PROMPT_STATS_INIT;
    stats.version = out->version;
    stats.routed = st.prompts_routed;
    stats.rejected = st.prompts_rejected;
    stats.learned = st.learned;
    stats.learn_rejected = st.learn_rejected;
    stats.dropped = st.prompts_dropped;
    *out = stats;
    return ELDR_OK;
  });
}

}  // extern "C"
