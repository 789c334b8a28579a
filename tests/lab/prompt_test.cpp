// Prompts in the simulator's workloads and routing from them (eldr sim
// --route-from prompt|text, --learn).
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "eldr/fit.hpp"
#include "eldr/lab/sim.hpp"
#include "temp_dir.hpp"

namespace eldr {
namespace {

const Geometry kGeometry{8, 32, 4};

void write_gzip(const std::string& path, const std::string& text) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, text.data(), static_cast<unsigned>(text.size())),
            static_cast<int>(text.size()));
  gzclose(f);
}

SimWorkload tiny_workload(uint64_t n) {
  SyntheticSimOptions o;
  o.prompts = false;
  auto w = synthetic_sim_workload(kGeometry, o, n, 1);
  EXPECT_TRUE(w.is_ok());
  return std::move(*w);
}

TEST(sim_prompts, a_trace_s_prompts_load_from_jsonl_gz) {
  testing::TempDir dir;
  SimWorkload w = tiny_workload(3);
  EXPECT_FALSE(w.has_prompts());
  write_gzip(dir.file("tokens.jsonl.gz"),
             R"({"prompt": ["<|start|>", "system", " hi"], "decode": ["x"]})"
             "\n"
             R"({"prompt": [" hi", "<|start|>"]})"
             "\n"
             R"({"prompt": ["\u00e9t\u00e9", " hi"]})"
             "\n");
  ASSERT_TRUE(load_trace_prompts(dir.file("tokens.jsonl.gz"), w).is_ok());
  ASSERT_TRUE(w.has_prompts());
  // Ids in first-seen order; the text is the strings joined.
  EXPECT_EQ(w.prompt_tokens[0], (std::vector<uint32_t>{0, 1, 2}));
  EXPECT_EQ(w.prompt_tokens[1], (std::vector<uint32_t>{2, 0}));
  EXPECT_EQ(w.prompt_tokens[2], (std::vector<uint32_t>{3, 2}));
  EXPECT_EQ(w.prompt_texts[0], "<|start|>system hi");
  EXPECT_EQ(w.prompt_texts[2], "\xc3\xa9t\xc3\xa9 hi");
  for (uint32_t r = 0; r < 3; ++r) EXPECT_EQ(w.requests[r].prompt, r);
}

TEST(sim_prompts, a_bad_prompt_file_is_an_error_and_changes_nothing) {
  testing::TempDir dir;
  SimWorkload w = tiny_workload(2);
  const SimWorkload before = w;
  EXPECT_EQ(load_trace_prompts(dir.file("missing.jsonl.gz"), w).code(), Errc::io);
  write_gzip(dir.file("one.jsonl.gz"), R"({"prompt": ["a"]})");
  EXPECT_EQ(load_trace_prompts(dir.file("one.jsonl.gz"), w).code(), Errc::shape_mismatch);
  write_gzip(dir.file("bad.jsonl.gz"), "{\"prompt\": [\"a\"]}\n{\"prompt\": [1]}\n");
  EXPECT_EQ(load_trace_prompts(dir.file("bad.jsonl.gz"), w).code(), Errc::corrupt);
  write_gzip(dir.file("json.jsonl.gz"), "{\"prompt\": [\"a\"]}\nnot json\n");
  EXPECT_EQ(load_trace_prompts(dir.file("json.jsonl.gz"), w).code(), Errc::corrupt);
  EXPECT_EQ(w.prompt_tokens, before.prompt_tokens);
  EXPECT_FALSE(w.has_prompts());
}

// Bag-of-ids cosine of two prompts, the shared boilerplate left out.
double cosine(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b, size_t skip) {
  std::map<uint32_t, double> x, y;
  for (size_t i = skip; i < a.size(); ++i) x[a[i]] += 1;
  for (size_t i = skip; i < b.size(); ++i) y[b[i]] += 1;
  double dot = 0, nx = 0, ny = 0;
  for (auto [k, v] : x) {
    nx += v * v;
    if (auto it = y.find(k); it != y.end()) dot += v * it->second;
  }
  for (auto [k, v] : y) ny += v * v;
  return dot / std::sqrt(nx * ny);
}

