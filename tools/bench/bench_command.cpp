// eldr bench route | fit: the performance targets, measured on synthetic data
// of the requested shape. Reports medians and tails, not means.
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli_common.hpp"
#include "commands.hpp"
#include "eldr/fit.hpp"
#include "eldr/lab/synthetic.hpp"
#include "eldr/router.hpp"
#include "eldr/signature.hpp"

namespace eldr::cli {

namespace {

using Clock = std::chrono::steady_clock;

struct BenchArgs {
  uint32_t layers = 48, experts = 128, workers = 16, top_k = 0;
  uint64_t decisions = 20000, calibration = 1000, requests = 1000, seed = 1;
  std::string policy = "eldr_cost";
  uint32_t live_batch = 32;  // requests in flight on every worker while timing
  bool json = false, no_layer_select = false;
  uint32_t threads = 0;
};

SyntheticOptions synthetic_for(const BenchArgs& a, uint64_t seed) {
  SyntheticOptions o;
  o.geometry = {a.layers, a.experts, a.top_k ? a.top_k : std::min(8u, a.experts)};
  o.seed = seed;
  return o;
}

int run_bench_route(const BenchArgs& a) {
  auto policy = parse_policy(a.policy);
  if (!policy) return report({Errc::invalid_argument, "unknown policy '" + a.policy + "'"});
  const SyntheticOptions so = synthetic_for(a, a.seed);
  if (Status s = so.geometry.validate(); !s) return report(s);
  auto cal = generate_synthetic(so, std::max<uint64_t>(a.calibration, a.workers));
  if (!cal) return report(cal.status());
  // All layers masked, as the target states; fitting without decode counts.
  FitOptions fo;
  fo.workers = a.workers;
  fo.seed = a.seed;
  fo.threads = a.threads;
  auto table = fit_table({so.geometry, cal->prefill.n, cal->prefill.data, {}, cal->labels()}, fo);
  if (!table) return report(table.status());
  auto eval = generate_synthetic(synthetic_for(a, a.seed + 1), 512);
  if (!eval) return report(eval.status());
  auto shared = std::make_shared<const ClusterTable>(std::move(*table));
  const auto labels = eval->labels();

  // One router per policy timed, in turn (interleaving them would make each
  // evict the other's data from the caches). Every worker holds a live batch
  // of live_batch requests, routed with ids; each timed decision routes one
  // more and then completes the oldest, so the batches stay that size.
  auto time_policy = [&](Policy timed, std::vector<uint64_t>& ns) -> Status {
    RouterOptions ro;
    ro.policy = timed;
    ro.max_workers = std::max<uint32_t>(256, a.workers);
    ro.max_inflight = std::max<uint32_t>(8192, a.live_batch * a.workers + 1);
    auto router = Router::create(shared, ro);
    if (!router) return router.status();
    Router& r = **router;
    const uint64_t live = uint64_t{a.live_batch} * a.workers;
    for (uint64_t id = 0; id < live; ++id) {
      RouteHints hints;
      hints.label = labels[id % eval->prefill.n];
      hints.request_id = id;
      if (auto d = r.route(eval->prefill.row(id % eval->prefill.n), hints); !d) return d.status();
    }
    const uint64_t warmup = std::min<uint64_t>(1000, a.decisions);
    ns.reserve(a.decisions);
    for (uint64_t i = 0; i < a.decisions + warmup; ++i) {
      const uint64_t id = live + i, req = id % eval->prefill.n;
      RouteHints hints;
      hints.label = labels[req];
      hints.request_id = id;
      const auto t0 = Clock::now();
      auto d = r.route(eval->prefill.row(req), hints);
      const auto t1 = Clock::now();
      if (!d) return d.status();
      if (live > 0) {
        ELDR_TRY(r.complete_request(id - live));
      } else {
        ELDR_TRY(r.complete_request(id));
      }
      if (i >= warmup)
        ns.push_back(static_cast<uint64_t>(std::chrono::nanoseconds(t1 - t0).count()));
    }
    return Status::ok();
  };
  std::vector<uint64_t> route_ns, paper_ns, reference_ns;
  if (Status s = time_policy(*policy, route_ns); !s) return report(s);
  const bool compare = *policy != Policy::eldr;
  if (compare)
    if (Status s = time_policy(Policy::eldr, paper_ns); !s) return report(s);

  // The straightforward path: materialise the signature, one dot product per
  // centroid (what the research prototype does, here in C++).
  auto space = SignatureSpace::create(shared->geometry, shared->layer_mask, shared->idf);
  if (!space) return report(space.status());
  const uint64_t warmup = std::min<uint64_t>(1000, a.decisions);
  reference_ns.reserve(a.decisions);
  std::vector<float> sig(space->dim()), ref_scores(shared->num_clusters());
  volatile float sink = 0.0f;
  for (uint64_t i = 0; i < a.decisions + warmup; ++i) {
    const auto t0 = Clock::now();
    (void)space->signature(eval->prefill.row(i % eval->prefill.n), sig);
    for (uint32_t c = 0; c < shared->num_clusters(); ++c)
      ref_scores[c] = dot(sig, shared->centroid(c));
    const auto t1 = Clock::now();
    sink = sink + ref_scores[0];
    if (i >= warmup)
      reference_ns.push_back(static_cast<uint64_t>(std::chrono::nanoseconds(t1 - t0).count()));
  }
  const uint64_t p50 = percentile(route_ns, 50), p99 = percentile(route_ns, 99);
  const uint64_t rp50 = percentile(reference_ns, 50), rp99 = percentile(reference_ns, 99);
  const uint64_t pp50 = compare ? percentile(paper_ns, 50) : p50;
  const uint64_t pp99 = compare ? percentile(paper_ns, 99) : p99;
  nlohmann::json j = {{"bench", "route"},
                      {"policy", policy_name(*policy)},
                      {"layers", a.layers},
                      {"experts", a.experts},
                      {"workers", a.workers},
                      {"masked_layers", shared->layer_mask.size()},
                      {"decisions", a.decisions},
                      {"live_batch", a.live_batch},
                      {"eldr_p50_ns", pp50},
                      {"eldr_p99_ns", pp99},
                      {"ratio_to_eldr_p50", pp50 ? static_cast<double>(p50) / pp50 : 0.0},
                      {"p50_ns", p50},
                      {"p99_ns", p99},
                      {"reference_p50_ns", rp50},
                      {"reference_p99_ns", rp99},
                      {"speedup_p50", p50 ? static_cast<double>(rp50) / p50 : 0.0}};
  if (a.json) {
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("route %s  L=%u E=%u K=%u  decisions %llu, %u requests live per worker\n",
                policy_name(*policy), a.layers, a.experts, a.workers,
                static_cast<unsigned long long>(a.decisions), a.live_batch);
    std::printf("  %-17s p50 %6llu ns  p99 %6llu ns\n", policy_name(*policy),
                static_cast<unsigned long long>(p50), static_cast<unsigned long long>(p99));
    if (compare)
      std::printf("  %-17s p50 %6llu ns  p99 %6llu ns  (ratio %.2f)\n", "eldr (paper rule)",
                  static_cast<unsigned long long>(pp50), static_cast<unsigned long long>(pp99),
                  pp50 ? static_cast<double>(p50) / pp50 : 0.0);
    std::printf("  signature + dots  p50 %6llu ns  p99 %6llu ns  (x%.1f)\n",
                static_cast<unsigned long long>(rp50), static_cast<unsigned long long>(rp99),
                p50 ? static_cast<double>(rp50) / p50 : 0.0);
  }
  return 0;
}

int run_bench_fit(const BenchArgs& a) {
  auto cal = generate_synthetic(synthetic_for(a, a.seed), a.requests);
  if (!cal) return report(cal.status());
  FitOptions fo;
  fo.workers = a.workers;
  fo.seed = a.seed;
  fo.threads = a.threads;
  fo.select_layers = !a.no_layer_select;
  const Geometry g = synthetic_for(a, a.seed).geometry;
  const auto t0 = Clock::now();
  auto table = fit_table({g, cal->prefill.n, cal->prefill.data, cal->decode.data, {}}, fo);
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  if (!table) return report(table.status());
  nlohmann::json j = {{"bench", "fit"},
                      {"requests", a.requests},
                      {"layers", a.layers},
                      {"experts", a.experts},
                      {"workers", a.workers},
                      {"layer_selection", !a.no_layer_select},
                      {"threads", a.threads},
                      {"seconds", secs},
                      {"masked_layers", table->layer_mask.size()},
                      {"peak_rho", table->fit.peak_rho},
                      {"iterations", table->fit.iterations}};
  if (a.json)
    std::printf("%s\n", j.dump().c_str());
  else
    std::printf("fit N=%llu K=%u %ux%u: %.2f s (%zu layers, peak rho %.4f, %u iterations)\n",
                static_cast<unsigned long long>(a.requests), a.workers, a.layers, a.experts, secs,
                table->layer_mask.size(), table->fit.peak_rho, table->fit.iterations);
  return 0;
}

}  // namespace

void register_bench_command(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  auto* bench = app.add_subcommand("bench", "performance benchmarks");
  bench->require_subcommand(1);
  auto* route = bench->add_subcommand("route", "latency of one routing decision");
  auto* fit = bench->add_subcommand("fit", "time of the offline fit");
  for (CLI::App* c : {route, fit}) {
    c->add_option("--layers", a->layers)->check(CLI::Range(1u, kMaxLayers));
    c->add_option("--experts", a->experts)->check(CLI::Range(1u, kMaxExperts));
    c->add_option("--workers", a->workers)->check(CLI::Range(1u, 1024u));
    c->add_option("--top-k", a->top_k, "experts per token (default min(8, E))");
    c->add_option("--seed", a->seed);
    c->add_option("--threads", a->threads, "fit threads (0 = all cores)");
    c->add_flag("--json", a->json, "one JSON line");
  }
  route->add_option("--decisions", a->decisions)
      ->check(CLI::Range(uint64_t{1}, uint64_t{100000000}));
  route->add_option("--calibration", a->calibration, "calibration requests for the table");
  route->add_option("--policy", a->policy);
  route->add_option("--live-batch", a->live_batch, "requests in flight on every worker")
      ->check(CLI::Range(0u, 1024u));
  fit->add_option("--requests,-n", a->requests)->check(CLI::Range(uint64_t{2}, uint64_t{10000000}));
  fit->add_flag("--no-layer-select", a->no_layer_select);
  route->callback([a] { g_exit_code = run_bench_route(*a); });
  fit->callback([a] { g_exit_code = run_bench_fit(*a); });
}

}  // namespace eldr::cli
