// domain, the oracle baseline: the least-loaded worker of the pool the table
// assigned to the request's label, else of the misc pool, else of all workers
// (ties at random).
#include <cstdint>

#include "policies.hpp"

namespace eldr::detail {

Pick pick_domain(const Candidates& c, PickContext& ctx) {
  const DomainPools& pools = ctx.table.domains;
  int32_t domain = -1;
  for (size_t d = 0; d < pools.names.size(); ++d)
    if (pools.names[d] == ctx.label) domain = static_cast<int32_t>(d);
  // worker_domain holds one entry per cluster (the table validates it).
  auto pool_of = [&](uint32_t j) {
    const uint32_t cl = c.cluster[j];
    return cl < pools.worker_domain.size() ? pools.worker_domain[cl] : -2;
  };
  auto pool_has = [&](int32_t want) {
    for (uint32_t j = 0; j < c.count; ++j)
      if (pool_of(j) == want) return true;
    return false;
  };
  const int32_t want = domain >= 0 && pool_has(domain) ? domain : pool_has(-1) ? -1 : -3;
  if (want == -3)
    return least_loaded(
        c, [](uint32_t) { return true; }, true, ctx.draws);
  return least_loaded(
      c, [&](uint32_t j) { return pool_of(j) == want; }, true, ctx.draws);
}

}  // namespace eldr::detail