TEST(sim_prompts, synthetic_prompts_depend_on_domain_and_are_deterministic) {
  SyntheticSimOptions o;
  auto w = synthetic_sim_workload(kGeometry, o, 120, 5);
  auto again = synthetic_sim_workload(kGeometry, o, 120, 5);
  ASSERT_TRUE(w.is_ok() && again.is_ok());
  ASSERT_TRUE(w->has_prompts());
  EXPECT_EQ(w->prompt_tokens, again->prompt_tokens);
  EXPECT_EQ(w->prompt_texts, again->prompt_texts);
  // The same footprints as without prompts (a generator of their own).
  o.prompts = false;
  auto bare = synthetic_sim_workload(kGeometry, o, 120, 5);
  ASSERT_TRUE(bare.is_ok());
  EXPECT_EQ(w->prefill.data, bare->prefill.data);
  // Shared boilerplate; the text spells the ids.
  const size_t skip = SyntheticSimOptions{}.prompt_boilerplate;
  for (const auto& t : w->prompt_tokens) {
    ASSERT_GT(t.size(), skip);
    EXPECT_TRUE(std::equal(t.begin(), t.begin() + skip, w->prompt_tokens[0].begin()));
  }
  const std::string first = std::to_string(w->prompt_tokens[0][0]);
  EXPECT_EQ(w->prompt_texts[0].substr(0, first.size() + 2), std::string("w").append(first) + " ");
  double same = 0, other = 0;
  int n_same = 0, n_other = 0;
  for (size_t i = 0; i < w->requests.size(); ++i)
    for (size_t j = i + 1; j < w->requests.size(); ++j) {
      const double c = cosine(w->prompt_tokens[i], w->prompt_tokens[j], skip);
      if (w->requests[i].domain == w->requests[j].domain) {
        same += c;
        ++n_same;
      } else {
        other += c;
        ++n_other;
      }
    }
  ASSERT_GT(n_same, 0);
  ASSERT_GT(n_other, 0);
  // Word counts (the general vocabulary's frequent words weigh most): the
  // same domain is clearly closer.
  EXPECT_GT(same / n_same, other / n_other + 0.08);
}

struct PromptSetup {
  SimWorkload calibration, evaluation;
  std::shared_ptr<ClusterTable> table;  // with a token-id predictor
};

// A strongly clustered workload: each domain's requests share many experts
// and many words.
PromptSetup make_prompt_setup(uint64_t requests, RouteFrom from = RouteFrom::prompt) {
  PromptSetup s;
  SyntheticSimOptions o;
  o.domain_affinity = 0.6;
  o.subtopic_affinity = 0.2;
  o.output_tokens_median = 40;
  o.output_tokens_max = 80;
  o.prompt_tokens_median = 60;
  o.prompt_domain_share = 0.3;
  CountsTensor decode;
  auto cal = synthetic_sim_workload(kGeometry, o, 300, 7, &decode);
  auto ev = synthetic_sim_workload(kGeometry, o, requests, 8);
  EXPECT_TRUE(cal.is_ok() && ev.is_ok());
  s.calibration = std::move(*cal);
  s.evaluation = std::move(*ev);
  FitOptions fo;
  fo.workers = 4;
  fo.rho_pairs = 2000;
  auto t = fit_table({kGeometry, 300, s.calibration.prefill.data, decode.data, {}}, fo);
  EXPECT_TRUE(t.is_ok()) << t.status().to_string();
  s.table = std::make_shared<ClusterTable>(std::move(*t));
  std::vector<Prompt> prompts;
  for (const auto& r : s.calibration.requests)
    prompts.push_back(from == RouteFrom::text
                          ? Prompt::of_text(s.calibration.prompt_texts[r.prompt])
                          : Prompt::of_tokens(s.calibration.prompt_tokens[r.prompt]));
  auto p = Predictor::fit(kGeometry, prompts, s.calibration.prefill.data);
  EXPECT_TRUE(p.is_ok()) << p.status().to_string();
  s.table->predictor = std::move(*p);
  return s;
}

