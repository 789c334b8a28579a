// Exactness tests for the assignment solvers (docs/design.md §4.3). The capacitated
// solver is checked against independent references: exhaustive enumeration on
// tiny instances, the paper's formulation (Hungarian on replicated slots) on
// medium ones, and a residual-graph negative-cycle certificate on the fit-sized
// instance where the Hungarian reference would be too slow.

#include "eldr/assignment.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <span>
#include <vector>

namespace eldr {
namespace {

constexpr double kTol = 1e-9;

// Portable random numbers: std::*_distribution output differs between standard
// libraries, raw mt19937_64 output does not, so instances are the same everywhere.
class Rng {
 public:
  explicit Rng(uint64_t seed) : m_gen(seed) {}
  double uniform() { return static_cast<double>(m_gen() >> 11) * 0x1.0p-53; }  // [0, 1)
  uint64_t below(uint64_t bound) { return m_gen() % bound; }

 private:
  std::mt19937_64 m_gen;
};

enum class CostKind { uniform, integer, constant, cosine, skewed };

// cosine: 1 - x.c for random unit vectors, the cost the fit actually feeds in.
// skewed: every point prefers the same two columns, the contention of early
// k-means iterations, which forces long chains of moves.
std::vector<double> make_costs(Rng& rng, size_t n, size_t k, CostKind kind) {
  std::vector<double> cost(n * k);
  switch (kind) {
    case CostKind::uniform:
      for (auto& c : cost) c = 2.0 * rng.uniform();
      break;
    case CostKind::integer:
      // Few distinct values: many ties and degenerate optima.
      for (auto& c : cost) c = static_cast<double>(rng.below(4));
      break;
    case CostKind::constant:
      std::fill(cost.begin(), cost.end(), 1.0);
      break;
    case CostKind::skewed:
      for (size_t i = 0; i < n; ++i)
        for (size_t j = 0; j < k; ++j) cost[i * k + j] = (j < 2 ? 0.0 : 1.0) + rng.uniform();
      break;
    case CostKind::cosine: {
      constexpr size_t kDim = 8;
      auto unit = [&rng] {
        std::vector<double> x(kDim);
        double norm = 0.0;
        for (auto& v : x) {
          v = rng.uniform() - 0.5;
          norm += v * v;
        }
        for (auto& v : x) v /= std::sqrt(norm);
        return x;
      };
      std::vector<std::vector<double>> centroids;
      for (size_t j = 0; j < k; ++j) centroids.push_back(unit());
      for (size_t i = 0; i < n; ++i) {
        const auto x = unit();
        for (size_t j = 0; j < k; ++j) {
          double dot = 0.0;
          for (size_t d = 0; d < kDim; ++d) dot += x[d] * centroids[j][d];
          cost[i * k + j] = 1.0 - dot;
        }
      }
      break;
    }
  }
  return cost;
}

double total_cost(std::span<const double> cost, size_t k, const std::vector<uint32_t>& assign) {
  double sum = 0.0;
  for (size_t i = 0; i < assign.size(); ++i) sum += cost[i * k + assign[i]];
  return sum;
}

// Every point placed on a real column, no column over capacity.
::testing::AssertionResult respects_capacity(const std::vector<uint32_t>& assign, size_t n,
                                             size_t k, size_t cap) {
  if (assign.size() != n)
    return ::testing::AssertionFailure() << "size " << assign.size() << " != " << n;
  std::vector<size_t> count(k, 0);
  for (size_t i = 0; i < n; ++i) {
    if (assign[i] >= k)
      return ::testing::AssertionFailure() << "point " << i << " -> column " << assign[i];
    if (++count[assign[i]] > cap)
      return ::testing::AssertionFailure() << "column " << assign[i] << " over cap " << cap;
  }
  return ::testing::AssertionSuccess();
}

// Exhaustive optimum over all k^n assignments within capacity.
double brute_force_capacitated(std::span<const double> cost, size_t n, size_t k, size_t cap) {
  std::vector<uint32_t> assign(n, 0);
  std::vector<size_t> count(k, 0);
  double best = std::numeric_limits<double>::infinity();
  auto rec = [&](auto& self, size_t i, double acc) -> void {
    if (i == n) {
      best = std::min(best, acc);
      return;
    }
    for (size_t j = 0; j < k; ++j) {
      if (count[j] == cap) continue;
      ++count[j];
      self(self, i + 1, acc + cost[i * k + j]);
      --count[j];
    }
  };
  rec(rec, 0, 0.0);
  return best;
}

// Exhaustive optimum over injective row -> column maps.
double brute_force_rectangular(std::span<const double> cost, size_t n, size_t m) {
  std::vector<uint8_t> used(m, 0);
  double best = std::numeric_limits<double>::infinity();
  auto rec = [&](auto& self, size_t i, double acc) -> void {
    if (i == n) {
      best = std::min(best, acc);
      return;
    }
    for (size_t j = 0; j < m; ++j) {
      if (used[j]) continue;
      used[j] = 1;
      self(self, i + 1, acc + cost[i * m + j]);
      used[j] = 0;
    }
  };
  rec(rec, 0, 0.0);
  return best;
}

// The paper's formulation: column j replicated into `cap` slots, slot s
// belonging to column s / cap.
std::vector<double> replicate_slots(std::span<const double> cost, size_t n, size_t k, size_t cap) {
  std::vector<double> out(n * k * cap);
  for (size_t i = 0; i < n; ++i)
    for (size_t s = 0; s < k * cap; ++s) out[i * k * cap + s] = cost[i * k + s / cap];
  return out;
}

// Baseline heuristic: most confident points first, each to its best column
// that still has room.
std::vector<uint32_t> greedy_assign(std::span<const double> cost, size_t n, size_t k, size_t cap) {
  std::vector<double> best(n);
  for (size_t i = 0; i < n; ++i)
    best[i] = *std::min_element(cost.begin() + static_cast<ptrdiff_t>(i * k),
                                cost.begin() + static_cast<ptrdiff_t>((i + 1) * k));
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&best](size_t a, size_t b) { return best[a] < best[b]; });
  std::vector<size_t> count(k, 0);
  std::vector<uint32_t> assign(n, 0);
  for (const size_t i : order) {
    size_t pick = k;
    for (size_t j = 0; j < k; ++j) {
      if (count[j] < cap && (pick == k || cost[i * k + j] < cost[i * k + pick])) pick = j;
    }
    ++count[pick];
    assign[i] = static_cast<uint32_t>(pick);
  }
  return assign;
}

