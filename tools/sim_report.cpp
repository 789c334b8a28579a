// eldr sim's report: the table per rate (or one JSON object keyed by run),
// the experts-per-step histograms and the plots.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_common.hpp"
#include "plot_sim_script.hpp"
#include "sim_command.hpp"

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

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

// ---- report: the table, the JSON and the plots -----------------------------------

void print_rate_header(const SimArgs& a, const SimSetup& s, double rate, double util) {
  const StepModel& m = s.model;
  std::printf(
      "%s, %s workload%s, %u workers, %.1f req/s = %.0f%% of capacity %.1f req/s, %llu "
      "requests%s%s (model: t0 %.2f ms, tseq %.3f ms, alpha %.2f us = %.0f%% of a full "
      "step, batch %u)\n",
      m.name.c_str(), a.workload.c_str(), a.drift ? " (drift)" : "", a.workers, rate, 100.0 * util,
      s.cap.requests_per_s, static_cast<unsigned long long>(s.evaluated),
      s.resampled ? " (resampled)" : "",
      a.seeds > 1 ? (", median of " + std::to_string(a.seeds) + " seeds").c_str() : "",
      m.cost.t0_ms, m.cost.tseq_ms, m.cost.alpha_us, 100.0 * s.share, m.cost.max_batch);
  if (a.seeds > 1)
    std::printf("  %-22s %9s %9s %9s %13s %9s %13s %13s %10s\n", "policy", "p50 ms", "p99 ms",
                "p50 red%", "(min..max)", "p99 red%", "(min..max)", "experts/step",
                "load max/mean");
  else
    std::printf("  %-22s %9s %9s %9s %9s %13s %10s\n", "policy", "p50 ms", "p99 ms", "p50 red%",
                "p99 red%", "experts/step", "load max/mean");
}

// One run at one rate: medians over the seeds, and each seed's figures.
nlohmann::json cell_entry(const SimArgs& a, const SimSetup& s, const Run& run, double rate,
                          const std::vector<Cell>& cs) {
  auto pick = [&](double Cell::*f) {
    std::vector<double> v;
    for (const Cell& c : cs) v.push_back(c.*f);
    return v;
  };
  const auto r50 = pick(&Cell::red50), r99 = pick(&Cell::red99), load = pick(&Cell::load);
  nlohmann::json per_seed = nlohmann::json::array();
  for (size_t si = 0; si < cs.size(); ++si)
    per_seed.push_back({{"seed", a.seed + si},
                        {"p50_ms", cs[si].p50},
                        {"p99_ms", cs[si].p99},
                        {"p50_reduction_pct", cs[si].red50},
                        {"p99_reduction_pct", cs[si].red99},
                        {"load_max_over_mean", cs[si].load}});
  const StepCost& rc = cs.front().router_cost;
  const StepModel& m = s.model;
  return {{"rate", rate},
          {"utilization", s.cap.requests_per_s > 0 ? rate / s.cap.requests_per_s : 0.0},
          {"capacity_rps", s.cap.requests_per_s},
          {"workers", run.workers},
          {"requests", s.evaluated},
          {"resampled", s.resampled},
          {"drift", a.drift},
          {"preset", m.name},
          {"alpha_us", m.cost.alpha_us},
          {"t0_ms", m.cost.t0_ms},
          {"tseq_ms", m.cost.tseq_ms},
          {"max_batch", m.cost.max_batch},
          {"expert_share", s.share},
          {"distinct_random", s.d_rand},
          {"full_step_ms", s.cap.full_step_ms},
          {"model_error", a.model_error},
          {"report_steps", a.report_steps},
          {"routers", a.routers},
          {"view_delay_ms", a.view_delay_ms},
          {"bookings", a.bookings},
          {"anticipate", a.anticipate},
          {"lead_share", a.lead_share},
          {"even_twins", a.even_twins},
          {"route_from", route_from_name(run.from)},
          {"learn", a.learn && run.from != RouteFrom::footprint},
          {"prelearn", run.prelearn},
          {"mean_confidence", median(pick(&Cell::confidence))},
          {"learned", cs.front().learned},
          {"router_step_cost",
           {{"t0_ms", rc.t0_ms}, {"tseq_ms", rc.tseq_ms}, {"alpha_us", rc.alpha_us}}},
          {"seeds", a.seeds},
          {"p50_ms", median(pick(&Cell::p50))},
          {"p99_ms", median(pick(&Cell::p99))},
          {"mean_ms", median(pick(&Cell::mean))},
          {"experts_per_step", median(pick(&Cell::experts))},
          {"load_max_over_mean", median(load)},
          {"load_max_over_mean_max", *std::max_element(load.begin(), load.end())},
          {"p50_reduction_pct", median(r50)},
          {"p99_reduction_pct", median(r99)},
          {"p50_reduction_pct_min", *std::min_element(r50.begin(), r50.end())},
          {"p50_reduction_pct_max", *std::max_element(r50.begin(), r50.end())},
          {"p99_reduction_pct_min", *std::min_element(r99.begin(), r99.end())},
          {"p99_reduction_pct_max", *std::max_element(r99.begin(), r99.end())},
          {"per_seed", per_seed}};
}

