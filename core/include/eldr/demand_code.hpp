// A request's demand over eldr_cost's cost cells in the form a worker's batch
// keeps it, and a pool's bookings carry it (docs/design.md §5.3, §10).
//
// Per cost cell, the request's demand p (its predicted per-token use of that
// expert) enters its worker's batch as q = -log2(1 - p) in 1/4096 units. The
// router keeps q rounded to one of kDemandCodes levels (0, every integer to
// 114, then steps of 4.3 % up to p = 0.999), so a request's share of a batch
// is a byte per cell: what a router of another node needs to put it in that
// worker's batch exactly as the router that placed it did. The rounding (at
// most 2.4 % of q, to the nearest level) keeps the contrasts eldr_cost reads:
// with 64 or 128 levels, routing from predicted footprints (whose demand
// differs little from cell to cell) lost most of its gain
// (tests/lab/prompt_test.cpp); with 256, `eldr sim` routes as with q exact
// (docs/simulator.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "eldr/geometry.hpp"

namespace eldr {

inline constexpr uint32_t kDemandCodeBits = 8;  // a code is a byte
inline constexpr uint32_t kDemandCodes = 1u << kDemandCodeBits;

// The q value (-log2(1 - p) * 4096) each code stands for.
std::span<const uint16_t, kDemandCodes> demand_code_levels() noexcept;
// The code nearest to a q value (q above the largest level: the largest).
uint8_t demand_code_of(uint16_t q12) noexcept;
// The same for n values.
void encode_demand(const uint16_t* q12, size_t n, uint8_t* codes) noexcept;

// Which cells eldr_cost reads: every stride-th layer from layer 0, all
// experts of each, at most about `cost_cells` (RouterOptions::cost_cells).
struct CostCells {
  uint32_t stride = 1;
  uint32_t layers_read = 0;
  uint32_t experts = 0;
  uint32_t count() const noexcept { return layers_read * experts; }
  // L / layers read: scales a cost-cell sum to the whole model.
  double layer_scale(const Geometry& g) const noexcept {
    return layers_read ? static_cast<double>(g.layers) / layers_read : 1.0;
  }
  bool operator==(const CostCells&) const = default;
};
// geometry must be valid and cost_cells >= 1.
CostCells cost_cells_of(const Geometry& geometry, uint32_t cost_cells) noexcept;

}  // namespace eldr