// Optimality certificate independent of the solver: an assignment is optimal
// iff its residual graph has no negative cycle. Nodes are the k columns plus a
// pseudo-node F for the free slots; j -> j' costs the cheapest move of a point
// from j to j', j -> F (count < cap) and F -> j (count > 0) cost 0 (a chain of
// moves may end in a free slot and start from the slot it vacates).
// Bellman-Ford from a virtual source at distance 0 everywhere.
bool has_negative_cycle(std::span<const double> cost, size_t n, size_t k, size_t cap,
                        const std::vector<uint32_t>& assign) {
  const size_t nodes = k + 1;
  const size_t free_node = k;
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::vector<double> w(nodes * nodes, kInf);
  std::vector<size_t> count(k, 0);
  for (size_t q = 0; q < n; ++q) {
    const size_t j = assign[q];
    ++count[j];
    for (size_t jp = 0; jp < k; ++jp) {
      if (jp == j) continue;
      w[j * nodes + jp] = std::min(w[j * nodes + jp], cost[q * k + jp] - cost[q * k + j]);
    }
  }
  for (size_t j = 0; j < k; ++j) {
    if (count[j] < cap) w[j * nodes + free_node] = 0.0;
    if (count[j] > 0) w[free_node * nodes + j] = 0.0;
  }
  std::vector<double> dist(nodes, 0.0);
  for (size_t round = 0; round < nodes; ++round) {
    bool relaxed = false;
    for (size_t u = 0; u < nodes; ++u) {
      for (size_t v = 0; v < nodes; ++v) {
        const double e = w[u * nodes + v];
        if (e == kInf) continue;
        // Tolerance: rounding must not pass for a negative cycle.
        if (dist[u] + e < dist[v] - kTol) {
          dist[v] = dist[u] + e;
          relaxed = true;
        }
      }
    }
    if (!relaxed) return false;
  }
  return true;
}

size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

