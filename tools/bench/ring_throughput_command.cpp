// eldr bench ring-throughput: the coordinator (spawns the producers, runs
// their collectors, prints the account) and the command's options. See
// ring_throughput.hpp for how a run works.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cli_common.hpp"
#include "commands.hpp"
#include "eldr/shm.hpp"
#include "footprint_set.hpp"
#include "ring_throughput.hpp"

namespace eldr::cli {

namespace ring_throughput {

namespace {

// The run's account, summed over the producers.
struct Totals {
  uint64_t pushed = 0, ok = 0, errors = 0, missing = 0, ring_full = 0, failed_producers = 0,
           completes_failed = 0;
  std::map<int32_t, uint64_t> errors_by_code;
  double seconds = 0.0;  // from the start signal to the last collector done
  double rate = 0.0;     // decisions (ok or error) per second
};

// What the daemon did during the run, from its segment and its /proc entry.
struct DaemonCost {
  // Every decision the daemon published in the run window (other clients of
  // the instance included): a cross-check of `pushed`.
  uint64_t published = 0;
  // The daemon's own cost per footprint: what one dedicated core would
  // sustain, whatever else shared the machine during the run.
  std::optional<double> cpu_s, us_per_footprint;
};

// Where the producers and the daemon ran.
struct Setup {
  size_t footprint_bytes = 0;
  unsigned cores = 0;
  bool shared_cores = false;  // fewer cores than producers + collectors + the daemon
};

// Spawns every producer and opens its collector's client.
Status start_producers(Producers& producers, const ThroughputArgs& a) {
  producers.list.reserve(a.producers);
  for (uint32_t i = 0; i < a.producers; ++i) {
    ELDR_TRY(producers.spawn(a, i));
    auto c = shm::Client::open(a.instance);
    if (!c) return c.status();
    producers.list.back().collector = std::move(*c);
  }
  return Status::ok();
}

// One footprint through collector 0's client: the daemon is there and its
// table has the geometry we push.
Status probe(shm::Client& c, const ThroughputArgs& a) {
  auto footprints = footprint_set(a.model, 1, 1);
  if (!footprints) return footprints.status();
  const std::string id = "tp-" + a.run_tag + "-probe";
  ELDR_TRY(c.push_footprint(footprint_of(*footprints, 0, id)));
  auto d = c.wait_decision(id, std::max<uint32_t>(a.timeout_ms, 5000));
  if (!d) return d.status();
  if (d->status != 0)
    return {static_cast<Errc>(d->status),
            "the daemon answered a probe footprint with an error (is its table for --model " +
                a.model + "?)"};
  return Status::ok();
}

// Start together: every producer has its client and its footprints ready.
Status wait_until_ready(Producers& producers) {
  for (uint32_t i = 0; i < producers.list.size(); ++i) {
    Producer& p = producers.list[i];
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    while (p.last.kind != ProducerReport::ready && !p.finished && Clock::now() < deadline)
      read_reports(p, 100);
    if (p.last.kind != ProducerReport::ready)
      return {p.last.code != 0 ? static_cast<Errc>(p.last.code) : Errc::timeout,
              "producer " + std::to_string(i) + " did not start (see its message above)"};
  }
  return Status::ok();
}

Status send_go(Producers& producers) {
  for (Producer& p : producers.list) {
    const char go = 'g';
    if (!write_all(p.go_fd, &go, 1)) return {Errc::io, "a producer exited before the start"};
    close_fd(p.go_fd);
  }
  return Status::ok();
}

void run_collectors(Producers& producers, const ThroughputArgs& a) {
  std::vector<std::thread> collectors;
  for (uint32_t i = 0; i < a.producers; ++i)
    collectors.emplace_back([&, i] { collect(producers.list[i], i, a); });
  for (auto& t : collectors) t.join();
}

Totals sum_accounts(const Producers& producers, Clock::time_point t0) {
  Totals t;
  Clock::time_point t1 = t0;
  for (const Producer& p : producers.list) {
    t.pushed += p.last.pushed;
    t.ok += p.ok;
    t.missing += p.missing;
    t.ring_full += p.last.ring_full_retries;
    t.completes_failed += p.completes_failed;
    for (const auto& [code, n] : p.errors) {
      t.errors += n;
      t.errors_by_code[code] += n;
    }
    if (p.exit_status != 0 || p.last.kind != ProducerReport::done) ++t.failed_producers;
    t1 = std::max(t1, p.collected_at);
  }
  t.seconds = std::chrono::duration<double>(t1 - t0).count();
  t.rate = t.seconds > 0 ? static_cast<double>(t.ok + t.errors) / t.seconds : 0.0;
  return t;
}

DaemonCost daemon_cost(const shm::SegmentSnapshot& before,
                       const Result<shm::SegmentSnapshot>& after, std::optional<double> cpu_before,
                       std::optional<double> cpu_after) {
  DaemonCost c;
  c.published = after ? after->decisions_published - before.decisions_published : 0;
  if (cpu_before && cpu_after) {
    c.cpu_s = *cpu_after - *cpu_before;
    if (c.published > 0) c.us_per_footprint = *c.cpu_s * 1e6 / static_cast<double>(c.published);
  }
  return c;
}

void print_json(const ThroughputArgs& a, const Setup& setup, const Totals& t,
                const DaemonCost& daemon) {
  nlohmann::json j;
  j["bench"] = "ring_throughput";
  j["producers"] = a.producers;
  j["pushed"] = t.pushed;
  j["decided"] = t.ok;
  j["errors"] = t.errors;
  j["missing"] = t.missing;
  j["ring_full_retries"] = t.ring_full;
  j["seconds"] = t.seconds;
  j["footprints_per_s"] = t.rate;
  j["footprint_bytes"] = setup.footprint_bytes;
  j["cores"] = setup.cores;
  j["daemon_published"] = daemon.published;
  j["failed_producers"] = t.failed_producers;
  j["completes"] = a.complete;
  if (daemon.cpu_s) j["daemon_cpu_s"] = *daemon.cpu_s;
  if (daemon.us_per_footprint) j["daemon_cpu_us_per_footprint"] = *daemon.us_per_footprint;
  j["completes_failed"] = t.completes_failed;
  for (const auto& [code, n] : t.errors_by_code)
    j["errors_by_code"][errc_name(static_cast<Errc>(code))] = n;
  std::printf("%s\n", j.dump().c_str());
}

void print_text(const ThroughputArgs& a, const Setup& setup, const Totals& t,
                const DaemonCost& daemon) {
  std::printf(
      "ring throughput: %u producer processes pushing %zu-byte footprints (%s) to eldrd "
      "instance %s\n",
      a.producers, setup.footprint_bytes, a.model.c_str(), a.instance.c_str());
  std::printf("  pushed %llu in %.2f s: decided %llu, error decisions %llu, missing %llu\n",
              static_cast<unsigned long long>(t.pushed), t.seconds,
              static_cast<unsigned long long>(t.ok), static_cast<unsigned long long>(t.errors),
              static_cast<unsigned long long>(t.missing));
  std::printf(
      "  %.0f footprints/s pushed and answered; %llu ring-full retries; the daemon "
      "published %llu decisions in the run\n",
      t.rate, static_cast<unsigned long long>(t.ring_full),
      static_cast<unsigned long long>(daemon.published));
  if (daemon.us_per_footprint)
    std::printf(
        "  the daemon used %.2f CPU-s: %.1f us per footprint (one dedicated core: ~%.0f "
        "footprints/s)\n",
        *daemon.cpu_s, *daemon.us_per_footprint, 1e6 / *daemon.us_per_footprint);
  if (setup.shared_cores)
    std::printf(
        "  only %u cores for %u producers, %u collectors and the daemon: they share "
        "them, so this rate is a floor\n",
        setup.cores, a.producers, a.producers);
  if (a.complete)
    std::printf("  collectors sent complete after each decision (%llu failed)\n",
                static_cast<unsigned long long>(t.completes_failed));
  for (const auto& [code, n] : t.errors_by_code)
    std::printf("  error decisions %s: %llu\n", errc_name(static_cast<Errc>(code)),
                static_cast<unsigned long long>(n));
}

// On stderr: the first missing ids, failed completes and failed producers.
void print_problems(const Producers& producers, const Totals& t) {
  for (const Producer& p : producers.list) {
    for (const std::string& m : p.missing_examples)
      std::fprintf(stderr, "eldr bench ring-throughput: missing %s\n", m.c_str());
    if (p.completes_failed > 0)
      std::fprintf(stderr, "eldr bench ring-throughput: %llu completes failed, first %s\n",
                   static_cast<unsigned long long>(p.completes_failed), p.complete_failure.c_str());
  }
  if (t.failed_producers > 0)
    std::fprintf(stderr, "eldr bench ring-throughput: %llu producer(s) failed\n",
                 static_cast<unsigned long long>(t.failed_producers));
}

int run_coordinator(ThroughputArgs a) {
  ::signal(SIGPIPE, SIG_IGN);  // a dead producer's go pipe: an error, not our death
  a.run_tag = std::to_string(::getpid());
  auto geometry_probe = footprint_set(a.model, 1, 1);
  if (!geometry_probe) return report(geometry_probe.status());
  Setup setup;
  setup.footprint_bytes = geometry_probe->prefill.row(0).size_bytes();

  Producers producers;
  if (Status s = start_producers(producers, a); !s) return report(s);
  if (Status s = probe(*producers.list.front().collector, a); !s) return report(s);
  auto before = shm::read_snapshot(a.instance);
  if (!before) return report(before.status());
  const std::optional<double> daemon_cpu_before = cpu_seconds(before->daemon_pid);
  if (Status s = wait_until_ready(producers); !s) return report(s);
  const auto t0 = Clock::now();
  if (Status s = send_go(producers); !s) return report(s);
  run_collectors(producers, a);
  producers.reap();
  auto after = shm::read_snapshot(a.instance);
  const std::optional<double> daemon_cpu_after = cpu_seconds(before->daemon_pid);

  const Totals totals = sum_accounts(producers, t0);
  const DaemonCost daemon = daemon_cost(*before, after, daemon_cpu_before, daemon_cpu_after);
  // Producers, collectors and the daemon each want a core of their own.
  setup.cores = std::thread::hardware_concurrency();
  setup.shared_cores = setup.cores < 2 * a.producers + 1;
  if (a.json)
    print_json(a, setup, totals, daemon);
  else
    print_text(a, setup, totals, daemon);
  print_problems(producers, totals);
  const bool accounted = totals.missing == 0 && totals.failed_producers == 0 &&
                         totals.completes_failed == 0 && totals.pushed > 0;
  return accounted ? 0 : 1;
}

}  // namespace

}  // namespace ring_throughput

void register_bench_ring_throughput_command(CLI::App& bench) {
  using ring_throughput::ThroughputArgs;
  auto a = std::make_shared<ThroughputArgs>();
  auto* cmd = bench.add_subcommand(
      "ring-throughput",
      "sustained footprints/s through a running eldrd: producer processes push flat out, "
      "collectors account for every request (exit 1 if any is missing)");
  cmd->add_option("--instance", a->instance, "eldrd instance name");
  cmd->add_option("--producers", a->producers, "producer processes")->check(CLI::Range(1u, 15u));
  cmd->add_option("--count", a->count, "footprints per producer (0 = push for --seconds)");
  cmd->add_option("--seconds", a->seconds, "how long each producer pushes when --count is 0")
      ->check(CLI::Range(0.01, 3600.0));
  cmd->add_option("--model", a->model, "model preset or LxExk (geometry of the daemon's table)");
  cmd->add_option("--timeout-ms", a->timeout_ms,
                  "wait for a decision at most this long before it counts as missing")
      ->check(CLI::Range(1u, 600'000u));
  cmd->add_flag("--complete", a->complete,
                "collectors send complete after each decision (as engines do when the decode "
                "ends), so the daemon's request map stays small");
  cmd->add_flag("--json", a->json, "one JSON line");
  // The producer role: the coordinator re-executes this binary with these.
  cmd->add_option("--producer-index", a->producer_index)->group("");
  cmd->add_option("--run-tag", a->run_tag)->group("");
  cmd->callback([a] {
    g_exit_code = a->producer_index >= 0 ? ring_throughput::run_producer(*a)
                                         : ring_throughput::run_coordinator(*a);
  });
}

}  // namespace eldr::cli