void print_row(const SimArgs& a, const Run& run, const nlohmann::json& e) {
  auto f = [&](const char* key) { return e[key].get<double>(); };
  if (a.seeds > 1)
    std::printf("  %-22s %9.2f %9.2f %9.1f %6.1f..%-6.1f %9.1f %6.1f..%-6.1f %13.1f %10.2f\n",
                run.name.c_str(), f("p50_ms"), f("p99_ms"), f("p50_reduction_pct"),
                f("p50_reduction_pct_min"), f("p50_reduction_pct_max"), f("p99_reduction_pct"),
                f("p99_reduction_pct_min"), f("p99_reduction_pct_max"), f("experts_per_step"),
                f("load_max_over_mean"));
  else
    std::printf("  %-22s %9.2f %9.2f %9.1f %9.1f %13.1f %10.2f\n", run.name.c_str(), f("p50_ms"),
                f("p99_ms"), f("p50_reduction_pct"), f("p99_reduction_pct"), f("experts_per_step"),
                f("load_max_over_mean"));
}

// Distribution of distinct experts per step (first seed), one file per rate.
void write_histograms(const SimArgs& a, const std::vector<Run>& runs, double rate,
                      const std::vector<std::vector<float>>& hist) {
  std::filesystem::create_directories(a.plot_dir);
  std::ofstream hist_file(a.plot_dir + "/experts_per_step_" +
                          std::to_string(static_cast<int>(rate)) + ".json");
  nlohmann::json h;
  for (size_t ui = 0; ui < runs.size(); ++ui) h[runs[ui].name] = hist[ui];
  hist_file << h.dump();
}

}  // namespace

int report_sim(const SimArgs& a, const SimSetup& s, const Grid& grid,
               std::chrono::steady_clock::time_point t_start) {
  nlohmann::json out = nlohmann::json::object();
  for (size_t ri = 0; ri < s.rates.size(); ++ri) {
    const double rate = s.rates[ri];
    if (!a.json)
      print_rate_header(a, s, rate, s.cap.requests_per_s > 0 ? rate / s.cap.requests_per_s : 0.0);
    for (size_t ui = 0; ui < s.runs.size(); ++ui) {
      const Run& run = s.runs[ui];
      const nlohmann::json entry = cell_entry(a, s, run, rate, grid.cells[ri][ui]);
      if (!out.contains(run.name)) {
        out[run.name] = entry;
        out[run.name]["by_rate"] = nlohmann::json::array();
      }
      out[run.name]["by_rate"].push_back(entry);
      if (!a.json) print_row(a, run, entry);
    }
    if (!a.plot_dir.empty()) write_histograms(a, s.runs, rate, grid.hist[ri]);
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  if (a.json)
    std::printf("%s\n", out.dump().c_str());
  else
    std::printf("(%.1f s; a model of step time, not a measurement: see README)\n", secs);
  if (!a.plot_dir.empty()) {
    std::ofstream(a.plot_dir + "/results.json") << out.dump();
    if (Status st = plot(a.plot_dir); !st) return report(st);
  }
  return 0;
}

}  // namespace eldr::cli
