#include "eldr/router.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <thread>

#include "test_tables.hpp"

// Counts heap allocations made by the current thread while enabled, so a test
// can show the routing hot path never allocates. Sanitizer builds bring their
// own allocator (replacing operator new there mixes allocators), so the count
// is only taken in normal builds.
// GCC names a sanitizer build by macro, clang by __has_feature.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define ELDR_COUNT_ALLOCS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define ELDR_COUNT_ALLOCS 0
#endif
#endif
#ifndef ELDR_COUNT_ALLOCS
#define ELDR_COUNT_ALLOCS 1
#endif
namespace {
thread_local bool g_count_allocs = false;
thread_local uint64_t g_allocs = 0;
}  // namespace
#if ELDR_COUNT_ALLOCS
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(size_t size) {
  if (g_count_allocs) ++g_allocs;
  if (void* p = std::malloc(size ? size : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop
#endif

namespace eldr {
namespace {

using testing::axis_table;
using testing::layer0;

std::unique_ptr<Router> make(RouterOptions o = {}, ClusterTable t = axis_table()) {
  auto r = Router::create(std::make_shared<const ClusterTable>(std::move(t)), o);
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  return std::move(r.value());
}

TEST(router, tau_zero_picks_the_top_worker_even_when_it_is_loaded) {
  auto sut = make({.policy = Policy::eldr, .tau = 0.0f});
  ASSERT_TRUE(sut->set_load(102, 50).is_ok());
  // Scores: [1, 2, 3, 0] / |.| -> worker 102 (slot 2) is on top.
  auto d = sut->route(layer0({1, 2, 3, 0}));
  ASSERT_TRUE(d.is_ok());
  EXPECT_EQ(d->worker_id, 102);
  EXPECT_EQ(d->band_size, 1u);
  EXPECT_NEAR(d->similarity, 3.0f / std::sqrt(14.0f), 1e-6f);
}

TEST(router, tau_one_is_join_shortest_queue) {
  auto sut = make({.policy = Policy::eldr, .tau = 1.0f});
  auto jsq = make({.policy = Policy::jsq});
  for (uint32_t i = 0; i < 20; ++i) {
    // Distinct loads (JSQ breaks ties at random, the band by index).
    const std::vector<uint32_t> loads{(i * 7) % 4, (i * 7 + 1) % 4, (i * 7 + 2) % 4,
                                      (i * 7 + 3) % 4};
    const auto f = layer0({int16_t(i % 5), 1, int16_t(i % 3), 2});
    auto a = sut->route(f, {.loads = loads});
    auto b = jsq->route(f, {.loads = loads});
    ASSERT_TRUE(a.is_ok() && b.is_ok());
    EXPECT_EQ(a->worker_id, b->worker_id);
    EXPECT_EQ(a->band_size, 4u);
  }
}

TEST(router, band_holds_workers_within_tau_of_the_best_and_jsq_picks_inside_it) {
  auto sut = make({.policy = Policy::eldr, .tau = 0.1f});
  // Scores 0.6, 0.55, 0.45, 0.37 (normalised from 60, 55, 45, 37).
  const auto f = layer0({60, 55, 45, 37});
  std::vector<float> scores(4);
  std::vector<uint8_t> band(4);
  auto n = sut->scores(f, scores, band);
  ASSERT_TRUE(n.is_ok());
  EXPECT_EQ(*n, 2u);
  EXPECT_EQ(band, (std::vector<uint8_t>{1, 1, 0, 0}));
  EXPECT_GT(scores[0], scores[1]);
  ASSERT_TRUE(sut->set_load(100, 4).is_ok());
  ASSERT_TRUE(sut->set_load(101, 1).is_ok());
  // Slot 1 is less loaded inside the band; slots 2, 3 are idle but outside it.
  auto d = sut->route(f);
  ASSERT_TRUE(d.is_ok());
  EXPECT_EQ(d->worker_id, 101);
  EXPECT_EQ(d->band_size, 2u);
}

TEST(router, band_ties_go_to_the_lowest_index) {
  auto sut = make({.policy = Policy::eldr, .tau = 0.1f});
  auto d = sut->route(layer0({1, 1, 1, 1}));
  ASSERT_TRUE(d.is_ok());
  EXPECT_EQ(d->worker_index, 0u);
  EXPECT_EQ(d->band_size, 4u);
}

TEST(router, min2_band_widens_a_single_member_band) {
  auto sut = make({.policy = Policy::eldr, .tau = 0.05f, .min2_band = true});
  const auto f = layer0({10, 5, 1, 0});
  std::vector<float> s(4);
  std::vector<uint8_t> band(4);
  ASSERT_EQ(*sut->scores(f, s, band), 2u);
  EXPECT_EQ(band, (std::vector<uint8_t>{1, 1, 0, 0}));
  ASSERT_TRUE(sut->set_load(100, 3).is_ok());
  EXPECT_EQ(sut->route(f)->worker_id, 101);
  // tau = 0 keeps the pure top-1 rule even with min2.
  auto pure = make({.policy = Policy::eldr, .tau = 0.0f, .min2_band = true});
  EXPECT_EQ(*pure->scores(f, s, band), 1u);
}

TEST(router, inflight_accounting_never_goes_negative) {
  auto sut = make({.policy = Policy::jsq});
  auto d = sut->route(layer0({1, 0, 0, 0}));
  ASSERT_TRUE(d.is_ok());
  EXPECT_EQ(sut->workers()[d->worker_index].inflight, 1);
  EXPECT_TRUE(sut->complete(d->worker_id).is_ok());
  EXPECT_EQ(sut->workers()[d->worker_index].inflight, 0);
  EXPECT_EQ(sut->complete(d->worker_id).code(), Errc::state);
  EXPECT_EQ(sut->complete(999).code(), Errc::not_found);
  EXPECT_EQ(sut->stats().completes_rejected, 2u);
  EXPECT_EQ(sut->workers()[d->worker_index].inflight, 0);
}

TEST(router, explicit_loads_drive_one_decision_without_touching_counters) {
  auto sut = make({.policy = Policy::jsq});
  const std::vector<uint32_t> loads{4, 4, 0, 4};
  auto d = sut->route(layer0({1, 0, 0, 0}), {.loads = loads});
  ASSERT_TRUE(d.is_ok());
  EXPECT_EQ(d->worker_id, 102);
  for (const auto& w : sut->workers()) EXPECT_EQ(w.inflight, 0);
  const std::vector<uint32_t> short_loads{1, 2};
  EXPECT_EQ(sut->route(layer0({1}), {.loads = short_loads}).status().code(),
            Errc::invalid_argument);
}

TEST(router, drained_and_removed_workers_never_get_requests) {
  for (Policy p : {Policy::eldr, Policy::round_robin, Policy::random, Policy::jsq, Policy::p2c}) {
    auto sut = make({.policy = p, .tau = 0.0f});
    ASSERT_TRUE(sut->drain_worker(100).is_ok());
    ASSERT_TRUE(sut->remove_worker(102).is_ok());
    for (int i = 0; i < 200; ++i) {
      auto d = sut->route(layer0({int16_t(i % 7), int16_t(i % 3), int16_t(i % 5), 1}));
      ASSERT_TRUE(d.is_ok());
      EXPECT_NE(d->worker_id, 100) << policy_name(p);
      EXPECT_NE(d->worker_id, 102) << policy_name(p);
    }
    std::vector<float> s(4);
    std::vector<uint8_t> band(4);
    ASSERT_TRUE(sut->scores(layer0({9, 0, 9, 0}), s, band).is_ok());
    EXPECT_EQ(band[0], 0);
    EXPECT_EQ(band[2], 0);
  }
}

TEST(router, no_active_worker_is_an_error_and_the_router_recovers) {
  auto sut = make();
  for (int32_t id : {100, 101, 102, 103}) ASSERT_TRUE(sut->remove_worker(id).is_ok());
  EXPECT_EQ(sut->route(layer0({1})).status().code(), Errc::no_worker);
  ASSERT_TRUE(sut->add_worker(7, 1u).is_ok());
  auto d = sut->route(layer0({1}));
  ASSERT_TRUE(d.is_ok());
  EXPECT_EQ(d->worker_id, 7);
  EXPECT_EQ(d->worker_index, 4u);  // tombstones keep their slots
}

TEST(router, added_worker_replicates_the_busiest_cluster) {
  auto sut = make({.policy = Policy::eldr, .tau = 0.0f});
  ASSERT_TRUE(sut->set_load(101, 10).is_ok());
  ASSERT_TRUE(sut->add_worker(42).is_ok());
  const auto workers = sut->workers();
  ASSERT_EQ(workers.size(), 5u);
  EXPECT_EQ(workers[4].cluster, 1u);
  // Same centroid as 101, far less loaded: tau = 0 now spreads over both.
  auto d = sut->route(layer0({0, 5, 0, 0}));
  EXPECT_EQ(d->worker_id, 42);
  EXPECT_EQ(d->band_size, 2u);
  EXPECT_EQ(sut->add_worker(42).code(), Errc::state);
  EXPECT_EQ(sut->add_worker(43, 9u).code(), Errc::out_of_range);
  EXPECT_EQ(sut->add_worker(-1).code(), Errc::invalid_argument);
}

TEST(router, drained_worker_can_be_reactivated) {
  auto sut = make({.policy = Policy::eldr, .tau = 0.0f});
  ASSERT_TRUE(sut->drain_worker(103).is_ok());
  EXPECT_NE(sut->route(layer0({0, 0, 0, 5}))->worker_id, 103);
  ASSERT_TRUE(sut->add_worker(103).is_ok());
  EXPECT_EQ(sut->route(layer0({0, 0, 0, 5}))->worker_id, 103);
}

TEST(router, worker_slots_are_bounded) {
  auto sut = make({.max_workers = 5});
  ASSERT_TRUE(sut->add_worker(1).is_ok());
  EXPECT_EQ(sut->add_worker(2).code(), Errc::capacity);
}

TEST(router, round_robin_cycles_over_active_workers) {
  auto sut = make({.policy = Policy::round_robin});
  std::vector<int32_t> seen;
  for (int i = 0; i < 8; ++i) seen.push_back(sut->route(layer0({1}))->worker_id);
  EXPECT_EQ(seen, (std::vector<int32_t>{100, 101, 102, 103, 100, 101, 102, 103}));
}

TEST(router, random_and_p2c_are_seeded_and_spread_load) {
  for (Policy p : {Policy::random, Policy::p2c, Policy::jsq}) {
    auto a = make({.policy = p, .seed = 7});
    auto b = make({.policy = p, .seed = 7});
    std::vector<int> hits(4, 0);
    for (int i = 0; i < 400; ++i) {
      auto da = a->route(layer0({1}), {.loads = std::vector<uint32_t>(4, 0)});
      auto db = b->route(layer0({1}), {.loads = std::vector<uint32_t>(4, 0)});
      ASSERT_EQ(da->worker_id, db->worker_id);
      ++hits[da->worker_index];
    }
    for (int h : hits) EXPECT_GT(h, 40) << policy_name(p);  // ~100 each
  }
}

TEST(router, p2c_takes_the_less_loaded_of_two) {
  auto sut = make({.policy = Policy::p2c, .seed = 3}, axis_table(2));
  ASSERT_TRUE(sut->set_load(100, 9).is_ok());
  for (int i = 0; i < 20; ++i) {
    auto d = sut->route(layer0({1}), {.loads = std::vector<uint32_t>{9, 1}});
    EXPECT_EQ(d->worker_id, 101);
    EXPECT_EQ(d->band_size, 2u);
  }
}

TEST(router, domain_policy_keeps_labels_in_their_pools) {
  ClusterTable t = axis_table(4);
  t.domains.names = {"code", "math", "rare"};
  t.domains.counts = {50, 40, 10};
  t.domains.worker_domain = {0, 0, 1, -1};
  auto sut = make({.policy = Policy::domain}, t);
  for (int i = 0; i < 50; ++i) {
    const int32_t code = sut->route(layer0({1}), {.label = "code"})->worker_id;
    EXPECT_TRUE(code == 100 || code == 101);
    EXPECT_EQ(sut->route(layer0({1}), {.label = "math"})->worker_id, 102);
    EXPECT_EQ(sut->route(layer0({1}), {.label = "rare"})->worker_id, 103);     // small domain
    EXPECT_EQ(sut->route(layer0({1}), {.label = "unknown"})->worker_id, 103);  // misc pool
  }
  EXPECT_EQ(
      Router::create(std::make_shared<const ClusterTable>(axis_table()), {.policy = Policy::domain})
          .status()
          .code(),
      Errc::invalid_argument);
}

TEST(router, malformed_footprints_are_rejected_counted_and_harmless) {
  auto sut = make();
  EXPECT_EQ(sut->route(std::vector<int16_t>(7, 1)).status().code(), Errc::shape_mismatch);
  EXPECT_EQ(sut->route(std::span<const int16_t>()).status().code(), Errc::shape_mismatch);
  EXPECT_EQ(sut->route(layer0({1, -3})).status().code(), Errc::out_of_range);
  EXPECT_EQ(sut->stats().rejected, 3u);
  for (const auto& w : sut->workers()) EXPECT_EQ(w.inflight, 0);
  EXPECT_TRUE(sut->route(layer0({1})).is_ok());
}

TEST(router, create_rejects_bad_options) {
  auto table = std::make_shared<const ClusterTable>(axis_table());
  EXPECT_EQ(Router::create(nullptr).status().code(), Errc::invalid_argument);
  EXPECT_EQ(Router::create(table, {.tau = NAN}).status().code(), Errc::invalid_argument);
  EXPECT_EQ(Router::create(table, {.tau = 3.0f}).status().code(), Errc::invalid_argument);
  EXPECT_EQ(Router::create(table, {.max_workers = 2}).status().code(), Errc::invalid_argument);
  ClusterTable broken = axis_table();
  broken.centroids[0] = 2.0f;  // not unit length
  EXPECT_FALSE(Router::create(std::make_shared<const ClusterTable>(broken)).is_ok());
}

TEST(router, swap_table_bumps_the_epoch_and_keeps_workers) {
  auto sut = make({.policy = Policy::eldr, .tau = 0.0f});
  EXPECT_EQ(sut->route(layer0({5}))->table_epoch, 1u);
  ClusterTable next = axis_table();
  std::swap(next.worker_ids[0], next.worker_ids[1]);  // 101 now owns cell 0
  next.worker_ids.push_back(200);                     // a new worker arrives with the table
  next.centroids.resize(5 * 8, 0.0f);
  next.centroids[4 * 8 + 4] = 1.0f;
  ASSERT_TRUE(sut->swap_table(std::make_shared<const ClusterTable>(next)).is_ok());
  auto d = sut->route(layer0({5}));
  EXPECT_EQ(d->table_epoch, 2u);
  EXPECT_EQ(d->worker_id, 101);
  EXPECT_EQ(sut->worker_slots(), 5u);
  ClusterTable other = axis_table();
  other.geometry.experts = 2;
  other.idf.resize(4);
  other.centroids.assign(16, 0.0f);
  for (int c = 0; c < 4; ++c) other.centroids[c * 4 + c] = 1.0f;
  EXPECT_EQ(sut->swap_table(std::make_shared<const ClusterTable>(other)).code(),
            Errc::shape_mismatch);
}

TEST(router, route_does_not_allocate) {
  if (!ELDR_COUNT_ALLOCS) GTEST_SKIP() << "allocation counting is off in sanitizer builds";
  for (Policy p : kAllPolicies) {
    ClusterTable t = axis_table();
    t.domains = {{"a"}, {1}, {0, 0, -1, -1}};
    auto sut = make({.policy = p}, t);
    const auto f = layer0({3, 1, 2, 0});
    ASSERT_TRUE(sut->route(f).is_ok());  // warm-up
    g_allocs = 0;
    g_count_allocs = true;
    for (int i = 0; i < 100; ++i) {
      auto d = sut->route(f, {.label = "a"});
      if (!d.is_ok()) break;
      (void)sut->complete(d->worker_id);
    }
    g_count_allocs = false;
    EXPECT_EQ(g_allocs, 0u) << policy_name(p);
  }
}

TEST(router, route_and_complete_by_id_do_not_allocate) {
  if (!ELDR_COUNT_ALLOCS) GTEST_SKIP() << "allocation counting is off in sanitizer builds";
  for (Policy p : {Policy::eldr_cost, Policy::jsq}) {
    auto sut = make({.policy = p, .max_inflight = 8});
    const auto f = layer0({3, 1, 2, 0});
    ASSERT_TRUE(sut->route(f, {.request_id = 1000}).is_ok());  // warm-up
    g_allocs = 0;
    g_count_allocs = true;
    uint64_t failures = 0;
    for (uint64_t id = 0; id < 100; ++id) {
      failures += !sut->route(f, {.request_id = id}).is_ok();
      if (id >= 4) failures += !sut->complete_request(id - 4).is_ok();
    }
    // Past the record pool (1 warm-up + 4 live + 3 of these fill it): routed
    // untracked, still without allocating.
    for (int i = 0; i < 8; ++i) failures += !sut->route(f).is_ok();
    g_count_allocs = false;
    EXPECT_EQ(g_allocs, 0u) << policy_name(p);
    EXPECT_EQ(failures, 0u);
    EXPECT_GT(sut->stats().untracked, 0u);
  }
}

TEST(router, concurrent_routes_and_completes_balance_out) {
  auto sut = make({.policy = Policy::eldr, .tau = 0.2f});
  constexpr int kThreads = 4, kPerThread = 2000;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        auto d = sut->route(layer0({int16_t(1 + (i + t) % 4), int16_t(i % 3), 1, 0}));
        if (!d.is_ok() || !sut->complete(d->worker_id).is_ok()) ++failures;
      }
    });
  threads.emplace_back([&] {  // membership churn while routing
    for (int i = 0; i < 200; ++i) {
      (void)sut->drain_worker(103);
      (void)sut->add_worker(103);
    }
  });
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(sut->stats().routed, uint64_t{kThreads} * kPerThread);
  for (const auto& w : sut->workers()) EXPECT_EQ(w.inflight, 0);
}

TEST(policy, names_round_trip) {
  for (Policy p : kAllPolicies) EXPECT_EQ(parse_policy(policy_name(p)), p);
  EXPECT_EQ(parse_policy("rr"), Policy::round_robin);
  EXPECT_FALSE(parse_policy("best"));
}

}  // namespace
}  // namespace eldr

namespace eldr {
namespace {

TEST(router, eldr_guard_spills_when_the_band_pick_runs_too_far_ahead) {
  auto sut = make({.policy = Policy::eldr_guard, .tau = 0.0f, .guard_slack = 2});
  // Worker 100 is the only band member; within the slack it keeps the request.
  auto d = sut->route(layer0({5}), {.loads = std::vector<uint32_t>{3, 1, 2, 1}});
  EXPECT_EQ(d->worker_id, 100);
  // Three above the least-loaded: spill to the least-loaded, the most similar of the tied.
  d = sut->route(layer0({5, 0, 1, 0}), {.loads = std::vector<uint32_t>{4, 1, 1, 2}});
  EXPECT_EQ(d->worker_id, 102);
  // The plain rule keeps piling on.
  auto plain = make({.policy = Policy::eldr, .tau = 0.0f});
  EXPECT_EQ(
      plain->route(layer0({5, 0, 1, 0}), {.loads = std::vector<uint32_t>{4, 1, 1, 2}})->worker_id,
      100);
}

}  // namespace
}  // namespace eldr
