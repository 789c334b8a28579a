// random: a uniformly random active worker.
#include "policies.hpp"

namespace eldr::detail {

Pick pick_random(const Candidates& c, PickContext& ctx) {
  return {static_cast<uint32_t>(ctx.draws.next() % c.count), 1};
}

}  // namespace eldr::detail
