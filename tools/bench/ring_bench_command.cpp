// eldr bench ring: the push -> decision round trip through a running eldrd
// (its shared-memory ring and decision table), side by side with the same
// exchange over a Unix socket and a Boost.Interprocess message_queue; one JSON
// line.
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <boost/date_time/posix_time/posix_time_types.hpp>
#include <boost/interprocess/ipc/message_queue.hpp>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
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

struct RingBenchArgs {
  std::string instance = "default", model = "qwen3-30b-a3b";
  uint64_t requests = 20000, warmup = 2000;
  uint32_t workers = 8;  // K of the baselines' router (eldrd's default table has 8)
  bool json = false, baselines = true;
};

struct Percentiles {
  uint64_t p50 = 0, p99 = 0;
};

// ---- baselines: the same exchange (footprint in, routed decision out, one
// round trip at a time) over a Unix socket and a Boost.Interprocess
// message_queue, served by a forked child that routes with the core router.

constexpr uint8_t kSwitchToQueue = 1;  // one-byte control messages to the child
constexpr uint8_t kStop = 2;

int serve_baselines(int sock, const std::string& req_name, const std::string& rep_name,
                    const SyntheticWorkload& footprints, uint32_t workers) {
  namespace bip = boost::interprocess;
  const Geometry g{footprints.prefill.layers, footprints.prefill.experts, 0};
  FitOptions fo;
  fo.workers = workers;
  fo.threads = 1;
  auto table = fit_table({g, footprints.prefill.n, footprints.prefill.data, {}, {}}, fo);
  if (!table) return 1;
  auto router = Router::create(std::make_shared<const ClusterTable>(std::move(*table)));
  if (!router) return 1;
  const size_t bytes = g.cells() * sizeof(int16_t);
  std::vector<int16_t> counts(g.cells());
  const auto answer = [&](size_t n) -> std::optional<shm::DecisionIn> {
    if (n != bytes) return std::nullopt;
    auto d = (*router)->route(counts);
    shm::DecisionIn out;
    if (d) {
      out.worker = d->worker_id;
      out.similarity = d->similarity;
      out.band_size = d->band_size;
      out.table_epoch = d->table_epoch;
      (void)(*router)->complete(d->worker_id);  // keep the load flat between round trips
    } else {
      out.status = static_cast<int32_t>(d.status().code());
    }
    return out;
  };
  const uint8_t ready = 0;
  if (send(sock, &ready, 1, 0) != 1) return 1;
  for (;;) {  // Unix socket phase
    const ssize_t n = recv(sock, counts.data(), bytes, 0);
    if (n <= 0) return 1;
    if (n == 1) break;
    auto d = answer(static_cast<size_t>(n));
    if (!d || send(sock, &*d, sizeof *d, 0) != static_cast<ssize_t>(sizeof *d)) return 1;
  }
  try {
    bip::message_queue req(bip::open_only, req_name.c_str());
    bip::message_queue rep(bip::open_only, rep_name.c_str());
    for (;;) {
      bip::message_queue::size_type n = 0;
      unsigned priority = 0;
      req.receive(counts.data(), bytes, n, priority);
      if (n == 1) return 0;
      auto d = answer(n);
      if (!d) return 1;
      rep.send(&*d, sizeof *d, 0);
    }
  } catch (const bip::interprocess_exception&) {
    return 1;
  }
}

