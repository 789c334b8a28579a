#include "eldr/footprint.hpp"

#include <algorithm>
#include <limits>
#include <string>

#include "eldr/internal/vector_kernels.hpp"

namespace eldr {

namespace {
std::string cell_name(const Geometry& g, size_t i) {
  return "layer " + std::to_string(i / g.experts) + " expert " + std::to_string(i % g.experts);
}
}  // namespace

Status validate_footprint(const Geometry& geometry, std::span<const int16_t> counts,
                          std::optional<uint32_t> tokens) {
  ELDR_TRY(geometry.validate());
  if (counts.data() == nullptr || counts.size() != geometry.cells())
    return {Errc::shape_mismatch, "footprint has " + std::to_string(counts.size()) +
                                      " cells, geometry " + geometry.to_string() + " needs " +
                                      std::to_string(geometry.cells())};
  // One branch-free pass decides; the cell loop runs only to name a bad cell.
  const kernels::Range16 range = kernels::range16(counts.data(), counts.size());
  const bool bad =
      range.min < 0 || (tokens && range.max >= 0 && static_cast<uint32_t>(range.max) > *tokens);
  for (size_t i = 0; bad && i < counts.size(); ++i) {
    if (counts[i] < 0)
      return {Errc::out_of_range,
              "negative count " + std::to_string(counts[i]) + " at " + cell_name(geometry, i)};
    if (tokens && static_cast<uint32_t>(counts[i]) > *tokens)
      return {Errc::out_of_range, "count " + std::to_string(counts[i]) + " at " +
                                      cell_name(geometry, i) + " exceeds the " +
                                      std::to_string(*tokens) + " prompt tokens"};
  }
  if (tokens && geometry.top_k != 0) {
    const uint64_t expected = uint64_t{geometry.top_k} * *tokens;
    for (uint32_t l = 0; l < geometry.layers; ++l) {
      const int64_t sum = kernels::sum16(&counts[size_t{l} * geometry.experts], geometry.experts);
      if (static_cast<uint64_t>(sum) != expected)
        return {Errc::out_of_range, "layer " + std::to_string(l) + " sums to " +
                                        std::to_string(sum) +
                                        ", expected k*tokens = " + std::to_string(expected)};
    }
  }
  return Status::ok();
}

Status accumulate_topk(const Geometry& geometry, std::span<const int32_t> expert_ids,
                       uint32_t tokens, std::span<int32_t> counts) {
  ELDR_TRY(geometry.validate());
  const uint32_t k = geometry.top_k;
  if (k == 0) return {Errc::invalid_argument, "accumulate_topk needs a geometry with top_k > 0"};
  if (counts.size() != geometry.cells())
    return {Errc::shape_mismatch, "accumulator has " + std::to_string(counts.size()) +
                                      " cells, expected " + std::to_string(geometry.cells())};
  const size_t per_token = size_t{geometry.layers} * k;
  if (expert_ids.size() != per_token * tokens)
    return {Errc::shape_mismatch,
            "expert_ids has " + std::to_string(expert_ids.size()) +
                " entries, expected tokens*L*k = " + std::to_string(per_token * tokens)};
  // Validate all picks first so that an error leaves counts unchanged.
  for (size_t tl = 0; tl < size_t{tokens} * geometry.layers; ++tl) {
    const int32_t* picks = expert_ids.data() + tl * k;
    for (uint32_t j = 0; j < k; ++j) {
      if (picks[j] < 0 || static_cast<uint32_t>(picks[j]) >= geometry.experts)
        return {Errc::out_of_range, "expert id " + std::to_string(picks[j]) + " of token " +
                                        std::to_string(tl / geometry.layers) + " layer " +
                                        std::to_string(tl % geometry.layers) + " is outside [0, " +
                                        std::to_string(geometry.experts) + ")"};
      for (uint32_t i = 0; i < j; ++i)
        if (picks[i] == picks[j])
          return {Errc::invalid_argument, "token " + std::to_string(tl / geometry.layers) +
                                              " picks expert " + std::to_string(picks[j]) +
                                              " twice in layer " +
                                              std::to_string(tl % geometry.layers)};
    }
  }
  for (size_t tl = 0; tl < size_t{tokens} * geometry.layers; ++tl) {
    const size_t layer = tl % geometry.layers;
    const int32_t* picks = expert_ids.data() + tl * k;
    for (uint32_t j = 0; j < k; ++j) counts[layer * geometry.experts + picks[j]] += 1;
  }
  return Status::ok();
}

Status narrow_footprint(std::span<const int32_t> wide, std::span<int16_t> out) {
  if (wide.size() != out.size())
    return {Errc::shape_mismatch, "narrow_footprint: sizes differ (" + std::to_string(wide.size()) +
                                      " vs " + std::to_string(out.size()) + ")"};
  for (size_t i = 0; i < wide.size(); ++i)
    if (wide[i] < 0 || wide[i] > std::numeric_limits<int16_t>::max())
      return {Errc::out_of_range, "footprint cell " + std::to_string(i) + " = " +
                                      std::to_string(wide[i]) +
                                      " does not fit int16 (prompt longer than 32767 tokens?)"};
  std::transform(wide.begin(), wide.end(), out.begin(),
                 [](int32_t v) { return static_cast<int16_t>(v); });
  return Status::ok();
}

}  // namespace eldr
