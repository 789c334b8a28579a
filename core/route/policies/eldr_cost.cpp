// eldr_cost (ours, docs/design.md §5.3): the worker whose pick adds the least
// to the pool's total decode time. A worker with b requests whose batch uses
// D distinct experts costs b * S(b, D) per step, S(b, D) = T0 + TSEQ b + alpha D;
// a request that adds dD experts there raises that to (b + 1) S(b + 1, D + dD):
//   cost = T0 + TSEQ (2b + 1) + alpha (D + (b + 1) dD).
// T0 is the same everywhere and drops out. An idle worker costs TSEQ + alpha
// * (the request's own experts), which no busy worker undercuts: D + dD is at
// least the request's own experts, so while a worker is idle no request joins
// a busy one (tested). Ties: the less loaded, then a seeded draw.
#include <algorithm>
#include <cmath>

#include "eldr/internal/vector_kernels.hpp"
#include "policies.hpp"

namespace eldr::detail {

Pick pick_eldr_cost(const Candidates& c, PickContext& ctx) {
  const CostInputs& in = *ctx.cost;
  const LiveBatches& live = *in.live;
  const double tseq = in.cost.tseq_ms;
  const double alpha = in.cost.alpha_us / 1000.0 * live.layer_scale();  // ms per cost cell
  constexpr double kEqualMs = 1e-9;  // costs this close are equal
  double best = 0.0;
  uint32_t pick = 0, ties = 0;
  for (uint32_t j = 0; j < c.count; ++j) {
    const uint32_t slot = c.slot[j];
    // In flight, queued requests included: a queue behind a full batch keeps
    // it full for longer.
    const double b = static_cast<double>(std::max<int64_t>(c.load[j], 0));
    const double d = live.distinct(slot);
    const double added = live.requests(slot) == 0
                             ? in.demand_total
                             : kernels::dot(live.keep(slot), in.demand, live.cells());
    const double cost = tseq * (2.0 * b + 1.0) + alpha * (d + (b + 1.0) * added);
    if (j == 0 || cost < best - kEqualMs) {
      best = cost;
      pick = j;
      ties = 1;
    } else if (cost <= best + kEqualMs) {
      if (c.load[j] < c.load[pick]) {
        best = std::min(best, cost);
        pick = j;
        ties = 1;
      } else if (c.load[j] == c.load[pick] && ctx.draws.next() % ++ties == 0) {
        pick = j;  // a reservoir draw: uniform among the equal
      }
    }
  }
  return {pick, c.count};
}

}  // namespace eldr::detail
