// Routed-expert payloads of stock serving engines -> eldr footprints.
//
// SGLang and vLLM can return, per request, the expert ids every token was
// routed to: [rows][num_hidden_layers][top_k], one row per token (docs/design.md
// §2). SGLang sends the raw ids base64-encoded (int32, or the dtype named in
// meta_info.routed_experts_dtype); vLLM sends a base64 .npy (uint8 up to 256
// experts, else uint16), and v0.21 also nested int16 lists where -1 marks a
// prefix-cache hit. These decoders turn such a payload into the int16 [L][E]
// footprint, L being the MoE layers among the hidden layers.
//
// Payloads come from the network: every malformed one (bad base64, a length
// that is not whole rows, a bad .npy header, an id outside [0, E), a cell past
// int16) is an error status, never a wrong footprint. On error `out` is left
// unchanged. The decoders stream: base64 is decoded in small chunks and counted
// from a stack buffer, so the decoded array is never materialised.
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <string_view>

#include "eldr/status.hpp"

namespace eldr {

// Element type of raw ids. i16 reserves -1 for "cached" (a prefix-cache hit
// whose routing the engine did not recompute): skipped and counted in
// RoutedExpertsInfo::cached_entries, never counted as an expert.
enum class IdDtype : uint8_t { u8, u16, i16, i32, i64 };

size_t id_dtype_size(IdDtype dtype) noexcept;
const char* id_dtype_name(IdDtype dtype) noexcept;  // "uint8", "int32", ...
// "uint8", "uint16", "int16", "int32", "int64" (SGLang's routed_experts_dtype);
// invalid_argument for anything else.
Result<IdDtype> parse_id_dtype(std::string_view name);

inline constexpr uint64_t kAllRows = std::numeric_limits<uint64_t>::max();

struct RoutedExpertsOptions {
  uint32_t num_experts = 0;  // E: required
  // The payload's layer and top-k axes. Required for raw ids; for a .npy they
  // come from its shape, and a nonzero value here must match it.
  uint32_t num_hidden_layers = 0;
  uint32_t top_k = 0;
  // The hidden layers that are MoE layers, ascending and unique; empty = all.
  // Footprint layer i is hidden layer moe_layers[i]. Entries of the other
  // (dense) layers are neither checked nor counted: engines fill them with
  // whatever they like, 0 included, and 0 is also a valid expert id.
  std::span<const uint32_t> moe_layers;
  // Only rows [first_row, first_row + row_count) are counted (a prompt's rows
  // out of prompt + generated); kAllRows = to the end. Rows past the payload
  // are an error (out_of_range). Rows outside the range are still checked.
  uint64_t first_row = 0;
  uint64_t row_count = kAllRows;
};

struct RoutedExpertsInfo {
  IdDtype dtype = IdDtype::i32;    // the payload's element type
  uint32_t num_hidden_layers = 0;  // the payload's layer axis
  uint32_t top_k = 0;              // the payload's top-k axis
  uint32_t footprint_layers = 0;   // L of the output
  uint64_t rows_in_payload = 0;
  uint64_t rows_counted = 0;
  uint64_t cached_entries = 0;  // -1 ids skipped in the counted rows (i16 only)
};

// The footprint's layer count for these options and payload layer axis.
uint32_t footprint_layers(const RoutedExpertsOptions& options, uint32_t num_hidden_layers) noexcept;

// Raw, flat, headerless little-endian ids [rows][num_hidden_layers][top_k].
// `out` must hold footprint_layers() * num_experts cells.
Result<RoutedExpertsInfo> footprint_from_ids(std::span<const uint8_t> bytes, IdDtype dtype,
                                             const RoutedExpertsOptions& options,
                                             std::span<int16_t> out);
// The same ids, base64-encoded (RFC 4648 standard alphabet, padded: what
// Python's base64.b64encode writes). SGLang's meta_info.routed_experts.
Result<RoutedExpertsInfo> footprint_from_base64_ids(std::string_view base64, IdDtype dtype,
                                                    const RoutedExpertsOptions& options,
                                                    std::span<int16_t> out);
// A .npy image of a C-order integer array [rows][num_hidden_layers][top_k]
// (u1, u2, i2, i4 or i8, little-endian). When `expected` is given, a .npy of
// another dtype is a shape_mismatch.
Result<RoutedExpertsInfo> footprint_from_npy(std::span<const uint8_t> npy,
                                             const RoutedExpertsOptions& options,
                                             std::span<int16_t> out,
                                             const IdDtype* expected = nullptr);
// The same .npy, base64-encoded: vLLM's choices[i].routed_experts.
Result<RoutedExpertsInfo> footprint_from_base64_npy(std::string_view base64,
                                                    const RoutedExpertsOptions& options,
                                                    std::span<int16_t> out,
                                                    const IdDtype* expected = nullptr);

// The header of a base64 .npy alone (dtype, rows, layer and top-k axes in the
// info; nothing counted), checked as footprint_from_base64_npy checks it, data
// length included: for callers that learn the layer count from the payload.
Result<RoutedExpertsInfo> base64_npy_shape(std::string_view base64);

}  // namespace eldr
