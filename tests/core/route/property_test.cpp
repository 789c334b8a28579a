// Property tests (rapidcheck) for the fit and router invariants and the
// footprint / signature-cache conservation rules.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "eldr/assignment.hpp"
#include "eldr/fit.hpp"
#include "eldr/footprint.hpp"
#include "eldr/router.hpp"
#include "eldr/signature_cache.hpp"
#include "test_tables.hpp"

namespace eldr {
namespace {

RC_GTEST_PROP(properties, exact_assignment_respects_capacity_and_beats_greedy, ()) {
  const size_t k = *rc::gen::inRange<size_t>(1, 7);
  const size_t n = *rc::gen::inRange<size_t>(1, 41);
  const size_t cap = *rc::gen::inRange<size_t>((n + k - 1) / k, n + 1);
  const auto raw = *rc::gen::container<std::vector<int>>(n * k, rc::gen::inRange(0, 2001));
  std::vector<double> cost(raw.begin(), raw.end());
  for (auto& c : cost) c /= 1000.0;
  auto sut = assign_capacitated(cost, n, k, cap);
  RC_ASSERT(sut.is_ok());
  std::vector<size_t> used(k, 0);
  double total = 0.0;
  for (size_t i = 0; i < n; ++i) {
    RC_ASSERT((*sut)[i] < k);
    ++used[(*sut)[i]];
    total += cost[i * k + (*sut)[i]];
  }
  for (size_t u : used) RC_ASSERT(u <= cap);
  // Greedy: points by their best cost, each to its cheapest column with room.
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return *std::min_element(&cost[a * k], &cost[a * k] + k) <
           *std::min_element(&cost[b * k], &cost[b * k] + k);
  });
  std::vector<size_t> room(k, cap);
  double greedy = 0.0;
  for (size_t i : order) {
    size_t best = k;
    for (size_t j = 0; j < k; ++j)
      if (room[j] && (best == k || cost[i * k + j] < cost[i * k + best])) best = j;
    --room[best];
    greedy += cost[i * k + best];
  }
  RC_ASSERT(total <= greedy + 1e-9);
}

RC_GTEST_PROP(properties, balanced_kmeans_clusters_never_exceed_the_cap, ()) {
  const uint32_t k = *rc::gen::inRange<uint32_t>(1, 6);
  const uint64_t n = *rc::gen::inRange<uint64_t>(k, 61);
  const size_t d = *rc::gen::inRange<size_t>(2, 7);
  const auto raw = *rc::gen::container<std::vector<int>>(n * d, rc::gen::inRange(0, 100));
  std::vector<float> pts(raw.begin(), raw.end());
  for (uint64_t i = 0; i < n; ++i) {
    double norm = 0.0;
    for (size_t j = 0; j < d; ++j) norm += double{pts[i * d + j]} * pts[i * d + j];
    for (size_t j = 0; j < d; ++j)
      pts[i * d + j] = norm > 0 ? static_cast<float>(pts[i * d + j] / std::sqrt(norm)) : 0.0f;
  }
  auto sut = spherical_kmeans(pts, n, d, k, *rc::gen::arbitrary<uint32_t>(), true, 50, 1);
  RC_ASSERT(sut.is_ok());
  std::vector<uint64_t> sizes(k, 0);
  for (uint32_t a : sut->assignment) ++sizes[a];
  for (uint64_t s : sizes) RC_ASSERT(s <= (n + k - 1) / k);
  RC_ASSERT(sut->iterations <= 50u);
}

RC_GTEST_PROP(properties, routing_only_ever_picks_active_workers, ()) {
  const uint32_t workers = *rc::gen::inRange<uint32_t>(2, 9);
  const auto policy = *rc::gen::element(Policy::eldr, Policy::round_robin, Policy::random,
                                        Policy::jsq, Policy::p2c, Policy::eldr_guard);
  RouterOptions o;
  o.policy = policy;
  o.tau = static_cast<float>(*rc::gen::inRange(0, 31)) / 100.0f;
  auto router =
      Router::create(std::make_shared<const ClusterTable>(testing::axis_table(workers)), o);
  RC_ASSERT(router.is_ok());
  Router& sut = **router;
  // Take some workers out, but leave at least one active.
  std::vector<bool> active(workers, true);
  const uint32_t out = *rc::gen::inRange<uint32_t>(0, workers);
  for (uint32_t i = 0; i < out; ++i) {
    const uint32_t w = *rc::gen::inRange<uint32_t>(0, workers);
    if (std::count(active.begin(), active.end(), true) == 1 && active[w]) continue;
    if (!active[w]) continue;
    active[w] = false;
    RC_ASSERT((*rc::gen::arbitrary<bool>() ? sut.drain_worker(100 + w) : sut.remove_worker(100 + w))
                  .is_ok());
  }
  for (int r = 0; r < 20; ++r) {
    const auto counts =
        *rc::gen::container<std::vector<int16_t>>(8, rc::gen::inRange<int16_t>(0, 50));
    auto d = sut.route(counts);
    RC_ASSERT(d.is_ok());
    RC_ASSERT(active[d->worker_index]);
    std::vector<float> scores(sut.worker_slots());
    std::vector<uint8_t> band(sut.worker_slots());
    auto n = sut.scores(counts, scores, band);
    RC_ASSERT(n.is_ok());
    RC_ASSERT(*n >= 1u);
    for (uint32_t i = 0; i < sut.worker_slots(); ++i)
      if (band[i]) RC_ASSERT(active[i]);
  }
}

