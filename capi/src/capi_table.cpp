// Embedded cluster tables: load, save, fit, inspect, signature and scores.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>

#include "capi_args.hpp"
#include "capi_internal.hpp"
#include "eldr/fit.hpp"
#include "eldr/footprint.hpp"

namespace eldr::capi {

eldr_status_t make_table(const char* fn, ClusterTable&& table, eldr_table_t** out) {
  auto space = SignatureSpace::create(table.geometry, table.layer_mask, table.idf);
  if (!space) return fail(fn, space.status());
  auto handle = std::make_unique<eldr_table>();
  handle->table = std::make_shared<const ClusterTable>(std::move(table));
  handle->space = std::move(*space);
  *out = handle.release();
  return ELDR_OK;
}

namespace {

// A footprint of the table's geometry: shape (SHAPE_MISMATCH) and values
// (OUT_OF_RANGE) checked.
eldr_status_t check_footprint(const char* fn, const ClusterTable& table, const int16_t* counts,
                              uint32_t layers, uint32_t experts) {
  if (eldr_status_t s = require(fn, counts, "counts")) return s;
  if (eldr_status_t s = check_shape(fn, layers, experts)) return s;
  const Geometry& g = table.geometry;
  if (layers != g.layers || experts != g.experts) {
    char msg[160];
    std::snprintf(msg, sizeof msg, "footprint is %ux%u, the table's geometry is %ux%u", layers,
                  experts, g.layers, g.experts);
    return fail(ELDR_E_SHAPE_MISMATCH, fn, msg);
  }
  if (Status s = validate_footprint(g, {counts, g.cells()}); !s) return fail(fn, s);
  return ELDR_OK;
}

}  // namespace
}  // namespace eldr::capi

using eldr::checked_mul;
using eldr::capi::check_footprint;
using eldr::capi::check_shape;
using eldr::capi::check_version;
using eldr::capi::fail;
using eldr::capi::guarded;
using eldr::capi::require;

