// The locality band (docs/design.md §5): the candidates whose score lies
// within tau of the best, decided from the score intervals of ClusterScores
// wherever they settle it. Private to route/.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "scoring.hpp"

namespace eldr::detail {

// Largest exact score among the candidates j with keep(j) (-inf if none):
// only those whose interval reaches the best lower bound are scored exactly.
template <class Keep>
inline float exact_max(ClusterScores& cs, const uint32_t* cluster, uint32_t m, Keep keep) {
  float reach = -INFINITY;
  for (uint32_t j = 0; j < m; ++j)
    if (keep(j)) reach = std::max(reach, cs.lower(cluster[j]));
  float best = -INFINITY;
  for (uint32_t j = 0; j < m; ++j)
    if (keep(j) && cs.upper(cluster[j]) >= reach) best = std::max(best, cs.exact(cluster[j]));
  return best;
}

// exact(c) >= floor, scoring c exactly only when its interval straddles floor.
inline bool at_least(ClusterScores& cs, uint32_t c, float floor) {
  if (cs.lower(c) >= floor) return true;
  if (cs.upper(c) < floor) return false;
  return cs.exact(c) >= floor;
}

// The locality band over m > 0 candidates: j is a member iff its exact score
// is >= floor, floor = best - tau; with min2, a one-member band widens to the
// second-best score. Decided from the intervals where they settle it: the
// best score lies in [max lower, max upper], so j is a member when its lower
// bound clears (max upper) - tau and not one when its upper bound stays under
// (max lower) - tau; only the rest need the exact floor.
class Band {
 public:
  Band(ClusterScores& cs, const uint32_t* cluster, uint32_t m, float tau, bool min2)
      : m_cs(cs), m_cluster(cluster), m_m(m), m_tau(tau), m_min2(min2 && tau > 0.0f) {
    for (uint32_t j = 0; j < m; ++j) {
      m_best_lower = std::max(m_best_lower, cs.lower(cluster[j]));
      m_best_upper = std::max(m_best_upper, cs.upper(cluster[j]));
    }
    if (m_min2) exact_floor();  // the widening rule counts exact members
  }

  bool contains(uint32_t j) {
    const uint32_t c = m_cluster[j];
    if (!m_floor_known) {
      if (m_cs.lower(c) >= m_best_upper - m_tau) return true;
      if (m_cs.upper(c) < m_best_lower - m_tau) return false;
      exact_floor();
    }
    return at_least(m_cs, c, m_floor);
  }

 private:
  void exact_floor() {
    const float top = exact_max(m_cs, m_cluster, m_m, [](uint32_t) { return true; });
    m_floor = top - m_tau;
    m_floor_known = true;
    if (!m_min2) return;
    uint32_t members = 0;
    for (uint32_t j = 0; j < m_m && members < 2; ++j)
      members += at_least(m_cs, m_cluster[j], m_floor);
    if (members != 1) return;
    const float second = exact_max(m_cs, m_cluster, m_m, [&](uint32_t j) {
      return m_cs.upper(m_cluster[j]) < top || m_cs.exact(m_cluster[j]) < top;
    });
    if (second >= 0.0f) m_floor = second;
  }

  ClusterScores& m_cs;
  const uint32_t* m_cluster;
  uint32_t m_m;
  float m_tau;
  bool m_min2;
  float m_best_lower = -INFINITY, m_best_upper = -INFINITY;
  float m_floor = 0.0f;
  bool m_floor_known = false;
};

}  // namespace eldr::detail
