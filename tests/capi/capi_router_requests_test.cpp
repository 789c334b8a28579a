// The embedded router's request records and step model through the C API:
// options versions 1 and 2, the eldr_cost default, route by id and complete
// by id (unknown and repeated ids), complete(worker) oldest first, engine
// reports, stats, and the bad arguments of every one of these calls.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "capi_test_support.hpp"
#include "eldr/eldr.h"

namespace {

using namespace eldr::capi_test;

RouterPtr new_router(const eldr_table_t* table, const eldr_router_options_t& options) {
  eldr_router_t* router = nullptr;
  const eldr_status_t s = eldr_router_new(table, &options, &router);
  EXPECT_EQ(s, ELDR_OK) << eldr_last_error_message();
  return RouterPtr(router);
}

eldr_router_stats_t stats_of(const eldr_router_t* router) {
  eldr_router_stats_t st = ELDR_ROUTER_STATS_INIT;
  EXPECT_EQ(eldr_router_get_stats(router, &st), ELDR_OK) << eldr_last_error_message();
  return st;
}

// The slot whose centroid is most similar to counts.
uint32_t best_slot(const eldr_table_t* table, const std::vector<int16_t>& counts) {
  float scores[2];
  EXPECT_EQ(eldr_table_score(table, counts.data(), kLayers, kExperts, scores, 2), ELDR_OK);
  return scores[0] >= scores[1] ? 0 : 1;
}

eldr_worker_report_t report_of(int32_t worker, uint32_t batch_size, float step_ms) {
  eldr_worker_report_t r = ELDR_WORKER_REPORT_INIT;
  r.worker = worker;
  r.batch_size = batch_size;
  r.step_ms = step_ms;
  return r;
}

class capi_router_requests : public ::testing::Test {
 protected:
  TablePtr table = fit_two_domain_table();
  std::vector<int16_t> a = domain_footprint(0);
  std::vector<int16_t> b = domain_footprint(1);

