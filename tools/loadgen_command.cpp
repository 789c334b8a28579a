// eldr loadgen: an example engine. Registers with an eldrd instance, pushes
// synthetic footprints, waits for each decision, optionally completes it, and
// reports where requests went and the push -> decision latency. With --nats
// it is an example gateway instead: the same requests, routed over NATS by
// any node of a pool.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "cli_common.hpp"
#include "commands.hpp"
#include "eldr/eldr.h"
#include "eldr/fit.hpp"
#include "eldr/lab/synthetic.hpp"
#include "eldr/pool/nats_auth_cli.hpp"
#include "eldr/router.hpp"
#include "eldr/shm.hpp"
#include "footprint_set.hpp"
#include "pool_client.hpp"
#include "round_trip.hpp"

namespace eldr::cli {

namespace {

struct LoadgenArgs {
  std::string instance = "default", model = "qwen3-30b-a3b";
  std::string nats, pool = "default";  // given --nats: a gateway over the pool, not an engine
  pool::NatsAuth auth;                 // with --nats: TLS, credentials, inbox prefix
  uint64_t requests = 1000, seed = 7;
  double rate = 0.0;  // requests per second, 0 = as fast as decisions come back
  bool complete = false, json = false;
  uint32_t print = 0;  // print the first N decisions
  uint32_t timeout_ms = 2000;
  uint32_t distinct = 256;  // distinct footprints, cycled
  uint32_t hold = 0;        // with --complete: requests kept open, each completed this many later
};

// Where requests go: an eldrd's rings (as an engine does) or any node of a
// pool over NATS (as a gateway does, eldr_pool_route). A failed route is
// counted by the caller; a failed complete ends the run, but for one to a
// node that is gone (its lease releases its requests), counted.
class Target {
 public:
  virtual ~Target() = default;
  virtual Result<RoundTrip> route(const SyntheticWorkload& set, uint64_t i,
                                  const std::string& id) = 0;
  virtual Status complete(const std::string& id, uint64_t token) = 0;
  virtual std::string name() const = 0;
  uint64_t ring_full = 0;  // retries on a full ring (engine only)
  uint64_t gone = 0;       // completes to a node that is gone (gateway only)
};

class EngineTarget final : public Target {
 public:
  EngineTarget(std::unique_ptr<shm::Client> c, const LoadgenArgs& a)
      : m_client(std::move(c)), m_a(a) {}
  Result<RoundTrip> route(const SyntheticWorkload& set, uint64_t i,
                          const std::string& id) override {
    return round_trip(*m_client, footprint_of(set, i, id), m_a.timeout_ms, ring_full);
  }
  // The daemon holds the token: the id alone completes.
  Status complete(const std::string& id, uint64_t) override {
    Status s = m_client->push_complete(id);
    for (int tries = 0; !s && s.code() == Errc::ring_full && tries < 1000; ++tries) {
      ++ring_full;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      s = m_client->push_complete(id);
    }
    return s;
  }
  std::string name() const override { return "instance " + m_a.instance; }

 private:
  std::unique_ptr<shm::Client> m_client;
  const LoadgenArgs& m_a;
};

class GatewayTarget final : public Target {
 public:
  GatewayTarget(eldr_pool_t* pool, const LoadgenArgs& a) : m_pool(pool), m_a(a) {}
  ~GatewayTarget() override { eldr_pool_free(m_pool); }
  Result<RoundTrip> route(const SyntheticWorkload& set, uint64_t i,
                          const std::string& id) override {
    const auto row = set.prefill.row(i % set.prefill.n);
    eldr_decision_t d = ELDR_DECISION_INIT;
    const auto t0 = Clock::now();
    const eldr_status_t s = eldr_pool_route(m_pool, id.c_str(), row.data(), set.prefill.layers,
                                            set.prefill.experts, m_a.timeout_ms, &d);
    if (s != ELDR_OK) return Status{static_cast<Errc>(s), eldr_last_error_message()};
    RoundTrip rt;
    rt.ns = ns_since(t0);
    rt.decision.worker = d.worker;
    rt.decision.similarity = d.similarity;
    rt.decision.band_size = d.band_size;
    rt.decision.table_epoch = d.table_epoch;
    rt.decision.completion_token = d.completion_token;
    return rt;
  }
  Status complete(const std::string& id, uint64_t token) override {
    const eldr_status_t s = eldr_pool_complete(m_pool, id.c_str(), token);
    if (s == ELDR_E_NO_DAEMON) {
      ++gone;
      return {};
    }
    if (s != ELDR_OK) return Status{static_cast<Errc>(s), eldr_last_error_message()};
    return {};
  }
  std::string name() const override { return "pool " + m_a.pool + " at " + m_a.nats; }