Result<std::pair<Percentiles, Percentiles>> run_baselines(const RingBenchArgs& a,
                                                          const SyntheticWorkload& footprints) {
  namespace bip = boost::interprocess;
  const size_t bytes = footprints.prefill.row(0).size_bytes();
  const std::string tag = "eldr-bench-" + std::to_string(getpid());
  const std::string req_name = tag + "-req", rep_name = tag + "-rep";
  bip::message_queue::remove(req_name.c_str());
  bip::message_queue::remove(rep_name.c_str());
  std::unique_ptr<bip::message_queue> req, rep;
  try {
    req = std::make_unique<bip::message_queue>(bip::create_only, req_name.c_str(), 4, bytes);
    rep = std::make_unique<bip::message_queue>(bip::create_only, rep_name.c_str(), 4,
                                               sizeof(shm::DecisionIn));
  } catch (const bip::interprocess_exception& e) {
    return Status{Errc::io, std::string("message_queue: ") + e.what()};
  }
  struct Cleanup {
    std::string a, b;
    ~Cleanup() {
      bip::message_queue::remove(a.c_str());
      bip::message_queue::remove(b.c_str());
    }
  } cleanup{req_name, rep_name};
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
    return Status{Errc::io, std::string("socketpair: ") + std::strerror(errno)};
  std::fflush(nullptr);
  const pid_t child = fork();
  if (child < 0) return Status{Errc::io, std::string("fork: ") + std::strerror(errno)};
  if (child == 0) {
    close(sv[0]);
    _exit(serve_baselines(sv[1], req_name, rep_name, footprints, a.workers));
  }
  close(sv[1]);
  const int sock = sv[0];
  struct Reaper {
    pid_t pid;
    int fd;
    ~Reaper() {
      close(fd);
      int status = 0;
      for (int i = 0; i < 500 && waitpid(pid, &status, WNOHANG) == 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      if (waitpid(pid, &status, WNOHANG) == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
      }
    }
  } reaper{child, sock};
  timeval tv{60, 0};  // the child fits its table first
  setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  uint8_t ready = 1;
  if (recv(sock, &ready, 1, 0) != 1) return Status{Errc::timeout, "baseline server did not start"};
  tv = {5, 0};
  setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);

  std::vector<uint64_t> unix_ns, queue_ns;
  unix_ns.reserve(a.requests);
  queue_ns.reserve(a.requests);
  shm::DecisionIn d;
  for (uint64_t i = 0; i < a.warmup + a.requests; ++i) {
    const auto row = footprints.prefill.row(i % footprints.prefill.n);
    const auto t0 = Clock::now();
    if (send(sock, row.data(), bytes, 0) != static_cast<ssize_t>(bytes) ||
        recv(sock, &d, sizeof d, 0) != static_cast<ssize_t>(sizeof d) || d.status != 0)
      return Status{Errc::io, "unix socket baseline failed"};
    if (i >= a.warmup)
      unix_ns.push_back(static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count()));
  }
  if (send(sock, &kSwitchToQueue, 1, 0) != 1) return Status{Errc::io, "baseline control failed"};
  try {
    for (uint64_t i = 0; i < a.warmup + a.requests; ++i) {
      const auto row = footprints.prefill.row(i % footprints.prefill.n);
      const auto t0 = Clock::now();
      bip::message_queue::size_type n = 0;
      unsigned priority = 0;
      const auto deadline =
          boost::posix_time::microsec_clock::universal_time() + boost::posix_time::seconds(5);
      if (!req->timed_send(row.data(), bytes, 0, deadline) ||
          !rep->timed_receive(&d, sizeof d, n, priority, deadline) || n != sizeof d ||
          d.status != 0)
        return Status{Errc::timeout, "message_queue baseline failed"};
      if (i >= a.warmup)
        queue_ns.push_back(static_cast<uint64_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count()));
    }
    req->send(&kStop, 1, 0);
  } catch (const bip::interprocess_exception& e) {
    return Status{Errc::io, std::string("message_queue: ") + e.what()};
  }
  return std::pair{Percentiles{percentile(unix_ns, 50), percentile(unix_ns, 99)},
                   Percentiles{percentile(queue_ns, 50), percentile(queue_ns, 99)}};
}

