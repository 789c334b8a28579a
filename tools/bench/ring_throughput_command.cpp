// eldr bench ring-throughput: sustained footprint throughput through a running
// eldrd, with an exact account of every request.
//
// N producer processes (this binary re-executed with posix_spawn, so no
// process inherits another's shared-memory client) each register their own
// client and push footprints as fast as their ring takes them; a full ring is
// retried and counted, never dropped. Request ids encode the run, the producer
// and its sequence number. One collector thread per producer, with a client of
// its own, fetches the decisions of that producer in push order while it
// pushes (the decision table is bounded: a collector that fell far behind
// would see the oldest evicted) and accounts for every sequence number:
// decided ok, explicit error (by code), or missing.
//
// A producer tells its collector how far it got through a pipe (fixed-size
// reports, each one atomic write): only ids known to be pushed are looked for.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
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
#include "footprint_pool.hpp"

extern char** environ;

namespace eldr::cli {

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kReportFd = 3;           // a producer's end of its report pipe
constexpr uint64_t kReportEvery = 64;  // pushes between progress reports
constexpr uint32_t kPoolSize = 256;    // distinct footprints per producer, cycled
constexpr auto kMissPatience = std::chrono::milliseconds(100);  // after a miss, see below

struct ThroughputArgs {
  std::string instance = "default", model = "qwen3-30b-a3b";
  uint32_t producers = 2;
  uint64_t count = 0;  // footprints per producer; 0 = push for `seconds`
  double seconds = 5.0;
  uint32_t timeout_ms = 2000;  // per decision; also the longest tolerated ring-full stall
  bool complete = false;       // collectors send complete per decision, as engines do
  bool json = false;
  // Producer role (set by the coordinator when it re-executes this binary).
  int32_t producer_index = -1;
  std::string run_tag;
};

// What a producer writes to its report pipe; one write() each (< PIPE_BUF:
// never interleaved or torn).
struct ProducerReport {
  enum Kind : uint32_t { ready = 1, progress = 2, done = 3, failed = 4 };
  uint32_t kind = 0;
  int32_t code = 0;  // Errc of a failure
  uint64_t pushed = 0;
  uint64_t ring_full_retries = 0;
};
static_assert(sizeof(ProducerReport) <= PIPE_BUF);

std::string request_id(const std::string& run_tag, uint32_t producer, uint64_t seq) {
  return "tp-" + run_tag + "-" + std::to_string(producer) + "-" + std::to_string(seq);
}

bool write_all(int fd, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// ---- producer role ------------------------------------------------------------

int run_producer(const ThroughputArgs& a) {
  const auto index = static_cast<uint32_t>(a.producer_index);
  ProducerReport r;
  const auto fail = [&](const Status& s) {
    r.kind = ProducerReport::failed;
    r.code = static_cast<int32_t>(s.code());
    write_all(kReportFd, &r, sizeof r);
    std::fprintf(stderr, "eldr bench ring-throughput: producer %u: %s\n", index,
                 s.to_string().c_str());
    return 1;
  };
  auto pool = footprint_pool(a.model, kPoolSize, 1000 + index);
  if (!pool) return fail(pool.status());
  auto client = shm::Client::open(a.instance);
  if (!client) return fail(client.status());
  r.kind = ProducerReport::ready;
  if (!write_all(kReportFd, &r, sizeof r)) return 1;
  char go = 0;
  if (::read(STDIN_FILENO, &go, 1) != 1) return 1;  // the coordinator went away

  const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(a.seconds));
  const auto stall_limit = std::chrono::milliseconds(a.timeout_ms);
  std::string id;
  for (uint64_t seq = 0; a.count > 0 ? seq < a.count : Clock::now() < end; ++seq) {
    id = request_id(a.run_tag, index, seq);
    const shm::FootprintOut f = footprint_of(*pool, seq, id);
    std::optional<Clock::time_point> full_since;
    for (;;) {
      Status s = (*client)->push_footprint(f);
      if (s) break;
      if (s.code() != Errc::ring_full) return fail(s);
      ++r.ring_full_retries;
      const auto now = Clock::now();
      if (!full_since) full_since = now;
      if (now - *full_since > stall_limit)
        return fail({Errc::timeout, "ring full for " + std::to_string(a.timeout_ms) +
                                        " ms: the daemon stopped draining it"});
      // Give the core to the daemon (on a small machine it shares ours).
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    ++r.pushed;
    if (r.pushed % kReportEvery == 0) {
      r.kind = ProducerReport::progress;
      if (!write_all(kReportFd, &r, sizeof r)) return 1;
    }
  }
  r.kind = ProducerReport::done;
  return write_all(kReportFd, &r, sizeof r) ? 0 : 1;
}

// ---- coordinator -------------------------------------------------------------

// One spawned producer, its pipes, and what its collector found.
struct Producer {
  pid_t pid = -1;
  int report_fd = -1;  // read end
  int go_fd = -1;      // write end (the producer's stdin)
  std::unique_ptr<shm::Client> collector;
  // Reports read so far.
  ProducerReport last;
  bool finished = false;  // done, failed, or the pipe closed
  std::string report_bytes;
  // The account.
  uint64_t ok = 0, missing = 0;
  std::map<int32_t, uint64_t> errors;  // by code
  std::vector<std::string> missing_examples;
  uint64_t completes_failed = 0;
  std::string complete_failure;
  Clock::time_point collected_at;
  int exit_status = -1;
};

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// Reads whatever reports arrived within timeout_ms; marks the producer
// finished on done/failed or end of file.
void read_reports(Producer& p, int timeout_ms) {
  pollfd pfd{p.report_fd, POLLIN, 0};
  const int ready = ::poll(&pfd, 1, timeout_ms);
  if (ready <= 0) return;
  char buffer[sizeof(ProducerReport) * 64];
  const ssize_t n = ::read(p.report_fd, buffer, sizeof buffer);
  if (n < 0 && errno == EINTR) return;
  if (n <= 0) {
    p.finished = true;  // the producer exited (its last report, if any, is in)
    return;
  }
  p.report_bytes.append(buffer, static_cast<size_t>(n));
  size_t used = 0;
  for (; p.report_bytes.size() - used >= sizeof(ProducerReport); used += sizeof(ProducerReport)) {
    std::memcpy(&p.last, p.report_bytes.data() + used, sizeof(ProducerReport));
    if (p.last.kind == ProducerReport::done || p.last.kind == ProducerReport::failed)
      p.finished = true;
  }
  p.report_bytes.erase(0, used);
}

// Looks the decision up without blocking the daemon: no futex wait (the
// daemon would have to wake us per decision), short sleeps instead while it is
// not there yet. Errc::timeout once `patience` has passed.
Result<shm::DecisionIn> fetch_decision(shm::Client& c, const std::string& id,
                                       std::chrono::milliseconds patience) {
  const auto deadline = Clock::now() + patience;
  auto pause = std::chrono::microseconds(20);
  for (;;) {
    auto d = c.wait_decision(id, 0);
    if (d || d.status().code() != Errc::timeout || Clock::now() >= deadline) return d;
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(1));
  }
}

// A full ring is retried (the daemon drains it) for up to timeout_ms.
Status push_complete(shm::Client& c, const std::string& id, uint32_t timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    Status s = c.push_complete(id);
    if (s || s.code() != Errc::ring_full || Clock::now() >= deadline) return s;
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

// The collector of one producer: every sequence number it reports pushed,
// in order. A decision not there within timeout_ms is missing; the daemon
// consumes a ring in order, so after a miss the ids behind it get a short
// patience until one is found again (a lost run costs 100 ms an id, not the
// whole timeout).
void collect(Producer& p, uint32_t index, const ThroughputArgs& a) {
  bool after_miss = false;
  for (uint64_t seq = 0;; ++seq) {
    while (seq >= p.last.pushed && !p.finished) read_reports(p, 100);
    if (seq >= p.last.pushed) break;
    const std::string id = request_id(a.run_tag, index, seq);
    auto d = fetch_decision(*p.collector, id,
                            after_miss ? kMissPatience : std::chrono::milliseconds(a.timeout_ms));
    after_miss = !d;
    if (!d) {
      ++p.missing;
      if (p.missing_examples.size() < 3)
        p.missing_examples.push_back(id + ": " + d.status().to_string());
    } else if (d->status != 0) {
      ++p.errors[d->status];
    } else {
      ++p.ok;
      if (a.complete) {
        if (Status s = push_complete(*p.collector, id, a.timeout_ms); !s) {
          if (p.completes_failed++ == 0) p.complete_failure = id + ": " + s.to_string();
        }
      }
    }
    // Keep the pipe drained so a fast producer never blocks on it.
    if (seq % kReportEvery == 0 && !p.finished) read_reports(p, 0);
  }
  p.collected_at = Clock::now();
}

class Producers {
 public:
  ~Producers() {
    for (Producer& p : list) {
      close_fd(p.go_fd);
      close_fd(p.report_fd);
      if (p.pid > 0) {
        ::kill(p.pid, SIGKILL);  // only on an early return: reap() clears pid
        ::waitpid(p.pid, nullptr, 0);
      }
    }
  }

  Status spawn(const ThroughputArgs& a, uint32_t index) {
    char self[PATH_MAX];
    const ssize_t len = ::readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0)
      return {Errc::io, std::string("readlink /proc/self/exe: ") + std::strerror(errno)};
    self[len] = '\0';
    int report[2], go[2];
    if (::pipe2(report, O_CLOEXEC) != 0) return {Errc::io, std::string("pipe: ") + strerror(errno)};
    if (::pipe2(go, O_CLOEXEC) != 0) {
      ::close(report[0]);
      ::close(report[1]);
      return {Errc::io, std::string("pipe: ") + std::strerror(errno)};
    }
    Producer& p = list.emplace_back();
    p.report_fd = report[0];
    p.go_fd = go[1];
    std::vector<std::string> args = {self,
                                     "bench",
                                     "ring-throughput",
                                     "--instance",
                                     a.instance,
                                     "--model",
                                     a.model,
                                     "--count",
                                     std::to_string(a.count),
                                     "--seconds",
                                     std::to_string(a.seconds),
                                     "--timeout-ms",
                                     std::to_string(a.timeout_ms),
                                     "--producer-index",
                                     std::to_string(index),
                                     "--run-tag",
                                     a.run_tag};
    std::vector<char*> argv;
    for (auto& s : args) argv.push_back(s.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, report[1], kReportFd);  // dup2 clears CLOEXEC
    posix_spawn_file_actions_adddup2(&actions, go[0], STDIN_FILENO);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t defaults;  // the coordinator ignores SIGPIPE; the producer should not inherit that
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGPIPE);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF);
    const int rc = ::posix_spawn(&p.pid, self, &actions, &attr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    ::close(report[1]);
    ::close(go[0]);
    if (rc != 0) {
      p.pid = -1;
      return {Errc::io, std::string("cannot start a producer: ") + std::strerror(rc)};
    }
    return Status::ok();
  }

