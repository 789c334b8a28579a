// The pick step of a decision (docs/design.md §5): one function per policy,
// each in its own file, choosing among the active candidates gathered once
// per decision. A new policy is a new file here plus its line in policy.cpp.
// Private to route/.
#pragma once

#include <atomic>
#include <cstdint>
#include <string_view>

#include "eldr/cluster_table.hpp"
#include "eldr/random.hpp"
#include "eldr/router.hpp"
#include "live_batch.hpp"
#include "scoring.hpp"

namespace eldr::detail {

// The active workers of one decision, as parallel arrays of `count` > 0
// entries: candidate j is router slot slot[j], routes by cluster[j]
// (kNoCluster: none) and has load[j] requests in flight.
struct Candidates {
  uint32_t count = 0;
  const uint32_t* slot = nullptr;
  const uint32_t* cluster = nullptr;
  const int64_t* load = nullptr;
};

// The router's seeded draws: splitmix64 over (seed, a shared counter), so
// concurrent decisions never share a draw.
struct Draws {
  uint64_t seed = 0;
  std::atomic<uint64_t>* counter = nullptr;
  uint64_t next() const noexcept {
    const uint64_t n = counter->fetch_add(1, std::memory_order_relaxed);
    return splitmix64(seed * 0x9e3779b97f4a7c15ULL + n);
  }
};

// What eldr_cost reads: the workers' batches, the request's demand over
// the cost cells (LiveBatches::demand) and the step constants in force.
struct CostInputs {
  const LiveBatches* live = nullptr;
  const float* demand = nullptr;
  float demand_total = 0.0f;
  StepCost cost;
};

// Everything a pick may read besides the candidates.
struct PickContext {
  const RouterOptions& options;
  const ClusterTable& table;
  ClusterScores& scores;   // the footprint's scores (int16-bounded only for
                           // the policies that reads_scores() names)
  float tau = 0.0f;        // the band width in force
  std::string_view label;  // RouteHints::label, for the domain policy
  Draws draws;
  std::atomic<uint64_t>& rr_cursor;
  const CostInputs* cost = nullptr;  // set for eldr_cost only
};

struct Pick {
  uint32_t candidate = 0;  // index into Candidates
  uint32_t band = 0;       // how many candidates the pick was made among
};

Pick pick_eldr(const Candidates& c, PickContext& ctx);
Pick pick_eldr_guard(const Candidates& c, PickContext& ctx);
Pick pick_eldr_cost(const Candidates& c, PickContext& ctx);
Pick pick_round_robin(const Candidates& c, PickContext& ctx);
Pick pick_random(const Candidates& c, PickContext& ctx);
Pick pick_jsq(const Candidates& c, PickContext& ctx);
Pick pick_p2c(const Candidates& c, PickContext& ctx);
Pick pick_domain(const Candidates& c, PickContext& ctx);

// The pick function of `policy` (policy.cpp).
Pick pick(Policy policy, const Candidates& c, PickContext& ctx);
// Whether the policy compares scores before it picks (then the int16 pass
// bounds every cluster; the others score only the picked worker).
bool reads_scores(Policy policy) noexcept;
// Whether the policy reads the workers' batch footprints (CostInputs).
bool reads_batches(Policy policy) noexcept;

// Least loaded of the candidates j with keep(j); ties: the lowest index, or a
// uniformly random one among the tied when `random_ties`. Pick::band counts
// the kept candidates. keep() must select at least one.
template <class Keep>
Pick least_loaded(const Candidates& c, Keep keep, bool random_ties, const Draws& draws) {
  int64_t best = INT64_MAX;
  uint32_t ties = 0, kept = 0;
  for (uint32_t j = 0; j < c.count; ++j) {
    if (!keep(j)) continue;
    ++kept;
    if (c.load[j] < best) {
      best = c.load[j];
      ties = 1;
    } else if (c.load[j] == best) {
      ++ties;
    }
  }
  uint32_t target = random_ties && ties > 1 ? static_cast<uint32_t>(draws.next() % ties) : 0;
  for (uint32_t j = 0; j < c.count; ++j)
    if (keep(j) && c.load[j] == best && target-- == 0) return {j, kept};
  return {0, kept};  // unreachable: keep() selected at least one
}

}  // namespace eldr::detail