SimOptions prompt_options(Policy p, double rate, RouteFrom from) {
  SimOptions o;
  o.model = {"test", kGeometry, {0.5, 0.02, 40.0, 16}};
  o.workers = 4;
  o.rate = rate;
  o.router.policy = p;
  o.route_from = from;
  return o;
}

TEST(sim_prompts, routing_from_the_prompt_runs_and_is_deterministic) {
  const PromptSetup s = make_prompt_setup(300);
  for (bool learn : {false, true}) {
    SimOptions o = prompt_options(Policy::eldr_cost, 60.0, RouteFrom::prompt);
    o.learn = learn;
    o.learn_delay_ms = 5.0;
    const uint64_t learned_before = s.table->predictor->info().learned;
    auto a = simulate(s.evaluation, s.table, o);
    auto b = simulate(s.evaluation, s.table, o);
    ASSERT_TRUE(a.is_ok() && b.is_ok()) << a.status().to_string();
    EXPECT_EQ(a->tpot_ms.size(), 300u);
    EXPECT_EQ(a->tpot_ms, b->tpot_ms);
    EXPECT_GT(a->mean_confidence, 0.0);
    EXPECT_LE(a->mean_confidence, 1.0);
    EXPECT_EQ(a->learned, learn ? 300u : 0u);
    // Learning works on a copy: the table's predictor is as fitted.
    EXPECT_EQ(s.table->predictor->info().learned, learned_before);
  }
}

TEST(sim_prompts, routing_from_the_prompt_needs_a_predictor_and_prompts) {
  PromptSetup s = make_prompt_setup(20);
  SimOptions o = prompt_options(Policy::eldr_cost, 10.0, RouteFrom::text);
  // A token-id predictor cannot predict from text.
  EXPECT_EQ(simulate(s.evaluation, s.table, o).status().code(), Errc::unsupported);
  SimWorkload bare = s.evaluation;
  bare.prompt_tokens.clear();
  bare.prompt_texts.clear();
  o.route_from = RouteFrom::prompt;
  EXPECT_EQ(simulate(bare, s.table, o).status().code(), Errc::invalid_argument);
  auto no_predictor = std::make_shared<ClusterTable>(*s.table);
  no_predictor->predictor = nullptr;
  EXPECT_EQ(simulate(s.evaluation, no_predictor, o).status().code(), Errc::invalid_argument);
  o.routers = 2;
  EXPECT_EQ(simulate(s.evaluation, s.table, o).status().code(), Errc::unsupported);
  EXPECT_EQ(parse_route_from("text").value(), RouteFrom::text);
  EXPECT_FALSE(parse_route_from("prefill").is_ok());
}

// Fails if the prompts are ignored: on a strongly clustered workload
// eldr_cost routed from the predicted footprint gathers each domain's
// requests and beats random routing, from token ids and from text; with
// prompts that say nothing (shuffled between requests) it does not gain as
// much.
TEST(sim_prompts, eldr_cost_from_the_prompt_beats_random_on_clustered_traffic) {
  for (RouteFrom from : {RouteFrom::prompt, RouteFrom::text}) {
    const PromptSetup s = make_prompt_setup(1500, from);
    auto rnd = simulate(s.evaluation, s.table, prompt_options(Policy::random, 200.0, from));
    auto cost = simulate(s.evaluation, s.table, prompt_options(Policy::eldr_cost, 200.0, from));
    ASSERT_TRUE(rnd.is_ok() && cost.is_ok()) << cost.status().to_string();
    EXPECT_LT(cost->experts_per_step, 0.95 * rnd->experts_per_step) << route_from_name(from);
    EXPECT_LT(cost->tpot_p50_ms, 0.95 * rnd->tpot_p50_ms) << route_from_name(from);
    SimWorkload shuffled = s.evaluation;
    for (size_t r = 0; r < shuffled.requests.size(); ++r)
      shuffled.requests[r].prompt = s.evaluation.requests[(r * 7919) % 1500].prompt;
    auto blind = simulate(shuffled, s.table, prompt_options(Policy::eldr_cost, 200.0, from));
    ASSERT_TRUE(blind.is_ok());
    EXPECT_GT(blind->experts_per_step, cost->experts_per_step) << route_from_name(from);
  }
}

}  // namespace
}  // namespace eldr