 private:
  eldr_pool_t* m_pool;
  const LoadgenArgs& m_a;
};

Result<std::unique_ptr<Target>> open_target(const LoadgenArgs& a) {
  if (a.nats.empty()) {
    auto client = shm::Client::open(a.instance);
    if (!client) return client.status();
    return std::unique_ptr<Target>(std::make_unique<EngineTarget>(std::move(*client), a));
  }
  auto pool = open_pool_client(a.nats, a.pool, a.auth, 2000);
  if (!pool) return pool.status();
  return std::unique_ptr<Target>(std::make_unique<GatewayTarget>(*pool, a));
}

int run_loadgen(const LoadgenArgs& a) {
  auto footprints = footprint_set(
      a.model, static_cast<uint32_t>(std::min<uint64_t>(a.distinct, a.requests)), a.seed);
  if (!footprints) return report(footprints.status());
  auto target = open_target(a);
  if (!target) return report(target.status());
  Target& t = **target;
  const auto labels = footprints->labels();

  std::map<int32_t, uint64_t> per_worker;
  std::map<int32_t, uint64_t> errors;  // by status code
  std::vector<uint64_t> latencies;
  latencies.reserve(a.requests);
  uint64_t failed = 0, similarity_n = 0;
  double similarity = 0.0;
  const std::string prefix = "lg-" + std::to_string(getpid()) + "-";
  std::deque<std::pair<std::string, uint64_t>> open;  // routed, not completed: id, token
  const auto t0 = Clock::now();
  for (uint64_t i = 0; i < a.requests; ++i) {
    if (a.rate > 0.0) {
      const auto due = t0 + std::chrono::nanoseconds(static_cast<int64_t>(1e9 * i / a.rate));
      std::this_thread::sleep_until(due);
    }
    const std::string id = prefix + std::to_string(i);
    auto rt = t.route(*footprints, i, id);
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
      open.emplace_back(id, d.completion_token);
      if (open.size() > a.hold) {
        if (Status s = t.complete(open.front().first, open.front().second); !s) return report(s);
        open.pop_front();
      }
    }
  }
  for (const auto& [id, token] : open)
    if (Status s = t.complete(id, token); !s) return report(s);
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  const uint64_t p50 = latencies.empty() ? 0 : percentile(latencies, 50);
  const uint64_t p99 = latencies.empty() ? 0 : percentile(latencies, 99);
  if (a.json) {
    nlohmann::json j;
    j["requests"] = a.requests;
    j["routed"] = similarity_n;
    j["failed"] = failed;
    j["ring_full_retries"] = t.ring_full;
    if (!a.nats.empty()) j["completes_to_gone_nodes"] = t.gone;
    j["p50_ns"] = p50;
    j["p99_ns"] = p99;
    j["seconds"] = secs;
    for (const auto& [w, n] : per_worker) j["per_worker"][std::to_string(w)] = n;
    for (const auto& [code, n] : errors) j["errors"][errc_name(static_cast<Errc>(code))] = n;
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf(
        "loadgen: %llu requests in %.2f s (%.0f/s) to %s: %llu routed, %llu "
        "error decisions, %llu failed, %llu ring-full retries\n",
        static_cast<unsigned long long>(a.requests), secs, a.requests / secs, t.name().c_str(),
        static_cast<unsigned long long>(similarity_n),
        static_cast<unsigned long long>(latencies.size() - similarity_n),
        static_cast<unsigned long long>(failed), static_cast<unsigned long long>(t.ring_full));
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
      "loadgen",
      "example engine (or, with --nats, gateway): route synthetic footprints, wait for the "
      "decisions");
  lg->add_option("--instance", a->instance, "eldrd instance name");
  lg->add_option("--nats", a->nats,
                 "URL[,URL...]: route over NATS through any node of --pool, as a gateway does");
  lg->add_option("--pool", a->pool, "with --nats: the pool's name");
  pool::add_nats_auth_options(*lg, a->auth);
  lg->add_option("--requests", a->requests)->check(CLI::Range(uint64_t{1}, uint64_t{1} << 40));
  lg->add_option("--rate", a->rate, "requests per second (0 = closed loop)")
      ->check(CLI::Range(0.0, 1e9));
  lg->add_option("--model", a->model, "model preset or LxExk (geometry of the daemon's table)");
  lg->add_flag("--complete", a->complete, "send complete after each decision");
  lg->add_option("--hold", a->hold,
                 "with --complete: keep this many requests open, completing each this many "
                 "requests later (the rest at the end)");
  lg->add_option("--print", a->print, "print the first N decisions");
  lg->add_option("--timeout-ms", a->timeout_ms, "wait for each decision at most this long");
  lg->add_option("--seed", a->seed);
  lg->add_flag("--json", a->json, "one JSON line");
  lg->callback([a] { g_exit_code = run_loadgen(*a); });
}

}  // namespace eldr::cli
