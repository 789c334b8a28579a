// libFuzzer target: arbitrary bytes through the routed-expert decoders, as
// base64 text of raw ids (geometry and dtype taken from the first bytes) and
// as a .npy image, raw and base64-encoded. Every input must either decode or
// fail cleanly, and the two .npy paths must agree exactly: same status code,
// same footprint.
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "eldr/base64.hpp"
#include "eldr/routed_experts.hpp"

namespace {

// Per footprint layer the counts sum to at most rows_counted * top_k.
void check_sums(const std::vector<int16_t>& fp, const eldr::RoutedExpertsInfo& info,
                uint32_t experts) {
  for (uint32_t l = 0; l < info.footprint_layers; ++l) {
    uint64_t sum = 0;
    for (uint32_t e = 0; e < experts; ++e) {
      const int16_t c = fp[size_t{l} * experts + e];
      if (c < 0) std::abort();
      sum += static_cast<uint64_t>(c);
    }
    if (sum > info.rows_counted * info.top_k) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  eldr::RoutedExpertsOptions o;
  o.num_experts = 1 + data[0] % 64;
  o.num_hidden_layers = 1 + data[1] % 8;
  o.top_k = 1 + data[2] % 4;
  const auto dtype = static_cast<eldr::IdDtype>(data[3] % 5);
  const uint32_t moe[] = {0, 2, 5};
  if (data[1] & 0x80) o.moe_layers = moe;
  if (data[2] & 0x80) o.row_count = data[0] >> 4;
  const std::string_view text(reinterpret_cast<const char*>(data + 4), size - 4);

  std::vector<int16_t> fp(size_t{eldr::footprint_layers(o, o.num_hidden_layers)} * o.num_experts);
  auto r = eldr::footprint_from_base64_ids(text, dtype, o, fp);
  if (r) check_sums(fp, *r, o.num_experts);

  // The whole input as a .npy, then the same bytes base64-encoded: both paths
  // parse the same header with the same code and must agree.
  eldr::RoutedExpertsOptions n;
  n.num_experts = o.num_experts;
  n.moe_layers = o.moe_layers;
  n.row_count = o.row_count;
  const std::span<const uint8_t> bytes(data, size);
  const std::string b64 = eldr::base64::encode(data, size);
  auto shape = eldr::base64_npy_shape(b64);
  if (!shape) return 0;
  std::vector<int16_t> a(size_t{eldr::footprint_layers(n, shape->num_hidden_layers)} *
                         n.num_experts),
      b(a.size());
  auto ra = eldr::footprint_from_npy(bytes, n, a);
  auto rb = eldr::footprint_from_base64_npy(b64, n, b);
  if (ra.is_ok() != rb.is_ok()) std::abort();
  if (!ra) {
    if (ra.status().code() != rb.status().code()) std::abort();
    return 0;
  }
  if (a != b || ra->cached_entries != rb->cached_entries) std::abort();
  check_sums(a, *ra, n.num_experts);
  return 0;
}
