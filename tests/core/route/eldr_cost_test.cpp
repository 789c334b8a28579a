// eldr_cost, the live batches it reads, complete by request id, worker
// reports and the online fit of the step constants.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#include "eldr/internal/vector_kernels.hpp"
#include "eldr/peer_twins.hpp"
#include "eldr/router.hpp"
#include "test_tables.hpp"

namespace eldr {
namespace {

using testing::axis_table;
using testing::layer0;

// A pure step model with round numbers: alpha = 1 ms per (layer, expert).
StepCost unit_cost(double tseq_ms) { return {0.5, tseq_ms, 1000.0, 64}; }

std::unique_ptr<Router> make(RouterOptions o, ClusterTable t = axis_table()) {
  auto r = Router::create(std::make_shared<const ClusterTable>(std::move(t)), o);
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  return std::move(r.value());
}

// Routes `f` with id onto `worker` alone: every other active worker is
// drained for the call and re-activated after it.
void place(Router& r, int32_t worker, const std::vector<int16_t>& f, uint64_t id) {
  std::vector<int32_t> drained;
  for (const WorkerInfo& w : r.workers())
    if (w.state == WorkerState::active && w.id != worker) {
      ASSERT_TRUE(r.drain_worker(w.id).is_ok());
      drained.push_back(w.id);
    }
  auto d = r.route(f, {.request_id = id});
  ASSERT_TRUE(d.is_ok()) << d.status().to_string();
  ASSERT_EQ(d->worker_id, worker);
  for (int32_t w : drained) ASSERT_TRUE(r.add_worker(w).is_ok());
}

const WorkerInfo& info(const std::vector<WorkerInfo>& ws, int32_t id) {
  for (const WorkerInfo& w : ws)
    if (w.id == id) return w;
  static WorkerInfo none;
  return none;
}

TEST(eldr_cost, is_the_default_policy) {
  EXPECT_EQ(RouterOptions{}.policy, Policy::eldr_cost);
  EXPECT_EQ(parse_policy("eldr_cost"), Policy::eldr_cost);
  EXPECT_STREQ(policy_name(Policy::eldr_cost), "eldr_cost");
}

// Request r uses experts 0 and 1 of layer 0 (k = 1: 8 tokens, 4 each): p = 0.5
// on both cells. Its experts, summed over p: 1. In a batch it keeps its
// demand code's share: keep = 2^(-q / 4096), q the level nearest to
// -log2(1 - p) * 4096 (within 2.5 % of 0.5).
const auto kR = layer0({4, 4, 0, 0});
double keep_of(double p) {
  const auto q = static_cast<uint16_t>(std::lround(-std::log2(1.0 - p) * 4096));
  return std::exp2(-demand_code_levels()[demand_code_of(q)] / 4096.0);
}
const double kKeep = keep_of(0.5);
const auto kDisjoint = layer0({0, 0, 4, 4});

TEST(eldr_cost, an_idle_pool_spreads_identical_requests_one_per_worker) {
  auto sut = make({.policy = Policy::eldr_cost, .step_cost = unit_cost(0.1)});
  std::set<int32_t> used;
  for (uint64_t id = 0; id < 4; ++id) {
    auto d = sut->route(kR, {.request_id = id});
    ASSERT_TRUE(d.is_ok());
    used.insert(d->worker_id);
  }
  EXPECT_EQ(used.size(), 4u);  // identical requests, but an idle worker is always cheaper
  for (const WorkerInfo& w : sut->workers()) {
    EXPECT_EQ(w.inflight, 1);
    EXPECT_NEAR(w.batch_experts, 2 * (1 - kKeep), 1e-3);  // 2 cells at p = 0.5
  }
}

TEST(eldr_cost, one_busy_worker_is_avoided_while_another_is_idle) {
  auto sut = make({.policy = Policy::eldr_cost, .step_cost = unit_cost(0.1)}, axis_table(2));
  place(*sut, 100, kR, 1);
  // Joining 100 (b = 1, D = 1, dD = 0.5): 3 tseq + alpha (1 + 2 * 0.5) = 2.3 ms;
  // idle 101: tseq + alpha * 1 = 1.1 ms.
  auto d = sut->route(kR, {.request_id = 2});
  ASSERT_TRUE(d.is_ok());
  EXPECT_EQ(d->worker_id, 101);
}

// Worker 100 holds two copies of r (keep k^2 on its cells, k = kKeep: D =
// 2 (1 - k^2), dD for another r = 2 * k^2 * 0.5); worker 101 one disjoint
// request (D = 2 (1 - k), dD = 1). cost(100) = 5 tseq + alpha (D + 3 dD),
// cost(101) = 3 tseq + alpha (D + 2 dD): r joins its twins iff tseq < flip.
// With k = 0.5: 5 tseq + 2.25 alpha against 3 tseq + 3 alpha, flip 0.375.
double twins_flip_ms() {
  const double k2 = kKeep * kKeep;
  const double c100 = 2 * (1 - k2) + 3 * k2, c101 = 2 * (1 - kKeep) + 2;
  return (c101 - c100) / 2;  // alpha = 1 ms
}

int32_t pick_with_twins_or_disjoint(double tseq_ms) {
  auto sut = make({.policy = Policy::eldr_cost, .step_cost = unit_cost(tseq_ms)}, axis_table(2));
  place(*sut, 100, kR, 1);
  place(*sut, 100, kR, 2);
  place(*sut, 101, kDisjoint, 3);
  auto d = sut->route(kR, {.request_id = 4});
  EXPECT_TRUE(d.is_ok());
  return d ? d->worker_id : -1;
}

TEST(eldr_cost, hand_computed_costs_flip_where_the_step_model_says) {
  const double flip = twins_flip_ms();
  EXPECT_NEAR(flip, 0.375, 0.02);  // k = 0.5 exactly: 0.375
  EXPECT_EQ(pick_with_twins_or_disjoint(flip - 0.1), 100);
  EXPECT_EQ(pick_with_twins_or_disjoint(flip - 0.01), 100);
  EXPECT_EQ(pick_with_twins_or_disjoint(flip + 0.01), 101);
  EXPECT_EQ(pick_with_twins_or_disjoint(flip + 0.1), 101);
}

TEST(eldr_cost, identical_beats_disjoint_at_equal_load) {
  auto sut = make({.policy = Policy::eldr_cost, .step_cost = unit_cost(0.1)}, axis_table(2));
  place(*sut, 100, kDisjoint, 1);
  place(*sut, 101, kR, 2);
  // 101: 0.3 + (1 + 2 * 0.5) = 2.3 ms; 100: 0.3 + (1 + 2 * 1) = 3.3 ms.
  auto d = sut->route(kR, {.request_id = 3});
  ASSERT_TRUE(d.is_ok());
  EXPECT_EQ(d->worker_id, 101);
  // And a request disjoint from both batches goes by load alone: tie -> either.
}

TEST(eldr_cost, leaving_restores_the_batch_exactly) {
  auto sut = make({.policy = Policy::eldr_cost, .step_cost = unit_cost(0.1)}, axis_table(1));
  auto a = sut->route(kR, {.request_id = 1});
  ASSERT_TRUE(a.is_ok());
  const double alone = sut->workers()[0].batch_experts;
  for (uint64_t id = 2; id < 500; ++id)
    ASSERT_TRUE(sut->route(layer0({int16_t(id % 5), 3, int16_t(id % 7), 1}), {.request_id = id}));
  for (uint64_t id = 2; id < 500; ++id) ASSERT_TRUE(sut->complete_request(id).is_ok());
  EXPECT_NEAR(sut->workers()[0].batch_experts, alone, 1e-4);
  ASSERT_TRUE(sut->complete_request(1).is_ok());
  EXPECT_EQ(sut->workers()[0].batch_experts, 0.0);
  EXPECT_EQ(sut->workers()[0].tracked, 0u);
  EXPECT_EQ(sut->workers()[0].inflight, 0);
}

TEST(eldr_cost, a_huge_batch_keeps_its_sums_in_range_and_empties_exactly) {
  // Past 32,768 footprints on one worker the requests are still recorded
  // (ids, counts) but add no footprint: the int32 q12 sums never overflow.
  auto sut = make({.policy = Policy::eldr_cost, .max_inflight = 40000}, axis_table(1));
  const auto heavy = layer0({1, 0, 0, 0});  // p = 0.999 on one cell: the largest q
  for (uint64_t id = 0; id < 40000; ++id) ASSERT_TRUE(sut->route(heavy, {.request_id = id}));
  EXPECT_EQ(sut->stats().untracked, 0u);
  EXPECT_EQ(sut->workers()[0].tracked, 40000u);
  EXPECT_NEAR(sut->workers()[0].batch_experts, 1.0, 1e-3);
  for (uint64_t id = 0; id < 40000; ++id) ASSERT_TRUE(sut->complete_request(id).is_ok());
  EXPECT_EQ(sut->workers()[0].batch_experts, 0.0);
  EXPECT_EQ(sut->workers()[0].inflight, 0);
}

// Another router's booking is this router's own route, minus the pick: the
// same in-flight count, the same batch footprint, the same exit by id.
TEST(booking, a_peers_booking_counts_and_joins_the_batch_like_a_route) {
  auto routed = make({.policy = Policy::eldr_cost, .step_cost = unit_cost(0.1)}, axis_table(2));
  auto booked = make({.policy = Policy::eldr_cost, .step_cost = unit_cost(0.1)}, axis_table(2));
  place(*routed, 101, kR, 1);
  ASSERT_TRUE(booked->book(101, kR, 1).is_ok());
  EXPECT_EQ(info(booked->workers(), 101).inflight, 1);
  EXPECT_EQ(info(booked->workers(), 101).tracked, 1u);
  EXPECT_EQ(info(booked->workers(), 101).batch_experts, info(routed->workers(), 101).batch_experts);
  // So the next pick is the same: kR again joins its twin on 101.
  auto a = routed->route(kR, {.request_id = 2});
  auto b = booked->route(kR, {.request_id = 2});
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  EXPECT_EQ(a->worker_id, b->worker_id);
  ASSERT_TRUE(booked->complete_request(1).is_ok());
  EXPECT_EQ(info(booked->workers(), 101).tracked, b->worker_id == 101 ? 1u : 0u);
  EXPECT_EQ(booked->stats().routed, 1u);  // a booking is not a route
}

TEST(booking, bad_bookings_are_refused_and_change_nothing) {
  auto sut = make({.policy = Policy::eldr_cost});
  ASSERT_TRUE(sut->book(100, kR, 5).is_ok());
  EXPECT_EQ(sut->book(100, kR, 5).code(), Errc::state);      // already in flight
  EXPECT_EQ(sut->book(999, kR, 6).code(), Errc::not_found);  // no such worker
  EXPECT_EQ(sut->book(100, std::vector<int16_t>(3, 1), 7).code(), Errc::shape_mismatch);
  EXPECT_EQ(sut->book(100, layer0({-1, 0, 0, 0}), 8).code(), Errc::out_of_range);
  int64_t total = 0;
  for (const WorkerInfo& w : sut->workers()) total += w.inflight;
  EXPECT_EQ(total, 1);
}

TEST(peer_twins, each_pick_books_a_twin_per_peer_until_the_view_catches_up) {
  auto sut = make({.policy = Policy::eldr_cost, .step_cost = unit_cost(0.1)}, axis_table(2));
  PeerTwins twins(3, 50.0);
  auto d = sut->route(kR, {.request_id = 1});
  ASSERT_TRUE(d.is_ok());
  ASSERT_TRUE(twins.after_route(*sut, d->worker_id, kR, 1000.0).is_ok());
  EXPECT_EQ(twins.pending(), 3u);
  EXPECT_EQ(info(sut->workers(), d->worker_id).inflight, 4);
  EXPECT_EQ(info(sut->workers(), d->worker_id).tracked, 4u);
  // The next identical request sees a worker four deep, not one.
  auto next = sut->route(kR, {.request_id = 2});
  ASSERT_TRUE(next.is_ok());
  EXPECT_NE(next->worker_id, d->worker_id);
  twins.release_due(*sut, 1049.0);
  EXPECT_EQ(twins.pending(), 3u);
  twins.release_due(*sut, 1050.0);
  EXPECT_EQ(twins.pending(), 0u);
  EXPECT_EQ(info(sut->workers(), d->worker_id).inflight, 1);
  EXPECT_EQ(sut->stats().completes_unknown, 0u);
}

// A node that routes a quarter as much as its peers together books four
// twins a pick; one that routes four times as much books one every fourth
// pick; the fractions are carried, never lost or doubled.
TEST(peer_twins, twins_follow_the_peers_rate_over_this_routers) {
  auto sut = make({.policy = Policy::jsq});
  PeerTwins twins(0, 1000.0);
  twins.set_twins_per_pick(4.0);
  ASSERT_TRUE(twins.after_route(*sut, 100, kR, 0.0).is_ok());
  EXPECT_EQ(twins.pending(), 4u);
  twins.set_twins_per_pick(0.25);
  for (int i = 1; i <= 8; ++i) ASSERT_TRUE(twins.after_route(*sut, 100, kR, i).is_ok());
  EXPECT_EQ(twins.pending(), 6u);  // two more in eight picks
  twins.set_twins_per_pick(1.5);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(twins.after_route(*sut, 101, kR, 10.0).is_ok());
  EXPECT_EQ(twins.pending(), 12u);  // 1 + 2 + 1 + 2
  twins.set_twins_per_pick(1e9);    // capped
  EXPECT_EQ(twins.twins_per_pick(), PeerTwins::kMaxTwinsPerPick);
  twins.set_twins_per_pick(-1.0);
  ASSERT_TRUE(twins.after_route(*sut, 101, kR, 11.0).is_ok());
  EXPECT_EQ(twins.pending(), 12u);
  twins.release_due(*sut, 2000.0);
  EXPECT_EQ(twins.pending(), 0u);
  EXPECT_EQ(sut->stats().completes_unknown, 0u);
}

TEST(peer_twins, nothing_is_anticipated_alone_or_with_a_live_view_and_due_times_stay_ordered) {
  auto sut = make({.policy = Policy::jsq});
  PeerTwins alone(0, 50.0), live(3, 0.0), nan(3, std::nan(""));
  for (PeerTwins* t : {&alone, &live, &nan}) {
    ASSERT_TRUE(t->after_route(*sut, 100, kR, 0.0).is_ok());
    EXPECT_EQ(t->pending(), 0u);
  }
  PeerTwins twins(1, 100.0);
  ASSERT_TRUE(twins.after_route(*sut, 100, kR, 0.0).is_ok());  // due at 100
  twins.set_view_delay_ms(10.0);
  ASSERT_TRUE(twins.after_route(*sut, 101, kR, 5.0).is_ok());  // due at 100, not 15
  twins.release_due(*sut, 20.0);
  EXPECT_EQ(twins.pending(), 2u);
  twins.release_due(*sut, 100.0);
  EXPECT_EQ(twins.pending(), 0u);
  // A booking the router refuses books nothing at all.
  EXPECT_EQ(twins.after_route(*sut, 999, kR, 200.0).code(), Errc::not_found);
  EXPECT_EQ(twins.pending(), 0u);
  int64_t total = 0;
  for (const WorkerInfo& w : sut->workers()) total += w.inflight;
  EXPECT_EQ(total, 0);
}

TEST(complete_by_id, unknown_and_repeated_ids_are_counted_and_change_nothing) {
  for (Policy p : {Policy::eldr_cost, Policy::jsq, Policy::eldr}) {
    auto sut = make({.policy = p});
    auto d = sut->route(kR, {.request_id = 7});
    ASSERT_TRUE(d.is_ok());
    EXPECT_EQ(sut->complete_request(8).code(), Errc::not_found);
    EXPECT_EQ(info(sut->workers(), d->worker_id).inflight, 1);
    ASSERT_TRUE(sut->complete_request(7).is_ok());
    EXPECT_EQ(sut->complete_request(7).code(), Errc::not_found);
    int64_t total = 0;
    for (const WorkerInfo& w : sut->workers()) total += w.inflight;
    EXPECT_EQ(total, 0);
    const RouterStats st = sut->stats();
    EXPECT_EQ(st.completes_unknown, 2u) << policy_name(p);
    EXPECT_EQ(st.completes_rejected, 2u);
  }
}

TEST(complete_by_id, an_id_in_flight_twice_is_rejected) {
  auto sut = make({});
  ASSERT_TRUE(sut->route(kR, {.request_id = 1}).is_ok());
  EXPECT_EQ(sut->route(kR, {.request_id = 1}).status().code(), Errc::state);
  EXPECT_EQ(sut->stats().rejected, 1u);
  EXPECT_EQ(sut->stats().routed, 1u);
  ASSERT_TRUE(sut->complete_request(1).is_ok());
  EXPECT_TRUE(sut->route(kR, {.request_id = 1}).is_ok());  // free again once completed
}

TEST(complete_by_id, ids_need_the_routers_own_accounting) {
  auto sut = make({});
  const std::vector<uint32_t> loads(4, 0);
  EXPECT_EQ(sut->route(kR, {.loads = loads, .request_id = 1}).status().code(),
            Errc::invalid_argument);
}

TEST(complete_by_id, complete_by_worker_takes_the_oldest_request_there) {
  auto sut = make({.policy = Policy::eldr_cost}, axis_table(2));
  place(*sut, 100, kR, 1);
  place(*sut, 100, kDisjoint, 2);
  ASSERT_TRUE(sut->complete(100).is_ok());
  EXPECT_EQ(sut->complete_request(1).code(), Errc::not_found);  // 1 was the oldest
  ASSERT_TRUE(sut->complete_request(2).is_ok());
  EXPECT_EQ(sut->complete(100).code(), Errc::state);
}

TEST(complete_by_id, a_full_record_pool_still_routes_and_counts) {
  auto sut = make({.policy = Policy::eldr_cost, .max_inflight = 2});
  for (uint64_t id = 0; id < 3; ++id) ASSERT_TRUE(sut->route(kR, {.request_id = id}).is_ok());
  EXPECT_EQ(sut->stats().untracked, 1u);
  int64_t total = 0;
  for (const WorkerInfo& w : sut->workers()) total += w.inflight;
  EXPECT_EQ(total, 3);
  EXPECT_EQ(sut->complete_request(2).code(), Errc::not_found);  // never tracked
  ASSERT_TRUE(sut->complete_request(0).is_ok());
  EXPECT_TRUE(sut->route(kR, {.request_id = 9}).is_ok());  // its record is free again
  EXPECT_EQ(sut->stats().untracked, 1u);
}

TEST(worker_report, batch_size_takes_precedence_and_bad_step_times_are_refused) {
  auto sut = make({});
  ASSERT_TRUE(sut->report(101, {.batch = 7}).is_ok());
  EXPECT_EQ(info(sut->workers(), 101).inflight, 7);
  EXPECT_EQ(sut->report(101, {.batch = 3, .step_ms = std::nan("")}).code(), Errc::invalid_argument);
  EXPECT_EQ(sut->report(101, {.step_ms = -1.0}).code(), Errc::invalid_argument);
  EXPECT_EQ(sut->report(999, {.batch = 1}).code(), Errc::not_found);
  EXPECT_EQ(info(sut->workers(), 101).inflight, 7);
}

// Step reports from an "engine" whose steps take truth.step_ms(batch, D)
// with D = distinct(batch, the router's estimate): a changing live batch on
// 4 workers, so batch size and distinct experts both vary. Returns the fit.
template <typename Distinct>
StepCost fit_from_reports(const StepCost& truth, const StepCost& prior, Distinct distinct) {
  auto sut = make({.policy = Policy::eldr_cost, .step_cost = prior});
  std::mt19937_64 rng(5);
  uint64_t next = 0, oldest = 0;
  for (int i = 0; i < 3000; ++i) {
    const int16_t a = int16_t(rng() % 6), b = int16_t(rng() % 6), c = int16_t(1 + rng() % 3);
    EXPECT_TRUE(sut->route(layer0({a, b, c, int16_t(rng() % 2)}), {.request_id = next++}));
    if (next - oldest > 20 + rng() % 30) {
      EXPECT_TRUE(sut->complete_request(oldest++));
    }
    for (const WorkerInfo& w : sut->workers())
      if (w.inflight > 0) {
        const uint32_t batch = static_cast<uint32_t>(w.inflight);
        const double step_ms = truth.step_ms(batch, distinct(batch, w.batch_experts));
        EXPECT_TRUE(sut->report(w.id, {.batch = batch, .step_ms = step_ms}).is_ok());
      }
  }
  EXPECT_GT(sut->stats().step_samples, 1000u);
  return sut->step_cost();
}

TEST(worker_report, step_times_fit_the_constants_online) {
  const StepCost truth{1.0, 0.03, 300.0, 64};  // what the "engine" measures
  const StepCost prior{3.0, 0.03, 1000.0, 64};
  const StepCost fitted = fit_from_reports(truth, prior, [](uint32_t, double d) { return d; });
  EXPECT_NEAR(fitted.alpha_us, truth.alpha_us, 0.1 * truth.alpha_us);
  EXPECT_NEAR(fitted.t0_ms, truth.t0_ms, 0.2 * truth.t0_ms);
  EXPECT_EQ(fitted.tseq_ms, prior.tseq_ms);  // configured, never fitted
}

// The router's distinct experts come from prefill footprints; the experts a
// batch's decode tokens use are more, by more the larger the batch (on the
// GPT-OSS-20B trace 0.4 to 2 experts per request). A fitted per-request
// coefficient soaked that up (TSEQ several times too high, so eldr_cost
// spread requests it should have batched); the fit keeps TSEQ and moves
// T0 and alpha only.
TEST(worker_report, the_fit_keeps_tseq_when_the_routers_distinct_count_lags_the_batch) {
  const StepCost truth{1.0, 0.03, 300.0, 64};
  const StepCost prior{3.0, 0.03, 1000.0, 64};
  const StepCost fitted = fit_from_reports(
      truth, prior, [](uint32_t batch, double d) { return d + 0.1 * (batch - 1.0); });
  EXPECT_NEAR(fitted.tseq_ms, truth.tseq_ms, 0.2 * truth.tseq_ms);
  EXPECT_NEAR(fitted.alpha_us, truth.alpha_us, 0.25 * truth.alpha_us);
}

// An engine with max_batch 8 runs the oldest 8 of its requests and queues
// the rest; its step time depends on the 8 it ran. The router's batch
// footprint holds the queued ones too, so a step with a queue behind it is
// no sample: reported with `running` or, without it, a batch above
// max_batch. The fit recovers the engine's constants either way.
TEST(worker_report, steps_with_a_queue_behind_them_are_no_sample) {
  const StepCost truth{1.0, 0.03, 300.0, 8};
  const StepCost prior{3.0, 0.03, 1000.0, 8};
  for (const bool say_running : {true, false}) {
    SCOPED_TRACE(say_running ? "running reported" : "batch only");
    auto sut = make({.policy = Policy::eldr_cost, .step_cost = prior}, axis_table(1));
    // The engine's running batch, booked alone on a second router: its
    // distinct experts as the router would estimate them.
    auto running = make({.policy = Policy::eldr_cost, .step_cost = prior}, axis_table(1));
    std::mt19937_64 rng(7);
    std::vector<std::vector<int16_t>> footprint;
    uint64_t oldest = 0, cap = 1;
    for (int i = 0; i < 4000; ++i) {
      const uint64_t id = footprint.size();
      footprint.push_back(layer0(
          {int16_t(rng() % 6), int16_t(rng() % 6), int16_t(1 + rng() % 3), int16_t(rng() % 2)}));
      ASSERT_TRUE(sut->route(footprint[id], {.request_id = id}));
      if (id - oldest < truth.max_batch) {
        ASSERT_TRUE(running->book(100, footprint[id], id));
      }
      // Up to 16 in flight, the bound changing every 20 steps: a queue
      // about half of the time.
      if (i % 20 == 0) cap = 1 + rng() % 16;
      while (footprint.size() - oldest > cap) {
        ASSERT_TRUE(sut->complete_request(oldest));
        ASSERT_TRUE(running->complete_request(oldest));
        ++oldest;
        const uint64_t joins = oldest + truth.max_batch - 1;  // the queue's head starts
        if (joins < footprint.size()) {
          ASSERT_TRUE(running->book(100, footprint[joins], joins));
        }
      }
      const auto in_flight = static_cast<uint32_t>(footprint.size() - oldest);
      const uint32_t ran = std::min(in_flight, truth.max_batch);
      const double step_ms = truth.step_ms(ran, info(running->workers(), 100).batch_experts);
      WorkerReport rep{.batch = in_flight, .step_ms = step_ms};
      if (say_running) rep.running = ran;
      ASSERT_TRUE(sut->report(100, rep).is_ok());
    }
    const StepCost fitted = sut->step_cost();
    EXPECT_NEAR(fitted.alpha_us, truth.alpha_us, 0.05 * truth.alpha_us);
    EXPECT_NEAR(fitted.t0_ms, truth.t0_ms, 0.05 * truth.t0_ms);
    EXPECT_NEAR(fitted.tseq_ms, truth.tseq_ms, 0.2 * truth.tseq_ms);
    EXPECT_GT(sut->stats().step_samples, 500u);
    EXPECT_LT(sut->stats().step_samples, 3500u);  // the queued steps are not
  }
}

TEST(worker_report, running_needs_a_batch_and_may_not_exceed_it) {
  auto sut = make({.policy = Policy::eldr_cost});
  EXPECT_EQ(sut->report(101, {.step_ms = 3.0, .running = 2}).code(), Errc::invalid_argument);
  EXPECT_EQ(sut->report(101, {.batch = 2, .step_ms = 3.0, .running = 3}).code(),
            Errc::invalid_argument);
  EXPECT_TRUE(sut->report(101, {.batch = 5, .step_ms = 3.0, .running = 3}).is_ok());
  EXPECT_EQ(info(sut->workers(), 101).inflight, 5);  // batch: running and queued
}

TEST(step_constants, come_from_options_then_table_then_preset) {
  ClusterTable t = axis_table();
  EXPECT_EQ(make({}, t)->step_cost(), StepCost{});  // no preset has this geometry
  t.step_cost = StepCost{2.0, 0.04, 5.0, 32};
  EXPECT_EQ(make({}, t)->step_cost(), *t.step_cost);
  const StepCost mine{1.0, 0.01, 1.0, 8};
  EXPECT_EQ(make({.step_cost = mine}, t)->step_cost(), mine);
  t.step_cost = StepCost{2.0, -1.0, 5.0, 32};
  EXPECT_FALSE(t.validate().is_ok());
  EXPECT_FALSE(Router::create(std::make_shared<const ClusterTable>(axis_table()),
                              {.step_cost = StepCost{1.0, 0.0, NAN, 8}})
                   .is_ok());
}

TEST(step_constants, a_swapped_table_brings_its_own_unless_the_caller_fixed_them) {
  ClusterTable t = axis_table();
  auto sut = make({}, t);
  t.step_cost = StepCost{2.0, 0.04, 5.0, 32};
  ASSERT_TRUE(sut->swap_table(std::make_shared<const ClusterTable>(t)).is_ok());
  EXPECT_EQ(sut->step_cost(), *t.step_cost);
  const StepCost mine{1.0, 0.01, 1.0, 8};
  auto fixed = make({.step_cost = mine}, axis_table());
  ASSERT_TRUE(fixed->swap_table(std::make_shared<const ClusterTable>(t)).is_ok());
  EXPECT_EQ(fixed->step_cost(), mine);
}

// While any worker is idle and the step model is pure (TSEQ > 0), no request
// joins a busy worker, whatever the batches hold.
TEST(eldr_cost, property_no_request_joins_a_busy_worker_while_one_is_idle) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    std::mt19937_64 rng(seed);
    const double tseq = 0.001 + (rng() % 100) / 1000.0;
    const double alpha = 1.0 + (rng() % 5000);
    auto sut = make(
        {.policy = Policy::eldr_cost, .seed = seed, .step_cost = StepCost{1.0, tseq, alpha, 64}},
        axis_table(1 + rng() % 4));
    uint64_t id = 0;
    std::vector<uint64_t> live;
    for (int step = 0; step < 300; ++step) {
      if (!live.empty() && rng() % 3 == 0) {
        const size_t k = rng() % live.size();
        ASSERT_TRUE(sut->complete_request(live[k]).is_ok());
        live.erase(live.begin() + static_cast<long>(k));
        continue;
      }
      bool any_idle = false;
      const auto before = sut->workers();
      for (const WorkerInfo& w : before) any_idle |= w.inflight == 0;
      std::vector<int16_t> f(8);
      for (auto& v : f) v = int16_t(rng() % 4 == 0 ? 0 : rng() % 20);
      if (f[0] + f[1] + f[2] + f[3] == 0) f[rng() % 4] = 1;
      auto d = sut->route(f, {.request_id = id});
      ASSERT_TRUE(d.is_ok());
      live.push_back(id++);
      if (any_idle) {
        ASSERT_EQ(info(before, d->worker_id).inflight, 0) << "seed " << seed << " step " << step;
      }
    }
  }
}

TEST(live_batch_kernels, q12_logs_and_keeps_match_libm) {
  std::vector<float> p;
  for (int i = 0; i <= 999; ++i) p.push_back(i / 1000.0f);
  p.push_back(kernels::kMaxDemand);
  std::vector<uint16_t> q(p.size());
  kernels::log_keep_q12(p.data(), p.size(), q.data());
  for (size_t i = 0; i < p.size(); ++i)
    ASSERT_NEAR(q[i], std::round(-std::log2(1.0 - p[i]) * 4096.0), 1.0) << p[i];
  std::vector<int32_t> s;
  for (int32_t v = 0; v < 600000; v += 997) s.push_back(v);
  std::vector<float> keep(s.size());
  const float sum = kernels::keep_from_q12(s.data(), s.size(), keep.data());
  double want_sum = 0.0;
  for (size_t i = 0; i < s.size(); ++i) {
    const double want = std::exp2(-s[i] / 4096.0);
    want_sum += want;
    ASSERT_LE(keep[i], 1.0f);
    ASSERT_NEAR(keep[i], want, 2e-5 * want + 1e-37) << s[i];
  }
  EXPECT_NEAR(sum, want_sum, 1e-4 * want_sum);
}

}  // namespace
}  // namespace eldr
