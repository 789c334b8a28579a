// eldr bench pool: how soon a booking made on one eldrd node is counted
// by another node of its pool. Routes requests through node A's ring (and
// completes each), then reads node B's record of the delay from A's publish
// to B's router counting the booking (its last 4096 bookings, same clock on
// one host), next to A's own shared-memory round trip. One JSON line.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "cli_common.hpp"
#include "commands.hpp"
#include "eldr/eldr.h"
#include "eldr/pool/nats_auth_cli.hpp"
#include "eldr/shm.hpp"
#include "footprint_set.hpp"
#include "pool_client.hpp"
#include "round_trip.hpp"

namespace eldr::cli {

namespace {

struct PoolBenchArgs {
  std::string from, to, model = "qwen3-30b-a3b";
  uint64_t requests = 4096;
  uint32_t rate = 1000;  // requests per second at A; 0 = one after another
  std::string nats;      // given: also time routing over NATS (eldr_pool_route) to the pool
  pool::NatsAuth auth;   // with nats: TLS, credentials, inbox prefix
  bool json = false;
};

// Round trips through the pool over NATS request/reply: each route, then
// its complete (which returns once the node has it).
struct NatsRoundTrips {
  std::vector<uint64_t> route_ns, complete_ns;
};
Result<NatsRoundTrips> pool_round_trips(const PoolBenchArgs& a, const std::string& pool,
                                        const SyntheticWorkload& fps) {
  auto opened = open_pool_client(a.nats, pool, a.auth, 2000);
  if (!opened) return opened.status();
  eldr_pool_t* handle = *opened;
  NatsRoundTrips rt;
  rt.route_ns.reserve(a.requests);
  rt.complete_ns.reserve(a.requests);
  const std::string prefix = "nbench-" + std::to_string(getpid()) + "-";
  const Geometry g{fps.prefill.layers, fps.prefill.experts, 0};
  for (uint64_t i = 0; i < a.requests; ++i) {
    const std::string id = prefix + std::to_string(i);
    const auto row = fps.prefill.row(i % fps.prefill.n);
    eldr_decision_t d = ELDR_DECISION_INIT;
    const auto t0 = Clock::now();
    const eldr_status_t s =
        eldr_pool_route(handle, id.c_str(), row.data(), g.layers, g.experts, 2000, &d);
    if (s != ELDR_OK) {
      const std::string why = eldr_last_error_message();
      eldr_pool_free(handle);
      return Status{static_cast<Errc>(s), why};
    }
    rt.route_ns.push_back(ns_since(t0));
    const auto t1 = Clock::now();
    if (eldr_pool_complete(handle, id.c_str(), d.completion_token) == ELDR_OK)
      rt.complete_ns.push_back(ns_since(t1));
  }
  eldr_pool_free(handle);
  return rt;
}

Result<nlohmann::json> pool_status(const std::string& instance) {
  auto s = shm::read_snapshot(instance);
  if (!s) return s.status();
  if (s->pool.empty())
    return Status{Errc::state, "instance " + instance + " is in no pool (eldrd without --nats)"};
  auto j = nlohmann::json::parse(s->pool, nullptr, false);
  if (!j.is_object()) return Status{Errc::corrupt, "instance " + instance + ": unreadable status"};
  return j;
}

// Bookings of `peer` that the node of `status` has applied.
uint64_t books_applied(const nlohmann::json& status, const std::string& peer) {
  for (const auto& p : status.value("peers", nlohmann::json::array()))
    if (p.value("name", "") == peer) return p.value("bookings_applied", uint64_t{0});
  return 0;
}

int run_bench_pool(const PoolBenchArgs& a) {
  auto from_status = pool_status(a.from);
  if (!from_status) return report(from_status.status());
  auto to_status = pool_status(a.to);
  if (!to_status) return report(to_status.status());
  const std::string node = from_status->value("node", "");
  if ((*from_status)["pool"] != (*to_status)["pool"])
    return report({Errc::state, a.from + " and " + a.to + " are in different pools"});
  const uint64_t before = books_applied(*to_status, node);
  auto footprints = footprint_set(a.model, 64, 13);
  if (!footprints) return report(footprints.status());
  auto client = shm::Client::open(a.from);
  if (!client) return report(client.status());
  shm::Client& c = **client;
  std::vector<uint64_t> ring_ns;
  ring_ns.reserve(a.requests);
  uint64_t ring_full = 0;
  const std::string prefix = "cbench-" + std::to_string(getpid()) + "-";
  const auto start = Clock::now();
  for (uint64_t i = 0; i < a.requests; ++i) {
    if (a.rate != 0)
      std::this_thread::sleep_until(start + std::chrono::microseconds(i * 1'000'000 / a.rate));
    const std::string id = prefix + std::to_string(i);
    auto rt = round_trip(c, footprint_of(*footprints, i, id), 2000, ring_full);
    if (!rt) return report(rt.status());
    if (rt->decision.status != 0)
      return report(
          {static_cast<Errc>(rt->decision.status),
           "node " + a.from + " answered with an error (is its table for " + a.model + "?)"});
    ring_ns.push_back(rt->ns);
    if (Status s = c.push_complete(id, rt->decision.completion_token); !s) return report(s);
  }
  // B must have applied every booking of this run before its delays are read.
  nlohmann::json after;
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  for (;;) {
    auto s = pool_status(a.to);
    if (!s) return report(s.status());
    after = *s;
    if (books_applied(after, node) >= before + a.requests) break;
    if (Clock::now() > deadline)
      return report({Errc::timeout, a.to + " applied " +
                                        std::to_string(books_applied(after, node) - before) +
                                        " of the " + std::to_string(a.requests) +
                                        " bookings within 5 s (is it connected?)"});
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const auto delay = after.value("booking_delay_ms", nlohmann::json::object());
  std::optional<NatsRoundTrips> nats_ns;
  if (!a.nats.empty()) {
    auto ns = pool_round_trips(a, from_status->value("pool", ""), *footprints);
    if (!ns) return report(ns.status());
    nats_ns = std::move(*ns);
  }
  const double ring_p50_us = static_cast<double>(percentile(ring_ns, 50)) / 1e3;
  const double ring_p99_us = static_cast<double>(percentile(ring_ns, 99)) / 1e3;
  if (a.json) {
    nlohmann::json j;
    j["booking_counted_at_peer_ms"] = delay;
    j["ring_round_trip_us"] = {{"p50", ring_p50_us}, {"p99", ring_p99_us}};
    const auto us = [](const std::vector<uint64_t>& ns) {
      return nlohmann::json{{"p50", static_cast<double>(percentile(ns, 50)) / 1e3},
                            {"p99", static_cast<double>(percentile(ns, 99)) / 1e3}};
    };
    if (nats_ns) {
      j["nats_route_round_trip_us"] = us(nats_ns->route_ns);
      j["nats_complete_round_trip_us"] = us(nats_ns->complete_ns);
    }
    j["requests"] = a.requests;
    j["rate"] = a.rate;
    j["from"] = a.from;
    j["to"] = a.to;
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("%llu requests routed at %s (%u/s), their bookings counted at %s:\n",
                static_cast<unsigned long long>(a.requests), a.from.c_str(), a.rate, a.to.c_str());
    std::printf("  booking -> counted at peer  p50 %8.3f ms  p99 %8.3f ms  max %8.3f ms (%llu)\n",
                delay.value("p50", 0.0), delay.value("p99", 0.0), delay.value("max", 0.0),
                static_cast<unsigned long long>(delay.value("samples", uint64_t{0})));
    std::printf("  ring round trip at %-8s  p50 %8.3f us  p99 %8.3f us\n", a.from.c_str(),
                ring_p50_us, ring_p99_us);
    if (nats_ns)
      for (const auto& [what, ns] :
           {std::pair{"route", nats_ns->route_ns}, std::pair{"complete", nats_ns->complete_ns}})
        std::printf("  %-8s over NATS (closed loop) p50 %8.3f us  p99 %8.3f us\n", what,
                    static_cast<double>(percentile(ns, 50)) / 1e3,
                    static_cast<double>(percentile(ns, 99)) / 1e3);
  }
  return 0;
}

}  // namespace

void register_bench_pool_command(CLI::App& bench) {
  auto a = std::make_shared<PoolBenchArgs>();
  auto* cmd = bench.add_subcommand(
      "pool", "a booking routed at one eldrd node, counted at another of its pool");
  cmd->add_option("--from", a->from, "instance of the node that routes")->required();
  cmd->add_option("--to", a->to, "instance of the node that counts")->required();
  cmd->add_option("--requests", a->requests, "at least 4096: the peer keeps the last 4096 delays")
      ->check(CLI::Range(uint64_t{4096}, uint64_t{1} << 24));
  cmd->add_option("--rate", a->rate, "requests per second at the first node, 0 = back to back");
  cmd->add_option("--model", a->model, "model preset (geometry of the nodes' tables)");
  cmd->add_option("--nats", a->nats,
                  "URL[,URL...]: also time the same requests routed over NATS (closed loop)");
  pool::add_nats_auth_options(*cmd, a->auth);
  cmd->add_flag("--json", a->json, "one JSON line");
  cmd->callback([a] { g_exit_code = run_bench_pool(*a); });
}

}  // namespace eldr::cli
