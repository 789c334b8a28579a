// The embedded router through the C API: routing, loads, scores, in-flight
// accounting, membership, table swaps, policies, bad arguments, threads.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <thread>
#include <vector>

#include "capi_test_support.hpp"
#include "eldr/eldr.h"

namespace {

using namespace eldr::capi_test;

// The slot whose centroid is most similar to counts.
uint32_t best_slot(const eldr_table_t* table, const std::vector<int16_t>& counts) {
  float scores[2];
  EXPECT_EQ(eldr_table_score(table, counts.data(), kLayers, kExperts, scores, 2), ELDR_OK);
  return scores[0] >= scores[1] ? 0 : 1;
}

class capi_router : public ::testing::Test {
 protected:
  TablePtr table = fit_two_domain_table();
  std::vector<int16_t> a = domain_footprint(0);
  std::vector<int16_t> b = domain_footprint(1);
};

TEST_F(capi_router, routes_each_domain_to_its_own_worker) {
  RouterPtr sut = make_router(table.get());
  const std::vector<int32_t> ids = worker_ids(sut.get());
  int32_t wa = -1, wb = -1;
  ASSERT_EQ(route_worker(sut.get(), a.data(), kLayers, kExperts, &wa), ELDR_OK);
  ASSERT_EQ(route_worker(sut.get(), b.data(), kLayers, kExperts, &wb), ELDR_OK);
  EXPECT_EQ(wa, ids[best_slot(table.get(), a)]);
  EXPECT_EQ(wb, ids[best_slot(table.get(), b)]);
  EXPECT_NE(wa, wb);
}

TEST_F(capi_router, route_counts_in_flight_and_complete_releases_it) {
  RouterPtr sut = make_router(table.get());
  int32_t w = -1;
  ASSERT_EQ(route_worker(sut.get(), a.data(), kLayers, kExperts, &w), ELDR_OK);
  ASSERT_EQ(route_worker(sut.get(), a.data(), kLayers, kExperts, &w), ELDR_OK);
  const uint32_t slot = best_slot(table.get(), a);
  EXPECT_EQ(inflight(sut.get())[slot], 2u);
  ASSERT_EQ(eldr_router_complete_worker(sut.get(), w), ELDR_OK);
  ASSERT_EQ(eldr_router_complete_worker(sut.get(), w), ELDR_OK);
  EXPECT_EQ(inflight(sut.get())[slot], 0u);
}

TEST_F(capi_router, complete_never_takes_a_count_below_zero) {
  RouterPtr sut = make_router(table.get());
  const std::vector<int32_t> ids = worker_ids(sut.get());
  EXPECT_EQ(eldr_router_complete_worker(sut.get(), ids[0]), ELDR_E_STATE);
  EXPECT_TRUE(message_names("eldr_router_complete_worker"));
  EXPECT_EQ(inflight(sut.get())[0], 0u);
  EXPECT_EQ(eldr_router_complete_worker(sut.get(), 999), ELDR_E_NOT_FOUND);
  EXPECT_EQ(eldr_router_complete_worker(sut.get(), -1), ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_router_complete_worker(nullptr, 0), ELDR_E_INVALID_ARGUMENT);
}

TEST_F(capi_router, route_fills_the_whole_decision) {
  RouterPtr sut = make_router(table.get());
  eldr_decision_t d = ELDR_DECISION_INIT;
  ASSERT_EQ(eldr_router_route(sut.get(), b.data(), kLayers, kExperts, nullptr, 0, &d), ELDR_OK);
  const uint32_t slot = best_slot(table.get(), b);
  float scores[2];
  ASSERT_EQ(eldr_table_score(table.get(), b.data(), kLayers, kExperts, scores, 2), ELDR_OK);
  EXPECT_EQ(d.version, static_cast<uint32_t>(ELDR_DECISION_VERSION));
  EXPECT_EQ(d.worker, worker_ids(sut.get())[slot]);
  EXPECT_NEAR(d.similarity, scores[slot], 1e-5);
  EXPECT_EQ(d.band_size, 1u);  // disjoint domains: the other worker is far outside tau
  EXPECT_EQ(d.table_epoch, 1u);
  EXPECT_EQ(d.policy, static_cast<uint32_t>(ELDR_POLICY_ELDR));
  EXPECT_EQ(d.status, ELDR_OK);
  EXPECT_EQ(d.latency_ns, 0u);
  EXPECT_EQ(inflight(sut.get())[slot], 1u);
}

TEST_F(capi_router, route_loads_override_in_flight_for_that_decision_only) {
  // tau = 2: every worker is in the band, so the least loaded one wins.
  RouterPtr sut = make_router(table.get(), ELDR_POLICY_ELDR, 2.0f);
  const uint32_t preferred = best_slot(table.get(), a);
  uint32_t loads[2] = {0, 0};
  loads[preferred] = 10;
  eldr_decision_t d = ELDR_DECISION_INIT;
  ASSERT_EQ(eldr_router_route(sut.get(), a.data(), kLayers, kExperts, loads, 2, &d), ELDR_OK);
  EXPECT_EQ(d.worker, worker_ids(sut.get())[1 - preferred]);
  EXPECT_EQ(d.band_size, 2u);
  const std::vector<uint32_t> counted = inflight(sut.get());
  EXPECT_EQ(counted[0] + counted[1], 0u);  // loads given: the router's counters stay
}

TEST_F(capi_router, set_load_steers_a_wide_band_to_the_less_loaded_worker) {
  RouterPtr sut = make_router(table.get(), ELDR_POLICY_ELDR, 2.0f);
  const std::vector<int32_t> ids = worker_ids(sut.get());
  const uint32_t preferred = best_slot(table.get(), a);
  ASSERT_EQ(eldr_router_set_load(sut.get(), ids[preferred], 5), ELDR_OK);
  int32_t w = -1;
  ASSERT_EQ(route_worker(sut.get(), a.data(), kLayers, kExperts, &w), ELDR_OK);
  EXPECT_EQ(w, ids[1 - preferred]);
  EXPECT_EQ(inflight(sut.get())[preferred], 5u);
  EXPECT_EQ(eldr_router_set_load(sut.get(), 999, 1), ELDR_E_NOT_FOUND);
  EXPECT_EQ(eldr_router_set_load(sut.get(), -3, 1), ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_router_set_load(nullptr, 0, 1), ELDR_E_INVALID_ARGUMENT);
}

TEST_F(capi_router, scores_match_the_table_and_mark_the_band) {
  RouterPtr sut = make_router(table.get());
  float scores[2] = {-1, -1}, expected[2];
  uint8_t band[2] = {9, 9};
  ASSERT_EQ(eldr_router_score(sut.get(), a.data(), kLayers, kExperts, scores, band, 2), ELDR_OK);
  ASSERT_EQ(eldr_table_score(table.get(), a.data(), kLayers, kExperts, expected, 2), ELDR_OK);
  const uint32_t preferred = best_slot(table.get(), a);
  EXPECT_NEAR(scores[0], expected[0], 1e-5);
  EXPECT_NEAR(scores[1], expected[1], 1e-5);
  EXPECT_EQ(band[preferred], 1);
  EXPECT_EQ(band[1 - preferred], 0);
  const std::vector<uint32_t> counted = inflight(sut.get());
  EXPECT_EQ(counted[0] + counted[1], 0u);  // scores never count a request
}

TEST_F(capi_router, scores_reject_bad_arguments_and_leave_out_alone) {
  RouterPtr sut = make_router(table.get());
  float scores[3] = {7, 7, 7};
  uint8_t band[3] = {9, 9, 9};
  EXPECT_EQ(eldr_router_score(sut.get(), a.data(), kLayers, kExperts, scores, band, 3),
            ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_router_score(sut.get(), a.data(), kLayers, kExperts, scores, band, 0),
            ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_router_score(sut.get(), a.data(), kLayers, kExperts, nullptr, band, 2),
            ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_router_score(sut.get(), a.data(), kLayers, kExperts, scores, nullptr, 2),
            ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_router_score(sut.get(), nullptr, kLayers, kExperts, scores, band, 2),
            ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_router_score(sut.get(), a.data(), kLayers, 4, scores, band, 2),
            ELDR_E_SHAPE_MISMATCH);
  EXPECT_EQ(eldr_router_score(nullptr, a.data(), kLayers, kExperts, scores, band, 2),
            ELDR_E_INVALID_ARGUMENT);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(scores[i], 7.0f);
    EXPECT_EQ(band[i], 9);
  }
}

