#include "eldr/demand_code.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

namespace eldr {

namespace {

// The largest q: -log2(1 - kMaxDemand) * 4096 (vector_kernels.hpp).
constexpr uint32_t kMaxQ = 40822;

struct CodeTables {
  std::array<uint16_t, kDemandCodes> q12{};
  std::vector<uint8_t> code;  // [kMaxQ + 1]: the nearest level

  CodeTables() : code(kMaxQ + 1) {
    // Level 0 is exactly nothing; levels 1.. grow geometrically from 1 to
    // kMaxQ, at least by 1 each.
    const double top = std::log(static_cast<double>(kMaxQ));
    q12[0] = 0;
    for (uint32_t k = 1; k < kDemandCodes; ++k) {
      const double v = std::exp(top * (k - 1) / (kDemandCodes - 2));
      q12[k] = static_cast<uint16_t>(
          std::max<double>(q12[k - 1] + 1, std::min<double>(kMaxQ, std::round(v))));
    }
    // Nearest in q itself (the batch sums add q): ties go up.
    uint32_t k = 0;
    for (uint32_t q = 0; q <= kMaxQ; ++q) {
      while (k + 1 < kDemandCodes && 2 * q >= uint32_t{q12[k]} + q12[k + 1]) ++k;
      code[q] = static_cast<uint8_t>(k);
    }
  }
};

const CodeTables& tables() {
  static const CodeTables t;
  return t;
}

}  // namespace

std::span<const uint16_t, kDemandCodes> demand_code_levels() noexcept { return tables().q12; }

uint8_t demand_code_of(uint16_t q12) noexcept {
  return tables().code[std::min<uint32_t>(q12, kMaxQ)];
}

void encode_demand(const uint16_t* q12, size_t n, uint8_t* codes) noexcept {
  const uint8_t* code = tables().code.data();
  for (size_t i = 0; i < n; ++i) codes[i] = code[std::min<uint32_t>(q12[i], kMaxQ)];
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
