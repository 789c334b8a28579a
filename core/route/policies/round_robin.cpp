// round_robin: the active workers in turn (one cursor shared by all callers).
#include "policies.hpp"

namespace eldr::detail {

Pick pick_round_robin(const Candidates& c, PickContext& ctx) {
  return {static_cast<uint32_t>(ctx.rr_cursor.fetch_add(1, std::memory_order_relaxed) % c.count),
          1};
}

}  // namespace eldr::detail
