// eldr sim, split along its path: sim_command.cpp parses the arguments and runs
// the simulations, sim_report.cpp prints and writes what they measured. This
// header holds what both see.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "commands.hpp"
#include "eldr/lab/sim.hpp"

namespace eldr::cli {

struct SimArgs {
  std::string preset = "qwen3-30b-a3b", workload = "task", ablation, plot_dir;
  std::vector<std::string> policies{"round_robin", "random", "jsq",        "p2c",
                                    "domain",      "eldr",   "eldr_guard", "eldr_cost"};
  std::vector<double> rates{40.0};
  std::vector<double> utilizations;  // shares of the fleet's capacity (replace the rates)
  uint32_t workers = 16, max_batch = 0, guard_slack = 2, seeds = 1;
  float guard_ratio = 0.25f;
  uint64_t requests = 20000, calibration = 1000, seed = 1;
  float tau = 0.1f;
  double t0_ms = -1, tseq_ms = -1, alpha_us = -1;
  double expert_share = -1;  // alpha set so that alpha * D_rand is this share of S_full
  double model_error = 1.0;
  uint32_t routers = 1;                 // routers sharing the fleet
  double view_delay_ms = 0.0;           // how old each router's view of the others' bookings is
  std::string bookings = "footprints";  // what a booking carries: footprints | counts
  bool anticipate = true;   // book routers - 1 twins of each pick until the view catches up
  double lead_share = 0.0;  // router 0's share of the arrivals (0: even)
  bool even_twins = false;  // routers - 1 twins a pick whatever the routers' rates
  uint32_t cost_cells = 0;  // eldr_cost: cells it reads (0 = the router's default)  // the router's
                            // alpha = this * the simulator's
  SyntheticSimOptions synth;
  // Routing from the prompt: what the non-baseline policies route from
  // (several: compared in one run), online learning, the predictor's options,
  // and the predictor pre-learned on this many requests of the routed mix.
  std::vector<std::string> route_from{"footprint"};
  bool learn = false;
  double learn_delay_ms = 0.0;
  std::vector<uint64_t> prelearn;
  PredictorOptions predictor;
  double calibration_max_share = 0.2;  // trace: at most this share of it calibrates
  bool json = false, plain_kmeans = false, resample = true, drift = false, report_steps = false;
  bool preset_given = false, rate_given = false;
};

struct Run {
  std::string name;  // policy, or policy + ablation setting (+ "/" route-from, "@N" pre-learned)
  Policy policy;
  float tau;
  bool plain = false;
  uint32_t workers;
  RouteFrom from = RouteFrom::footprint;
  uint64_t prelearn = 0;  // requests of the routed mix the predictor learned first
};

// One seed's request sets.
struct Workloads {
  SimWorkload calibration, evaluation;
  CountsTensor calibration_decode;
  // Requests of the routed mix for --prelearn, disjoint from the evaluated
  // ones (a trace: every other request of the evaluated set).
  SimWorkload learn_pool;
  bool resampled = false;
};

// The tables (sim_tables.cpp): fitted once per (workers, plain), and per run
// its copy with the predictor of its prompt form.
// sim_workloads.cpp: the synthetic presets' names; a trace directory loaded
// once; one seed's calibration, routed and pre-learned requests.
bool is_synthetic(const std::string& workload);
Result<SimWorkload> load_trace(const SimArgs& a);
Result<Workloads> make_workloads(const SimArgs& a, const StepModel& model, const SimWorkload* trace,
                                 uint64_t seed);

Result<std::shared_ptr<const ClusterTable>> fit_for(const Workloads& w, uint32_t workers,
                                                    bool plain, uint64_t seed);
struct Tables {
  std::map<std::pair<uint32_t, bool>, std::shared_ptr<const ClusterTable>> fitted;
  std::map<RouteFrom, std::shared_ptr<Predictor>> predictors;
  std::map<std::tuple<uint32_t, bool, RouteFrom, uint64_t>, std::shared_ptr<const ClusterTable>>
      routed;
};
Result<std::shared_ptr<const ClusterTable>> table_for(const SimArgs& a, const Workloads& w,
                                                      const Run& run, uint64_t seed, Tables& t);
// --route-from, --learn, --prelearn and the predictor's options.
void add_prompt_options(CLI::App* sim, SimArgs* a);

// What one simulation leaves for the report (the per-request samples go).
struct Cell {
  double p50 = 0, p99 = 0, mean = 0, experts = 0, load = 0, red50 = 0, red99 = 0;
  double confidence = 1.0;  // the predictor's mean confidence (routing from the prompt)
  uint64_t learned = 0;
  StepCost router_cost;
};

// What every cell of the sweep shares.
struct SimSetup {
  std::optional<SimWorkload> trace;  // a trace workload, loaded once
  StepModel model;
  std::vector<Run> runs;
  // From the first seed's workloads: D_rand, hence the expert share's alpha and
  // the capacity that --utilization scales (the same rates for every seed).
  std::vector<double> rates;
  FleetCapacity cap;
  double d_rand = 0, share = 0;
  uint64_t evaluated = 0;
  bool resampled = false;
};

struct Grid {
  std::vector<std::vector<std::vector<Cell>>> cells;  // [rate][run][seed]
  std::vector<std::vector<std::vector<float>>> hist;  // [rate][run]: experts/step, first seed
};

// Prints the table (or the JSON) and writes the plots: the command's exit code.
int report_sim(const SimArgs& a, const SimSetup& s, const Grid& grid,
               std::chrono::steady_clock::time_point t_start);

}  // namespace eldr::cli
