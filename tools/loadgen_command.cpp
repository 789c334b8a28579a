// eldr loadgen: an example engine. Registers with an eldrd instance, pushes
// synthetic footprints, waits for each decision, optionally completes it, and
// reports where requests went and the push -> decision latency.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "cli_common.hpp"
#include "commands.hpp"
#include "eldr/fit.hpp"
#include "eldr/lab/synthetic.hpp"
#include "eldr/router.hpp"
#include "eldr/shm.hpp"
#include "footprint_set.hpp"
#include "round_trip.hpp"

namespace eldr::cli {

namespace {

struct LoadgenArgs {
  std::string instance = "default", model = "qwen3-30b-a3b";
  uint64_t requests = 1000, seed = 7;
  double rate = 0.0;  // requests per second, 0 = as fast as decisions come back
  bool complete = false, json = false;
  uint32_t print = 0;  // print the first N decisions
  uint32_t timeout_ms = 2000;
  uint32_t distinct = 256;  // distinct footprints, cycled
};

int run_loadgen(const LoadgenArgs& a) {
  auto footprints = footprint_set(
      a.model, static_cast<uint32_t>(std::min<uint64_t>(a.distinct, a.requests)), a.seed);
  if (!footprints) return report(footprints.status());
  auto client = shm::Client::open(a.instance);
  if (!client) return report(client.status());
  shm::Client& c = **client;
  const auto labels = footprints->labels();

  std::map<int32_t, uint64_t> per_worker;
  std::map<int32_t, uint64_t> errors;  // by status code
  std::vector<uint64_t> latencies;
  latencies.reserve(a.requests);
  uint64_t ring_full = 0, failed = 0, similarity_n = 0;
  double similarity = 0.0;
  const std::string prefix = "lg-" + std::to_string(getpid()) + "-";
  const auto t0 = Clock::now();
  for (uint64_t i = 0; i < a.requests; ++i) {
    if (a.rate > 0.0) {
      const auto due = t0 + std::chrono::nanoseconds(static_cast<int64_t>(1e9 * i / a.rate));
      std::this_thread::sleep_until(due);
    }
    const std::string id = prefix + std::to_string(i);
    auto rt = round_trip(c, footprint_of(*footprints, i, id), a.timeout_ms, ring_full);
    if (!rt) {
      ++failed;
      if (failed <= 3)
        std::fprintf(stderr, "eldr loadgen: %s: %s\n", id.c_str(), rt.status().to_string().c_str());
      continue;
    }
    const shm::DecisionIn& d = rt->decision;
    latencies.push_back(rt->ns);
    if (d.status != 0) {
      ++errors[d.status];
      continue;
    }
    ++per_worker[d.worker];
    similarity += d.similarity;
    ++similarity_n;
    if (i < a.print)
      std::printf("  %-24s %-8s -> worker %3d  similarity %.3f  band %u  epoch %llu  %6.1f us\n",
                  id.c_str(), labels[i % labels.size()].c_str(), d.worker, d.similarity,
                  d.band_size, static_cast<unsigned long long>(d.table_epoch), rt->ns / 1e3);
    if (a.complete) {
      Status s = c.push_complete(id);
      for (int tries = 0; !s && s.code() == Errc::ring_full && tries < 1000; ++tries) {
        ++ring_full;
        std::this_thread::sleep_for(std::chrono::microseconds(50));
        s = c.push_complete(id);
      }
      if (!s) return report(s);
    }
  }
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  const uint64_t p50 = latencies.empty() ? 0 : percentile(latencies, 50);
  const uint64_t p99 = latencies.empty() ? 0 : percentile(latencies, 99);
  if (a.json) {
    nlohmann::json j;
    j["requests"] = a.requests;
    j["routed"] = similarity_n;
    j["failed"] = failed;
    j["ring_full_retries"] = ring_full;
    j["p50_ns"] = p50;
    j["p99_ns"] = p99;
    j["seconds"] = secs;
    for (const auto& [w, n] : per_worker) j["per_worker"][std::to_string(w)] = n;
    for (const auto& [code, n] : errors) j["errors"][errc_name(static_cast<Errc>(code))] = n;
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf(
        "loadgen: %llu requests in %.2f s (%.0f/s) to instance %s: %llu routed, %llu "
        "error decisions, %llu failed, %llu ring-full retries\n",
        static_cast<unsigned long long>(a.requests), secs, a.requests / secs, a.instance.c_str(),
        static_cast<unsigned long long>(similarity_n),
        static_cast<unsigned long long>(latencies.size() - similarity_n),
        static_cast<unsigned long long>(failed), static_cast<unsigned long long>(ring_full));
    std::printf("push -> decision: p50 %.1f us, p99 %.1f us; mean similarity %.3f\n", p50 / 1e3,
                p99 / 1e3, similarity_n ? similarity / similarity_n : 0.0);
    std::printf("per worker:");
    for (const auto& [w, n] : per_worker)
      std::printf(" %d:%llu", w, static_cast<unsigned long long>(n));
    std::printf("\n");
    for (const auto& [code, n] : errors)
      std::printf("error decisions %s: %llu\n", errc_name(static_cast<Errc>(code)),
                  static_cast<unsigned long long>(n));
  }
  return failed == 0 ? 0 : 1;
}

}  // namespace

void register_loadgen_command(CLI::App& app) {
  auto a = std::make_shared<LoadgenArgs>();
  auto* lg = app.add_subcommand(
      "loadgen", "example engine: push synthetic footprints to eldrd, wait for the decisions");
  lg->add_option("--instance", a->instance, "eldrd instance name");
  lg->add_option("--requests", a->requests)->check(CLI::Range(uint64_t{1}, uint64_t{1} << 40));
  lg->add_option("--rate", a->rate, "requests per second (0 = closed loop)")
      ->check(CLI::Range(0.0, 1e9));
  lg->add_option("--model", a->model, "model preset or LxExk (geometry of the daemon's table)");
  lg->add_flag("--complete", a->complete, "send complete after each decision");
  lg->add_option("--print", a->print, "print the first N decisions");
  lg->add_option("--timeout-ms", a->timeout_ms, "wait for each decision at most this long");
  lg->add_option("--seed", a->seed);
  lg->add_flag("--json", a->json, "one JSON line");
  lg->callback([a] { g_exit_code = run_loadgen(*a); });
}

}  // namespace eldr::cli
