// jsq, join the shortest queue: the least-loaded active worker, ties broken
// at random.
#include "policies.hpp"

namespace eldr::detail {

Pick pick_jsq(const Candidates& c, PickContext& ctx) {
  return least_loaded(
      c, [](uint32_t) { return true; }, true, ctx.draws);
}

}  // namespace eldr::detail
