// Footprints: per request, the count of prompt tokens routed to each expert of
// each MoE layer, int16 [L][E] row-major (docs/design.md §2). Built from real top-k gate
// decisions, never from probabilities.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "eldr/geometry.hpp"
#include "eldr/status.hpp"

namespace eldr {

// Checks shape (counts.size() == L*E), non-negative counts and, when the
// prompt's token count is known, that no cell exceeds it (a token picks an
// expert at most once) and that every layer sums to k * tokens.
Status validate_footprint(const Geometry& geometry, std::span<const int16_t> counts,
                          std::optional<uint32_t> tokens = std::nullopt);

// Adds the top-k picks of `tokens` tokens to an int32 [L][E] accumulator.
// expert_ids is [tokens][L][k] row-major. Rejects ids outside [0, E) and a
// token that names the same expert twice in one layer; on error `counts` is
// left unchanged.
Status accumulate_topk(const Geometry& geometry, std::span<const int32_t> expert_ids,
                       uint32_t tokens, std::span<int32_t> counts);

// Narrows an int32 accumulator to the int16 wire format; out_of_range when a
// cell exceeds 32767 (prompt longer than the format allows).
Status narrow_footprint(std::span<const int32_t> wide, std::span<int16_t> out);

}  // namespace eldr
