#include "eldr/lab/sim.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "eldr/fit.hpp"
#include "temp_dir.hpp"

namespace eldr {
namespace {

const Geometry kGeometry{8, 32, 4};

struct SimSetup {
  SimWorkload calibration, evaluation;
  CountsTensor decode;
  std::shared_ptr<const ClusterTable> table;
};

SimSetup make_setup(uint64_t requests, uint32_t workers = 4) {
  SimSetup s;
  SyntheticSimOptions o;
  o.output_tokens_median = 40;
  o.output_tokens_max = 80;
  o.prompt_tokens_median = 60;
  auto cal = synthetic_sim_workload(kGeometry, o, 300, 7, &s.decode);
  auto ev = synthetic_sim_workload(kGeometry, o, requests, 8);
  EXPECT_TRUE(cal.is_ok() && ev.is_ok());
  s.calibration = std::move(*cal);
  s.evaluation = std::move(*ev);
  std::vector<std::string> labels;
  for (const auto& r : s.calibration.requests)
    labels.push_back(s.calibration.domain_names[r.domain]);
  FitOptions fo;
  fo.workers = workers;
  fo.rho_pairs = 2000;
  auto t = fit_table({kGeometry, 300, s.calibration.prefill.data, s.decode.data, labels}, fo);
  EXPECT_TRUE(t.is_ok()) << t.status().to_string();
  s.table = std::make_shared<const ClusterTable>(std::move(*t));
  return s;
}

SimOptions options(Policy p, double rate) {
  SimOptions o;
  o.model = {"test", kGeometry, {2.0, 0.02, 20.0, 16}};
  o.workers = 4;
  o.rate = rate;
  o.router.policy = p;
  return o;
}

TEST(sim_workload, footprints_and_profiles_are_well_formed) {
  SyntheticSimOptions o;
  CountsTensor decode;
  auto sut = synthetic_sim_workload(kGeometry, o, 50, 3, &decode);
  ASSERT_TRUE(sut.is_ok());
  EXPECT_EQ(sut->requests.size(), 50u);
  EXPECT_EQ(sut->profiles(), 4u * o.subtopics);
  for (float p : sut->inclusion) {
    EXPECT_GE(p, 0.0f);
    EXPECT_LE(p, 0.999f);
  }
  for (const auto& r : sut->requests) {
    EXPECT_LT(r.profile, sut->profiles());
    EXPECT_GE(r.output_tokens, 1u);
    EXPECT_LE(r.output_tokens, o.output_tokens_max);
  }
  for (int16_t c : sut->prefill.data) EXPECT_GE(c, 0);
  for (int16_t c : decode.data) EXPECT_LE(c, 127);
}

TEST(sim_workload, same_model_seed_gives_the_same_profiles_for_other_requests) {
  SyntheticSimOptions o;
  auto a = synthetic_sim_workload(kGeometry, o, 10, 1);
  auto b = synthetic_sim_workload(kGeometry, o, 10, 2);
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  EXPECT_EQ(a->inclusion, b->inclusion);
  EXPECT_NE(a->prefill.data, b->prefill.data);
}

TEST(sim, every_request_finishes_once_and_results_are_deterministic) {
  const SimSetup s = make_setup(400);
  for (Policy p : kAllPolicies) {
    auto a = simulate(s.evaluation, s.table, options(p, 30.0));
    auto b = simulate(s.evaluation, s.table, options(p, 30.0));
    ASSERT_TRUE(a.is_ok()) << a.status().to_string();
    EXPECT_EQ(a->tpot_ms.size(), 400u) << policy_name(p);
    EXPECT_EQ(a->tpot_ms, b->tpot_ms) << policy_name(p);
    EXPECT_GT(a->tpot_p50_ms, 0.0);
    EXPECT_GE(a->tpot_p99_ms, a->tpot_p50_ms);
    EXPECT_GE(a->worker_load_max_over_mean, 1.0);
    EXPECT_GT(a->steps, 0u);
  }
}

TEST(sim, a_lone_request_costs_exactly_the_step_model) {
  // One request, batch of one: every step costs t0 + tseq + alpha * expected
  // distinct experts of that request alone = sum of its inclusion probabilities.
  SimSetup s = make_setup(1);
  const auto& req = s.evaluation.requests[0];
  const size_t cells = kGeometry.cells();
  double distinct = 0.0;
  for (size_t c = 0; c < cells; ++c)
    distinct += s.evaluation.inclusion[size_t{req.profile} * cells + c];
  auto sut = simulate(s.evaluation, s.table, options(Policy::round_robin, 1.0));
  ASSERT_TRUE(sut.is_ok());
  const double expected = 2.0 + 0.02 + 20.0e-3 * distinct;
  EXPECT_NEAR(sut->tpot_p50_ms, expected, 1e-3 * expected);
  EXPECT_NEAR(sut->experts_per_step, distinct / kGeometry.layers, 1e-3);
  EXPECT_EQ(sut->steps, req.output_tokens);
}

TEST(sim, locality_routing_shrinks_the_expert_union_per_step) {
  const SimSetup s = make_setup(1500);
  // Loaded enough that batches are large and expert loading dominates a step.
  SimOptions ro = options(Policy::round_robin, 200.0), eo = options(Policy::eldr, 200.0);
  ro.model.cost.t0_ms = eo.model.cost.t0_ms = 0.5;
  auto rr = simulate(s.evaluation, s.table, ro);
  auto eldr = simulate(s.evaluation, s.table, eo);
  ASSERT_TRUE(rr.is_ok() && eldr.is_ok());
  EXPECT_LT(eldr->experts_per_step, rr->experts_per_step);
  EXPECT_LT(eldr->tpot_p50_ms, rr->tpot_p50_ms);
}

TEST(sim, rejects_bad_options) {
  const SimSetup s = make_setup(10);
  EXPECT_EQ(simulate(s.evaluation, nullptr, options(Policy::eldr, 1.0)).status().code(),
            Errc::invalid_argument);
  EXPECT_EQ(simulate(s.evaluation, s.table, options(Policy::eldr, 0.0)).status().code(),
            Errc::invalid_argument);
  SimWorkload other = s.evaluation;
  other.geometry.layers = 4;
  EXPECT_EQ(simulate(other, s.table, options(Policy::eldr, 1.0)).status().code(),
            Errc::shape_mismatch);
}

// Several routers: with an instant view and bookings that carry footprints,
// each router holds exactly what one router would, so a deterministic
// policy routes exactly like one; with counts only, eldr_cost loses the
// other routers' batch footprints.
TEST(sim_routers, an_instant_view_with_footprints_routes_exactly_like_one_router) {
  const SimSetup s = make_setup(800);
  SimOptions one = options(Policy::eldr_cost, 120.0);
  SimOptions four = one;
  four.routers = 4;
  auto a = simulate(s.evaluation, s.table, one);
  auto b = simulate(s.evaluation, s.table, four);
  ASSERT_TRUE(a.is_ok() && b.is_ok()) << b.status().to_string();
  EXPECT_EQ(a->tpot_ms, b->tpot_ms);
  four.view_delay_ms = 50.0;
  auto late = simulate(s.evaluation, s.table, four);
  ASSERT_TRUE(late.is_ok());
  EXPECT_EQ(late->tpot_ms.size(), 800u);  // every request finishes once
  EXPECT_NE(late->tpot_ms, a->tpot_ms);   // a stale view changes picks
  four.view_delay_ms = 0.0;
  four.bookings_carry_footprints = false;
  auto counts = simulate(s.evaluation, s.table, four);
  ASSERT_TRUE(counts.is_ok());
  EXPECT_EQ(counts->tpot_ms.size(), 800u);
  EXPECT_NE(counts->tpot_ms, a->tpot_ms);
}

// Herding: with 8 routers and a view 300 ms old, jsq sends every router's
// next request to the same least-loaded worker; anticipating the peers'
// twins spreads them again (the load evens out and the tail shrinks).
TEST(sim_routers, anticipating_the_peers_twins_undoes_herding_on_a_stale_view) {
  const SimSetup s = make_setup(1500, 8);
  SimOptions o = options(Policy::jsq, 160.0);
  o.workers = 8;
  o.routers = 8;
  o.view_delay_ms = 300.0;
  o.anticipate_peers = false;
  auto herded = simulate(s.evaluation, s.table, o);
  o.anticipate_peers = true;
  auto spread = simulate(s.evaluation, s.table, o);
  o.routers = 1;
  o.view_delay_ms = 0.0;
  auto live = simulate(s.evaluation, s.table, o);
  ASSERT_TRUE(herded.is_ok() && spread.is_ok() && live.is_ok());
  // Herding costs this fleet over a fifth of its P99 (6.00 ms against 4.20 live);
  // anticipation wins back more than half of it (4.88 ms) and evens the load.
  EXPECT_GT(herded->tpot_p99_ms, 1.2 * live->tpot_p99_ms);
  EXPECT_LT(spread->tpot_p99_ms,
            herded->tpot_p99_ms - 0.5 * (herded->tpot_p99_ms - live->tpot_p99_ms));
  EXPECT_LT(spread->worker_load_max_over_mean, herded->worker_load_max_over_mean);
}

TEST(sim_routers, bad_router_options_are_refused) {
  const SimSetup s = make_setup(10);
  SimOptions o = options(Policy::eldr_cost, 10.0);
  o.routers = 0;
  EXPECT_EQ(simulate(s.evaluation, s.table, o).status().code(), Errc::invalid_argument);
  o.routers = 2;
  o.view_delay_ms = -1.0;
  EXPECT_EQ(simulate(s.evaluation, s.table, o).status().code(), Errc::invalid_argument);
  o.view_delay_ms = 10.0;
  o.report_steps = true;
  EXPECT_EQ(simulate(s.evaluation, s.table, o).status().code(), Errc::unsupported);
}

// A workload of `profiles` hand-made profiles over kGeometry, one request each.
SimWorkload flat_workload(const std::vector<float>& p_per_profile, uint32_t output_tokens = 10) {
  SimWorkload w;
  w.geometry = kGeometry;
  w.domain_names = {"all"};
  const size_t cells = kGeometry.cells(), n = p_per_profile.size();
  w.prefill = {n, kGeometry.layers, kGeometry.experts, std::vector<int16_t>(n * cells)};
  for (size_t i = 0; i < n; ++i) {
    w.inclusion.insert(w.inclusion.end(), cells, p_per_profile[i]);
    SimRequest r;
    r.profile = static_cast<uint32_t>(i);
    r.output_tokens = output_tokens;
    w.requests.push_back(r);
    for (size_t c = 0; c < cells; ++c) w.prefill.data[i * cells + c] = static_cast<int16_t>(i);
  }
  return w;
}

TEST(sim_regimes, random_batch_distinct_is_the_expected_union) {
  // One profile, p everywhere: a batch of B has cells * (1 - (1 - p)^B) distinct experts.
  const SimWorkload w = flat_workload({0.1f});
  const double cells = static_cast<double>(kGeometry.cells());
  EXPECT_NEAR(random_batch_distinct(w, 1, 1), cells * 0.1, 1e-3);
  EXPECT_NEAR(random_batch_distinct(w, 8, 1), cells * (1.0 - std::pow(0.9, 8)), 1e-3);
  EXPECT_EQ(random_batch_distinct(SimWorkload{}, 8, 1), 0.0);
  // Two profiles drawn at random: the mean lies between the pure batches.
  const SimWorkload two = flat_workload({0.0f, 0.5f});
  const double d = random_batch_distinct(two, 4, 3, 64);
  EXPECT_GT(d, 0.0);
  EXPECT_LT(d, cells * (1.0 - std::pow(0.5, 4)));
}

TEST(sim_regimes, capacity_and_expert_share_by_hand) {
  const StepCost cost{2.0, 0.05, 10.0, 20};  // t0, tseq, alpha us, max batch
  // S_full = 2 + 0.05 * 20 + 10e-3 * 100 = 4 ms; a worker decodes 20 / 4 ms =
  // 5000 tokens/s, 50 requests/s at 100 output tokens; 4 workers: 200.
  const FleetCapacity c = fleet_capacity(cost, 4, 100.0, 100.0);
  EXPECT_DOUBLE_EQ(c.full_step_ms, 4.0);
  EXPECT_NEAR(c.requests_per_s, 200.0, 1e-9);
  EXPECT_EQ(fleet_capacity(cost, 4, 100.0, 0.0).requests_per_s, 0.0);
  // Share 0.5: alpha * D = T0 + TSEQ * B = 3 ms -> alpha = 30 us at D = 100.
  auto alpha = alpha_for_expert_share(cost, 100.0, 0.5);
  ASSERT_TRUE(alpha.is_ok());
  EXPECT_NEAR(*alpha, 30.0, 1e-9);
  for (double share : {0.2, 0.8}) {
    StepCost c2 = cost;
    c2.alpha_us = *alpha_for_expert_share(cost, 100.0, share);
    EXPECT_NEAR(c2.alpha_us / 1000.0 * 100.0 / c2.step_ms(20, 100.0), share, 1e-12);
  }
  EXPECT_FALSE(alpha_for_expert_share(cost, 100.0, 1.0).is_ok());
  EXPECT_FALSE(alpha_for_expert_share(cost, 100.0, 0.0).is_ok());
  EXPECT_FALSE(alpha_for_expert_share(cost, 0.0, 0.5).is_ok());
  EXPECT_FALSE(alpha_for_expert_share({0.0, 0.0, 1.0, 20}, 100.0, 0.5).is_ok());
  EXPECT_NEAR(mean_output_tokens(flat_workload({0.1f, 0.2f}, 30)), 30.0, 1e-12);
}

TEST(sim_regimes, utilization_one_half_keeps_batches_below_full) {
  // At half the capacity of random batches, round robin keeps up: every
  // request finishes and the mean batch stays well below max_batch.
  const SimSetup s = make_setup(600);
  SimOptions o = options(Policy::round_robin, 1.0);
  const double d = random_batch_distinct(s.evaluation, o.model.cost.max_batch, 1);
  const FleetCapacity cap = fleet_capacity(o.model.cost, 4, d, mean_output_tokens(s.evaluation));
  ASSERT_GT(cap.requests_per_s, 0.0);
  o.rate = 0.5 * cap.requests_per_s;
  auto r = simulate(s.evaluation, s.table, o);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->tpot_ms.size(), 600u);
  // Tokens served / steps = the mean batch.
  double tokens = 0;
  for (const auto& req : s.evaluation.requests) tokens += req.output_tokens;
  EXPECT_LT(tokens / static_cast<double>(r->steps), 0.8 * o.model.cost.max_batch);
}

TEST(sim_requests, resampling_draws_source_requests_with_replacement) {
  const SimWorkload w = flat_workload({0.1f, 0.2f, 0.3f});
  const SimWorkload a = resample_requests(w, 50, 7), b = resample_requests(w, 50, 7);
  const SimWorkload c = resample_requests(w, 50, 8);
  ASSERT_EQ(a.requests.size(), 50u);
  EXPECT_EQ(a.prefill.n, 50u);
  EXPECT_EQ(a.inclusion, w.inclusion);
  EXPECT_EQ(a.prefill.data, b.prefill.data);  // seeded
  EXPECT_NE(a.prefill.data, c.prefill.data);
  std::vector<int> seen(3, 0);
  for (uint64_t i = 0; i < 50; ++i) {
    const uint32_t p = a.requests[i].profile;
    ASSERT_LT(p, 3u);
    ++seen[p];
    // The prefill row travels with its request (flat_workload: row i holds i).
    EXPECT_EQ(a.prefill.row(i)[0], static_cast<int16_t>(p));
  }
  for (int k : seen) EXPECT_GT(k, 0);
  const uint64_t rows[] = {2, 0};
  const SimWorkload sel = select_requests(w, rows);
  ASSERT_EQ(sel.requests.size(), 2u);
  EXPECT_EQ(sel.requests[0].profile, 2u);
  EXPECT_EQ(sel.prefill.row(1)[0], 0);
}

TEST(sim_requests, drift_groups_split_labels_by_group_name) {
  auto d = drift_groups({"mmlu/bio", "gpqa/phys", "sorry/a", "mmlu/chem", "tulu"});
  ASSERT_TRUE(d.is_ok());
  EXPECT_EQ(d->calibration, (std::vector<std::string>{"gpqa", "mmlu"}));
  EXPECT_EQ(d->evaluation, (std::vector<std::string>{"sorry", "tulu"}));
  EXPECT_TRUE(d->calibrates("mmlu/anything"));
  EXPECT_FALSE(d->calibrates("sorry/a"));
  EXPECT_FALSE(d->calibrates("tulu"));
  EXPECT_EQ(label_group("a/b/c"), "a");
  EXPECT_EQ(drift_groups({"x/1", "x/2"}).status().code(), Errc::invalid_argument);
}

TEST(sim_requests, synthetic_requests_only_from_the_named_domains) {
  SyntheticSimOptions o;
  auto all = synthetic_sim_workload(kGeometry, o, 200, 3);
  ASSERT_TRUE(all.is_ok());
  ASSERT_GE(all->domain_names.size(), 2u);
  o.only_domains = {all->domain_names[1]};
  auto some = synthetic_sim_workload(kGeometry, o, 200, 3);
  ASSERT_TRUE(some.is_ok());
  for (const auto& r : some->requests) EXPECT_EQ(r.domain, 1u);
  EXPECT_EQ(some->inclusion, all->inclusion);  // the same model
  o.only_domains = {"no such domain"};
  EXPECT_EQ(synthetic_sim_workload(kGeometry, o, 10, 3).status().code(), Errc::invalid_argument);
}

TEST(sim, step_reports_feed_the_routers_online_fit_only_when_asked) {
  const SimSetup s = make_setup(300);
  SimOptions o = options(Policy::eldr_cost, 60.0);
  o.router.step_cost = o.model.cost;
  auto quiet = simulate(s.evaluation, s.table, o);
  o.report_steps = true;
  auto reported = simulate(s.evaluation, s.table, o);
  ASSERT_TRUE(quiet.is_ok() && reported.is_ok());
  EXPECT_EQ(quiet->router_step_samples, 0u);
  EXPECT_GT(reported->router_step_samples, 0u);
  EXPECT_LE(reported->router_step_samples, reported->steps);
  EXPECT_EQ(reported->tpot_ms.size(), 300u);
}

TEST(step_models, presets_cover_the_papers_models) {
  for (const char* name : {"qwen3-30b-a3b", "gpt-oss-120b", "gemma-4-26b-a4b", "gpt-oss-20b"}) {
    auto m = find_step_model(name);
    ASSERT_TRUE(m.is_ok()) << name;
    EXPECT_GT(m->cost.alpha_us, 0.0);
  }
  EXPECT_FALSE(find_step_model("llama").is_ok());
}

TEST(trace_workload, builds_footprints_and_profiles_from_token_expert_ids) {
  testing::TempDir dir("eldr_trace");
  // 2 layers, k = 1. Request 0: 2 prompt + 2 decode tokens; request 1: decode only (3 tokens).
  const std::vector<int32_t> ids{0, 1, 0, 1, 2, 3, 2, 1, /* r1 */ 3, 3, 3, 0, 1, 0};
  const uint64_t ids_shape[] = {7, 2, 1};
  ASSERT_TRUE(write_npy(dir.file("t.npy"), NpyDtype::i32, ids_shape, ids.data()).is_ok());
  const std::vector<int64_t> index{0, 2, 2, 4, 0, 3};
  const uint64_t index_shape[] = {2, 3};
  ASSERT_TRUE(write_npy(dir.file("i.npy"), NpyDtype::i64, index_shape, index.data()).is_ok());
  auto sut = load_trace_workload(dir.file("t.npy"), dir.file("i.npy"), "", 2);
  ASSERT_TRUE(sut.is_ok()) << sut.status().to_string();
  EXPECT_EQ(sut->geometry, (Geometry{2, 4, 1}));
  // Request 0 prefill: layer 0 {0, 0}, layer 1 {1, 1}.
  EXPECT_EQ(std::vector<int16_t>(sut->prefill.row(0).begin(), sut->prefill.row(0).end()),
            (std::vector<int16_t>{2, 0, 0, 0, 0, 2, 0, 0}));
  // Its decode tokens: layer 0 uses 2 twice, layer 1 uses 3 and 1 once each.
  const float* inc0 = &sut->inclusion[0];
  EXPECT_FLOAT_EQ(inc0[2], 0.999f);  // capped below 1
  EXPECT_FLOAT_EQ(inc0[4 + 3], 0.5f);
  EXPECT_FLOAT_EQ(inc0[4 + 1], 0.5f);
  // Request 1 is decode-only: its first 2 decode tokens stand in for the prefill.
  EXPECT_EQ(std::vector<int16_t>(sut->prefill.row(1).begin(), sut->prefill.row(1).end()),
            (std::vector<int16_t>{0, 0, 0, 2, 1, 0, 0, 1}));
  EXPECT_EQ(sut->requests[1].output_tokens, 3u);
}

TEST(trace_workload, rejects_indexes_outside_the_tokens) {
  testing::TempDir dir("eldr_trace");
  const std::vector<int32_t> ids{0, 1, 0, 1};
  const uint64_t ids_shape[] = {2, 2, 1};
  ASSERT_TRUE(write_npy(dir.file("t.npy"), NpyDtype::i32, ids_shape, ids.data()).is_ok());
  const std::vector<int64_t> index{1, 1, 5};
  const uint64_t index_shape[] = {1, 3};
  ASSERT_TRUE(write_npy(dir.file("i.npy"), NpyDtype::i64, index_shape, index.data()).is_ok());
  EXPECT_EQ(load_trace_workload(dir.file("t.npy"), dir.file("i.npy"), "").status().code(),
            Errc::out_of_range);
  // Values whose sum would overflow int64 are refused, not wrapped.
  const std::vector<int64_t> hostile{INT64_MAX, INT64_MAX, 1};
  ASSERT_TRUE(write_npy(dir.file("h.npy"), NpyDtype::i64, index_shape, hostile.data()).is_ok());
  EXPECT_EQ(load_trace_workload(dir.file("t.npy"), dir.file("h.npy"), "").status().code(),
            Errc::out_of_range);
  EXPECT_FALSE(load_trace_workload(dir.file("missing.npy"), dir.file("i.npy"), "").is_ok());
}

}  // namespace
}  // namespace eldr
