// eldr sim: what routing policy buys, on a simulated decode pool driven by the
// real router (docs/design.md §1 step-time model).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "cli_common.hpp"
#include "commands.hpp"
#include "eldr/fit.hpp"
#include "eldr/lab/sim.hpp"
#include "plot_sim_script.hpp"

namespace eldr::cli {

namespace {

// The embedded plot script, piped into Debian's python3 (sys.argv[1] = dir).
Status plot(const std::string& dir) {
  std::string quoted = "'";
  for (char c : dir) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  quoted += "'";
  const std::string cmd = "/usr/bin/python3 - " + quoted;
  FILE* py = ::popen(cmd.c_str(), "w");
  if (py == nullptr) return {Errc::io, "cannot run " + cmd};
  const size_t n = sizeof(kPlotSimScript) - 1;
  const bool written = std::fwrite(kPlotSimScript, 1, n, py) == n;
  if (::pclose(py) != 0 || !written)
    return {Errc::io, "plotting failed (needs Debian's python3-matplotlib): " + cmd};
  return {};
}

struct SimArgs {
  std::string preset = "qwen3-30b-a3b", workload = "task", ablation, plot_dir;
  std::vector<std::string> policies{"round_robin", "random", "jsq",       "p2c",
                                    "domain",      "eldr",   "eldr_guard"};
  std::vector<double> rates{40.0};
  uint32_t workers = 16, max_batch = 0, guard_slack = 2;
  float guard_ratio = 0.25f;
  uint64_t requests = 20000, calibration = 1000, seed = 1;
  float tau = 0.1f;
  double t0_ms = -1, tseq_ms = -1, alpha_us = -1;
  double model_error = 1.0;  // the router's alpha = this * the simulator's
  SyntheticSimOptions synth;
  bool json = false, plain_kmeans = false;
};

struct Run {
  std::string name;  // policy, or policy + ablation setting
  Policy policy;
  float tau;
  bool plain = false;
  uint32_t workers;
};

bool is_baseline(Policy p) {
  return p == Policy::round_robin || p == Policy::random || p == Policy::jsq || p == Policy::p2c;
}

struct Workloads {
  SimWorkload calibration, evaluation;
  CountsTensor calibration_decode;
};

Result<Workloads> make_workloads(const SimArgs& a, const StepModel& model) {
  Workloads w;
  if (a.workload == "task" || a.workload == "language") {
    SyntheticSimOptions o = a.synth;
    o.preset = a.workload;
    auto cal = synthetic_sim_workload(model.geometry, o, a.calibration, a.seed + 100,
                                      &w.calibration_decode);
    if (!cal) return cal.status();
    auto ev = synthetic_sim_workload(model.geometry, o, a.requests, a.seed + 200);
    if (!ev) return ev.status();
    w.calibration = std::move(*cal);
    w.evaluation = std::move(*ev);
    return w;
  }
  // A trace directory: token_experts.npy, index.npy, optional labels.txt.
  const std::string dir = a.workload + "/";
  const std::string labels = std::filesystem::exists(dir + "labels.txt") ? dir + "labels.txt" : "";
  auto all = load_trace_workload(dir + "token_experts.npy", dir + "index.npy", labels);
  if (!all) return all.status();
  const uint64_t n = all->requests.size();
  const uint64_t n_cal = std::min<uint64_t>(a.calibration, n / 5);
  if (n_cal < 2 || n - n_cal < 1)
    return Status{Errc::invalid_argument, "the trace needs at least 10 requests"};
  const size_t cells = all->geometry.cells();
  auto split = [&](uint64_t first, uint64_t count) {
    SimWorkload s;
    s.geometry = all->geometry;
    s.domain_names = all->domain_names;
    s.requests.assign(all->requests.begin() + first, all->requests.begin() + first + count);
    for (auto& r : s.requests) r.profile -= static_cast<uint32_t>(first);
    s.prefill = {count, all->geometry.layers, all->geometry.experts,
                 std::vector<int16_t>(all->prefill.data.begin() + first * cells,
                                      all->prefill.data.begin() + (first + count) * cells)};
    s.inclusion.assign(all->inclusion.begin() + first * cells,
                       all->inclusion.begin() + (first + count) * cells);
    return s;
  };
  // Calibration: the first requests (disjoint from the evaluated ones); their
  // decode counts come from the trace's own decode tokens.
  w.calibration = split(0, n_cal);
  w.evaluation = split(n_cal, std::min<uint64_t>(a.requests, n - n_cal));
  w.calibration_decode = {n_cal, all->geometry.layers, all->geometry.experts,
                          std::vector<int16_t>(n_cal * cells)};
  for (uint64_t r = 0; r < n_cal; ++r)
    for (size_t c = 0; c < cells; ++c)
      w.calibration_decode.data[r * cells + c] = static_cast<int16_t>(std::lround(
          w.calibration.inclusion[r * cells + c] * w.calibration.requests[r].output_tokens));
  return w;
}

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

int run_sim(const SimArgs& a) {
  auto model = find_step_model(a.preset);
  if (!model) return report(model.status());
  if (a.t0_ms >= 0) model->cost.t0_ms = a.t0_ms;
  if (a.tseq_ms >= 0) model->cost.tseq_ms = a.tseq_ms;
  if (a.alpha_us >= 0) model->cost.alpha_us = a.alpha_us;
  if (a.max_batch) model->cost.max_batch = a.max_batch;

  std::vector<Run> runs;
  const std::vector<std::string> baselines{"round_robin", "random", "jsq", "p2c"};
  auto add_baselines = [&](uint32_t workers) {
    for (const auto& b : baselines) runs.push_back({b, *parse_policy(b), a.tau, false, workers});
  };
  if (a.ablation.empty()) {
    for (const auto& p : a.policies) {
      auto pol = parse_policy(p);
      if (!pol) return report({Errc::invalid_argument, "unknown policy '" + p + "'"});
      runs.push_back({p, *pol, a.tau, a.plain_kmeans, a.workers});
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
  } else if (a.ablation == "pool") {
    for (uint32_t k : {8u, 16u, 24u}) {
      for (const auto& b : baselines)
        runs.push_back({b + " K=" + std::to_string(k), *parse_policy(b), a.tau, false, k});
      runs.push_back({"eldr K=" + std::to_string(k), Policy::eldr, a.tau, false, k});
      runs.push_back({"eldr_guard K=" + std::to_string(k), Policy::eldr_guard, a.tau, false, k});
    }
  } else {
    return report(
        {Errc::invalid_argument, "unknown ablation '" + a.ablation + "' (tau|kmeans|pool)"});
  }

  const auto t_start = std::chrono::steady_clock::now();
  auto w = make_workloads(a, *model);
  if (!w) return report(w.status());
  std::map<std::pair<uint32_t, bool>, std::shared_ptr<const ClusterTable>> tables;
  ProgressBar bar;
  nlohmann::json out = nlohmann::json::object();
  for (double rate : a.rates) {
    std::map<std::string, SimResult> results;
    for (const Run& run : runs) {
      auto key = std::make_pair(run.workers, run.plain);
      if (!tables.count(key)) {
        auto t = fit_for(*w, run.workers, run.plain, a.seed);
        if (!t) return report(t.status());
        tables[key] = *t;
      }
      SimOptions so;
      so.model = *model;
      so.workers = run.workers;
      so.rate = rate;
      so.seed = a.seed;
      so.router.policy = run.policy;
      so.router.tau = run.tau;
      so.router.seed = a.seed;
      so.router.guard_slack = a.guard_slack;
      so.router.guard_ratio = a.guard_ratio;
      so.router.step_cost = model->cost;
      so.router.step_cost->alpha_us *= a.model_error;
      so.progress = [&](double f) { bar.update("sim " + run.name, f); };
      auto r = simulate(w->evaluation, tables[key], so);
      if (!r) return report(r.status());
      results[run.name] = std::move(*r);
    }
    bar.finish();
    // Reductions against the best load-balancing baseline of the same pool.
    auto best_baseline = [&](const Run& run, bool p99) {
      double best = 1e300;
      for (const Run& b : runs)
        if (is_baseline(b.policy) && b.workers == run.workers) {
          const auto& r = results[b.name];
          best = std::min(best, p99 ? r.tpot_p99_ms : r.tpot_p50_ms);
        }
      return best;
    };
    if (!a.json) {
      std::printf(
          "%s, %s workload, %u workers, %.1f req/s, %zu requests (model: t0 %.2f ms, "
          "tseq %.3f ms, alpha %.2f us, batch %u)\n",
          model->name.c_str(), a.workload.c_str(), a.workers, rate, w->evaluation.requests.size(),
          model->cost.t0_ms, model->cost.tseq_ms, model->cost.alpha_us, model->cost.max_batch);
      std::printf("  %-22s %9s %9s %9s %9s %13s %10s\n", "policy", "p50 ms", "p99 ms", "p50 red%",
                  "p99 red%", "experts/step", "load max/mean");
    }
    for (const Run& run : runs) {
      const SimResult& r = results[run.name];
      const double b50 = best_baseline(run, false), b99 = best_baseline(run, true);
      const double red50 = b50 < 1e300 ? 100.0 * (b50 - r.tpot_p50_ms) / b50 : 0.0;
      const double red99 = b99 < 1e300 ? 100.0 * (b99 - r.tpot_p99_ms) / b99 : 0.0;
      nlohmann::json entry = {{"rate", rate},
                              {"workers", run.workers},
                              {"p50_ms", r.tpot_p50_ms},
                              {"p99_ms", r.tpot_p99_ms},
                              {"mean_ms", r.tpot_mean_ms},
                              {"experts_per_step", r.experts_per_step},
                              {"load_max_over_mean", r.worker_load_max_over_mean},
                              {"p50_reduction_pct", red50},
                              {"p99_reduction_pct", red99}};
      if (!out.contains(run.name)) {
        out[run.name] = entry;
        out[run.name]["by_rate"] = nlohmann::json::array();
      }
      out[run.name]["by_rate"].push_back(entry);
      if (!a.json)
        std::printf("  %-22s %9.2f %9.2f %9.1f %9.1f %13.1f %10.2f\n", run.name.c_str(),
                    r.tpot_p50_ms, r.tpot_p99_ms, red50, red99, r.experts_per_step,
                    r.worker_load_max_over_mean);
    }
    if (!a.plot_dir.empty()) {
      // Distribution of distinct experts per step, one file per rate.
      std::filesystem::create_directories(a.plot_dir);
      std::ofstream hist(a.plot_dir + "/experts_per_step_" +
                         std::to_string(static_cast<int>(rate)) + ".json");
      nlohmann::json h;
      for (const Run& run : runs) {
        const auto& s = results[run.name].experts_per_step_samples;
        std::vector<float> sample;
        for (size_t i = 0; i < s.size(); i += std::max<size_t>(1, s.size() / 20000))
          sample.push_back(s[i]);
        h[run.name] = sample;
      }
      hist << h.dump();
    }
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  if (a.json)
    std::printf("%s\n", out.dump().c_str());
  else
    std::printf("(%.1f s; a model of step time, not a measurement: see README)\n", secs);
  if (!a.plot_dir.empty()) {
    std::ofstream(a.plot_dir + "/results.json") << out.dump();
    if (Status s = plot(a.plot_dir); !s) return report(s);
  }
  return 0;
}

}  // namespace

void register_sim_command(CLI::App& app) {
  auto a = std::make_shared<SimArgs>();
  auto* sim = app.add_subcommand("sim", "simulate a decode pool: TPOT per routing policy");
  sim->add_option("--preset", a->preset, "model preset (step-time model and geometry)");
  sim->add_option("--workload", a->workload, "task | language | trace directory");
  sim->add_option("--workers", a->workers)->check(CLI::Range(1u, 1024u));
  sim->add_option("--rate", a->rates, "arrivals per second (several: a sweep)")->expected(1, -1);
  sim->add_option("--requests,-n", a->requests)->check(CLI::Range(uint64_t{1}, uint64_t{10000000}));
  sim->add_option("--calibration", a->calibration, "calibration requests (disjoint)");
  sim->add_option("--policies", a->policies)->expected(1, -1);
  sim->add_option("--tau", a->tau)->check(CLI::Range(0.0f, 2.0f));
  sim->add_option("--guard-slack", a->guard_slack,
                  "eldr_guard: least slack above the minimum load");
  sim->add_option("--guard-ratio", a->guard_ratio, "eldr_guard: slack as a share of the mean load");
  sim->add_option("--ablation", a->ablation, "tau | kmeans | pool");
  sim->add_option("--seed", a->seed);
  sim->add_option("--t0-ms", a->t0_ms);
  sim->add_option("--tseq-ms", a->tseq_ms);
  sim->add_option("--alpha-us", a->alpha_us);
  sim->add_option("--max-batch", a->max_batch);
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
  sim->callback([a] { g_exit_code = run_sim(*a); });
}

}  // namespace eldr::cli
