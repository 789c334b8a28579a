// eldr demo: the main job end to end on an embedded default — synthetic
// calibration set -> fit -> route a disjoint workload with every policy.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>

#include "cli_common.hpp"
#include "commands.hpp"
#include "eldr/fit.hpp"
#include "eldr/lab/synthetic.hpp"
#include "eldr/router.hpp"

namespace eldr::cli {

namespace {

struct DemoArgs {
  std::string out_dir = "eldr-demo", model = "qwen3-30b-a3b", workload = "task";
  uint64_t calibration = 1000, requests = 4000, seed = 1;
  uint32_t workers = 16, window = 128;
};

struct PolicyReport {
  double mean_similarity = 0.0;
  double purity = 0.0;           // requests on a worker whose main domain is theirs
  double peak_over_mean = 0.0;   // routed requests: busiest worker / mean
  double inflight_spread = 0.0;  // mean over decisions of (max - min) in flight
};

PolicyReport route_workload(const std::shared_ptr<const ClusterTable>& table, Policy policy,
                            const SyntheticWorkload& w, uint32_t window, Status& error) {
  PolicyReport rep;
  RouterOptions o;
  o.policy = policy;
  o.seed = 7;
  auto router = Router::create(table, o);
  if (!router) {
    error = router.status();
    return rep;
  }
  Router& r = **router;
  const uint32_t K = table->num_clusters();
  std::vector<std::vector<uint64_t>> domain_hits(K,
                                                 std::vector<uint64_t>(w.domain_names.size(), 0));
  std::vector<uint64_t> routed(K, 0);
  std::deque<int32_t> inflight;
  double sim = 0.0, spread = 0.0;
  const auto labels = w.labels();
  for (uint64_t i = 0; i < w.prefill.n; ++i) {
    RouteHints hints;
    hints.label = labels[i];
    auto d = r.route(w.prefill.row(i), hints);
    if (!d) {
      error = d.status();
      return rep;
    }
    sim += d->similarity;
    ++routed[d->worker_index];
    ++domain_hits[d->worker_index][w.domain[i]];
    inflight.push_back(d->worker_id);
    if (inflight.size() > window) {
      (void)r.complete(inflight.front());
      inflight.pop_front();
    }
    int64_t lo = INT64_MAX, hi = 0;
    for (const auto& wi : r.workers()) {
      lo = std::min(lo, wi.inflight);
      hi = std::max(hi, wi.inflight);
    }
    spread += static_cast<double>(hi - lo);
  }
  const double n = static_cast<double>(w.prefill.n);
  uint64_t pure = 0;
  for (const auto& h : domain_hits) pure += *std::max_element(h.begin(), h.end());
  rep.mean_similarity = sim / n;
  rep.purity = static_cast<double>(pure) / n;
  rep.peak_over_mean =
      static_cast<double>(*std::max_element(routed.begin(), routed.end())) / (n / K);
  rep.inflight_spread = spread / n;
  return rep;
}

int run_demo(const DemoArgs& a) {
  auto g = find_preset(a.model);
  if (!g) return report({Errc::invalid_argument, "unknown model preset '" + a.model + "'"});
  auto opts = synthetic_preset(a.workload, *g, a.seed);
  if (!opts) return report(opts.status());
  std::printf("== eldr demo: %s (%s), %s workload, %u decode workers ==\n", a.model.c_str(),
              g->to_string().c_str(), a.workload.c_str(), a.workers);

  // 1. Calibration set (what a capture script would dump) and a disjoint workload.
  auto cal = generate_synthetic(*opts, a.calibration);
  if (!cal) return report(cal.status());
  SyntheticOptions eval_opts = *opts;
  eval_opts.seed = a.seed + 1000003;  // different requests, same model and domains
  auto eval = generate_synthetic(eval_opts, a.requests);
  if (!eval) return report(eval.status());
  std::filesystem::create_directories(a.out_dir);
  const std::string dir = a.out_dir + "/";
  for (auto [name, t] : {std::pair{"prefill.npy", &cal->prefill},
                         {"decode.npy", &cal->decode},
                         {"workload.npy", &eval->prefill}})
    if (Status s = save_counts_npy(dir + name, *t); !s) return report(s);
  {
    std::ofstream labels(dir + "labels.txt"), wl(dir + "workload_labels.txt");
    for (const auto& l : cal->labels()) labels << l << '\n';
    for (const auto& l : eval->labels()) wl << l << '\n';
  }
  std::printf("1. calibration: %llu requests -> %sprefill.npy, decode.npy, labels.txt\n",
              static_cast<unsigned long long>(a.calibration), dir.c_str());

  // 2. Offline fit.
  FitOptions fo;
  fo.workers = a.workers;
  fo.seed = a.seed;
  fo.model = a.model;
  ProgressBar bar;
  fo.progress = [&bar](std::string_view stage, double f) { bar.update(stage, f); };
  const auto labels = cal->labels();
  const auto t0 = std::chrono::steady_clock::now();
  auto table = fit_table({*g, cal->prefill.n, cal->prefill.data, cal->decode.data, labels}, fo);
  bar.finish();
  if (!table) return report(table.status());
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (Status s = save_table(*table, dir + "table.eldr"); !s) return report(s);
  std::printf("2. fit: %.2f s, %zu of %u layers, peak rho %.3f (all layers %.3f), cluster sizes",
              secs, table->layer_mask.size(), g->layers, table->fit.peak_rho,
              table->fit.rho_curve.empty() ? 0.0f : table->fit.rho_curve.back());
  for (uint32_t s : table->fit.cluster_sizes) std::printf(" %u", s);
  std::printf(" -> %stable.eldr\n", dir.c_str());

  // 3. Route the disjoint workload with every policy.
  std::printf("3. routing %llu requests, %u in flight:\n",
              static_cast<unsigned long long>(a.requests), a.window);
  std::printf("   %-12s %10s %8s %10s %12s\n", "policy", "similarity", "purity", "peak/mean",
              "inflight max-min");
  auto shared = std::make_shared<const ClusterTable>(std::move(*table));
  for (Policy p : kAllPolicies) {
    Status err;
    const PolicyReport rep = route_workload(shared, p, *eval, a.window, err);
    if (!err) return report(err);
    std::printf("   %-12s %10.3f %8.3f %10.2f %12.2f\n", policy_name(p), rep.mean_similarity,
                rep.purity, rep.peak_over_mean, rep.inflight_spread);
  }
  std::printf(
      "similarity: mean signature.centroid of the chosen worker (higher = more expert\n"
      "sharing); purity: share of requests on a worker whose main domain is theirs;\n"
      "peak/mean: busiest worker's request count over the mean (1.00 = perfectly even).\n");
  std::printf(
      "Reproduce with the CLI:\n  eldr fit --prefill %sprefill.npy --decode %sdecode.npy "
      "--labels %slabels.txt --workers %u --model %s --out %stable.eldr\n"
      "  eldr route --table %stable.eldr --footprints %sworkload.npy --policy eldr_cost\n",
      dir.c_str(), dir.c_str(), dir.c_str(), a.workers, a.model.c_str(), dir.c_str(), dir.c_str(),
      dir.c_str());
  return 0;
}

}  // namespace

void register_demo_command(CLI::App& app) {
  auto a = std::make_shared<DemoArgs>();
  auto* demo =
      app.add_subcommand("demo", "synthetic calibration -> fit -> route with every policy");
  demo->add_option("--out-dir", a->out_dir);
  demo->add_option("--model", a->model, "model preset");
  demo->add_option("--workload", a->workload, "task | language");
  demo->add_option("--calibration", a->calibration)
      ->check(CLI::Range(uint64_t{16}, uint64_t{1000000}));
  demo->add_option("--requests", a->requests)->check(CLI::Range(uint64_t{1}, uint64_t{10000000}));
  demo->add_option("--workers", a->workers)->check(CLI::Range(1u, 1024u));
  demo->add_option("--window", a->window, "requests in flight");
  demo->add_option("--seed", a->seed);
  demo->callback([a] { g_exit_code = run_demo(*a); });
}

}  // namespace eldr::cli