TEST(assign_capacitated, matches_brute_force_on_small_instances) {
  Rng rng(0x5eed0001);
  const CostKind kinds[] = {CostKind::uniform, CostKind::integer, CostKind::constant,
                            CostKind::cosine, CostKind::skewed};
  size_t checked = 0;
  for (size_t n = 0; n <= 8; ++n) {
    for (size_t k = 1; k <= 4; ++k) {
      // Every capacity from the tightest feasible one up to "unconstrained".
      const size_t min_cap = std::max<size_t>(ceil_div(n, k), n == 0 ? 0 : 1);
      for (size_t cap = min_cap; cap <= std::max<size_t>(n, 1); ++cap) {
        for (const CostKind kind : kinds) {
          const int reps = kind == CostKind::constant ? 1 : 3;
          for (int rep = 0; rep < reps; ++rep) {
            const auto cost = make_costs(rng, n, k, kind);
            const auto sut = assign_capacitated(cost, n, k, cap);
            ASSERT_TRUE(sut.is_ok()) << sut.status().to_string();
            ASSERT_TRUE(respects_capacity(*sut, n, k, cap))
                << "n=" << n << " k=" << k << " cap=" << cap;
            EXPECT_NEAR(total_cost(cost, k, *sut), brute_force_capacitated(cost, n, k, cap), kTol)
                << "n=" << n << " k=" << k << " cap=" << cap;
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 500u);
}

TEST(assign_capacitated, handles_negative_and_mixed_sign_costs) {
  // Costs are any finite doubles, not only the [0, 2] cosine range.
  Rng rng(0x5eed0002);
  for (int rep = 0; rep < 200; ++rep) {
    const size_t n = 1 + rng.below(8);
    const size_t k = 1 + rng.below(4);
    const size_t cap = ceil_div(n, k) + rng.below(2);
    auto cost = make_costs(rng, n, k, CostKind::uniform);
    for (auto& c : cost) c = (c - 1.0) * 1000.0;
    const auto sut = assign_capacitated(cost, n, k, cap);
    ASSERT_TRUE(sut.is_ok()) << sut.status().to_string();
    ASSERT_TRUE(respects_capacity(*sut, n, k, cap));
    EXPECT_NEAR(total_cost(cost, k, *sut), brute_force_capacitated(cost, n, k, cap), 1e-7);
  }
}

TEST(assign_capacitated, matches_hungarian_on_replicated_slots) {
  Rng rng(0x5eed0003);
  const CostKind kinds[] = {CostKind::uniform, CostKind::integer, CostKind::cosine};
  for (int rep = 0; rep < 9; ++rep) {
    const size_t n = 60 + rng.below(141);
    const size_t k = 3 + rng.below(6);
    // Mostly the fit's tight cap = ceil(n / k), sometimes with slack.
    const size_t cap = ceil_div(n, k) + (rep % 3 == 2 ? rng.below(5) : 0);
    const CostKind kind = kinds[rep % 3];
    const auto cost = make_costs(rng, n, k, kind);
    const auto sut = assign_capacitated(cost, n, k, cap);
    ASSERT_TRUE(sut.is_ok()) << sut.status().to_string();
    ASSERT_TRUE(respects_capacity(*sut, n, k, cap));
    const auto slots = replicate_slots(cost, n, k, cap);
    const auto ref = hungarian_min(slots, n, k * cap);
    ASSERT_TRUE(ref.is_ok()) << ref.status().to_string();
    EXPECT_NEAR(total_cost(cost, k, *sut), total_cost(slots, k * cap, *ref), kTol)
        << "n=" << n << " k=" << k << " cap=" << cap;
  }
}

TEST(assign_capacitated, matches_hungarian_on_many_mid_sized_instances) {
  // Columns of up to 40 points overflow the solver's per-pair shortlists, so
  // exhausted lists get refilled; brute-force sizes never get there. Few
  // distinct cost values make many equal-cost paths.
  Rng rng(0x5eed0008);
  for (int rep = 0; rep < 300; ++rep) {
    const size_t k = 2 + rng.below(9);
    const size_t n = 20 + rng.below(61);
    const size_t cap = ceil_div(n, k) + (rep % 3 == 0 ? rng.below(4) : 0);
    const CostKind kinds[] = {CostKind::integer, CostKind::uniform, CostKind::skewed};
    auto cost = make_costs(rng, n, k, kinds[rep % 3]);
    if (rep % 5 == 0)
      for (auto& c : cost) c = std::floor(c / 2.0);  // 0/1 costs: ties everywhere
    const auto sut = assign_capacitated(cost, n, k, cap);
    ASSERT_TRUE(sut.is_ok()) << sut.status().to_string();
    ASSERT_TRUE(respects_capacity(*sut, n, k, cap));
    const auto slots = replicate_slots(cost, n, k, cap);
    const auto ref = hungarian_min(slots, n, k * cap);
    ASSERT_TRUE(ref.is_ok()) << ref.status().to_string();
    EXPECT_NEAR(total_cost(cost, k, *sut), total_cost(slots, k * cap, *ref), kTol)
        << "rep=" << rep << " n=" << n << " k=" << k << " cap=" << cap;
  }
}

TEST(assign_capacitated, is_never_worse_than_greedy) {
  Rng rng(0x5eed0004);
  const CostKind kinds[] = {CostKind::uniform, CostKind::integer, CostKind::cosine,
                            CostKind::skewed};
  size_t strictly_better = 0;
  for (int rep = 0; rep < 60; ++rep) {
    const size_t n = 1 + rng.below(300);
    const size_t k = 1 + rng.below(12);
    const size_t cap = ceil_div(n, k) + (rep % 4 == 0 ? rng.below(10) : 0);
    const auto cost = make_costs(rng, n, k, kinds[rep % 4]);
    const auto sut = assign_capacitated(cost, n, k, cap);
    ASSERT_TRUE(sut.is_ok()) << sut.status().to_string();
    const auto greedy = greedy_assign(cost, n, k, cap);
    ASSERT_TRUE(respects_capacity(greedy, n, k, cap));
    const double exact = total_cost(cost, k, *sut);
    const double heuristic = total_cost(cost, k, greedy);
    EXPECT_LE(exact, heuristic + kTol);
    if (exact < heuristic - 1e-6) ++strictly_better;
  }
  // Otherwise the comparison above would be vacuous.
  EXPECT_GT(strictly_better, 10u);
}

TEST(assign_capacitated, fit_sized_instance_is_optimal_by_negative_cycle_certificate) {
  // N = 1000, K = 16, cap = 63: the main use. Hungarian on 1000 x 1008 slots
  // is ~1e9 steps, so optimality is certified by the residual graph instead.
  constexpr size_t kN = 1000;
  constexpr size_t kK = 16;
  constexpr size_t kCap = 63;
  Rng rng(0x5eed0005);
  for (const CostKind kind :
       {CostKind::uniform, CostKind::cosine, CostKind::integer, CostKind::skewed}) {
    const auto cost = make_costs(rng, kN, kK, kind);
    const auto sut = assign_capacitated(cost, kN, kK, kCap);
    ASSERT_TRUE(sut.is_ok()) << sut.status().to_string();
    ASSERT_TRUE(respects_capacity(*sut, kN, kK, kCap));
    EXPECT_FALSE(has_negative_cycle(cost, kN, kK, kCap, *sut));
    // The certificate must have teeth: greedy is suboptimal on these and the
    // checker has to see it.
    const auto greedy = greedy_assign(cost, kN, kK, kCap);
    if (total_cost(cost, kK, greedy) > total_cost(cost, kK, *sut) + 1e-6) {
      EXPECT_TRUE(has_negative_cycle(cost, kN, kK, kCap, greedy));
    }
  }
}

TEST(assign_capacitated, is_deterministic) {
  Rng rng(0x5eed0006);
  const auto cost = make_costs(rng, 200, 7, CostKind::integer);
  const auto first = assign_capacitated(cost, 200, 7, 29);
  const auto second = assign_capacitated(cost, 200, 7, 29);
  ASSERT_TRUE(first.is_ok());
  ASSERT_TRUE(second.is_ok());
  EXPECT_EQ(*first, *second);
}

TEST(assign_capacitated, single_column_takes_every_point) {
  const std::vector<double> cost{0.5, 1.5, 0.25};
  const auto sut = assign_capacitated(cost, 3, 1, 3);
  ASSERT_TRUE(sut.is_ok());
  EXPECT_EQ(*sut, (std::vector<uint32_t>{0, 0, 0}));
}

TEST(assign_capacitated, capacity_forces_second_best_column) {
  // Both points prefer column 0; the one losing less by moving goes to 1.
  const std::vector<double> cost{0.0, 1.0,    // point 0 loses 1.0 by moving
                                 0.0, 0.25};  // point 1 loses 0.25
  const auto sut = assign_capacitated(cost, 2, 2, 1);
  ASSERT_TRUE(sut.is_ok());
  EXPECT_EQ(*sut, (std::vector<uint32_t>{0, 1}));
}

TEST(assign_capacitated, empty_input_gives_empty_assignment) {
  const auto sut = assign_capacitated({}, 0, 4, 0);
  ASSERT_TRUE(sut.is_ok());
  EXPECT_TRUE(sut->empty());
}

TEST(assign_capacitated, huge_cap_does_not_overflow) {
  // cap * k overflows size_t; that must read as "plenty", not wrap to a small
  // number and reject the call.
  const std::vector<double> cost{1.0, 0.0, 0.0, 1.0, 1.0, 0.0};
  const auto sut = assign_capacitated(cost, 3, 2, std::numeric_limits<size_t>::max());
  ASSERT_TRUE(sut.is_ok()) << sut.status().to_string();
  EXPECT_EQ(*sut, (std::vector<uint32_t>{1, 0, 1}));
}

TEST(assign_capacitated, rejects_invalid_arguments) {
  const std::vector<double> cost(6, 1.0);
  EXPECT_EQ(assign_capacitated(cost, 3, 2, 1).status().code(), Errc::invalid_argument)
      << "n > k * cap";
  EXPECT_EQ(assign_capacitated(cost, 2, 2, 1).status().code(), Errc::invalid_argument)
      << "cost size != n * k";
  EXPECT_EQ(assign_capacitated(cost, 3, 0, 3).status().code(), Errc::invalid_argument) << "k = 0";
  EXPECT_EQ(assign_capacitated(cost, 3, 2, 0).status().code(), Errc::invalid_argument)
      << "cap = 0 with points";
  auto bad = cost;
  bad[4] = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(assign_capacitated(bad, 3, 2, 2).status().code(), Errc::invalid_argument) << "NaN";
  bad[4] = std::numeric_limits<double>::infinity();
  EXPECT_EQ(assign_capacitated(bad, 3, 2, 2).status().code(), Errc::invalid_argument) << "inf";
  // Finite but so large that sums of costs would overflow to inf.
  bad[4] = 1e308;
  EXPECT_EQ(assign_capacitated(bad, 3, 2, 2).status().code(), Errc::out_of_range) << "1e308";
  // Point counts beyond what a uint32_t result can index (and where n * k
  // would wrap) are refused before the span is touched.
  EXPECT_EQ(assign_capacitated(cost, std::numeric_limits<size_t>::max() / 2 + 4, 2,
                               std::numeric_limits<size_t>::max())
                .status()
                .code(),
            Errc::out_of_range);
}

TEST(hungarian_min, matches_brute_force_over_permutations) {
  Rng rng(0x5eed0007);
  const CostKind kinds[] = {CostKind::uniform, CostKind::integer, CostKind::constant};
  for (size_t n = 0; n <= 7; ++n) {
    for (size_t m = std::max<size_t>(n, 1); m <= 7; ++m) {
      for (const CostKind kind : kinds) {
        const int reps = kind == CostKind::constant ? 1 : 4;
        for (int rep = 0; rep < reps; ++rep) {
          const auto cost = make_costs(rng, n, m, kind);
          const auto sut = hungarian_min(cost, n, m);
          ASSERT_TRUE(sut.is_ok()) << sut.status().to_string();
          ASSERT_TRUE(respects_capacity(*sut, n, m, 1)) << "columns must be distinct";
          EXPECT_NEAR(total_cost(cost, m, *sut), brute_force_rectangular(cost, n, m), kTol)
              << "n=" << n << " m=" << m;
        }
      }
    }
  }
}

TEST(hungarian_min, rejects_invalid_arguments) {
  const std::vector<double> cost(6, 1.0);
  EXPECT_EQ(hungarian_min(cost, 3, 2).status().code(), Errc::invalid_argument) << "rows > cols";
  EXPECT_EQ(hungarian_min(cost, 2, 2).status().code(), Errc::invalid_argument) << "size";
  auto bad = cost;
  bad[0] = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(hungarian_min(bad, 2, 3).status().code(), Errc::invalid_argument) << "NaN";
  bad[0] = -1e308;
  EXPECT_EQ(hungarian_min(bad, 2, 3).status().code(), Errc::out_of_range) << "-1e308";
  const auto empty = hungarian_min({}, 0, 0);
  ASSERT_TRUE(empty.is_ok());
  EXPECT_TRUE(empty->empty());
}

}  // namespace
}  // namespace eldr
