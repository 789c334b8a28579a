// eldr sim: what routing policy buys, on a simulated decode fleet driven by the
// real router (docs/design.md §1 step-time model).
#include "sim_command.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <tuple>

#include "cli_common.hpp"
#include "commands.hpp"
#include "eldr/fit.hpp"
#include "eldr/lab/sim.hpp"

namespace eldr::cli {

namespace {

bool is_baseline(Policy p) {
  return p == Policy::round_robin || p == Policy::random || p == Policy::jsq || p == Policy::p2c;
}

// ---- parse: the arguments into a step model and the runs -----------------------

// A trace's step model: --preset when given, else the preset of its geometry;
// then the constants given on the command line.
Result<StepModel> step_model(const SimArgs& a, const std::optional<SimWorkload>& trace) {
  const bool synthetic = !trace;
  auto model =
      synthetic || a.preset_given ? find_step_model(a.preset) : step_model_for(trace->geometry);
  if (!model && !synthetic && !a.preset_given) {
    std::fprintf(stderr, "eldr sim: %s; using the %s preset's step constants\n",
                 model.status().to_string().c_str(), a.preset.c_str());
    model = find_step_model(a.preset);
  }
  if (!model) return model.status();
  if (a.t0_ms >= 0) model->cost.t0_ms = a.t0_ms;
  if (a.tseq_ms >= 0) model->cost.tseq_ms = a.tseq_ms;
  if (a.alpha_us >= 0) model->cost.alpha_us = a.alpha_us;
  if (a.max_batch) model->cost.max_batch = a.max_batch;
  return model;
}

// The simulations of one seed and rate: --policies, or an --ablation's set.
Result<std::vector<Run>> plan_runs(const SimArgs& a) {
  std::vector<Run> runs;
  const std::vector<std::string> baselines{"round_robin", "random", "jsq", "p2c"};
  auto add_baselines = [&](uint32_t workers) {
    for (const auto& b : baselines) runs.push_back({b, *parse_policy(b), a.tau, false, workers});
  };
  std::vector<RouteFrom> froms;
  for (const auto& f : a.route_from) {
    auto from = parse_route_from(f);
    if (!from) return from.status();
    if (std::find(froms.begin(), froms.end(), *from) == froms.end()) froms.push_back(*from);
  }
  if (!a.ablation.empty() && (froms.size() != 1 || froms[0] != RouteFrom::footprint))
    return Status{Errc::invalid_argument, "--ablation routes from footprints only"};
  std::vector<uint64_t> prelearn = a.prelearn.empty() ? std::vector<uint64_t>{0} : a.prelearn;
  if (a.ablation.empty()) {
    for (const auto& p : a.policies) {
      auto pol = parse_policy(p);
      if (!pol) return Status{Errc::invalid_argument, "unknown policy '" + p + "'"};
      // The load balancers and the label oracle read no footprint: one run.
      if (is_baseline(*pol) || *pol == Policy::domain) {
        runs.push_back({p, *pol, a.tau, a.plain_kmeans, a.workers});
        continue;
      }
      for (RouteFrom from : froms) {
        if (from == RouteFrom::footprint) {
          runs.push_back({p, *pol, a.tau, a.plain_kmeans, a.workers});
          continue;
        }
        for (uint64_t n : prelearn) {
          std::string name = p + "/" + route_from_name(from);
          if (!a.prelearn.empty()) name += "@" + std::to_string(n);
          runs.push_back({name, *pol, a.tau, a.plain_kmeans, a.workers, from, n});
        }
      }
    }
  } else if (a.ablation == "tau") {
    add_baselines(a.workers);
    for (float t : {0.0f, 0.1f, 0.2f, 0.3f}) {
      char name[32];
      std::snprintf(name, sizeof name, "eldr tau=%.1f", t);
      runs.push_back({name, Policy::eldr, t, false, a.workers});
    }
  } else if (a.ablation == "kmeans") {
    add_baselines(a.workers);
    runs.push_back({"eldr balanced", Policy::eldr, a.tau, false, a.workers});
    runs.push_back({"eldr plain", Policy::eldr, a.tau, true, a.workers});
  } else if (a.ablation == "fleet") {
    for (uint32_t k : {8u, 16u, 24u}) {
      for (const auto& b : baselines)
        runs.push_back({b + " K=" + std::to_string(k), *parse_policy(b), a.tau, false, k});
      runs.push_back({"eldr K=" + std::to_string(k), Policy::eldr, a.tau, false, k});
      runs.push_back({"eldr_guard K=" + std::to_string(k), Policy::eldr_guard, a.tau, false, k});
    }
  } else {
    return Status{Errc::invalid_argument,
                  "unknown ablation '" + a.ablation + "' (tau|kmeans|fleet)"};
  }
  return runs;
}

Status parse_sim(const SimArgs& a, SimSetup* s) {
  if (a.rate_given && !a.utilizations.empty())
    return {Errc::invalid_argument, "give --rate or --utilization, not both"};
  if (a.expert_share >= 0 && a.alpha_us >= 0)
    return {Errc::invalid_argument, "give --alpha-us or --expert-share, not both"};
  if (!is_synthetic(a.workload)) {
    auto t = load_trace(a);
    if (!t) return t.status();
    s->trace = std::move(*t);
  }
  auto model = step_model(a, s->trace);
  if (!model) return model.status();
  s->model = std::move(*model);
  auto runs = plan_runs(a);
  if (!runs) return runs.status();
  s->runs = std::move(*runs);
  return {};
}

// The first seed's workloads fix D_rand, the expert share's alpha, the
// capacity and the rates.
Result<Workloads> scale_to_first_seed(const SimArgs& a, SimSetup* s) {
  auto first = make_workloads(a, s->model, s->trace ? &*s->trace : nullptr, a.seed);
  if (!first) return first.status();
  StepCost& cost = s->model.cost;
  s->d_rand = random_batch_distinct(first->evaluation, cost.max_batch, a.seed, 8);
  if (a.expert_share >= 0) {
    auto alpha = alpha_for_expert_share(cost, s->d_rand, a.expert_share);
    if (!alpha) return alpha.status();
    cost.alpha_us = *alpha;
  }
  s->cap = fleet_capacity(cost, a.workers, s->d_rand, mean_output_tokens(first->evaluation));
  s->share =
      s->cap.full_step_ms > 0 ? cost.alpha_us / 1000.0 * s->d_rand / s->cap.full_step_ms : 0.0;
  s->rates = a.rates;
  if (!a.utilizations.empty()) {
    if (!(s->cap.requests_per_s > 0))
      return Status{Errc::invalid_argument, "the fleet's capacity is 0: no utilization"};
    s->rates.clear();
    for (double u : a.utilizations) s->rates.push_back(u * s->cap.requests_per_s);
  }
  s->evaluated = first->evaluation.requests.size();
  s->resampled = first->resampled;
  return first;
}

// ---- run: every (rate, run, seed) cell ------------------------------------------

SimOptions sim_options(const SimArgs& a, const SimSetup& s, const Run& run, double rate,
                       uint64_t seed) {
  SimOptions so;
  so.model = s.model;
  so.workers = run.workers;
  so.rate = rate;
  so.seed = seed;
  so.report_steps = a.report_steps;
  so.routers = a.routers;
  so.view_delay_ms = a.view_delay_ms;
  so.bookings_carry_footprints = a.bookings == "footprints";
  so.anticipate_peers = a.anticipate;
  so.lead_share = a.lead_share;
  so.rate_aware_twins = !a.even_twins;
  so.route_from = run.from;
  so.learn = a.learn;
  so.learn_delay_ms = a.learn_delay_ms;
  so.router.policy = run.policy;
  so.router.tau = run.tau;
  so.router.seed = seed;
  so.router.guard_slack = a.guard_slack;
  so.router.guard_ratio = a.guard_ratio;
  so.router.step_cost = s.model.cost;
  so.router.step_cost->alpha_us *= a.model_error;
  if (a.cost_cells) so.router.cost_cells = a.cost_cells;
  return so;
}

// Reductions against the best load-balancing baseline of the same fleet and seed.
void add_reductions(const std::vector<Run>& runs, std::vector<std::vector<Cell>>& at_rate,
                    size_t si) {
  for (size_t ui = 0; ui < runs.size(); ++ui) {
    double b50 = 1e300, b99 = 1e300;
    for (size_t bi = 0; bi < runs.size(); ++bi)
      if (is_baseline(runs[bi].policy) && runs[bi].workers == runs[ui].workers) {
        b50 = std::min(b50, at_rate[bi][si].p50);
        b99 = std::min(b99, at_rate[bi][si].p99);
      }
    Cell& c = at_rate[ui][si];
    c.red50 = b50 < 1e300 ? 100.0 * (b50 - c.p50) / b50 : 0.0;
    c.red99 = b99 < 1e300 ? 100.0 * (b99 - c.p99) / b99 : 0.0;
  }
}

// One seed's cells at every rate.
Status run_seed(const SimArgs& a, const SimSetup& s, const Workloads& w, uint32_t si,
                ProgressBar& bar, Grid& grid) {
  const uint64_t seed = a.seed + si;
  Tables tables;
  for (size_t ri = 0; ri < s.rates.size(); ++ri) {
    for (size_t ui = 0; ui < s.runs.size(); ++ui) {
      const Run& run = s.runs[ui];
      auto table = table_for(a, w, run, seed, tables);
      if (!table) return table.status();
      SimOptions so = sim_options(a, s, run, s.rates[ri], seed);
      const std::string stage =
          "sim " + run.name + (a.seeds > 1 ? " seed " + std::to_string(seed) : "");
      so.progress = [&](double f) { bar.update(stage, f); };
      auto r = simulate(w.evaluation, *table, so);
      if (!r) return r.status();
      Cell cell{r->tpot_p50_ms,
                r->tpot_p99_ms,
                r->tpot_mean_ms,
                r->experts_per_step,
                r->worker_load_max_over_mean,
                0,
                0};
      cell.router_cost = r->router_step_cost;
      cell.confidence = r->mean_confidence;
      cell.learned = r->learned;
      grid.cells[ri][ui].push_back(cell);
      if (si == 0 && !a.plot_dir.empty()) {
        const auto& samples = r->experts_per_step_samples;
        for (size_t i = 0; i < samples.size(); i += std::max<size_t>(1, samples.size() / 20000))
          grid.hist[ri][ui].push_back(samples[i]);
      }
    }
    add_reductions(s.runs, grid.cells[ri], si);
  }
  return {};
}

Status run_grid(const SimArgs& a, const SimSetup& s, Result<Workloads> first, Grid& grid) {
  grid.cells.assign(s.rates.size(), std::vector<std::vector<Cell>>(s.runs.size()));
  grid.hist.assign(s.rates.size(), std::vector<std::vector<float>>(s.runs.size()));
  ProgressBar bar;
  for (uint32_t si = 0; si < a.seeds; ++si) {
    Result<Workloads> w = std::move(first);
    if (si > 0) w = make_workloads(a, s.model, s.trace ? &*s.trace : nullptr, a.seed + si);
    if (!w) return w.status();
    ELDR_TRY(run_seed(a, s, *w, si, bar, grid));
  }
  bar.finish();
  return {};
}

int run_sim(const SimArgs& a) {
  SimSetup s;
  if (Status st = parse_sim(a, &s); !st) return report(st);
  const auto t_start = std::chrono::steady_clock::now();
  auto first = scale_to_first_seed(a, &s);
  if (!first) return report(first.status());
  Grid grid;
  if (Status st = run_grid(a, s, std::move(first), grid); !st) return report(st);
  return report_sim(a, s, grid, t_start);
}

// The options of the router processes: step reports, several routers, their views.
void add_router_options(CLI::App* sim, SimArgs* a) {
  sim->add_flag(
      "--report-steps", a->report_steps,
      "workers report every step (batch + queue, running, step ms) to the router, which fits "
      "its step constants online");
  sim->add_option("--routers", a->routers,
                  "routers sharing the fleet; each arrival goes to one at random")
      ->check(CLI::Range(1u, 64u));
  sim->add_option("--view-delay-ms,--staleness", a->view_delay_ms,
                  "each router sees the others' routes and finishes this much later (ms)")
      ->check(CLI::Range(0.0, 60'000.0));
  sim->add_option("--bookings", a->bookings,
                  "what a router tells the others: footprints (counted and in the batch) | counts")
      ->check(CLI::IsMember({"footprints", "counts"}));
  sim->add_flag("--anticipate,!--no-anticipate", a->anticipate,
                "against herding (default on): each pick also books a twin for each pick the "
                "others make meanwhile (their rate over this router's) until their bookings can "
                "have arrived");
  sim->add_option("--lead-share", a->lead_share,
                  "router 0 takes this share of the arrivals, the others the rest evenly (0: even)")
      ->check(CLI::Range(0.0, 0.99));
  sim->add_flag("--even-twins", a->even_twins,
                "book routers - 1 twins a pick whatever the routers' rates (before rate-aware "
                "twins)");
}

// The policies and the constants of the step model.
void add_policy_options(CLI::App* sim, SimArgs* a) {
  sim->add_option("--policies", a->policies)->expected(1, -1);
  sim->add_option("--tau", a->tau)->check(CLI::Range(0.0f, 2.0f));
  sim->add_option("--guard-slack", a->guard_slack,
                  "eldr_guard: least slack above the minimum load");
  sim->add_option("--guard-ratio", a->guard_ratio, "eldr_guard: slack as a share of the mean load");
  sim->add_option("--ablation", a->ablation, "tau | kmeans | fleet (8, 16, 24 workers)");
  sim->add_option("--seed", a->seed);
  sim->add_option("--t0-ms", a->t0_ms);
  sim->add_option("--tseq-ms", a->tseq_ms);
  sim->add_option("--alpha-us", a->alpha_us);
  sim->add_option("--max-batch", a->max_batch);
  sim->add_option("--cost-cells", a->cost_cells,
                  "eldr_cost reads every s-th layer, at most about this many cells (ablation)")
      ->check(CLI::Range(1u, 65536u));
  sim->add_option("--model-error", a->model_error,
                  "the router's alpha (expert load time) is this many times the simulator's")
      ->check(CLI::Range(1e-3, 1e3));
  sim->add_flag("--plain-kmeans", a->plain_kmeans);
  sim->add_option("--domain-affinity", a->synth.domain_affinity,
                  "synthetic: share of picks from the domain's experts");
  sim->add_option("--subtopic-affinity", a->synth.subtopic_affinity,
                  "synthetic: share of picks from the subtopic's experts");
  sim->add_option("--plot-dir", a->plot_dir, "write PNG plots and JSON here");
  sim->add_flag("--json", a->json, "one JSON object keyed by policy");
}

}  // namespace

void register_sim_command(CLI::App& app) {
  auto a = std::make_shared<SimArgs>();
  auto* sim = app.add_subcommand("sim", "simulate a decode fleet: TPOT per routing policy");
  auto* preset = sim->add_option(
      "--preset", a->preset,
      "model preset (step-time model and geometry); a trace defaults to the preset of its "
      "geometry");
  sim->add_option("--workload", a->workload, "task | language | trace directory");
  sim->add_option("--workers", a->workers)->check(CLI::Range(1u, 1024u));
  auto* rate = sim->add_option("--rate", a->rates, "arrivals per second (several: a sweep)")
                   ->expected(1, -1);
  sim->add_option("--utilization", a->utilizations,
                  "load as a share of the fleet's capacity (several: a sweep; replaces --rate): "
                  "rate = U * workers * max_batch / (mean output tokens * S_full), S_full = "
                  "step_ms(max_batch, D_rand), D_rand = expected distinct experts of a random "
                  "batch of max_batch evaluated requests")
      ->expected(1, -1)
      ->delimiter(',')
      ->check(CLI::Range(1e-6, 1.5));
  sim->add_option("--expert-share", a->expert_share,
                  "set alpha so that loading experts (alpha * D_rand) is this share of S_full, "
                  "T0 and TSEQ kept")
      ->check(CLI::Range(1e-6, 1.0 - 1e-6));
  sim->add_option("--requests,-n", a->requests)->check(CLI::Range(uint64_t{1}, uint64_t{10000000}));
  sim->add_option("--calibration", a->calibration, "calibration requests (disjoint)");
  sim->add_option("--calibration-max-share", a->calibration_max_share,
                  "trace: at most this share of its requests calibrate (default 0.2)")
      ->check(CLI::Range(0.01, 0.9));
  sim->add_option(
      "--resample", a->resample,
      "trace: draw the evaluated requests with replacement (seeded) up to --requests "
      "when the trace has fewer (default on; synthetic workloads are generated to size)");
  sim->add_flag("--drift", a->drift,
                "calibrate on the first half of the label groups by name (a trace's benchmarks, "
                "the synthetic domains), route the others");
  sim->add_option("--seeds", a->seeds,
                  "repeat each cell with this many seeds (arrivals, workload draw, router): "
                  "medians, and the min..max of the reductions")
      ->check(CLI::Range(1u, 1000u));
  add_router_options(sim, a.get());
  add_prompt_options(sim, a.get());
  add_policy_options(sim, a.get());
  sim->footer(
      "Utilization U: the arrival rate as a share of the fleet's capacity, capacity = workers * "
      "max_batch / (mean output tokens * S_full) requests/s, S_full = T0 + TSEQ * max_batch + "
      "alpha * D_rand the step of a full batch of random requests (D_rand: the mean over 8 random "
      "batches of max_batch evaluated requests of sum over (layer, expert) of 1 - prod(1 - p)). "
      "Expert share S: alpha * D_rand / S_full. Both are reported (JSON: utilization, rate, "
      "capacity_rps, expert_share, alpha_us).");
  sim->callback([a, preset, rate] {
    a->preset_given = preset->count() > 0;
    a->rate_given = rate->count() > 0;
    g_exit_code = run_sim(*a);
  });
}

}  // namespace eldr::cli