int run_bench_ring(const RingBenchArgs& a) {
  auto footprints = footprint_set(a.model, 64, 11);
  if (!footprints) return report(footprints.status());
  // Baselines first: fork before this process opens the segment (and any thread runs).
  std::optional<std::pair<Percentiles, Percentiles>> baselines;
  if (a.baselines) {
    auto b = run_baselines(a, *footprints);
    if (!b) return report(b.status());
    baselines = *b;
  }
  auto client = shm::Client::open(a.instance);
  if (!client) return report(client.status());
  shm::Client& c = **client;
  std::vector<uint64_t> ns, push_ns, daemon_ns;  // round trip, push, daemon (seen -> published)
  ns.reserve(a.requests);
  push_ns.reserve(a.requests);
  daemon_ns.reserve(a.requests);
  uint64_t ring_full = 0;
  const std::string prefix = "bench-" + std::to_string(getpid()) + "-";
  for (uint64_t i = 0; i < a.warmup + a.requests; ++i) {
    const std::string id = prefix + std::to_string(i);
    auto rt = round_trip(c, footprint_of(*footprints, i, id), 2000, ring_full);
    if (!rt) return report(rt.status());
    if (rt->decision.status != 0)
      return report({static_cast<Errc>(rt->decision.status),
                     "the daemon answered with an error (is its table for " + a.model + "?)"});
    if (Status s = c.push_complete(id); !s) return report(s);
    if (i >= a.warmup) {
      ns.push_back(rt->ns);
      push_ns.push_back(rt->push_ns);
      daemon_ns.push_back(rt->decision.latency_ns);
    }
  }
  const Percentiles ring{percentile(ns, 50), percentile(ns, 99)};
  const size_t bytes = footprints->prefill.row(0).size_bytes();
  if (a.json) {
    nlohmann::json j;
    // Where the ring's round trip goes: the client's push, and the daemon
    // from reading the record to publishing the decision.
    j["eldr_ring"] = {{"p50_ns", ring.p50},
                      {"p99_ns", ring.p99},
                      {"push_p50_ns", percentile(push_ns, 50)},
                      {"daemon_p50_ns", percentile(daemon_ns, 50)}};
    if (baselines) {
      j["unix_socket"] = {{"p50_ns", baselines->first.p50}, {"p99_ns", baselines->first.p99}};
      j["boost_message_queue"] = {{"p50_ns", baselines->second.p50},
                                  {"p99_ns", baselines->second.p99}};
    }
    j["requests"] = a.requests;
    j["footprint_bytes"] = bytes;
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("round trip: %zu-byte footprint in, routed decision out; %llu requests\n", bytes,
                static_cast<unsigned long long>(a.requests));
    std::printf("  %-22s p50 %8.2f us  p99 %8.2f us  (push p50 %.2f us, daemon p50 %.2f us)\n",
                "eldr ring (eldrd)", ring.p50 / 1e3, ring.p99 / 1e3, percentile(push_ns, 50) / 1e3,
                percentile(daemon_ns, 50) / 1e3);
    if (baselines) {
      std::printf("  %-22s p50 %8.2f us  p99 %8.2f us\n", "unix socket", baselines->first.p50 / 1e3,
                  baselines->first.p99 / 1e3);
      std::printf("  %-22s p50 %8.2f us  p99 %8.2f us\n", "boost message_queue",
                  baselines->second.p50 / 1e3, baselines->second.p99 / 1e3);
    }
  }
  return 0;
}

}  // namespace

void register_bench_ring_command(CLI::App& bench) {
  auto a = std::make_shared<RingBenchArgs>();
  auto* ring = bench.add_subcommand(
      "ring", "push -> decision round trip through a running eldrd (shared-memory ring)");
  ring->add_option("--instance", a->instance, "eldrd instance name");
  ring->add_option("--requests", a->requests)->check(CLI::Range(uint64_t{1}, uint64_t{1} << 32));
  ring->add_option("--warmup", a->warmup);
  ring->add_option("--model", a->model, "model preset (geometry of the daemon's table)");
  ring->add_option("--workers", a->workers, "K of the baselines' router")
      ->check(CLI::Range(1u, 1024u));
  ring->add_flag("--baselines,!--no-baselines", a->baselines,
                 "also time the same exchange over a Unix socket and a Boost message_queue");
  ring->add_flag("--json", a->json, "one JSON line");
  ring->callback([a] { g_exit_code = run_bench_ring(*a); });
}

}  // namespace eldr::cli
