#include "eldr/demand_code.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

namespace eldr {

namespace {

// The largest q: -log2(1 - kMaxDemand) * 4096 (vector_kernels.hpp).
constexpr uint32_t kMaxQ = 40822;

// Below kFine every q has its code in `fine`; above, `coarse` holds the code
// of the first q of each 32-wide bucket, and levels there are more than 32
// apart, so the code of q is that or the next (one comparison): 3.3 KB of
// tables the route path keeps in L1.
constexpr uint32_t kFine = 2048;
constexpr uint32_t kBucketShift = 5;

struct CodeTables {
  std::array<uint16_t, kDemandCodes> q12{};
  std::array<uint32_t, kDemandCodes> twice_mid{};  // q12[k] + q12[k + 1]; the last: never
  std::array<uint8_t, kFine> fine{};
  std::vector<uint8_t> coarse;

  CodeTables() : coarse(((kMaxQ - kFine) >> kBucketShift) + 1) {
    // Level 0 is exactly nothing; levels 1.. grow geometrically from 1 to
    // kMaxQ, at least by 1 each.
    const double top = std::log(static_cast<double>(kMaxQ));
    q12[0] = 0;
    for (uint32_t k = 1; k < kDemandCodes; ++k) {
      const double v = std::exp(top * (k - 1) / (kDemandCodes - 2));
      q12[k] = static_cast<uint16_t>(
          std::max<double>(q12[k - 1] + 1, std::min<double>(kMaxQ, std::round(v))));
    }
    for (uint32_t k = 0; k < kDemandCodes; ++k)
      twice_mid[k] = k + 1 < kDemandCodes ? uint32_t{q12[k]} + q12[k + 1] : UINT32_MAX;
    for (uint32_t q = 0; q < kFine; ++q) fine[q] = nearest(q);
    for (uint32_t b = 0; b < coarse.size(); ++b) coarse[b] = nearest(kFine + (b << kBucketShift));
  }
  // Nearest in q itself (the batch sums add q): ties go up.
  uint8_t nearest(uint32_t q) const {
    uint32_t k = 0;
    while (2 * q >= twice_mid[k]) ++k;
    return static_cast<uint8_t>(k);
  }
  // Both lookups, then a select: no branch to mispredict on the route path.
  uint8_t code(uint32_t q) const {
    q = std::min(q, kMaxQ);
    const uint8_t small = fine[std::min(q, kFine - 1)];
    const uint8_t k = coarse[(std::max(q, kFine) - kFine) >> kBucketShift];
    const uint8_t large = static_cast<uint8_t>(k + (2 * q >= twice_mid[k]));
    return q < kFine ? small : large;
  }
};

const CodeTables& tables() {
  static const CodeTables t;
  return t;
}

}  // namespace

std::span<const uint16_t, kDemandCodes> demand_code_levels() noexcept { return tables().q12; }

uint8_t demand_code_of(uint16_t q12) noexcept { return tables().code(q12); }

void encode_demand(const uint16_t* q12, size_t n, uint8_t* codes) noexcept {
  const CodeTables& t = tables();
  for (size_t i = 0; i < n; ++i) codes[i] = t.code(q12[i]);
}

CostCells cost_cells_of(const Geometry& g, uint32_t cost_cells) noexcept {
  CostCells c;
  const uint64_t all = g.cells();
  const uint64_t budget = std::max<uint32_t>(cost_cells, 1);
  c.stride = static_cast<uint32_t>(std::max<uint64_t>(1, (all + budget - 1) / budget));
  c.stride = std::max<uint32_t>(1, std::min(c.stride, g.layers));
  c.layers_read = g.layers ? (g.layers + c.stride - 1) / c.stride : 0;
  c.experts = g.experts;
  return c;
}

}  // namespace eldr
