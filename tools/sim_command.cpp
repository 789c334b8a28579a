// eldr sim: what routing policy buys, on a simulated decode pool driven by the
// real router (docs/design.md §1 step-time model).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli_common.hpp"
#include "commands.hpp"
#include "eldr/fit.hpp"
#include "eldr/lab/sim.hpp"
#include "plot_sim_script.hpp"

namespace eldr::cli {

namespace {

// Single-quoted for the shell.
std::string shell_quoted(const std::string& s) {
  std::string quoted = "'";
  for (char c : s) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

// The embedded plot script, piped into a Python with matplotlib (sys.argv[1] =
// dir): $ELDR_PYTHON, else python3 on PATH.
Status plot(const std::string& dir) {
  const char* python = std::getenv("ELDR_PYTHON");
  const std::string cmd =
      (python != nullptr && *python != '\0' ? shell_quoted(python) : "python3") + " - " +
      shell_quoted(dir);
  FILE* py = ::popen(cmd.c_str(), "w");
  if (py == nullptr) return {Errc::io, "cannot run " + cmd};
  const size_t n = sizeof(kPlotSimScript) - 1;
  const bool written = std::fwrite(kPlotSimScript, 1, n, py) == n;
  if (::pclose(py) != 0 || !written)
    return {Errc::io, "plotting failed (needs matplotlib; ELDR_PYTHON names the Python): " + cmd};
  return {};
}

struct SimArgs {
  std::string preset = "qwen3-30b-a3b", workload = "task", ablation, plot_dir;
  std::vector<std::string> policies{"round_robin", "random", "jsq",        "p2c",
                                    "domain",      "eldr",   "eldr_guard", "eldr_cost"};
  std::vector<double> rates{40.0};
  std::vector<double> utilizations;  // shares of the pool's capacity (replace the rates)
  uint32_t workers = 16, max_batch = 0, guard_slack = 2, seeds = 1;
  float guard_ratio = 0.25f;
  uint64_t requests = 20000, calibration = 1000, seed = 1;
  float tau = 0.1f;
  double t0_ms = -1, tseq_ms = -1, alpha_us = -1;
  double expert_share = -1;  // alpha set so that alpha * D_rand is this share of S_full
  double model_error = 1.0;
  uint32_t routers = 1;                 // routers sharing the pool
  double view_delay_ms = 0.0;           // how old each router's view of the others' bookings is
  std::string bookings = "footprints";  // what a booking carries: footprints | counts
  bool anticipate = true;   // book routers - 1 twins of each pick until the view catches up
  uint32_t cost_cells = 0;  // eldr_cost: cells it reads (0 = the router's default)  // the router's
                            // alpha = this * the simulator's
  SyntheticSimOptions synth;
  bool json = false, plain_kmeans = false, resample = true, drift = false, report_steps = false;
  bool preset_given = false, rate_given = false;
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

bool is_synthetic(const std::string& workload) {
  return workload == "task" || workload == "language";
}

struct Workloads {
  SimWorkload calibration, evaluation;
  CountsTensor calibration_decode;
  bool resampled = false;
};

// A trace directory (token_experts.npy, index.npy, optional labels.txt), loaded once.
Result<SimWorkload> load_trace(const std::string& workload) {
  const std::string dir = workload + "/";
  const std::string labels = std::filesystem::exists(dir + "labels.txt") ? dir + "labels.txt" : "";
  return load_trace_workload(dir + "token_experts.npy", dir + "index.npy", labels);
}

// Calibration and evaluation sets for one seed. Synthetic: generated to size
// (drift: calibration from the first half of the domains by name, traffic from
// the others). Trace: the first requests calibrate (drift: those of the first
// half of the label groups, i.e. benchmarks), the rest are evaluated, drawn
// with replacement up to --requests when --resample is on and the trace has
// fewer.
Result<Workloads> make_workloads(const SimArgs& a, const StepModel& model, const SimWorkload* trace,
                                 uint64_t seed) {
  Workloads w;
  if (is_synthetic(a.workload)) {
    SyntheticSimOptions o = a.synth;
    o.preset = a.workload;
    SyntheticSimOptions cal_o = o, ev_o = o;
    if (a.drift) {
      auto probe = synthetic_sim_workload(model.geometry, o, 0, seed);
      if (!probe) return probe.status();
      auto groups = drift_groups(probe->domain_names);
      if (!groups) return groups.status();
      cal_o.only_domains = groups->calibration;
      ev_o.only_domains = groups->evaluation;
    }
    auto cal = synthetic_sim_workload(model.geometry, cal_o, a.calibration, seed + 100,
                                      &w.calibration_decode);
    if (!cal) return cal.status();
    auto ev = synthetic_sim_workload(model.geometry, ev_o, a.requests, seed + 200);
    if (!ev) return ev.status();
    w.calibration = std::move(*cal);
    w.evaluation = std::move(*ev);
    return w;
  }
  const SimWorkload& all = *trace;
  const uint64_t n = all.requests.size();
  std::vector<uint64_t> cal_rows, ev_rows;
  if (a.drift) {
    auto groups = drift_groups(all.domain_names);
    if (!groups) return groups.status();
    for (uint64_t r = 0; r < n; ++r) {
      const bool cal = groups->calibrates(all.domain_names[all.requests[r].domain]);
      if (!cal)
        ev_rows.push_back(r);
      else if (cal_rows.size() < a.calibration)
        cal_rows.push_back(r);
    }
  } else {
    const uint64_t n_cal = std::min<uint64_t>(a.calibration, n / 5);
    for (uint64_t r = 0; r < n; ++r) (r < n_cal ? cal_rows : ev_rows).push_back(r);
  }
  if (cal_rows.size() < 2 || ev_rows.empty())
    return Status{Errc::invalid_argument,
                  "the trace needs at least 10 requests (drift mode: two "
                  "calibration requests and one to route)"};
  // Calibration: disjoint from the evaluated requests; its decode counts come
  // from the trace's own decode tokens.
  w.calibration = select_requests(all, cal_rows);
  SimWorkload ev = select_requests(all, ev_rows);
  if (a.resample && a.requests > ev.requests.size()) {
    w.evaluation = resample_requests(ev, a.requests, seed + 300);
    w.resampled = true;
  } else {
    ev.requests.resize(std::min<uint64_t>(a.requests, ev.requests.size()));
    ev.prefill.n = ev.requests.size();
    ev.prefill.data.resize(ev.prefill.n * all.geometry.cells());
    w.evaluation = std::move(ev);
  }
  const uint64_t n_cal = cal_rows.size();
  const size_t cells = all.geometry.cells();
  w.calibration_decode = {n_cal, all.geometry.layers, all.geometry.experts,
                          std::vector<int16_t>(n_cal * cells)};
  for (uint64_t r = 0; r < n_cal; ++r) {
    const SimRequest& req = w.calibration.requests[r];
    for (size_t c = 0; c < cells; ++c)
      w.calibration_decode.data[r * cells + c] = static_cast<int16_t>(std::lround(
          w.calibration.inclusion[size_t{req.profile} * cells + c] * req.output_tokens));
  }
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

// What one simulation leaves for the report (the per-request samples go).
struct Cell {
  double p50 = 0, p99 = 0, mean = 0, experts = 0, load = 0, red50 = 0, red99 = 0;
  StepCost router_cost;
};

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

int run_sim(const SimArgs& a) {
  if (a.rate_given && !a.utilizations.empty())
    return report({Errc::invalid_argument, "give --rate or --utilization, not both"});
  if (a.expert_share >= 0 && a.alpha_us >= 0)
    return report({Errc::invalid_argument, "give --alpha-us or --expert-share, not both"});
  const bool synthetic = is_synthetic(a.workload);
  std::optional<SimWorkload> trace;
  if (!synthetic) {
    auto t = load_trace(a.workload);
    if (!t) return report(t.status());
    trace = std::move(*t);
  }
  // A trace's step model: --preset when given, else the preset of its geometry.
  auto model =
      synthetic || a.preset_given ? find_step_model(a.preset) : step_model_for(trace->geometry);
  if (!model && !synthetic && !a.preset_given) {
    std::fprintf(stderr, "eldr sim: %s; using the %s preset's step constants\n",
                 model.status().to_string().c_str(), a.preset.c_str());
    model = find_step_model(a.preset);
  }
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
  // The first seed's workloads fix D_rand, hence the expert share's alpha and
  // the capacity that --utilization scales (the same rates for every seed).
  auto first = make_workloads(a, *model, trace ? &*trace : nullptr, a.seed);
  if (!first) return report(first.status());
  const double d_rand = random_batch_distinct(first->evaluation, model->cost.max_batch, a.seed, 8);
  if (a.expert_share >= 0) {
    auto alpha = alpha_for_expert_share(model->cost, d_rand, a.expert_share);
    if (!alpha) return report(alpha.status());
    model->cost.alpha_us = *alpha;
  }
  const PoolCapacity cap =
      pool_capacity(model->cost, a.workers, d_rand, mean_output_tokens(first->evaluation));
  const double share =
      cap.full_step_ms > 0 ? model->cost.alpha_us / 1000.0 * d_rand / cap.full_step_ms : 0.0;
  std::vector<double> rates = a.rates;
  if (!a.utilizations.empty()) {
    if (!(cap.requests_per_s > 0))
      return report({Errc::invalid_argument, "the pool's capacity is 0: no utilization"});
    rates.clear();
    for (double u : a.utilizations) rates.push_back(u * cap.requests_per_s);
  }

  // cells[rate][run][seed]
  std::vector<std::vector<std::vector<Cell>>> cells(rates.size(),
                                                    std::vector<std::vector<Cell>>(runs.size()));
  std::vector<std::vector<std::vector<float>>> hist(rates.size(),
                                                    std::vector<std::vector<float>>(runs.size()));
  ProgressBar bar;
  uint64_t evaluated = first->evaluation.requests.size();
  const bool resampled = first->resampled;
  for (uint32_t si = 0; si < a.seeds; ++si) {
    const uint64_t seed = a.seed + si;
    Result<Workloads> w = std::move(first);
    if (si > 0) w = make_workloads(a, *model, trace ? &*trace : nullptr, seed);
    if (!w) return report(w.status());
    std::map<std::pair<uint32_t, bool>, std::shared_ptr<const ClusterTable>> tables;
    for (size_t ri = 0; ri < rates.size(); ++ri) {
      for (size_t ui = 0; ui < runs.size(); ++ui) {
        const Run& run = runs[ui];
        auto key = std::make_pair(run.workers, run.plain);
        if (!tables.count(key)) {
          auto t = fit_for(*w, run.workers, run.plain, seed);
          if (!t) return report(t.status());
          tables[key] = *t;
        }
        SimOptions so;
        so.model = *model;
        so.workers = run.workers;
        so.rate = rates[ri];
        so.seed = seed;
        so.report_steps = a.report_steps;
        so.routers = a.routers;
        so.view_delay_ms = a.view_delay_ms;
        so.bookings_carry_footprints = a.bookings == "footprints";
        so.anticipate_peers = a.anticipate;
        so.router.policy = run.policy;
        so.router.tau = run.tau;
        so.router.seed = seed;
        so.router.guard_slack = a.guard_slack;
        so.router.guard_ratio = a.guard_ratio;
        so.router.step_cost = model->cost;
        so.router.step_cost->alpha_us *= a.model_error;
        if (a.cost_cells) so.router.cost_cells = a.cost_cells;
        const std::string stage =
            "sim " + run.name + (a.seeds > 1 ? " seed " + std::to_string(seed) : "");
        so.progress = [&](double f) { bar.update(stage, f); };
        auto r = simulate(w->evaluation, tables[key], so);
        if (!r) return report(r.status());
        cells[ri][ui].push_back({r->tpot_p50_ms, r->tpot_p99_ms, r->tpot_mean_ms,
                                 r->experts_per_step, r->worker_load_max_over_mean, 0, 0,
                                 r->router_step_cost});
        if (si == 0 && !a.plot_dir.empty()) {
          const auto& s = r->experts_per_step_samples;
          for (size_t i = 0; i < s.size(); i += std::max<size_t>(1, s.size() / 20000))
            hist[ri][ui].push_back(s[i]);
        }
      }
      // Reductions against the best load-balancing baseline of the same pool and seed.
      for (size_t ui = 0; ui < runs.size(); ++ui) {
        double b50 = 1e300, b99 = 1e300;
        for (size_t bi = 0; bi < runs.size(); ++bi)
          if (is_baseline(runs[bi].policy) && runs[bi].workers == runs[ui].workers) {
            b50 = std::min(b50, cells[ri][bi][si].p50);
            b99 = std::min(b99, cells[ri][bi][si].p99);
          }
        Cell& c = cells[ri][ui][si];
        c.red50 = b50 < 1e300 ? 100.0 * (b50 - c.p50) / b50 : 0.0;
        c.red99 = b99 < 1e300 ? 100.0 * (b99 - c.p99) / b99 : 0.0;
      }
    }
  }
  bar.finish();

  nlohmann::json out = nlohmann::json::object();
  for (size_t ri = 0; ri < rates.size(); ++ri) {
    const double rate = rates[ri];
    const double util = cap.requests_per_s > 0 ? rate / cap.requests_per_s : 0.0;
    if (!a.json) {
      std::printf(
          "%s, %s workload%s, %u workers, %.1f req/s = %.0f%% of capacity %.1f req/s, %llu "
          "requests%s%s (model: t0 %.2f ms, tseq %.3f ms, alpha %.2f us = %.0f%% of a full "
          "step, batch %u)\n",
          model->name.c_str(), a.workload.c_str(), a.drift ? " (drift)" : "", a.workers, rate,
          100.0 * util, cap.requests_per_s, static_cast<unsigned long long>(evaluated),
          resampled ? " (resampled)" : "",
          a.seeds > 1 ? (", median of " + std::to_string(a.seeds) + " seeds").c_str() : "",
          model->cost.t0_ms, model->cost.tseq_ms, model->cost.alpha_us, 100.0 * share,
          model->cost.max_batch);
      if (a.seeds > 1)
        std::printf("  %-22s %9s %9s %9s %13s %9s %13s %13s %10s\n", "policy", "p50 ms", "p99 ms",
                    "p50 red%", "(min..max)", "p99 red%", "(min..max)", "experts/step",
                    "load max/mean");
      else
        std::printf("  %-22s %9s %9s %9s %9s %13s %10s\n", "policy", "p50 ms", "p99 ms", "p50 red%",
                    "p99 red%", "experts/step", "load max/mean");
    }
    for (size_t ui = 0; ui < runs.size(); ++ui) {
      const Run& run = runs[ui];
      const std::vector<Cell>& cs = cells[ri][ui];
      auto pick = [&](double Cell::*f) {
        std::vector<double> v;
        for (const Cell& c : cs) v.push_back(c.*f);
        return v;
      };
      const auto r50 = pick(&Cell::red50), r99 = pick(&Cell::red99), load = pick(&Cell::load);
      const double p50 = median(pick(&Cell::p50)), p99 = median(pick(&Cell::p99));
      const double red50 = median(r50), red99 = median(r99);
      const double experts = median(pick(&Cell::experts)), lm = median(load);
      nlohmann::json per_seed = nlohmann::json::array();
      for (size_t si = 0; si < cs.size(); ++si)
        per_seed.push_back({{"seed", a.seed + si},
                            {"p50_ms", cs[si].p50},
                            {"p99_ms", cs[si].p99},
                            {"p50_reduction_pct", cs[si].red50},
                            {"p99_reduction_pct", cs[si].red99},
                            {"load_max_over_mean", cs[si].load}});
      const StepCost& rc = cs.front().router_cost;
      nlohmann::json entry = {
          {"rate", rate},
          {"utilization", util},
          {"capacity_rps", cap.requests_per_s},
          {"workers", run.workers},
          {"requests", evaluated},
          {"resampled", resampled},
          {"drift", a.drift},
          {"preset", model->name},
          {"alpha_us", model->cost.alpha_us},
          {"t0_ms", model->cost.t0_ms},
          {"tseq_ms", model->cost.tseq_ms},
          {"max_batch", model->cost.max_batch},
          {"expert_share", share},
          {"distinct_random", d_rand},
          {"full_step_ms", cap.full_step_ms},
          {"model_error", a.model_error},
          {"report_steps", a.report_steps},
          {"routers", a.routers},
          {"view_delay_ms", a.view_delay_ms},
          {"bookings", a.bookings},
          {"anticipate", a.anticipate},
          {"router_step_cost",
           {{"t0_ms", rc.t0_ms}, {"tseq_ms", rc.tseq_ms}, {"alpha_us", rc.alpha_us}}},
          {"seeds", a.seeds},
          {"p50_ms", p50},
          {"p99_ms", p99},
          {"mean_ms", median(pick(&Cell::mean))},
          {"experts_per_step", experts},
          {"load_max_over_mean", lm},
          {"load_max_over_mean_max", *std::max_element(load.begin(), load.end())},
          {"p50_reduction_pct", red50},
          {"p99_reduction_pct", red99},
          {"p50_reduction_pct_min", *std::min_element(r50.begin(), r50.end())},
          {"p50_reduction_pct_max", *std::max_element(r50.begin(), r50.end())},
          {"p99_reduction_pct_min", *std::min_element(r99.begin(), r99.end())},
          {"p99_reduction_pct_max", *std::max_element(r99.begin(), r99.end())},
          {"per_seed", per_seed}};
      if (!out.contains(run.name)) {
        out[run.name] = entry;
        out[run.name]["by_rate"] = nlohmann::json::array();
      }
      out[run.name]["by_rate"].push_back(entry);
      if (a.json) continue;
      if (a.seeds > 1)
        std::printf("  %-22s %9.2f %9.2f %9.1f %6.1f..%-6.1f %9.1f %6.1f..%-6.1f %13.1f %10.2f\n",
                    run.name.c_str(), p50, p99, red50, entry["p50_reduction_pct_min"].get<double>(),
                    entry["p50_reduction_pct_max"].get<double>(), red99,
                    entry["p99_reduction_pct_min"].get<double>(),
                    entry["p99_reduction_pct_max"].get<double>(), experts, lm);
      else
        std::printf("  %-22s %9.2f %9.2f %9.1f %9.1f %13.1f %10.2f\n", run.name.c_str(), p50, p99,
                    red50, red99, experts, lm);
    }
    if (!a.plot_dir.empty()) {
      // Distribution of distinct experts per step (first seed), one file per rate.
      std::filesystem::create_directories(a.plot_dir);
      std::ofstream hist_file(a.plot_dir + "/experts_per_step_" +
                              std::to_string(static_cast<int>(rate)) + ".json");
      nlohmann::json h;
      for (size_t ui = 0; ui < runs.size(); ++ui) h[runs[ui].name] = hist[ri][ui];
      hist_file << h.dump();
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
  auto* preset = sim->add_option(
      "--preset", a->preset,
      "model preset (step-time model and geometry); a trace defaults to the preset of its "
      "geometry");
  sim->add_option("--workload", a->workload, "task | language | trace directory");
  sim->add_option("--workers", a->workers)->check(CLI::Range(1u, 1024u));
  auto* rate = sim->add_option("--rate", a->rates, "arrivals per second (several: a sweep)")
                   ->expected(1, -1);
  sim->add_option("--utilization", a->utilizations,
                  "load as a share of the pool's capacity (several: a sweep; replaces --rate): "
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
  sim->add_flag("--report-steps", a->report_steps,
                "workers report every step (batch + queue, step ms) to the router, which fits "
                "its step constants online");
  sim->add_option("--routers", a->routers,
                  "routers sharing the pool; each arrival goes to one at random")
      ->check(CLI::Range(1u, 64u));
  sim->add_option("--view-delay-ms", a->view_delay_ms,
                  "each router sees the others' routes and finishes this much later")
      ->check(CLI::Range(0.0, 60'000.0));
  sim->add_option("--bookings", a->bookings,
                  "what a router tells the others: footprints (counted and in the batch) | counts")
      ->check(CLI::IsMember({"footprints", "counts"}));
  sim->add_flag("--anticipate,!--no-anticipate", a->anticipate,
                "against herding (default on): each pick also books routers - 1 twins there "
                "until the others' bookings can have arrived");
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
  sim->footer(
      "Utilization U: the arrival rate as a share of the pool's capacity, capacity = workers * "
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
