// eldr bench prompt: routing from the prompt beside routing a footprint, in
// one run (docs/benchmarks.md): predict + route p50/p99 for a prompt of
// --prompt-tokens token ids at L x E x K, and the predictor's memory per
// component with --prototypes prototypes over a --vocabulary of token ids.
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli_common.hpp"
#include "commands.hpp"
#include "eldr/fit.hpp"
#include "eldr/lab/synthetic.hpp"
#include "eldr/random.hpp"
#include "eldr/router.hpp"

namespace eldr::cli {

namespace {

using Clock = std::chrono::steady_clock;

struct PromptBenchArgs {
  uint32_t layers = 48, experts = 128, workers = 16, top_k = 8;
  uint32_t vocabulary = 200000, prompt_tokens = 2048, prototypes = 4096;
  uint32_t live_batch = 32;
  uint64_t decisions = 5000, seed = 1;
  bool json = false;
  PredictorOptions predictor;
};

// A prompt of `n` token ids for a request of domain d: a shared 64-token
// system prompt, then ids drawn from the domain's slice of the vocabulary
// (Zipf-like: squared uniform) and from the whole of it.
std::vector<uint32_t> domain_prompt(uint32_t d, uint32_t domains, uint32_t n, uint32_t vocabulary,
                                    Rng& rng) {
  std::vector<uint32_t> t;
  t.reserve(n);
  for (uint32_t i = 0; i < std::min(n, 64u); ++i) t.push_back(i);
  const uint32_t slice = vocabulary / domains;
  while (t.size() < n) {
    const double u = rng.uniform();
    const double z = rng.uniform();
    t.push_back(u < 0.6 ? d * slice + static_cast<uint32_t>(z * z * slice)
                        : static_cast<uint32_t>(z * z * vocabulary));
  }
  return t;
}

int run_bench_prompt(const PromptBenchArgs& a) {
  SyntheticOptions so;
  so.geometry = {a.layers, a.experts, a.top_k};
  so.seed = a.seed;
  if (Status s = so.geometry.validate(); !s) return report(s);
  auto cal = generate_synthetic(so, std::max<uint64_t>(a.prototypes, a.workers));
  if (!cal) return report(cal.status());
  FitOptions fo;
  fo.workers = a.workers;
  fo.seed = a.seed;
  auto table = fit_table({so.geometry, cal->prefill.n, cal->prefill.data, {}, cal->labels()}, fo);
  if (!table) return report(table.status());
  // Calibration prompts: one per footprint, of its domain; each as long as
  // the timed prompts, so every prototype keeps its full max_features keys.
  const auto domains = static_cast<uint32_t>(cal->domain_names.size());
  Rng rng(a.seed);
  std::vector<std::vector<uint32_t>> prompts;
  std::vector<Prompt> views;
  for (uint64_t i = 0; i < cal->prefill.n; ++i)
    prompts.push_back(domain_prompt(cal->domain[i], domains, a.prompt_tokens, a.vocabulary, rng));
  for (const auto& p : prompts) views.push_back(Prompt::of_tokens(p));
  const auto fit_t0 = Clock::now();
  PredictorOptions po = a.predictor;
  po.capacity = std::max(po.capacity, a.prototypes);
  auto predictor = Predictor::fit(so.geometry, views, cal->prefill.data, po);
  const double fit_s = std::chrono::duration<double>(Clock::now() - fit_t0).count();
  if (!predictor) return report(predictor.status());
  table->predictor = *predictor;
  auto shared = std::make_shared<const ClusterTable>(std::move(*table));

  SyntheticOptions eo = so;
  eo.seed = so.seed + 1;
  auto eval = generate_synthetic(eo, 512);
  if (!eval) return report(eval.status());
  std::vector<std::vector<uint32_t>> eval_prompts;
  for (uint64_t i = 0; i < eval->prefill.n; ++i)
    eval_prompts.push_back(
        domain_prompt(eval->domain[i], domains, a.prompt_tokens, a.vocabulary, rng));

  // As eldr bench route: every worker holds live_batch requests; each timed
  // decision routes one more and completes the oldest.
  auto time_route = [&](bool from_prompt, std::vector<uint64_t>& ns) -> Status {
    RouterOptions ro;
    ro.max_inflight = std::max<uint32_t>(8192, a.live_batch * a.workers + 1);
    auto router = Router::create(shared, ro);
    if (!router) return router.status();
    Router& r = **router;
    const uint64_t live = uint64_t{a.live_batch} * a.workers;
    const uint64_t n = eval->prefill.n;
    auto one = [&](uint64_t id) -> Result<Decision> {
      const uint64_t req = id % n;
      return from_prompt ? r.route_prompt(Prompt::of_tokens(eval_prompts[req]), {.request_id = id})
                         : r.route(eval->prefill.row(req), {.request_id = id});
    };
    for (uint64_t id = 0; id < live; ++id)
      if (auto d = one(id); !d) return d.status();
    const uint64_t warmup = std::min<uint64_t>(500, a.decisions);
    ns.reserve(a.decisions);
    for (uint64_t i = 0; i < a.decisions + warmup; ++i) {
      const uint64_t id = live + i;
      const auto t0 = Clock::now();
      auto d = one(id);
      const auto t1 = Clock::now();
      if (!d) return d.status();
      ELDR_TRY(r.complete_request(id - live));
      if (i >= warmup)
        ns.push_back(static_cast<uint64_t>(std::chrono::nanoseconds(t1 - t0).count()));
    }
    return Status::ok();
  };
  std::vector<uint64_t> footprint_ns, prompt_ns;
  if (Status s = time_route(false, footprint_ns); !s) return report(s);
  if (Status s = time_route(true, prompt_ns); !s) return report(s);
  const PredictorInfo info = (*predictor)->info();
  const uint64_t f50 = percentile(footprint_ns, 50), f99 = percentile(footprint_ns, 99);
  const uint64_t p50 = percentile(prompt_ns, 50), p99 = percentile(prompt_ns, 99);
  const double mib = 1048576.0;
  nlohmann::json j = {{"bench", "prompt"},
                      {"layers", a.layers},
                      {"experts", a.experts},
                      {"workers", a.workers},
                      {"prompt_tokens", a.prompt_tokens},
                      {"vocabulary", a.vocabulary},
                      {"prototypes", info.prototypes},
                      {"live_batch", a.live_batch},
                      {"decisions", a.decisions},
                      {"footprint_p50_ns", f50},
                      {"footprint_p99_ns", f99},
                      {"prompt_p50_ns", p50},
                      {"prompt_p99_ns", p99},
                      {"predictor_fit_s", fit_s},
                      {"memory_demand_mib", info.demand_bytes / mib},
                      {"memory_features_mib", info.feature_bytes / mib},
                      {"memory_index_mib", info.index_bytes / mib},
                      {"memory_total_mib", info.total_bytes() / mib}};
  if (a.json) {
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf(
      "prompt routing  L=%u E=%u K=%u  %u-token prompts, vocabulary %u, %u prototypes, "
      "%u requests live per worker\n",
      a.layers, a.experts, a.workers, a.prompt_tokens, a.vocabulary, info.prototypes, a.live_batch);
  std::printf("  route a footprint       p50 %7llu ns  p99 %7llu ns\n",
              static_cast<unsigned long long>(f50), static_cast<unsigned long long>(f99));
  std::printf("  predict + route prompt  p50 %7llu ns  p99 %7llu ns  (x%.1f)\n",
              static_cast<unsigned long long>(p50), static_cast<unsigned long long>(p99),
              f50 ? static_cast<double>(p50) / f50 : 0.0);
  std::printf(
      "  predictor memory %.1f MiB: demand %.1f, features %.1f, index %.1f "
      "(fitted in %.1f s)\n",
      info.total_bytes() / mib, info.demand_bytes / mib, info.feature_bytes / mib,
      info.index_bytes / mib, fit_s);
  return 0;
}

}  // namespace

void register_bench_prompt_command(CLI::App& bench) {
  auto a = std::make_shared<PromptBenchArgs>();
  auto* c = bench.add_subcommand("prompt", "routing from the prompt beside routing a footprint");
  c->add_option("--layers", a->layers)->check(CLI::Range(1u, kMaxLayers));
  c->add_option("--experts", a->experts)->check(CLI::Range(1u, kMaxExperts));
  c->add_option("--workers", a->workers)->check(CLI::Range(1u, 1024u));
  c->add_option("--top-k", a->top_k);
  c->add_option("--vocabulary", a->vocabulary)->check(CLI::Range(1024u, kMaxVocabulary));
  c->add_option("--prompt-tokens", a->prompt_tokens)->check(CLI::Range(64u, kMaxPromptTokens));
  c->add_option("--prototypes", a->prototypes, "calibration prompts = predictor prototypes")
      ->check(CLI::Range(16u, 1u << 20));
  c->add_option("--live-batch", a->live_batch)->check(CLI::Range(0u, 1024u));
  c->add_option("--decisions", a->decisions)->check(CLI::Range(uint64_t{1}, uint64_t{10000000}));
  c->add_option("--seed", a->seed);
  c->add_flag("--json", a->json, "one JSON line");
  add_predictor_options(c, &a->predictor);
  c->callback([a] { g_exit_code = run_bench_prompt(*a); });
}

}  // namespace eldr::cli
