// Footprints from engines' routed-expert payloads: the C face of
// core/io/routed_experts.cpp.
#include <cstdint>
#include <cstdio>
#include <span>
#include <string_view>

#include "capi_args.hpp"
#include "capi_internal.hpp"
#include "eldr/routed_experts.hpp"

namespace eldr::capi {
namespace {

// ELDR_DTYPE_* -> the core's dtype; AUTO only where `allow_auto` (nullopt).
eldr_status_t to_dtype(const char* fn, uint32_t dtype, bool allow_auto, bool* is_auto,
                       IdDtype* out) noexcept {
  *is_auto = false;
  switch (dtype) {
    case ELDR_DTYPE_UINT8:
      *out = IdDtype::u8;
      return ELDR_OK;
    case ELDR_DTYPE_UINT16:
      *out = IdDtype::u16;
      return ELDR_OK;
    case ELDR_DTYPE_INT16:
      *out = IdDtype::i16;
      return ELDR_OK;
    case ELDR_DTYPE_INT32:
      *out = IdDtype::i32;
      return ELDR_OK;
    case ELDR_DTYPE_INT64:
      *out = IdDtype::i64;
      return ELDR_OK;
    case ELDR_DTYPE_AUTO:
      if (allow_auto) {
        *is_auto = true;
        return ELDR_OK;
      }
      return fail(ELDR_E_INVALID_ARGUMENT, fn, "raw ids need an explicit dtype (not AUTO)");
    default:
      break;
  }
  char msg[96];
  std::snprintf(msg, sizeof msg, "unknown dtype %d (expected an ELDR_DTYPE_* value)", dtype);
  return fail(ELDR_E_INVALID_ARGUMENT, fn, msg);
}

uint32_t to_c(IdDtype d) noexcept {
  switch (d) {
    case IdDtype::u8:
      return ELDR_DTYPE_UINT8;
    case IdDtype::u16:
      return ELDR_DTYPE_UINT16;
    case IdDtype::i16:
      return ELDR_DTYPE_INT16;
    case IdDtype::i32:
      return ELDR_DTYPE_INT32;
    case IdDtype::i64:
      return ELDR_DTYPE_INT64;
  }
  return ELDR_DTYPE_AUTO;
}

// The shared checks: pointers, struct versions, the options copied into the core's.
eldr_status_t prepare(const char* fn, const void* payload, size_t payload_len,
                      const eldr_routed_experts_options_t* options, const int16_t* out,
                      const eldr_routed_experts_info_t* info, RoutedExpertsOptions* core) {
  // An empty payload may come with a NULL pointer; anything longer may not.
  if (payload_len > 0)
    if (eldr_status_t s = require(fn, payload, "payload")) return s;
  if (eldr_status_t s = require(fn, options, "options")) return s;
  if (eldr_status_t s = require(fn, out, "out")) return s;
  if (eldr_status_t s =
          check_version(fn, "options", options->version, ELDR_ROUTED_EXPERTS_OPTIONS_VERSION))
    return s;
  if (info != nullptr)
    if (eldr_status_t s =
            check_version(fn, "info", info->version, ELDR_ROUTED_EXPERTS_INFO_VERSION))
      return s;
  if (options->num_moe_layers > 0 && options->moe_layers == nullptr)
    return fail(ELDR_E_INVALID_ARGUMENT, fn, "moe_layers is NULL but num_moe_layers is not 0");
  core->num_experts = options->num_experts;
  core->num_hidden_layers = options->num_hidden_layers;
  core->top_k = options->top_k;
  if (options->moe_layers != nullptr)
    core->moe_layers = {options->moe_layers, options->num_moe_layers};
  core->first_row = options->first_row;
  core->row_count = options->row_count;
  return ELDR_OK;
}

// Writes info last (its version is the caller's).
eldr_status_t finish(const char* fn, const Result<RoutedExpertsInfo>& r,
                     eldr_routed_experts_info_t* info) {
  if (!r) return fail(fn, r.status());
  if (info != nullptr) {
    eldr_routed_experts_info_t v = ELDR_ROUTED_EXPERTS_INFO_INIT;
    v.version = info->version;
    v.dtype = to_c(r->dtype);
    v.num_hidden_layers = r->num_hidden_layers;
    v.top_k = r->top_k;
    v.layers = r->footprint_layers;
    v.rows_in_payload = r->rows_in_payload;
    v.rows_counted = r->rows_counted;
    v.cached_entries = r->cached_entries;
    *info = v;
  }
  return ELDR_OK;
}

}  // namespace
}  // namespace eldr::capi

