// eldr_guard (ours): eldr's pick, unless it runs more than a load-dependent
// slack ahead of the least-loaded worker; then the request spills to the
// least-loaded worker, the most similar among ties. It bounds the pile-up a
// burst of one domain causes on a narrow band.
#include <algorithm>

#include "policies.hpp"

namespace eldr::detail {

Pick pick_eldr_guard(const Candidates& c, PickContext& ctx) {
  Pick p = pick_eldr(c, ctx);
  int64_t lowest = c.load[0], total = 0;
  for (uint32_t j = 0; j < c.count; ++j) {
    lowest = std::min(lowest, c.load[j]);
    total += c.load[j];
  }
  const double slack = std::max<double>(
      ctx.options.guard_slack, ctx.options.guard_ratio * static_cast<double>(total) / c.count);
  if (static_cast<double>(c.load[p.candidate] - lowest) > slack) {
    uint32_t best = c.count;
    for (uint32_t j = 0; j < c.count; ++j)
      if (c.load[j] == lowest &&
          (best == c.count || ctx.scores.exact(c.cluster[j]) > ctx.scores.exact(c.cluster[best])))
        best = j;
    p.candidate = best;
  }
  return p;
}

}  // namespace eldr::detail