extern "C" {

eldr_status_t eldr_table_load(const char* path, eldr_table_t** out) {
  static constexpr const char* fn = "eldr_table_load";
  return guarded(fn, [&]() -> eldr_status_t {
    if (eldr_status_t s = require(fn, path, "path")) return s;
    if (eldr_status_t s = require(fn, out, "out")) return s;
    if (path[0] == '\0') return fail(ELDR_E_INVALID_ARGUMENT, fn, "path is empty");
    auto table = eldr::load_table(path);
    if (!table) return fail(fn, table.status());
    return eldr::capi::make_table(fn, std::move(*table), out);
  });
}

void eldr_table_free(eldr_table_t* table) { delete table; }

eldr_status_t eldr_table_save(const eldr_table_t* table, const char* path) {
  static constexpr const char* fn = "eldr_table_save";
  return guarded(fn, [&]() -> eldr_status_t {
    if (eldr_status_t s = require(fn, table, "table")) return s;
    if (eldr_status_t s = require(fn, path, "path")) return s;
    if (path[0] == '\0') return fail(ELDR_E_INVALID_ARGUMENT, fn, "path is empty");
    if (eldr::Status s = eldr::save_table(*table->table, path); !s) return fail(fn, s);
    return ELDR_OK;
  });
}

void eldr_table_info_init(eldr_table_info_t* info) {
  if (info == nullptr) return;
  const eldr_table_info_t init = ELDR_TABLE_INFO_INIT;
  *info = init;
}

eldr_status_t eldr_table_get_info(const eldr_table_t* table, eldr_table_info_t* out) {
  static constexpr const char* fn = "eldr_table_get_info";
  return guarded(fn, [&]() -> eldr_status_t {
    if (eldr_status_t s = require(fn, table, "table")) return s;
    if (eldr_status_t s = require(fn, out, "out")) return s;
    if (eldr_status_t s = check_version(fn, "out", out->version, ELDR_TABLE_INFO_VERSION)) return s;
    const eldr::ClusterTable& t = *table->table;
    eldr_table_info_t info = ELDR_TABLE_INFO_INIT;
    info.version = out->version;
    info.layers = t.geometry.layers;
    info.experts = t.geometry.experts;
    info.top_k = t.geometry.top_k;
    info.num_workers = t.num_clusters();
    info.num_selected_layers = static_cast<uint32_t>(t.layer_mask.size());
    info.default_tau = t.default_tau;
    *out = info;
    return ELDR_OK;
  });
}

eldr_status_t eldr_table_get_worker_ids(const eldr_table_t* table, int32_t* out, uint32_t n) {
  static constexpr const char* fn = "eldr_table_get_worker_ids";
  return guarded(fn, [&]() -> eldr_status_t {
    if (eldr_status_t s = require(fn, table, "table")) return s;
    if (eldr_status_t s = require(fn, out, "out")) return s;
    const std::vector<int32_t>& worker_ids = table->table->worker_ids;
    if (n != worker_ids.size()) {
      char msg[128];
      std::snprintf(msg, sizeof msg, "out holds %u entries, the table has %zu workers", n,
                    worker_ids.size());
      return fail(ELDR_E_INVALID_ARGUMENT, fn, msg);
    }
    std::memcpy(out, worker_ids.data(), worker_ids.size() * sizeof(int32_t));
    return ELDR_OK;
  });
}

void eldr_fit_options_init(eldr_fit_options_t* options) {
  if (options == nullptr) return;
  const eldr_fit_options_t init = ELDR_FIT_OPTIONS_INIT;
  *options = init;
}

eldr_status_t eldr_table_fit(const int16_t* prefill, const int16_t* decode, uint64_t n,
                             uint32_t layers, uint32_t experts, uint32_t top_k,
                             const eldr_fit_options_t* options, eldr_table_t** out) {
  static constexpr const char* fn = "eldr_table_fit";
  return guarded(fn, [&]() -> eldr_status_t {
    if (eldr_status_t s = require(fn, prefill, "prefill")) return s;
    if (eldr_status_t s = require(fn, options, "options")) return s;
    if (eldr_status_t s = require(fn, out, "out")) return s;
    if (eldr_status_t s = check_version(fn, "options", options->version, ELDR_FIT_OPTIONS_VERSION))
      return s;
    if (eldr_status_t s = check_shape(fn, layers, experts)) return s;
    if (n == 0) return fail(ELDR_E_INVALID_ARGUMENT, fn, "n is 0: no calibration footprints");
    if (options->num_workers == 0)
      return fail(ELDR_E_INVALID_ARGUMENT, fn, "options.num_workers is 0 (required)");
    uint64_t cells = 0;
    uint64_t bytes = 0;
    if (!checked_mul(n, uint64_t{layers} * experts, &cells) ||
        !checked_mul(cells, sizeof(int16_t), &bytes) || bytes > PTRDIFF_MAX) {
      return fail(ELDR_E_INVALID_ARGUMENT, fn, "n * layers * experts overflows the address space");
    }
    eldr::FitInput input;
    input.geometry = {layers, experts, top_k};
    input.n = n;
    input.prefill = {prefill, static_cast<size_t>(cells)};
    if (decode != nullptr) input.decode = {decode, static_cast<size_t>(cells)};
    eldr::FitOptions fit;
    fit.workers = options->num_workers;
    fit.seed = options->seed;
    fit.select_layers = options->select_layers != 0;
    fit.max_iterations = options->max_iterations;
    fit.threads = options->threads;
    auto table = eldr::fit_table(input, fit);
    if (!table) return fail(fn, table.status());
    table->fit.source = "eldr_table_fit";
    return eldr::capi::make_table(fn, std::move(*table), out);
  });
}

eldr_status_t eldr_table_compute_signature(const eldr_table_t* table, const int16_t* counts,
                                           uint32_t layers, uint32_t experts, float* out,
                                           uint64_t n) {
  static constexpr const char* fn = "eldr_table_compute_signature";
  return guarded(fn, [&]() -> eldr_status_t {
    if (eldr_status_t s = require(fn, table, "table")) return s;
    if (eldr_status_t s = require(fn, out, "out")) return s;
    if (eldr_status_t s = check_footprint(fn, *table->table, counts, layers, experts)) return s;
    const size_t dim = table->space.dim();
    if (n != dim) {
      char msg[128];
      std::snprintf(msg, sizeof msg, "out holds %llu floats, the signature has %zu",
                    static_cast<unsigned long long>(n), dim);
      return fail(ELDR_E_INVALID_ARGUMENT, fn, msg);
    }
    const size_t cells = table->table->geometry.cells();
    if (eldr::Status s = table->space.signature({counts, cells}, {out, dim}); !s)
      return fail(fn, s);
    return ELDR_OK;
  });
}

eldr_status_t eldr_table_score(const eldr_table_t* table, const int16_t* counts, uint32_t layers,
                               uint32_t experts, float* out, uint32_t n) {
  static constexpr const char* fn = "eldr_table_score";
  return guarded(fn, [&]() -> eldr_status_t {
    if (eldr_status_t s = require(fn, table, "table")) return s;
    if (eldr_status_t s = require(fn, out, "out")) return s;
    if (eldr_status_t s = check_footprint(fn, *table->table, counts, layers, experts)) return s;
    const eldr::ClusterTable& t = *table->table;
    if (n != t.num_clusters()) {
      char msg[128];
      std::snprintf(msg, sizeof msg, "out holds %u floats, the table has %u workers", n,
                    t.num_clusters());
      return fail(ELDR_E_INVALID_ARGUMENT, fn, msg);
    }
    std::vector<float> signature(table->space.dim());
    if (eldr::Status s = table->space.signature({counts, t.geometry.cells()}, signature); !s)
      return fail(fn, s);
    // Computed in full before the first write: out is untouched on failure.
    std::vector<float> scores(n);
    for (uint32_t c = 0; c < n; ++c) scores[c] = eldr::dot(signature, t.centroid(c));
    std::memcpy(out, scores.data(), n * sizeof(float));
    return ELDR_OK;
  });
}

}  // extern "C"