using eldr::capi::fail;
using eldr::capi::guarded;

extern "C" {

void eldr_routed_experts_options_init(eldr_routed_experts_options_t* options) {
  if (options == nullptr) return;
  const eldr_routed_experts_options_t init = ELDR_ROUTED_EXPERTS_OPTIONS_INIT;
  *options = init;
}

void eldr_routed_experts_info_init(eldr_routed_experts_info_t* info) {
  if (info == nullptr) return;
  const eldr_routed_experts_info_t init = ELDR_ROUTED_EXPERTS_INFO_INIT;
  *info = init;
}

eldr_status_t eldr_routed_experts_decode_ids(const void* ids, size_t bytes, uint32_t dtype,
                                             const eldr_routed_experts_options_t* options,
                                             int16_t* out, size_t out_len,
                                             eldr_routed_experts_info_t* out_info) {
  static constexpr const char* fn = "eldr_routed_experts_decode_ids";
  return guarded(fn, [&]() -> eldr_status_t {
    eldr::RoutedExpertsOptions core;
    if (eldr_status_t s = eldr::capi::prepare(fn, ids, bytes, options, out, out_info, &core))
      return s;
    bool is_auto = false;
    eldr::IdDtype d{};
    if (eldr_status_t s = eldr::capi::to_dtype(fn, dtype, false, &is_auto, &d)) return s;
    const std::span<const uint8_t> payload(static_cast<const uint8_t*>(ids), ids ? bytes : 0);
    return eldr::capi::finish(fn, eldr::footprint_from_ids(payload, d, core, {out, out_len}),
                              out_info);
  });
}

eldr_status_t eldr_routed_experts_decode_base64_ids(const char* base64, size_t len, uint32_t dtype,
                                                    const eldr_routed_experts_options_t* options,
                                                    int16_t* out, size_t out_len,
                                                    eldr_routed_experts_info_t* out_info) {
  static constexpr const char* fn = "eldr_routed_experts_decode_base64_ids";
  return guarded(fn, [&]() -> eldr_status_t {
    eldr::RoutedExpertsOptions core;
    if (eldr_status_t s = eldr::capi::prepare(fn, base64, len, options, out, out_info, &core))
      return s;
    bool is_auto = false;
    eldr::IdDtype d{};
    if (eldr_status_t s = eldr::capi::to_dtype(fn, dtype, false, &is_auto, &d)) return s;
    const std::string_view text(base64 ? base64 : "", base64 ? len : 0);
    return eldr::capi::finish(fn, eldr::footprint_from_base64_ids(text, d, core, {out, out_len}),
                              out_info);
  });
}

eldr_status_t eldr_routed_experts_decode_base64_npy(const char* base64, size_t len, uint32_t dtype,
                                                    const eldr_routed_experts_options_t* options,
                                                    int16_t* out, size_t out_len,
                                                    eldr_routed_experts_info_t* out_info) {
  static constexpr const char* fn = "eldr_routed_experts_decode_base64_npy";
  return guarded(fn, [&]() -> eldr_status_t {
    eldr::RoutedExpertsOptions core;
    if (eldr_status_t s = eldr::capi::prepare(fn, base64, len, options, out, out_info, &core))
      return s;
    bool is_auto = false;
    eldr::IdDtype d{};
    if (eldr_status_t s = eldr::capi::to_dtype(fn, dtype, true, &is_auto, &d)) return s;
    const std::string_view text(base64 ? base64 : "", base64 ? len : 0);
    return eldr::capi::finish(
        fn, eldr::footprint_from_base64_npy(text, core, {out, out_len}, is_auto ? nullptr : &d),
        out_info);
  });
}

eldr_status_t eldr_routed_experts_inspect_base64_npy(const char* base64, size_t len,
                                                     eldr_routed_experts_info_t* out) {
  static constexpr const char* fn = "eldr_routed_experts_inspect_base64_npy";
  return guarded(fn, [&]() -> eldr_status_t {
    if (len > 0)
      if (eldr_status_t s = eldr::capi::require(fn, base64, "base64")) return s;
    if (eldr_status_t s = eldr::capi::require(fn, out, "out")) return s;
    if (eldr_status_t s =
            eldr::capi::check_version(fn, "out", out->version, ELDR_ROUTED_EXPERTS_INFO_VERSION))
      return s;
    const std::string_view text(base64 ? base64 : "", base64 ? len : 0);
    return eldr::capi::finish(fn, eldr::base64_npy_shape(text), out);
  });
}

}  // extern "C"
