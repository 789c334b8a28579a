// eldr route: footprints (.npy) -> decisions, for scripting.
#include <cstdio>
#include <deque>
#include <map>

#include "cli_common.hpp"
#include "commands.hpp"
#include "eldr/npy.hpp"
#include "eldr/router.hpp"

namespace eldr::cli {

namespace {

struct RouteArgs {
  std::string table, footprints, labels, policy = "eldr_cost";
  float tau = -1.0f;
  bool min2 = false, json = false;
  uint64_t seed = 0;
  uint32_t window = 64;
};

int run_route(const RouteArgs& a) {
  auto policy = parse_policy(a.policy);
  if (!policy) return report({Errc::invalid_argument, "unknown policy '" + a.policy + "'"});
  auto table = load_any_table(a.table);
  if (!table) return report(table.status());
  auto fp = load_counts_npy(a.footprints);
  if (!fp) return report(fp.status());
  if (fp->layers != table->geometry.layers || fp->experts != table->geometry.experts)
    return report({Errc::shape_mismatch, "footprints are " + std::to_string(fp->layers) + "x" +
                                             std::to_string(fp->experts) + ", the table is " +
                                             table->geometry.to_string()});
  std::vector<std::string> labels;
  if (!a.labels.empty()) {
    auto l = load_labels(a.labels);
    if (!l) return report(l.status());
    labels = std::move(*l);
    if (labels.size() != fp->n)
      return report({Errc::shape_mismatch, "labels count differs from the footprints count"});
  }
  RouterOptions o;
  o.policy = *policy;
  o.tau = a.tau;
  o.min2_band = a.min2;
  o.seed = a.seed;
  o.max_workers = std::max<uint32_t>(256, table->num_clusters());
  auto router = Router::create(std::make_shared<const ClusterTable>(std::move(*table)), o);
  if (!router) return report(router.status());
  Router& r = **router;

  // Requests finish in arrival order once `window` are in flight, a stand-in
  // for decode completions so that load-aware policies (and eldr_cost's batch
  // footprints) see a live load. Each request is routed and completed by its
  // index.
  std::deque<uint64_t> inflight;
  std::map<int32_t, uint64_t> per_worker;
  if (!a.json) std::printf("request,worker,similarity,band_size\n");
  for (uint64_t i = 0; i < fp->n; ++i) {
    RouteHints hints;
    if (!labels.empty()) hints.label = labels[i];
    hints.request_id = i;
    auto d = r.route(fp->row(i), hints);
    if (!d) {
      std::fprintf(stderr, "eldr: request %llu: %s\n", static_cast<unsigned long long>(i),
                   d.status().to_string().c_str());
      continue;
    }
    ++per_worker[d->worker_id];
    if (a.json)
      std::printf(
          "{\"request\":%llu,\"worker\":%d,\"similarity\":%.6f,\"band_size\":%u,\"policy\":\"%s\"}"
          "\n",
          static_cast<unsigned long long>(i), d->worker_id, d->similarity, d->band_size,
          policy_name(d->policy));
    else
      std::printf("%llu,%d,%.6f,%u\n", static_cast<unsigned long long>(i), d->worker_id,
                  d->similarity, d->band_size);
    inflight.push_back(i);
    if (a.window && inflight.size() > a.window) {
      (void)r.complete_request(inflight.front());
      inflight.pop_front();
    }
  }
  std::fprintf(stderr,
               "routed %llu requests (%s):", static_cast<unsigned long long>(r.stats().routed),
               policy_name(*policy));
  for (const auto& [w, c] : per_worker)
    std::fprintf(stderr, " %d:%llu", w, static_cast<unsigned long long>(c));
  std::fprintf(stderr, "\n");
  return r.stats().rejected ? 1 : 0;
}

}  // namespace

void register_route_command(CLI::App& app) {
  auto a = std::make_shared<RouteArgs>();
  auto* cmd =
      app.add_subcommand("route", "route footprints from an .npy file, one decision per line");
  cmd->add_option("--table,-t", a->table, "cluster table")->required()->check(CLI::ExistingFile);
  cmd->add_option("--footprints,-f", a->footprints, "footprints [N,L,E] .npy")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option(
      "--policy", a->policy,
      "eldr_cost (default) | eldr | eldr_guard | round_robin | random | jsq | p2c | domain");
  cmd->add_option("--tau", a->tau, "band width (default: the table's)");
  cmd->add_flag("--min2", a->min2, "widen a one-member band to the top two");
  cmd->add_option("--seed", a->seed);
  cmd->add_option("--labels", a->labels, "labels for the domain policy")->check(CLI::ExistingFile);
  cmd->add_option("--window", a->window,
                  "requests in flight before the oldest completes (0: never)");
  cmd->add_flag("--json", a->json, "JSON lines instead of CSV");
  cmd->callback([a] { g_exit_code = run_route(*a); });
}

}  // namespace eldr::cli