TEST_F(capi_router, route_rejects_garbage_and_leaves_the_worker_alone) {
  RouterPtr sut = make_router(table.get());
  int32_t w = -77;
  EXPECT_EQ(route_worker(nullptr, a.data(), kLayers, kExperts, &w), ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(route_worker(sut.get(), nullptr, kLayers, kExperts, &w), ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(route_worker(sut.get(), a.data(), kLayers, kExperts, nullptr), ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(route_worker(sut.get(), a.data(), 0, kExperts, &w), ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(route_worker(sut.get(), a.data(), kLayers, 0, &w), ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(route_worker(sut.get(), a.data(), UINT32_MAX, UINT32_MAX, &w), ELDR_E_INVALID_ARGUMENT);
  // Same cell count, other shape: still a mismatch.
  EXPECT_EQ(route_worker(sut.get(), a.data(), kExperts, kLayers, &w), ELDR_E_SHAPE_MISMATCH);
  EXPECT_TRUE(message_names("eldr_router_route"));
  EXPECT_EQ(route_worker(sut.get(), a.data(), kLayers + 1, kExperts, &w), ELDR_E_SHAPE_MISMATCH);
  std::vector<int16_t> negative = a;
  negative[5] = INT16_MIN;
  EXPECT_EQ(route_worker(sut.get(), negative.data(), kLayers, kExperts, &w), ELDR_E_OUT_OF_RANGE);
  EXPECT_EQ(w, -77);
  const std::vector<uint32_t> counted = inflight(sut.get());
  EXPECT_EQ(counted[0] + counted[1], 0u);
}

TEST_F(capi_router, route_rejects_bad_versions_and_loads) {
  RouterPtr sut = make_router(table.get());
  eldr_decision_t d = ELDR_DECISION_INIT;
  d.version = 0;
  EXPECT_EQ(eldr_router_route(sut.get(), a.data(), kLayers, kExperts, nullptr, 0, &d),
            ELDR_E_INVALID_ARGUMENT);
  d.version = ELDR_DECISION_VERSION + 1;
  EXPECT_EQ(eldr_router_route(sut.get(), a.data(), kLayers, kExperts, nullptr, 0, &d),
            ELDR_E_UNSUPPORTED);
  EXPECT_TRUE(message_names("eldr_router_route"));
  d.version = ELDR_DECISION_VERSION;
  uint32_t loads[3] = {0, 0, 0};
  EXPECT_EQ(eldr_router_route(sut.get(), a.data(), kLayers, kExperts, nullptr, 2, &d),
            ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_router_route(sut.get(), a.data(), kLayers, kExperts, loads, 3, &d),
            ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_router_route(sut.get(), a.data(), kLayers, kExperts, loads, 0, &d),
            ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_router_route(sut.get(), a.data(), kLayers, kExperts, loads, 2, nullptr),
            ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(d.worker, -1);
}

TEST_F(capi_router, drain_remove_and_add_change_who_gets_requests) {
  RouterPtr sut = make_router(table.get());
  const std::vector<int32_t> ids = worker_ids(sut.get());
  const int32_t preferred = ids[best_slot(table.get(), a)];
  const int32_t other = ids[1 - best_slot(table.get(), a)];
  int32_t w = -1;
  ASSERT_EQ(eldr_router_drain_worker(sut.get(), preferred), ELDR_OK);
  ASSERT_EQ(route_worker(sut.get(), a.data(), kLayers, kExperts, &w), ELDR_OK);
  EXPECT_EQ(w, other);
  ASSERT_EQ(eldr_router_remove_worker(sut.get(), other), ELDR_OK);
  EXPECT_EQ(route_worker(sut.get(), a.data(), kLayers, kExperts, &w), ELDR_E_NO_WORKER);
  EXPECT_TRUE(message_names("eldr_router_route"));
  // A removed worker keeps its slot (positions never shift) in state removed.
  uint32_t n = 0;
  ASSERT_EQ(eldr_router_get_worker_slots(sut.get(), &n), ELDR_OK);
  ASSERT_EQ(n, 2u);
  int32_t slot_ids[2];
  uint32_t states[2];
  ASSERT_EQ(eldr_router_get_workers(sut.get(), slot_ids, states, nullptr, 2), ELDR_OK);
  const uint32_t other_slot = slot_ids[0] == other ? 0 : 1;
  EXPECT_EQ(states[other_slot], ELDR_WORKER_STATE_REMOVED);
  EXPECT_EQ(states[1 - other_slot], ELDR_WORKER_STATE_DRAINING);
  // Re-activating the drained worker routes to it again.
  ASSERT_EQ(eldr_router_add_worker(sut.get(), preferred), ELDR_OK);
  ASSERT_EQ(route_worker(sut.get(), a.data(), kLayers, kExperts, &w), ELDR_OK);
  EXPECT_EQ(w, preferred);
  EXPECT_EQ(eldr_router_add_worker(sut.get(), preferred), ELDR_E_STATE);  // already active
  EXPECT_EQ(eldr_router_drain_worker(sut.get(), 999), ELDR_E_NOT_FOUND);
  EXPECT_EQ(eldr_router_remove_worker(sut.get(), 999), ELDR_E_NOT_FOUND);
  EXPECT_EQ(eldr_router_add_worker(sut.get(), -1), ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_router_drain_worker(nullptr, 0), ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_router_remove_worker(nullptr, 0), ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_router_add_worker(nullptr, 0), ELDR_E_INVALID_ARGUMENT);
}

TEST_F(capi_router, add_worker_with_a_new_id_takes_a_new_slot) {
  RouterPtr sut = make_router(table.get());
  ASSERT_EQ(eldr_router_add_worker(sut.get(), 42), ELDR_OK);
  const std::vector<int32_t> ids = worker_ids(sut.get());
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids[2], 42);
  // The score and loads arrays follow the slot count.
  float scores[3];
  uint8_t band[3];
  EXPECT_EQ(eldr_router_score(sut.get(), a.data(), kLayers, kExperts, scores, band, 3), ELDR_OK);
  uint32_t loads[3] = {0, 0, 0};
  eldr_decision_t d = ELDR_DECISION_INIT;
  EXPECT_EQ(eldr_router_route(sut.get(), a.data(), kLayers, kExperts, loads, 3, &d), ELDR_OK);
}

TEST_F(capi_router, workers_needs_the_exact_slot_count) {
  RouterPtr sut = make_router(table.get());
  int32_t ids[3] = {-9, -9, -9};
  EXPECT_EQ(eldr_router_get_workers(sut.get(), ids, nullptr, nullptr, 3), ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_router_get_workers(sut.get(), nullptr, nullptr, nullptr, 2),
            ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_router_get_workers(nullptr, ids, nullptr, nullptr, 2), ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(ids[0], -9);
  uint32_t n = 5;
  EXPECT_EQ(eldr_router_get_worker_slots(nullptr, &n), ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_router_get_worker_slots(sut.get(), nullptr), ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(n, 5u);
}

TEST_F(capi_router, swap_table_moves_later_decisions_to_the_new_epoch) {
  RouterPtr sut = make_router(table.get());
  TablePtr next = fit_two_domain_table(2);
  eldr_decision_t d = ELDR_DECISION_INIT;
  ASSERT_EQ(eldr_router_route(sut.get(), a.data(), kLayers, kExperts, nullptr, 0, &d), ELDR_OK);
  EXPECT_EQ(d.table_epoch, 1u);
  ASSERT_EQ(eldr_router_swap_table(sut.get(), next.get()), ELDR_OK);
  next.reset();  // the router holds its own reference
  ASSERT_EQ(eldr_router_route(sut.get(), a.data(), kLayers, kExperts, nullptr, 0, &d), ELDR_OK);
  EXPECT_EQ(d.table_epoch, 2u);
  EXPECT_EQ(eldr_router_swap_table(sut.get(), nullptr), ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_router_swap_table(nullptr, table.get()), ELDR_E_INVALID_ARGUMENT);
}

TEST_F(capi_router, swap_table_of_another_geometry_is_a_shape_mismatch) {
  RouterPtr sut = make_router(table.get());
  std::vector<int16_t> wide(6 * 3 * 4, 1);  // 6 requests of 3x4
  for (size_t i = 0; i < wide.size(); i += 5) wide[i] = 3;
  eldr_fit_options_t options = ELDR_FIT_OPTIONS_INIT;
  options.num_workers = 2;
  options.threads = 1;
  eldr_table_t* other = nullptr;
  ASSERT_EQ(eldr_table_fit(wide.data(), nullptr, 6, 3, 4, 1, &options, &other), ELDR_OK)
      << eldr_last_error_message();
  TablePtr owner(other);
  EXPECT_EQ(eldr_router_swap_table(sut.get(), other), ELDR_E_SHAPE_MISMATCH);
  EXPECT_TRUE(message_names("eldr_router_swap_table"));
}

TEST_F(capi_router, the_router_outlives_the_table_handle) {
  RouterPtr sut = make_router(table.get());
  table.reset();
  int32_t w = -1;
  EXPECT_EQ(route_worker(sut.get(), a.data(), kLayers, kExperts, &w), ELDR_OK);
  EXPECT_GE(w, 0);
}

TEST_F(capi_router, every_policy_routes_to_a_worker_of_the_table) {
  for (uint32_t policy :
       {ELDR_POLICY_ELDR, ELDR_POLICY_ROUND_ROBIN, ELDR_POLICY_RANDOM, ELDR_POLICY_JSQ,
        ELDR_POLICY_P2C, ELDR_POLICY_ELDR_GUARD, ELDR_POLICY_ELDR_COST}) {
    RouterPtr sut = make_router(table.get(), policy);
    ASSERT_TRUE(sut) << policy;
    for (int i = 0; i < 8; ++i) {
      eldr_decision_t d = ELDR_DECISION_INIT;
      ASSERT_EQ(
          eldr_router_route(sut.get(), (i % 2 ? a : b).data(), kLayers, kExperts, nullptr, 0, &d),
          ELDR_OK)
          << policy;
      EXPECT_TRUE(d.worker == 0 || d.worker == 1) << policy;
      EXPECT_EQ(d.policy, policy);
    }
  }
  // Round robin alternates whatever the footprint.
  RouterPtr rr = make_router(table.get(), ELDR_POLICY_ROUND_ROBIN);
  int32_t w1 = -1, w2 = -1;
  ASSERT_EQ(route_worker(rr.get(), a.data(), kLayers, kExperts, &w1), ELDR_OK);
  ASSERT_EQ(route_worker(rr.get(), a.data(), kLayers, kExperts, &w2), ELDR_OK);
  EXPECT_NE(w1, w2);
}

TEST_F(capi_router, new_rejects_bad_options) {
  eldr_router_t* sentinel = reinterpret_cast<eldr_router_t*>(uintptr_t{0x1});
  eldr_router_t* out = sentinel;
  eldr_router_options_t o = ELDR_ROUTER_OPTIONS_INIT;
  EXPECT_EQ(eldr_router_new(nullptr, &o, &out), ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_router_new(table.get(), &o, nullptr), ELDR_E_INVALID_ARGUMENT);
  o.version = 0;
  EXPECT_EQ(eldr_router_new(table.get(), &o, &out), ELDR_E_INVALID_ARGUMENT);
  o.version = ELDR_ROUTER_OPTIONS_VERSION + 1;
  EXPECT_EQ(eldr_router_new(table.get(), &o, &out), ELDR_E_UNSUPPORTED);
  eldr_router_options_init(&o);
  o.policy = 99;
  EXPECT_EQ(eldr_router_new(table.get(), &o, &out), ELDR_E_UNSUPPORTED);
  EXPECT_TRUE(message_names("eldr_router_new"));
  // The domain policy needs a table fitted with labels.
  o.policy = ELDR_POLICY_DOMAIN;
  EXPECT_EQ(eldr_router_new(table.get(), &o, &out), ELDR_E_INVALID_ARGUMENT);
  o.policy = ELDR_POLICY_ELDR;
  o.tau = NAN;
  EXPECT_EQ(eldr_router_new(table.get(), &o, &out), ELDR_E_INVALID_ARGUMENT);
  o.tau = 3.0f;
  EXPECT_EQ(eldr_router_new(table.get(), &o, &out), ELDR_E_INVALID_ARGUMENT);
  o.tau = -1.0f;
  o.max_workers = 0;
  EXPECT_EQ(eldr_router_new(table.get(), &o, &out), ELDR_E_INVALID_ARGUMENT);
  o.max_workers = 1;  // fewer slots than the table's workers
  EXPECT_EQ(eldr_router_new(table.get(), &o, &out), ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(out, sentinel);
  // NULL options: the defaults.
  out = nullptr;
  ASSERT_EQ(eldr_router_new(table.get(), nullptr, &out), ELDR_OK);
  eldr_router_free(out);
}

TEST_F(capi_router, concurrent_routes_and_completes_keep_the_books) {
  RouterPtr sut = make_router(table.get(), ELDR_POLICY_ELDR, 2.0f);
  constexpr int kThreads = 4, kRounds = 500;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const std::vector<int16_t>& counts = t % 2 ? a : b;
      for (int i = 0; i < kRounds; ++i) {
        int32_t w = -1;
        if (route_worker(sut.get(), counts.data(), kLayers, kExperts, &w) != ELDR_OK ||
            eldr_router_complete_worker(sut.get(), w) != ELDR_OK) {
          failures.fetch_add(1);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  const std::vector<uint32_t> counted = inflight(sut.get());
  EXPECT_EQ(counted[0] + counted[1], 0u);
}

}  // namespace
