// eldr, the paper's rule: the least-loaded worker inside the locality band.
#include "band.hpp"
#include "policies.hpp"

namespace eldr::detail {

Pick pick_eldr(const Candidates& c, PickContext& ctx) {
  Band in_band(ctx.scores, c.cluster, c.count, ctx.tau, ctx.options.min2_band);
  bool member[kMaxSlots];
  for (uint32_t j = 0; j < c.count; ++j) member[j] = in_band.contains(j);
  return least_loaded(
      c, [&](uint32_t j) { return member[j]; }, false, ctx.draws);
}

}  // namespace eldr::detail
