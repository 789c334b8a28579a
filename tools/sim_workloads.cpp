// eldr sim's workloads: a synthetic preset or a trace directory, split into
// the calibration set the table (and predictor) is fitted on, the requests
// routed, and the requests a predictor pre-learns (--prelearn).
#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "sim_command.hpp"

namespace eldr::cli {

namespace {

bool routes_from_prompts(const SimArgs& a) {
  return std::any_of(a.route_from.begin(), a.route_from.end(),
                     [](const std::string& f) { return f != "footprint"; });
}

uint64_t max_prelearn(const SimArgs& a) {
  return a.prelearn.empty() ? 0 : *std::max_element(a.prelearn.begin(), a.prelearn.end());
}

}  // namespace

bool is_synthetic(const std::string& workload) {
  return workload == "task" || workload == "language";
}

// A trace directory (token_experts.npy, index.npy, optional labels.txt and
// tokens.jsonl.gz, the prompts), loaded once. A bad prompt file is an error
// only where prompts are routed from.
Result<SimWorkload> load_trace(const SimArgs& a) {
  const std::string dir = a.workload + "/";
  const std::string labels = std::filesystem::exists(dir + "labels.txt") ? dir + "labels.txt" : "";
  auto w = load_trace_workload(dir + "token_experts.npy", dir + "index.npy", labels);
  if (!w) return w;
  const std::string prompts = dir + "tokens.jsonl.gz";
  if (!std::filesystem::exists(prompts)) {
    if (routes_from_prompts(a))
      return Status{Errc::not_found,
                    "--route-from prompt|text needs the trace's prompts: no " + prompts};
    return w;
  }
  if (Status s = load_trace_prompts(prompts, *w); !s) {
    if (routes_from_prompts(a)) return s;
    std::fprintf(stderr, "eldr sim: no prompts (%s)\n", s.to_string().c_str());
  }
  return w;
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
    if (max_prelearn(a) > 0) {
      auto pool = synthetic_sim_workload(model.geometry, ev_o, max_prelearn(a), seed + 400);
      if (!pool) return pool.status();
      w.learn_pool = std::move(*pool);
    }
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
    const uint64_t n_cal = std::min<uint64_t>(
        a.calibration, static_cast<uint64_t>(static_cast<double>(n) * a.calibration_max_share));
    for (uint64_t r = 0; r < n; ++r) (r < n_cal ? cal_rows : ev_rows).push_back(r);
  }
  // --prelearn: every other routed request is only learned, never evaluated.
  std::vector<uint64_t> learn_rows;
  if (max_prelearn(a) > 0) {
    std::vector<uint64_t> kept;
    for (size_t i = 0; i < ev_rows.size(); ++i) (i % 2 ? learn_rows : kept).push_back(ev_rows[i]);
    ev_rows = std::move(kept);
    if (!learn_rows.empty())
      w.learn_pool =
          resample_requests(select_requests(all, learn_rows), max_prelearn(a), seed + 400);
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

}  // namespace eldr::cli