RC_GTEST_PROP(properties, footprints_conserve_k_picks_per_token_and_layer, ()) {
  const uint32_t L = *rc::gen::inRange<uint32_t>(1, 5), E = *rc::gen::inRange<uint32_t>(2, 17);
  const uint32_t k = *rc::gen::inRange<uint32_t>(1, E + 1),
                 tokens = *rc::gen::inRange<uint32_t>(0, 30);
  const Geometry g{L, E, k};
  std::vector<int32_t> ids;
  std::vector<int32_t> perm(E);
  for (uint32_t t = 0; t < tokens * L; ++t) {
    std::iota(perm.begin(), perm.end(), 0);
    auto picks = perm;
    for (uint32_t i = 0; i < k; ++i)  // a random k-subset
      std::swap(picks[i], picks[i + *rc::gen::inRange<uint32_t>(0, E - i)]);
    ids.insert(ids.end(), picks.begin(), picks.begin() + k);
  }
  std::vector<int32_t> wide(g.cells(), 0);
  RC_ASSERT(accumulate_topk(g, ids, tokens, wide).is_ok());
  std::vector<int16_t> counts(g.cells());
  RC_ASSERT(narrow_footprint(wide, counts).is_ok());
  RC_ASSERT(validate_footprint(g, counts, tokens).is_ok());
}

RC_GTEST_PROP(properties, block_rows_sum_to_the_cold_footprint_for_any_split, ()) {
  const Geometry g{2, 8, 2};
  const uint32_t block = *rc::gen::inRange<uint32_t>(1, 9);
  const uint32_t tokens = *rc::gen::inRange<uint32_t>(1, 40);
  const uint32_t blocks_needed = (tokens + block - 1) / block;
  const uint32_t num_blocks = blocks_needed + 3;
  auto rows = BlockRows::create(g, num_blocks, block);
  RC_ASSERT(rows.is_ok());
  // Stale counts everywhere first: reused physical blocks must be reset.
  {
    std::vector<int32_t> ids;
    std::vector<int64_t> slots;
    for (uint32_t s = 0; s < num_blocks * block; ++s) {
      slots.push_back(s);
      for (uint32_t l = 0; l < 2; ++l)
        ids.insert(ids.end(), {int32_t(s % 8), int32_t((s + 1) % 8)});
    }
    RC_ASSERT(rows->update_step(ids, slots).is_ok());
  }
  // The request's blocks: a random choice of distinct physical blocks.
  std::vector<int32_t> table(num_blocks);
  std::iota(table.begin(), table.end(), 0);
  for (uint32_t i = 0; i + 1 < num_blocks; ++i)
    std::swap(table[i], table[i + *rc::gen::inRange<uint32_t>(0, num_blocks - i)]);
  table.resize(blocks_needed);
  // Token picks, and the cold footprint straight from them.
  std::vector<int32_t> ids;
  std::vector<int32_t> cold(g.cells(), 0);
  for (uint32_t t = 0; t < tokens; ++t)
    for (uint32_t l = 0; l < 2; ++l) {
      const int32_t a = *rc::gen::inRange<int32_t>(0, 8);
      const int32_t b = (a + *rc::gen::inRange<int32_t>(1, 8)) % 8;
      ids.insert(ids.end(), {a, b});
      ++cold[l * 8 + a];
      ++cold[l * 8 + b];
    }
  // Prefill in random chunks.
  uint32_t done = 0;
  while (done < tokens) {
    const uint32_t chunk = *rc::gen::inRange<uint32_t>(1, tokens - done + 1);
    std::vector<int64_t> slots;
    for (uint32_t t = done; t < done + chunk; ++t)
      slots.push_back(int64_t{table[t / block]} * block + t % block);
    RC_ASSERT(rows->update_step(std::span(ids).subspan(done * 4, chunk * 4), slots).is_ok());
    done += chunk;
  }
  std::vector<int16_t> out(g.cells());
  RC_ASSERT(rows->request_footprint(table, out).is_ok());
  for (size_t c = 0; c < out.size(); ++c) RC_ASSERT(out[c] == cold[c]);
}

}  // namespace
}  // namespace eldr