  // Pure locality (tau 0): every request of a domain lands on one worker.
  RouterPtr locality_router() { return make_router(table.get(), ELDR_POLICY_ELDR, 0.0f); }
  int32_t preferred(const RouterPtr& router) {
    return worker_ids(router.get())[best_slot(table.get(), a)];
  }
};

TEST_F(capi_router_requests, init_selects_eldr_cost_and_unset_step_constants) {
  eldr_router_options_t o;
  std::memset(&o, 0xab, sizeof o);
  eldr_router_options_init(&o);
  const eldr_router_options_t macro = ELDR_ROUTER_OPTIONS_INIT;
  EXPECT_EQ(std::memcmp(&o, &macro, sizeof o), 0);
  EXPECT_EQ(o.version, 1u);
  EXPECT_EQ(o.policy, static_cast<uint32_t>(ELDR_POLICY_ELDR_COST));
  EXPECT_LT(o.t0_ms, 0.0);
  EXPECT_LT(o.tseq_ms, 0.0);
  EXPECT_LT(o.alpha_us, 0.0);
  EXPECT_EQ(o.max_batch, 0u);
  EXPECT_EQ(o.fit_step_cost, 1u);
  EXPECT_EQ(o.max_inflight, 0u);
  eldr_router_options_init(nullptr);  // no-op
  EXPECT_STREQ(eldr_policy_name(ELDR_POLICY_ELDR_COST), "eldr_cost");
  EXPECT_EQ(eldr_policy_name(ELDR_POLICY_ELDR_COST + 1), nullptr);
}

TEST_F(capi_router_requests, default_options_route_with_eldr_cost) {
  for (const bool null_options : {true, false}) {
    eldr_router_t* raw = nullptr;
    eldr_router_options_t o;
    eldr_router_options_init(&o);
    ASSERT_EQ(eldr_router_new(table.get(), null_options ? nullptr : &o, &raw), ELDR_OK);
    RouterPtr sut(raw);
    eldr_decision_t d = ELDR_DECISION_INIT;
    ASSERT_EQ(eldr_router_route(sut.get(), a.data(), kLayers, kExperts, nullptr, 0, &d), ELDR_OK);
    EXPECT_EQ(d.policy, static_cast<uint32_t>(ELDR_POLICY_ELDR_COST)) << null_options;
  }
}

TEST_F(capi_router_requests, a_zeroed_struct_keeps_meaning_the_eldr_policy) {
  eldr_router_options_t o;
  std::memset(&o, 0, sizeof o);
  o.version = ELDR_ROUTER_OPTIONS_VERSION;
  o.max_workers = 256;  // 0 is refused: the zeroed struct is the caller's choice
  RouterPtr sut = new_router(table.get(), o);
  ASSERT_TRUE(sut);
  eldr_decision_t d = ELDR_DECISION_INIT;
  ASSERT_EQ(eldr_router_route(sut.get(), a.data(), kLayers, kExperts, nullptr, 0, &d), ELDR_OK);
  EXPECT_EQ(d.policy, static_cast<uint32_t>(ELDR_POLICY_ELDR));
  // Zero step constants are "all three >= 0": set, as zeros.
  const eldr_router_stats_t st = stats_of(sut.get());
  EXPECT_EQ(st.t0_ms, 0.0);
  EXPECT_EQ(st.tseq_ms, 0.0);
  EXPECT_EQ(st.alpha_us, 0.0);
}

TEST_F(capi_router_requests, step_constants_are_used_as_given) {
  eldr_router_options_t o = ELDR_ROUTER_OPTIONS_INIT;
  o.t0_ms = 1.5;
  o.tseq_ms = 0.25;
  o.alpha_us = 2.0;
  RouterPtr sut = new_router(table.get(), o);
  ASSERT_TRUE(sut);
  eldr_router_stats_t st = stats_of(sut.get());
  EXPECT_EQ(st.t0_ms, 1.5);
  EXPECT_EQ(st.tseq_ms, 0.25);
  EXPECT_EQ(st.alpha_us, 2.0);
  // Zeros are constants too (all >= 0), and max_batch may be given with them.
  o.t0_ms = o.tseq_ms = o.alpha_us = 0.0;
  o.max_batch = 16;
  RouterPtr zeros = new_router(table.get(), o);
  ASSERT_TRUE(zeros);
  st = stats_of(zeros.get());
  EXPECT_EQ(st.t0_ms + st.tseq_ms + st.alpha_us, 0.0);
}

TEST_F(capi_router_requests, a_mix_of_set_and_unset_constants_is_rejected) {
  eldr_router_t* sentinel = reinterpret_cast<eldr_router_t*>(uintptr_t{0x1});
  eldr_router_t* out = sentinel;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const double bad[][3] = {{1.0, -1.0, -1.0}, {-1.0, 0.5, -1.0}, {-1.0, -1.0, 2.0},
                           {1.0, 0.5, -1.0},  {nan, 0.5, 2.0},   {1.0, nan, 2.0},
                           {nan, nan, nan},   {inf, 0.5, 2.0},   {1.0, 0.5, inf}};
  for (const auto& c : bad) {
    eldr_router_options_t o = ELDR_ROUTER_OPTIONS_INIT;
    o.t0_ms = c[0];
    o.tseq_ms = c[1];
    o.alpha_us = c[2];
    EXPECT_EQ(eldr_router_new(table.get(), &o, &out), ELDR_E_INVALID_ARGUMENT)
        << c[0] << " " << c[1] << " " << c[2];
    EXPECT_TRUE(message_names("eldr_router_new"));
  }
  // max_batch without the constants it goes with.
  eldr_router_options_t o = ELDR_ROUTER_OPTIONS_INIT;
  o.max_batch = 32;
  EXPECT_EQ(eldr_router_new(table.get(), &o, &out), ELDR_E_INVALID_ARGUMENT);
  // max_inflight past the core's bound.
  o = ELDR_ROUTER_OPTIONS_INIT;
  o.max_inflight = UINT32_MAX;
  EXPECT_EQ(eldr_router_new(table.get(), &o, &out), ELDR_E_INVALID_ARGUMENT);
  // Policy 7 is known, 8 is not.
  o = ELDR_ROUTER_OPTIONS_INIT;
  o.policy = ELDR_POLICY_ELDR_COST + 1;
  EXPECT_EQ(eldr_router_new(table.get(), &o, &out), ELDR_E_UNSUPPORTED);
  EXPECT_EQ(out, sentinel);
}

TEST_F(capi_router_requests, route_request_and_complete_keep_the_books) {
  RouterPtr sut = locality_router();
  const int32_t w = preferred(sut);
  const uint32_t slot = best_slot(table.get(), a);
  eldr_decision_t d = ELDR_DECISION_INIT;
  ASSERT_EQ(eldr_router_route_request(sut.get(), 11, a.data(), kLayers, kExperts, &d), ELDR_OK);
  EXPECT_EQ(d.worker, w);
  EXPECT_EQ(d.policy, static_cast<uint32_t>(ELDR_POLICY_ELDR));
  EXPECT_EQ(d.table_epoch, 1u);
  EXPECT_EQ(d.status, ELDR_OK);
  ASSERT_EQ(eldr_router_route_request(sut.get(), 12, a.data(), kLayers, kExperts, &d), ELDR_OK);
  EXPECT_EQ(inflight(sut.get())[slot], 2u);
  ASSERT_EQ(eldr_router_complete(sut.get(), 11), ELDR_OK);
  EXPECT_EQ(inflight(sut.get())[slot], 1u);

  // Completed already, or never routed: NOT_FOUND, counted, nothing else changes.
  EXPECT_EQ(eldr_router_complete(sut.get(), 11), ELDR_E_NOT_FOUND);
  EXPECT_TRUE(message_names("eldr_router_complete"));
  EXPECT_EQ(eldr_router_complete(sut.get(), 999), ELDR_E_NOT_FOUND);
  EXPECT_EQ(inflight(sut.get())[slot], 1u);
  eldr_router_stats_t st = stats_of(sut.get());
  EXPECT_EQ(st.routed, 2u);
  EXPECT_EQ(st.completes_unknown, 2u);
  EXPECT_EQ(st.completes_rejected, 2u);

  ASSERT_EQ(eldr_router_complete(sut.get(), 12), ELDR_OK);
  EXPECT_EQ(inflight(sut.get())[slot], 0u);
  // A finished id may be used again.
  ASSERT_EQ(eldr_router_route_request(sut.get(), 11, a.data(), kLayers, kExperts, &d), ELDR_OK);
  ASSERT_EQ(eldr_router_complete(sut.get(), 11), ELDR_OK);
  st = stats_of(sut.get());
  EXPECT_EQ(st.routed, 3u);
  EXPECT_EQ(st.completes_unknown, 2u);
}

TEST_F(capi_router_requests, route_request_refuses_an_id_already_in_flight) {
  RouterPtr sut = locality_router();
  const uint32_t slot = best_slot(table.get(), a);
  eldr_decision_t d = ELDR_DECISION_INIT;
  ASSERT_EQ(eldr_router_route_request(sut.get(), 5, a.data(), kLayers, kExperts, &d), ELDR_OK);
  eldr_decision_t again = ELDR_DECISION_INIT;
  EXPECT_EQ(eldr_router_route_request(sut.get(), 5, b.data(), kLayers, kExperts, &again),
            ELDR_E_STATE);
  EXPECT_TRUE(message_names("eldr_router_route_request"));
  EXPECT_EQ(again.worker, -1);  // untouched
  const std::vector<uint32_t> counted = inflight(sut.get());
  EXPECT_EQ(counted[slot], 1u);
  EXPECT_EQ(counted[1 - slot], 0u);
  const eldr_router_stats_t st = stats_of(sut.get());
  EXPECT_EQ(st.routed, 1u);
  EXPECT_EQ(st.rejected, 1u);
}

TEST_F(capi_router_requests, complete_worker_takes_the_oldest_request_on_it) {
  RouterPtr sut = locality_router();
  const int32_t w = preferred(sut);
  eldr_decision_t d = ELDR_DECISION_INIT;
  for (uint64_t id : {21u, 22u, 23u})
    ASSERT_EQ(eldr_router_route_request(sut.get(), id, a.data(), kLayers, kExperts, &d), ELDR_OK);
  ASSERT_EQ(d.worker, w);
  ASSERT_EQ(eldr_router_complete_worker(sut.get(), w), ELDR_OK);  // takes 21
  EXPECT_EQ(eldr_router_complete(sut.get(), 21), ELDR_E_NOT_FOUND);
  ASSERT_EQ(eldr_router_complete(sut.get(), 23), ELDR_OK);
  ASSERT_EQ(eldr_router_complete_worker(sut.get(), w), ELDR_OK);  // takes 22
  EXPECT_EQ(eldr_router_complete(sut.get(), 22), ELDR_E_NOT_FOUND);
  EXPECT_EQ(eldr_router_complete_worker(sut.get(), w), ELDR_E_STATE);  // nothing left
  const eldr_router_stats_t st = stats_of(sut.get());
  EXPECT_EQ(st.completes_unknown, 2u);
  EXPECT_EQ(st.completes_rejected, 3u);
  EXPECT_EQ(inflight(sut.get())[best_slot(table.get(), a)], 0u);
}

TEST_F(capi_router_requests, routes_past_max_inflight_are_counted_but_untracked) {
  eldr_router_options_t o = ELDR_ROUTER_OPTIONS_INIT;
  o.policy = ELDR_POLICY_ELDR;
  o.tau = 0.0f;
  o.max_inflight = 1;
  RouterPtr sut = new_router(table.get(), o);
  ASSERT_TRUE(sut);
  const uint32_t slot = best_slot(table.get(), a);
  eldr_decision_t d = ELDR_DECISION_INIT;
  ASSERT_EQ(eldr_router_route_request(sut.get(), 1, a.data(), kLayers, kExperts, &d), ELDR_OK);
  ASSERT_EQ(eldr_router_route_request(sut.get(), 2, a.data(), kLayers, kExperts, &d), ELDR_OK);
  EXPECT_EQ(inflight(sut.get())[slot], 2u);
  eldr_router_stats_t st = stats_of(sut.get());
  EXPECT_EQ(st.routed, 2u);
  EXPECT_EQ(st.untracked, 1u);
  // The untracked request has no record: its id is unknown.
  EXPECT_EQ(eldr_router_complete(sut.get(), 2), ELDR_E_NOT_FOUND);
  EXPECT_EQ(eldr_router_complete(sut.get(), 1), ELDR_OK);
  EXPECT_EQ(inflight(sut.get())[slot], 1u);
  // A caller that keeps no ids still completes it by worker.
  EXPECT_EQ(eldr_router_complete_worker(sut.get(), d.worker), ELDR_OK);
  EXPECT_EQ(inflight(sut.get())[slot], 0u);
}

TEST_F(capi_router_requests, a_report_sets_the_in_flight_count_routes_add_to) {
  RouterPtr sut = locality_router();
  const int32_t w = preferred(sut);
  const uint32_t slot = best_slot(table.get(), a);
  eldr_decision_t d = ELDR_DECISION_INIT;
  ASSERT_EQ(eldr_router_route_request(sut.get(), 1, a.data(), kLayers, kExperts, &d), ELDR_OK);
  eldr_worker_report_t r = report_of(w, 5, 0.0f);
  ASSERT_EQ(eldr_router_report(sut.get(), &r), ELDR_OK) << eldr_last_error_message();
  EXPECT_EQ(inflight(sut.get())[slot], 5u);  // the engine's view takes precedence
  ASSERT_EQ(eldr_router_route_request(sut.get(), 2, a.data(), kLayers, kExperts, &d), ELDR_OK);
  EXPECT_EQ(inflight(sut.get())[slot], 6u);
  // batch_size 0 = not reported: the count stays.
  r = report_of(w, 0, 4.0f);
  r.running = 2;
  r.kv_usage = 0.5f;
  ASSERT_EQ(eldr_router_report(sut.get(), &r), ELDR_OK);
  EXPECT_EQ(inflight(sut.get())[slot], 6u);
  ASSERT_EQ(eldr_router_complete(sut.get(), 2), ELDR_OK);
  EXPECT_EQ(inflight(sut.get())[slot], 5u);
  // The other worker is untouched by all of it.
  EXPECT_EQ(inflight(sut.get())[1 - slot], 0u);
}

TEST_F(capi_router_requests, step_reports_feed_the_fit_unless_it_is_off) {
  for (const uint32_t fit : {1u, 0u}) {
    eldr_router_options_t o = ELDR_ROUTER_OPTIONS_INIT;  // eldr_cost
    o.fit_step_cost = fit;
    RouterPtr sut = new_router(table.get(), o);
    ASSERT_TRUE(sut);
    const eldr_router_stats_t before = stats_of(sut.get());
    const int32_t w = worker_ids(sut.get())[0];
    eldr_decision_t d = ELDR_DECISION_INIT;
    ASSERT_EQ(eldr_router_route_request(sut.get(), 1, a.data(), kLayers, kExperts, &d), ELDR_OK);
    // Far slower steps than the prior predicts, batch sizes 1..8.
    for (uint32_t i = 0; i < 64; ++i) {
      const eldr_worker_report_t r = report_of(w, 1 + i % 8, 40.0f + 5.0f * (i % 8));
      ASSERT_EQ(eldr_router_report(sut.get(), &r), ELDR_OK) << eldr_last_error_message();
    }
    // A step time without a batch size is no sample.
    const eldr_worker_report_t lone = report_of(w, 0, 30.0f);
    ASSERT_EQ(eldr_router_report(sut.get(), &lone), ELDR_OK);
    const eldr_router_stats_t after = stats_of(sut.get());
    if (fit) {
      EXPECT_EQ(after.step_samples, 64u);
      EXPECT_NE(after.t0_ms, before.t0_ms);  // past the fit's minimum sample count
    } else {
      EXPECT_EQ(after.step_samples, 0u);
      EXPECT_EQ(after.t0_ms, before.t0_ms);
      EXPECT_EQ(after.tseq_ms, before.tseq_ms);
      EXPECT_EQ(after.alpha_us, before.alpha_us);
    }
  }
}

TEST_F(capi_router_requests, stats_count_routes_rejections_and_completes) {
  RouterPtr sut = locality_router();
  eldr_router_stats_t st;
  std::memset(&st, 0xcd, sizeof st);
  st.version = ELDR_ROUTER_STATS_VERSION;
  ASSERT_EQ(eldr_router_get_stats(sut.get(), &st), ELDR_OK);
  EXPECT_EQ(st.version, static_cast<uint32_t>(ELDR_ROUTER_STATS_VERSION));
  EXPECT_EQ(st.reserved0, 0u);
  EXPECT_EQ(st.routed + st.rejected + st.completes_rejected + st.completes_unknown + st.untracked +
                st.step_samples,
            0u);
  for (uint64_t r : st.reserved) EXPECT_EQ(r, 0u);
  EXPECT_TRUE(std::isfinite(st.t0_ms) && st.t0_ms >= 0.0);
  int32_t w = -1;
  ASSERT_EQ(route_worker(sut.get(), a.data(), kLayers, kExperts, &w), ELDR_OK);
  std::vector<int16_t> negative = a;
  negative[0] = -1;
  EXPECT_EQ(route_worker(sut.get(), negative.data(), kLayers, kExperts, &w), ELDR_E_OUT_OF_RANGE);
  ASSERT_EQ(eldr_router_complete_worker(sut.get(), w), ELDR_OK);
  EXPECT_EQ(eldr_router_complete_worker(sut.get(), w), ELDR_E_STATE);
  st = stats_of(sut.get());
  EXPECT_EQ(st.routed, 1u);
  EXPECT_EQ(st.rejected, 1u);
  EXPECT_EQ(st.completes_rejected, 1u);
  EXPECT_EQ(st.completes_unknown, 0u);
  EXPECT_EQ(st.step_samples, 0u);  // the eldr policy keeps no batch footprints
}

TEST_F(capi_router_requests, worker_report_init_fills_the_defaults) {
  eldr_worker_report_t r;
  std::memset(&r, 0xee, sizeof r);
  eldr_worker_report_init(&r);
  const eldr_worker_report_t macro = ELDR_WORKER_REPORT_INIT;
  EXPECT_EQ(std::memcmp(&r, &macro, sizeof r), 0);
  EXPECT_EQ(r.version, static_cast<uint32_t>(ELDR_WORKER_REPORT_VERSION));
  EXPECT_EQ(r.batch_size, 0u);
  EXPECT_EQ(r.step_ms, 0.0f);
  eldr_worker_report_init(nullptr);  // no-op
}

TEST_F(capi_router_requests, route_request_rejects_bad_arguments_and_leaves_out_alone) {
  RouterPtr sut = locality_router();
  eldr_decision_t d = ELDR_DECISION_INIT;
  EXPECT_EQ(eldr_router_route_request(nullptr, 1, a.data(), kLayers, kExperts, &d),
            ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_router_route_request(sut.get(), 1, nullptr, kLayers, kExperts, &d),
            ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_router_route_request(sut.get(), 1, a.data(), kLayers, kExperts, nullptr),
            ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_router_route_request(sut.get(), 1, a.data(), 0, kExperts, &d),
            ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_router_route_request(sut.get(), 1, a.data(), kExperts, kLayers, &d),
            ELDR_E_SHAPE_MISMATCH);
  EXPECT_TRUE(message_names("eldr_router_route_request"));
  std::vector<int16_t> negative = a;
  negative[3] = -4;
  EXPECT_EQ(eldr_router_route_request(sut.get(), 1, negative.data(), kLayers, kExperts, &d),
            ELDR_E_OUT_OF_RANGE);
  d.version = 0;
  EXPECT_EQ(eldr_router_route_request(sut.get(), 1, a.data(), kLayers, kExperts, &d),
            ELDR_E_INVALID_ARGUMENT);
  d.version = ELDR_DECISION_VERSION + 1;
  EXPECT_EQ(eldr_router_route_request(sut.get(), 1, a.data(), kLayers, kExperts, &d),
            ELDR_E_UNSUPPORTED);
  EXPECT_EQ(d.worker, -1);
  const std::vector<uint32_t> counted = inflight(sut.get());
  EXPECT_EQ(counted[0] + counted[1], 0u);
  // None of the failures left a record behind: id 1 is free.
  d = ELDR_DECISION_INIT;
  EXPECT_EQ(eldr_router_route_request(sut.get(), 1, a.data(), kLayers, kExperts, &d), ELDR_OK);
  EXPECT_EQ(eldr_router_complete(nullptr, 1), ELDR_E_INVALID_ARGUMENT);
  EXPECT_TRUE(message_names("eldr_router_complete"));
}

TEST_F(capi_router_requests, report_rejects_bad_arguments) {
  RouterPtr sut = locality_router();
  const int32_t w = worker_ids(sut.get())[0];
  eldr_worker_report_t r = report_of(w, 3, 2.0f);
  EXPECT_EQ(eldr_router_report(nullptr, &r), ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_router_report(sut.get(), nullptr), ELDR_E_INVALID_ARGUMENT);
  EXPECT_TRUE(message_names("eldr_router_report"));
  r.version = 0;
  EXPECT_EQ(eldr_router_report(sut.get(), &r), ELDR_E_INVALID_ARGUMENT);
  r.version = ELDR_WORKER_REPORT_VERSION + 1;
  EXPECT_EQ(eldr_router_report(sut.get(), &r), ELDR_E_UNSUPPORTED);
  for (const float step : {-1.0f, -0.0001f, std::numeric_limits<float>::quiet_NaN(),
                           std::numeric_limits<float>::infinity()}) {
    r = report_of(w, 3, step);
    EXPECT_EQ(eldr_router_report(sut.get(), &r), ELDR_E_INVALID_ARGUMENT) << step;
    EXPECT_TRUE(message_names("eldr_router_report"));
  }
  for (const float kv : {-0.5f, 1.5f, std::numeric_limits<float>::quiet_NaN()}) {
    r = report_of(w, 3, 2.0f);
    r.kv_usage = kv;
    EXPECT_EQ(eldr_router_report(sut.get(), &r), ELDR_E_INVALID_ARGUMENT) << kv;
  }
  r = report_of(999, 3, 2.0f);
  EXPECT_EQ(eldr_router_report(sut.get(), &r), ELDR_E_NOT_FOUND);
  r.worker = 0x80000000u;  // not an int32 worker id
  EXPECT_EQ(eldr_router_report(sut.get(), &r), ELDR_E_INVALID_ARGUMENT);
  // None of them changed a count.
  const std::vector<uint32_t> counted = inflight(sut.get());
  EXPECT_EQ(counted[0] + counted[1], 0u);
}

TEST_F(capi_router_requests, stats_reject_bad_arguments_and_leave_out_alone) {
  RouterPtr sut = locality_router();
  eldr_router_stats_t st = ELDR_ROUTER_STATS_INIT;
  st.routed = 77;
  EXPECT_EQ(eldr_router_get_stats(nullptr, &st), ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_router_get_stats(sut.get(), nullptr), ELDR_E_INVALID_ARGUMENT);
  EXPECT_TRUE(message_names("eldr_router_get_stats"));
  st.version = 0;
  EXPECT_EQ(eldr_router_get_stats(sut.get(), &st), ELDR_E_INVALID_ARGUMENT);
  st.version = ELDR_ROUTER_STATS_VERSION + 1;
  EXPECT_EQ(eldr_router_get_stats(sut.get(), &st), ELDR_E_UNSUPPORTED);
  EXPECT_EQ(st.routed, 77u);
}

}  // namespace
