// eldr loadgen: an example engine. Registers with an eldrd instance, pushes
// synthetic footprints, waits for each decision, optionally completes it, and
// reports where requests went and the push -> decision latency.
// eldr bench ring: the same round trip as a benchmark, one JSON line.
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
#include "footprint_pool.hpp"

namespace eldr::cli {

namespace {

using Clock = std::chrono::steady_clock;

struct LoadgenArgs {
  std::string instance = "default", model = "qwen3-30b-a3b";
  uint64_t requests = 1000, seed = 7;
  double rate = 0.0;  // requests per second, 0 = as fast as decisions come back
  bool complete = false, json = false;
  uint32_t print = 0;  // print the first N decisions
  uint32_t timeout_ms = 2000;
  uint32_t pool = 256;  // distinct footprints, cycled
};

struct RoundTrip {
  shm::DecisionIn decision;
  uint64_t ns = 0;       // push -> decision back
  uint64_t push_ns = 0;  // of which the push (encode, copy into the ring, checksum)
};

uint64_t ns_since(Clock::time_point start) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count());
}

// Push one footprint and wait for its decision; a full ring is retried (the
// daemon drains it) until the timeout.
Result<RoundTrip> round_trip(shm::Client& client, const shm::FootprintOut& f, uint32_t timeout_ms,
                             uint64_t& ring_full_retries) {
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    Status pushed = client.push_footprint(f);
    if (pushed) break;
    if (pushed.code() != Errc::ring_full || Clock::now() > deadline) return pushed;
    ++ring_full_retries;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  const uint64_t push_ns = ns_since(start);
  auto d = client.wait_decision(f.request_id, timeout_ms);
  if (!d) return d.status();
  return RoundTrip{*d, ns_since(start), push_ns};
}

int run_loadgen(const LoadgenArgs& a) {
  auto pool = footprint_pool(a.model, static_cast<uint32_t>(std::min<uint64_t>(a.pool, a.requests)),
                             a.seed);
  if (!pool) return report(pool.status());
  auto client = shm::Client::open(a.instance);
  if (!client) return report(client.status());
  shm::Client& c = **client;
  const auto labels = pool->labels();

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
    auto rt = round_trip(c, footprint_of(*pool, i, id), a.timeout_ms, ring_full);
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
                    const SyntheticWorkload& pool, uint32_t workers) {
  namespace bip = boost::interprocess;
  const Geometry g{pool.prefill.layers, pool.prefill.experts, 0};
  FitOptions fo;
  fo.workers = workers;
  fo.threads = 1;
  auto table = fit_table({g, pool.prefill.n, pool.prefill.data, {}, {}}, fo);
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
                                                          const SyntheticWorkload& pool) {
  namespace bip = boost::interprocess;
  const size_t bytes = pool.prefill.row(0).size_bytes();
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
    _exit(serve_baselines(sv[1], req_name, rep_name, pool, a.workers));
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
    const auto row = pool.prefill.row(i % pool.prefill.n);
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
      const auto row = pool.prefill.row(i % pool.prefill.n);
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
  auto pool = footprint_pool(a.model, 64, 11);
  if (!pool) return report(pool.status());
  // Baselines first: fork before this process opens the segment (and any thread runs).
  std::optional<std::pair<Percentiles, Percentiles>> baselines;
  if (a.baselines) {
    auto b = run_baselines(a, *pool);
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
    auto rt = round_trip(c, footprint_of(*pool, i, id), 2000, ring_full);
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
  const size_t bytes = pool->prefill.row(0).size_bytes();
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
