// The routed-expert decoders of raw and base64 id payloads ([rows][hidden
// layers][top_k] ids of one dtype, the axes given by the caller) and the id
// dtype helpers. The .npy payloads are decoded in routed_experts_npy.cpp; both
// count through routed_experts_count.hpp.
#include "eldr/routed_experts.hpp"

#include <string>

#include "eldr/base64.hpp"
#include "routed_experts_count.hpp"

namespace eldr {

using namespace expert_ids;

namespace {

// The payload length (bytes of ids) as whole rows of [H][k] elements.
Result<uint64_t> whole_rows(uint64_t bytes, IdDtype dtype, uint32_t hidden_layers, uint32_t top_k) {
  const uint64_t row_bytes = uint64_t{hidden_layers} * top_k * id_dtype_size(dtype);
  if (row_bytes == 0) return uint64_t{0};
  if (bytes % row_bytes != 0)
    return Status{Errc::corrupt, "payload of " + std::to_string(bytes) + " bytes is not a whole " +
                                     "number of rows of " + std::to_string(hidden_layers) + " x " +
                                     std::to_string(top_k) + " " + id_dtype_name(dtype) + " (" +
                                     std::to_string(row_bytes) + " bytes each)"};
  return bytes / row_bytes;
}

Status require_axes(const RoutedExpertsOptions& o) {
  if (o.num_hidden_layers == 0)
    return {Errc::invalid_argument, "num_hidden_layers is required for raw ids"};
  if (o.top_k == 0) return {Errc::invalid_argument, "top_k is required for raw ids"};
  return Status::ok();
}

}  // namespace

size_t id_dtype_size(IdDtype dtype) noexcept {
  switch (dtype) {
    case IdDtype::u8:
      return 1;
    case IdDtype::u16:
    case IdDtype::i16:
      return 2;
    case IdDtype::i32:
      return 4;
    case IdDtype::i64:
      return 8;
  }
  return 1;
}

const char* id_dtype_name(IdDtype dtype) noexcept {
  switch (dtype) {
    case IdDtype::u8:
      return "uint8";
    case IdDtype::u16:
      return "uint16";
    case IdDtype::i16:
      return "int16";
    case IdDtype::i32:
      return "int32";
    case IdDtype::i64:
      return "int64";
  }
  return "?";
}

Result<IdDtype> parse_id_dtype(std::string_view name) {
  for (IdDtype d : {IdDtype::u8, IdDtype::u16, IdDtype::i16, IdDtype::i32, IdDtype::i64})
    if (name == id_dtype_name(d)) return d;
  return Status{Errc::invalid_argument, "unknown id dtype '" + std::string(name.substr(0, 32)) +
                                            "' (expected uint8, uint16, int16, int32 or int64)"};
}

uint32_t footprint_layers(const RoutedExpertsOptions& options,
                          uint32_t num_hidden_layers) noexcept {
  return options.moe_layers.empty() ? num_hidden_layers
                                    : static_cast<uint32_t>(options.moe_layers.size());
}

Result<RoutedExpertsInfo> footprint_from_ids(std::span<const uint8_t> bytes, IdDtype dtype,
                                             const RoutedExpertsOptions& options,
                                             std::span<int16_t> out) {
  return guarded("footprint_from_ids", [&]() -> Result<RoutedExpertsInfo> {
    ELDR_TRY(check_options(options));
    ELDR_TRY(require_axes(options));
    auto rows = whole_rows(bytes.size(), dtype, options.num_hidden_layers, options.top_k);
    if (!rows) return rows.status();
    auto plan = make_plan(options, options.num_hidden_layers, options.top_k, *rows, out.size());
    if (!plan) return plan.status();
    Counter counter(std::move(*plan));
    ELDR_TRY(feed(counter, dtype, bytes.data(), bytes.size() / id_dtype_size(dtype)));
    return finish(counter, dtype, out);
  });
}

Result<RoutedExpertsInfo> footprint_from_base64_ids(std::string_view base64, IdDtype dtype,
                                                    const RoutedExpertsOptions& options,
                                                    std::span<int16_t> out) {
  return guarded("footprint_from_base64_ids", [&]() -> Result<RoutedExpertsInfo> {
    ELDR_TRY(check_options(options));
    ELDR_TRY(require_axes(options));
    auto dec = base64::Decoder::create(base64);
    if (!dec) return dec.status();
    auto rows = whole_rows(dec->decoded_size(), dtype, options.num_hidden_layers, options.top_k);
    if (!rows) return rows.status();
    auto plan = make_plan(options, options.num_hidden_layers, options.top_k, *rows, out.size());
    if (!plan) return plan.status();
    Counter counter(std::move(*plan));
    ELDR_TRY(stream(*dec, counter, dtype, nullptr, 0));
    return finish(counter, dtype, out);
  });
}

}  // namespace eldr