  void reap() {
    for (Producer& p : list) {
      if (p.pid <= 0) continue;
      int status = 0;
      if (::waitpid(p.pid, &status, 0) == p.pid)
        p.exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      p.pid = -1;
    }
  }

  std::vector<Producer> list;
};

// CPU seconds (user + system) a process has used so far; nullopt when its
// /proc entry is not readable (another pid namespace).
std::optional<double> cpu_seconds(uint32_t pid) {
  std::FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/stat").c_str(), "r");
  if (f == nullptr) return std::nullopt;
  char line[1024];
  const bool read = std::fgets(line, sizeof line, f) != nullptr;
  std::fclose(f);
  if (!read) return std::nullopt;
  // The command name (field 2) may hold spaces and ')': fields resume after the last ')'.
  const char* rest = std::strrchr(line, ')');
  unsigned long long utime = 0, stime = 0;
  if (rest == nullptr ||
      std::sscanf(rest + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime,
                  &stime) != 2)
    return std::nullopt;
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// One footprint through collector 0's client: the daemon is there and its
// table has the geometry we push.
Status probe(shm::Client& c, const ThroughputArgs& a) {
  auto pool = footprint_pool(a.model, 1, 1);
  if (!pool) return pool.status();
  const std::string id = "tp-" + a.run_tag + "-probe";
  ELDR_TRY(c.push_footprint(footprint_of(*pool, 0, id)));
  auto d = c.wait_decision(id, std::max<uint32_t>(a.timeout_ms, 5000));
  if (!d) return d.status();
  if (d->status != 0)
    return {static_cast<Errc>(d->status),
            "the daemon answered a probe footprint with an error (is its table for --model " +
                a.model + "?)"};
  return Status::ok();
}

int run_coordinator(ThroughputArgs a) {
  ::signal(SIGPIPE, SIG_IGN);  // a dead producer's go pipe: an error, not our death
  a.run_tag = std::to_string(::getpid());
  auto geometry_pool = footprint_pool(a.model, 1, 1);
  if (!geometry_pool) return report(geometry_pool.status());
  const size_t footprint_bytes = geometry_pool->prefill.row(0).size_bytes();

  Producers producers;
  producers.list.reserve(a.producers);
  for (uint32_t i = 0; i < a.producers; ++i) {
    if (Status s = producers.spawn(a, i); !s) return report(s);
    auto c = shm::Client::open(a.instance);
    if (!c) return report(c.status());
    producers.list.back().collector = std::move(*c);
  }
  if (Status s = probe(*producers.list.front().collector, a); !s) return report(s);
  auto before = shm::read_snapshot(a.instance);
  if (!before) return report(before.status());
  const std::optional<double> daemon_cpu_before = cpu_seconds(before->daemon_pid);

  // Start together: every producer has its client and its footprints ready.
  for (uint32_t i = 0; i < a.producers; ++i) {
    Producer& p = producers.list[i];
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    while (p.last.kind != ProducerReport::ready && !p.finished && Clock::now() < deadline)
      read_reports(p, 100);
    if (p.last.kind != ProducerReport::ready)
      return report({p.last.code != 0 ? static_cast<Errc>(p.last.code) : Errc::timeout,
                     "producer " + std::to_string(i) + " did not start (see its message above)"});
  }
  const auto t0 = Clock::now();
  for (Producer& p : producers.list) {
    const char go = 'g';
    if (!write_all(p.go_fd, &go, 1))
      return report({Errc::io, "a producer exited before the start"});
    close_fd(p.go_fd);
  }
  {
    std::vector<std::thread> collectors;
    for (uint32_t i = 0; i < a.producers; ++i)
      collectors.emplace_back([&, i] { collect(producers.list[i], i, a); });
    for (auto& t : collectors) t.join();
  }
  producers.reap();
  auto after = shm::read_snapshot(a.instance);
  const std::optional<double> daemon_cpu_after = cpu_seconds(before->daemon_pid);

  uint64_t pushed = 0, ok = 0, errors = 0, missing = 0, ring_full = 0, failed_producers = 0,
           completes_failed = 0;
  Clock::time_point t1 = t0;
  std::map<int32_t, uint64_t> errors_by_code;
  for (const Producer& p : producers.list) {
    pushed += p.last.pushed;
    ok += p.ok;
    missing += p.missing;
    ring_full += p.last.ring_full_retries;
    completes_failed += p.completes_failed;
    for (const auto& [code, n] : p.errors) {
      errors += n;
      errors_by_code[code] += n;
    }
    if (p.exit_status != 0 || p.last.kind != ProducerReport::done) ++failed_producers;
    t1 = std::max(t1, p.collected_at);
  }
  const double seconds = std::chrono::duration<double>(t1 - t0).count();
  const double rate = seconds > 0 ? static_cast<double>(ok + errors) / seconds : 0.0;
  // Every decision the daemon published in the run window (other clients of
  // the instance included): a cross-check of `pushed`.
  const uint64_t published = after ? after->decisions_published - before->decisions_published : 0;
  // The daemon's own cost per footprint: what one dedicated core would
  // sustain, whatever else shared the machine during the run.
  std::optional<double> daemon_cpu, daemon_us_per_footprint;
  if (daemon_cpu_before && daemon_cpu_after) {
    daemon_cpu = *daemon_cpu_after - *daemon_cpu_before;
    if (published > 0) daemon_us_per_footprint = *daemon_cpu * 1e6 / static_cast<double>(published);
  }

  // Producers, collectors and the daemon each want a core of their own.
  const unsigned cores = std::thread::hardware_concurrency();
  const bool shared_cores = cores < 2 * a.producers + 1;
  if (a.json) {
    nlohmann::json j;
    j["bench"] = "ring_throughput";
    j["producers"] = a.producers;
    j["pushed"] = pushed;
    j["decided"] = ok;
    j["errors"] = errors;
    j["missing"] = missing;
    j["ring_full_retries"] = ring_full;
    j["seconds"] = seconds;
    j["footprints_per_s"] = rate;
    j["footprint_bytes"] = footprint_bytes;
    j["cores"] = cores;
    j["daemon_published"] = published;
    j["failed_producers"] = failed_producers;
    j["completes"] = a.complete;
    if (daemon_cpu) j["daemon_cpu_s"] = *daemon_cpu;
    if (daemon_us_per_footprint) j["daemon_cpu_us_per_footprint"] = *daemon_us_per_footprint;
    j["completes_failed"] = completes_failed;
    for (const auto& [code, n] : errors_by_code)
      j["errors_by_code"][errc_name(static_cast<Errc>(code))] = n;
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf(
        "ring throughput: %u producer processes pushing %zu-byte footprints (%s) to eldrd "
        "instance %s\n",
        a.producers, footprint_bytes, a.model.c_str(), a.instance.c_str());
    std::printf("  pushed %llu in %.2f s: decided %llu, error decisions %llu, missing %llu\n",
                static_cast<unsigned long long>(pushed), seconds,
                static_cast<unsigned long long>(ok), static_cast<unsigned long long>(errors),
                static_cast<unsigned long long>(missing));
    std::printf(
        "  %.0f footprints/s pushed and answered; %llu ring-full retries; the daemon "
        "published %llu decisions in the run\n",
        rate, static_cast<unsigned long long>(ring_full),
        static_cast<unsigned long long>(published));
    if (daemon_us_per_footprint)
      std::printf(
          "  the daemon used %.2f CPU-s: %.1f us per footprint (one dedicated core: ~%.0f "
          "footprints/s)\n",
          *daemon_cpu, *daemon_us_per_footprint, 1e6 / *daemon_us_per_footprint);
    if (shared_cores)
      std::printf(
          "  only %u cores for %u producers, %u collectors and the daemon: they share "
          "them, so this rate is a floor\n",
          cores, a.producers, a.producers);
    if (a.complete)
      std::printf("  collectors sent complete after each decision (%llu failed)\n",
                  static_cast<unsigned long long>(completes_failed));
    for (const auto& [code, n] : errors_by_code)
      std::printf("  error decisions %s: %llu\n", errc_name(static_cast<Errc>(code)),
                  static_cast<unsigned long long>(n));
  }
  for (const Producer& p : producers.list) {
    for (const std::string& m : p.missing_examples)
      std::fprintf(stderr, "eldr bench ring-throughput: missing %s\n", m.c_str());
    if (p.completes_failed > 0)
      std::fprintf(stderr, "eldr bench ring-throughput: %llu completes failed, first %s\n",
                   static_cast<unsigned long long>(p.completes_failed), p.complete_failure.c_str());
  }
  if (failed_producers > 0)
    std::fprintf(stderr, "eldr bench ring-throughput: %llu producer(s) failed\n",
                 static_cast<unsigned long long>(failed_producers));
  return missing == 0 && failed_producers == 0 && completes_failed == 0 && pushed > 0 ? 0 : 1;
}

}  // namespace

void register_bench_ring_throughput_command(CLI::App& bench) {
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
  cmd->callback(
      [a] { g_exit_code = a->producer_index >= 0 ? run_producer(*a) : run_coordinator(*a); });
}

}  // namespace eldr::cli
