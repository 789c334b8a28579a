// Private to core/fit (fit.cpp, fit_layers.cpp): the calibration check that
// fit_table and select_layers both run on their inputs.
#pragma once

#include <cstdint>
#include <span>

#include "eldr/geometry.hpp"
#include "eldr/status.hpp"

namespace eldr::fit_detail {

// The geometry is valid, there are at least 2 requests, prefill holds N*L*E
// counts, decode is empty or the same shape, and every footprint validates.
Status check_calibration(const Geometry& g, uint64_t n, std::span<const int16_t> prefill,
                         std::span<const int16_t> decode);

}  // namespace eldr::fit_detail
