// eldr sim's tables: the cluster table fitted on the calibration requests and,
// for routing from the prompt, the footprint predictor of each prompt form,
// optionally pre-learned on requests of the routed mix (--prelearn).
#include <map>
#include <tuple>

#include "cli_common.hpp"
#include "eldr/fit.hpp"
#include "sim_command.hpp"

namespace eldr::cli {

Result<std::shared_ptr<const ClusterTable>> fit_for(const Workloads& w, uint32_t workers,
                                                    bool plain, uint64_t seed) {
  std::vector<std::string> labels;
  for (const auto& r : w.calibration.requests)
    labels.push_back(w.calibration.domain_names[r.domain]);
  FitOptions fo;
  fo.workers = workers;
  fo.seed = seed;
  fo.balanced = !plain;
  auto t = fit_table({w.calibration.geometry, w.calibration.prefill.n, w.calibration.prefill.data,
                      w.calibration_decode.data, labels},
                     fo);
  if (!t) return t.status();
  return std::make_shared<const ClusterTable>(std::move(*t));
}

namespace {

// The footprint predictor of one prompt form, fitted on the calibration
// requests (their prompts -> their prefill footprints).
Result<std::shared_ptr<Predictor>> fit_predictor(const SimArgs& a, const SimWorkload& cal,
                                                 RouteFrom from) {
  if (!cal.has_prompts())
    return Status{Errc::invalid_argument, "the calibration requests have no prompts"};
  std::vector<Prompt> prompts;
  for (const SimRequest& r : cal.requests)
    prompts.push_back(from == RouteFrom::text ? Prompt::of_text(cal.prompt_texts[r.prompt])
                                              : Prompt::of_tokens(cal.prompt_tokens[r.prompt]));
  return Predictor::fit(cal.geometry, prompts, cal.prefill.data, a.predictor);
}

}  // namespace

// The table a run routes with: fitted once per (workers, plain); routing from
// the prompt, a copy carrying the predictor of its form (fitted once per
// seed), pre-learned on the first `prelearn` requests of the learn pool.

Result<std::shared_ptr<const ClusterTable>> table_for(const SimArgs& a, const Workloads& w,
                                                      const Run& run, uint64_t seed, Tables& t) {
  const auto key = std::make_pair(run.workers, run.plain);
  if (!t.fitted.count(key)) {
    auto fitted = fit_for(w, run.workers, run.plain, seed);
    if (!fitted) return fitted.status();
    t.fitted[key] = *fitted;
  }
  if (run.from == RouteFrom::footprint) return t.fitted[key];
  const auto rkey = std::make_tuple(run.workers, run.plain, run.from, run.prelearn);
  if (t.routed.count(rkey)) return t.routed[rkey];
  if (!t.predictors.count(run.from)) {
    auto p = fit_predictor(a, w.calibration, run.from);
    if (!p) return p.status();
    t.predictors[run.from] = *p;
  }
  auto table = std::make_shared<ClusterTable>(*t.fitted[key]);
  table->predictor = t.predictors[run.from];
  if (run.prelearn > 0) {
    table = with_own_predictor(*table);
    const SimWorkload& pool = w.learn_pool;
    if (!pool.has_prompts() || pool.requests.size() < run.prelearn)
      return Status{Errc::invalid_argument, "too few requests to pre-learn from"};
    PromptFeatures f;
    for (uint64_t i = 0; i < run.prelearn; ++i) {
      const uint32_t p = pool.requests[i].prompt;
      ELDR_TRY(extract_features(run.from == RouteFrom::text
                                    ? Prompt::of_text(pool.prompt_texts[p])
                                    : Prompt::of_tokens(pool.prompt_tokens[p]),
                                f));
      ELDR_TRY(table->predictor->learn(f, pool.prefill.row(i)));
    }
    table->predictor->flush();
  }
  return t.routed[rkey] = table;
}

// Routing from the prompt: the forms, online learning, the predictor.
void add_prompt_options(CLI::App* sim, SimArgs* a) {
  sim->add_option("--route-from", a->route_from,
                  "what the locality policies route from: footprint (the prefill's, default) | "
                  "prompt (token ids) | text; several: compared in one run (rows policy/prompt, "
                  "policy/text). The predictor is fitted on the calibration requests")
      ->expected(1, -1)
      ->check(CLI::IsMember({"footprint", "prompt", "text"}));
  sim->add_flag("--learn", a->learn,
                "routing from the prompt: each request's real prefill footprint reaches "
                "Router::learn after its prefill, so the predictor learns online");
  sim->add_option("--learn-delay-ms", a->learn_delay_ms,
                  "with --learn: how long after its routing a request's footprint arrives")
      ->check(CLI::Range(0.0, 60'000.0));
  sim->add_option("--prelearn", a->prelearn,
                  "the predictor first learns this many requests of the routed mix (drawn apart "
                  "from the evaluated ones); several: the online-learning curve (rows @N)")
      ->expected(1, -1);
  add_predictor_options(sim, &a->predictor);
  sim->add_option("--prompt-domain-share", a->synth.prompt_domain_share,
                  "synthetic: share of prompt tokens from the domain's words");
  sim->add_option("--prompt-subtopic-share", a->synth.prompt_subtopic_share,
                  "synthetic: share of prompt tokens from the subtopic's words");
}

}  // namespace eldr::cli
