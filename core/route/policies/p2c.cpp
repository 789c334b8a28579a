// p2c, the power of two choices: two distinct random workers, the less loaded
// of them (the first on a tie).
#include "policies.hpp"

namespace eldr::detail {

Pick pick_p2c(const Candidates& c, PickContext& ctx) {
  const uint32_t a = static_cast<uint32_t>(ctx.draws.next() % c.count);
  if (c.count == 1) return {a, 1};
  uint32_t b = static_cast<uint32_t>(ctx.draws.next() % (c.count - 1));
  if (b >= a) ++b;
  return {c.load[b] < c.load[a] ? b : a, 2};
}

}  // namespace eldr::detail
