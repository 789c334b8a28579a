// The routed-expert decoders of .npy payloads, raw and base64 (an engine's
// [rows, layers, top_k] array, its axes and dtype read from the header), and
// base64_npy_shape. They count through routed_experts_count.hpp.
#include <string>
#include <vector>

#include "eldr/base64.hpp"
#include "eldr/npy.hpp"
#include "eldr/routed_experts.hpp"
#include "routed_experts_count.hpp"

namespace eldr {

using namespace expert_ids;

namespace {

struct NpyIds {
  IdDtype dtype;
  uint32_t hidden_layers;
  uint32_t top_k;
  uint64_t rows;
  uint64_t data_offset;
};

// Checks a .npy header against what the decoder accepts and the caller said.
Result<NpyIds> check_npy_header(const NpyHeader& h, uint64_t total_bytes,
                                const RoutedExpertsOptions& o, const IdDtype* expected) {
  NpyIds ids{};
  switch (h.dtype) {
    case NpyDtype::u8:
      ids.dtype = IdDtype::u8;
      break;
    case NpyDtype::u16:
      ids.dtype = IdDtype::u16;
      break;
    case NpyDtype::i16:
      ids.dtype = IdDtype::i16;
      break;
    case NpyDtype::i32:
      ids.dtype = IdDtype::i32;
      break;
    case NpyDtype::i64:
      ids.dtype = IdDtype::i64;
      break;
    default:
      return Status{Errc::unsupported, std::string("npy dtype '") + npy_dtype_descr(h.dtype) +
                                           "' is not an expert id dtype (u1, u2, i2, i4, i8)"};
  }
  if (h.big_endian)
    return Status{Errc::unsupported, "npy: big-endian expert ids are not supported"};
  if (h.fortran_order)
    return Status{Errc::unsupported, "npy: fortran_order True is not supported (save C order)"};
  if (expected && *expected != ids.dtype)
    return Status{Errc::shape_mismatch, std::string("npy holds ") + id_dtype_name(ids.dtype) +
                                            " ids, the caller expects " + id_dtype_name(*expected)};
  if (h.shape.size() != 3)
    return Status{Errc::shape_mismatch,
                  "npy routed experts must be 3-D [rows, layers, top_k], got " +
                      std::to_string(h.shape.size()) + " dimensions"};
  if (h.shape[1] == 0 || h.shape[1] > kMaxLayers || h.shape[2] == 0 || h.shape[2] > kMaxTopK)
    return Status{Errc::shape_mismatch, "npy shape (" + std::to_string(h.shape[0]) + ", " +
                                            std::to_string(h.shape[1]) + ", " +
                                            std::to_string(h.shape[2]) +
                                            ") needs 1 <= layers <= " + std::to_string(kMaxLayers) +
                                            " and 1 <= top_k <= " + std::to_string(kMaxTopK)};
  ids.rows = h.shape[0];
  ids.hidden_layers = static_cast<uint32_t>(h.shape[1]);
  ids.top_k = static_cast<uint32_t>(h.shape[2]);
  if (o.num_hidden_layers != 0 && o.num_hidden_layers != ids.hidden_layers)
    return Status{Errc::shape_mismatch, "npy has " + std::to_string(ids.hidden_layers) +
                                            " layers, the caller says num_hidden_layers = " +
                                            std::to_string(o.num_hidden_layers)};
  if (o.top_k != 0 && o.top_k != ids.top_k)
    return Status{Errc::shape_mismatch, "npy has top_k " + std::to_string(ids.top_k) +
                                            ", the caller says " + std::to_string(o.top_k)};
  ids.data_offset = h.data_offset;
  const uint64_t actual = total_bytes - h.data_offset;
  if (actual != h.data_bytes)
    return Status{Errc::corrupt,
                  "npy data is " + std::to_string(actual) + " bytes, its shape needs " +
                      std::to_string(h.data_bytes) +
                      (actual < h.data_bytes ? " (truncated)" : " (trailing bytes)")};
  return ids;
}

// Decodes just past the header of a base64 .npy (whole quanta) into
// `prefix`: its fixed preamble says how long the dict is.
Result<NpyHeader> read_base64_npy_header(base64::Decoder& dec, std::vector<uint8_t>* prefix) {
  const size_t total = dec.decoded_size();
  auto grow_to = [&](size_t want) -> Status {
    want = std::min(want, total);
    while (prefix->size() < want) {
      const size_t need = (want - prefix->size() + 2) / 3 * 3;
      const size_t at = prefix->size();
      prefix->resize(at + need + 1);
      auto n = dec.next(prefix->data() + at, need + 1);
      if (!n) return n.status();
      prefix->resize(at + *n);
      if (*n == 0) break;
    }
    return Status::ok();
  };
  ELDR_TRY(grow_to(kNpyPreambleMax));
  auto header_size = npy_header_size(*prefix);
  if (!header_size) return header_size.status();
  if (*header_size > total)
    return Status{Errc::corrupt, "npy truncated inside its header (" + std::to_string(total) +
                                     " bytes, the header needs " + std::to_string(*header_size) +
                                     ")"};
  ELDR_TRY(grow_to(static_cast<size_t>(*header_size)));
  return parse_npy_header(*prefix);
}

}  // namespace

Result<RoutedExpertsInfo> footprint_from_npy(std::span<const uint8_t> npy,
                                             const RoutedExpertsOptions& options,
                                             std::span<int16_t> out, const IdDtype* expected) {
  return guarded("footprint_from_npy", [&]() -> Result<RoutedExpertsInfo> {
    ELDR_TRY(check_options(options));
    auto header = parse_npy_header(npy);
    if (!header) return header.status();
    auto ids = check_npy_header(*header, npy.size(), options, expected);
    if (!ids) return ids.status();
    auto plan = make_plan(options, ids->hidden_layers, ids->top_k, ids->rows, out.size());
    if (!plan) return plan.status();
    Counter counter(std::move(*plan));
    const uint64_t data_bytes = npy.size() - ids->data_offset;
    ELDR_TRY(feed(counter, ids->dtype, npy.data() + ids->data_offset,
                  static_cast<size_t>(data_bytes / id_dtype_size(ids->dtype))));
    return finish(counter, ids->dtype, out);
  });
}

Result<RoutedExpertsInfo> footprint_from_base64_npy(std::string_view base64,
                                                    const RoutedExpertsOptions& options,
                                                    std::span<int16_t> out,
                                                    const IdDtype* expected) {
  return guarded("footprint_from_base64_npy", [&]() -> Result<RoutedExpertsInfo> {
    ELDR_TRY(check_options(options));
    auto dec = base64::Decoder::create(base64);
    if (!dec) return dec.status();
    const size_t total = dec->decoded_size();
    std::vector<uint8_t> prefix;
    auto header = read_base64_npy_header(*dec, &prefix);
    if (!header) return header.status();
    auto ids = check_npy_header(*header, total, options, expected);
    if (!ids) return ids.status();
    auto plan = make_plan(options, ids->hidden_layers, ids->top_k, ids->rows, out.size());
    if (!plan) return plan.status();
    Counter counter(std::move(*plan));
    const size_t offset = static_cast<size_t>(ids->data_offset);
    ELDR_TRY(stream(*dec, counter, ids->dtype, prefix.data() + offset, prefix.size() - offset));
    return finish(counter, ids->dtype, out);
  });
}

Result<RoutedExpertsInfo> base64_npy_shape(std::string_view base64) {
  return guarded("base64_npy_shape", [&]() -> Result<RoutedExpertsInfo> {
    auto dec = base64::Decoder::create(base64);
    if (!dec) return dec.status();
    std::vector<uint8_t> prefix;
    auto header = read_base64_npy_header(*dec, &prefix);
    if (!header) return header.status();
    RoutedExpertsOptions any;
    auto ids = check_npy_header(*header, dec->decoded_size(), any, nullptr);
    if (!ids) return ids.status();
    RoutedExpertsInfo info;
    info.dtype = ids->dtype;
    info.num_hidden_layers = ids->hidden_layers;
    info.top_k = ids->top_k;
    info.footprint_layers = ids->hidden_layers;
    info.rows_in_payload = ids->rows;
    return info;
  });
}

}  // namespace eldr
