// eldr_soak: the sidecar under sustained abuse, with an exact account at the end.
//
// One eldrd on a private instance; producer processes push footprints as fast
// as their rings take them; gateway processes wait for every decision and
// report completion; a reporter floods load reports. Meanwhile the conductor
// (this process) SIGKILLs a producer every few seconds and starts a new one,
// rewrites and reloads the cluster table, and removes and re-adds workers.
//
// Accounting: a producer writes each request id it pushed successfully to its
// gateway's pipe (one write() of a short line: atomic, never torn, even when
// the producer dies right after). At the end:
//   - every logged id got exactly one decision, ok or an explicit error, and
//     none timed out;
//   - the daemon published between `logged` and `logged + kills` footprint
//     decisions (a producer killed between its push and its log line leaves
//     one unlogged push), so nothing was dropped or doubled;
//   - the daemon's resident memory did not grow past warm-up;
//   - no worker's in-flight count wrapped below zero.
// Roles run as re-executions of this binary (posix_spawn), so no process
// inherits another's shared-memory client.
//
// Each gateway trails the daemon by the ids queued in its pipe (64 KiB, about
// 6,000 ids; two producers feed gateway 0): up to ~12,000 decisions, 18% of the
// default decision table. The table keeps every decision for about a third of
// its size in publishes (shm_decisions.hpp); with one probe run it evicted
// some at 12%, which this soak caught as lost decisions.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "eldr/cluster_table.hpp"
#include "eldr/fit.hpp"
#include "eldr/geometry.hpp"
#include "eldr/lab/synthetic.hpp"
#include "eldr/random.hpp"
#include "eldr/shm.hpp"

extern char** environ;

namespace {

using namespace eldr;
using Clock = std::chrono::steady_clock;

volatile sig_atomic_t g_stop = 0;
void on_stop(int) { g_stop = 1; }

// A SIGKILLed eldrd cannot remove its segment, socket, lock file and the
// format-1 page, and no later daemon reuses a soak's instance name: the
// conductor removes them (unlink is async-signal-safe; the paths are set
// before the daemon starts).
char g_daemon_paths[4][512] = {};
void remove_daemon_files() {
  for (const char* path : g_daemon_paths)
    if (path[0] != '\0') ::unlink(path);
}

// The conductor's watchdog: a hang anywhere fails the run instead of CI's
// clock. Every role shares the conductor's process group.
void on_watchdog(int) {
  const char msg[] = "eldr_soak: watchdog expired, killing the soak\n";
  [[maybe_unused]] ssize_t n = ::write(STDERR_FILENO, msg, sizeof msg - 1);
  remove_daemon_files();
  ::kill(0, SIGKILL);
}

bool g_conductor = false;  // leads the process group of every role and the daemon

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "eldr_soak: %s\n", what.c_str());
  // The conductor takes its roles and the daemon with it: nothing outlives a failed soak.
  if (g_conductor) {
    remove_daemon_files();
    ::kill(0, SIGKILL);
  }
  std::exit(2);
}

std::map<std::string, std::string> parse_args(int argc, char** argv) {
  std::map<std::string, std::string> args;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strncmp(argv[i], "--", 2) != 0) die(std::string("unexpected argument ") + argv[i]);
    args[argv[i] + 2] = argv[i + 1];
  }
  return args;
}

std::string arg(const std::map<std::string, std::string>& a, const std::string& key,
                const std::string& fallback = "") {
  auto it = a.find(key);
  if (it != a.end()) return it->second;
  if (fallback.empty()) die("missing --" + key);
  return fallback;
}

constexpr uint32_t kWorkers = 8;
const Geometry kGeometry{48, 128, 8};

SyntheticWorkload make_requests(uint64_t seed, uint64_t n) {
  auto opts = synthetic_preset("task", kGeometry, seed);
  if (!opts) die(opts.status().to_string());
  auto w = generate_synthetic(*opts, n);
  if (!w) die(w.status().to_string());
  return std::move(*w);
}

std::unique_ptr<shm::Client> open_client(const std::string& instance) {
  shm::ClientOptions o;
  o.open_timeout = std::chrono::milliseconds(10000);
  auto c = shm::Client::open(instance, o);
  if (!c) die("client open: " + c.status().to_string());
  return std::move(*c);
}

void write_line(int fd, const std::string& line) {
  // One write() of at most PIPE_BUF bytes is atomic: lines never tear.
  const std::string l = line + "\n";
  for (;;) {
    ssize_t n = ::write(fd, l.data(), l.size());
    if (n == static_cast<ssize_t>(l.size())) return;
    if (n < 0 && errno == EINTR) continue;
    die(std::string("pipe write failed: ") + (n < 0 ? std::strerror(errno) : "short write"));
  }
}

// ---- roles ------------------------------------------------------------------

int run_producer(const std::map<std::string, std::string>& a) {
  const std::string instance = arg(a, "instance"), tag = arg(a, "tag");
  const int out_fd = std::stoi(arg(a, "fd"));
  auto requests = make_requests(std::stoull(arg(a, "seed")), 256);
  auto client = open_client(instance);
  uint64_t seq = 0, ring_full = 0;
  while (!g_stop) {
    const std::string id = tag + "-" + std::to_string(seq);
    shm::FootprintOut fp;
    fp.request_id = id;
    fp.layers = kGeometry.layers;
    fp.experts = kGeometry.experts;
    fp.counts = requests.prefill.row(seq % requests.prefill.n);
    Status s = client->push_footprint(fp);
    if (s.code() == Errc::ring_full) {
      ++ring_full;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      continue;
    }
    if (!s) die("producer push: " + s.to_string());
    write_line(out_fd, id);
    ++seq;
  }
  std::fprintf(stderr, "producer %s: %llu pushed, %llu ring-full retries\n", tag.c_str(),
               static_cast<unsigned long long>(seq), static_cast<unsigned long long>(ring_full));
  return 0;
}

constexpr uint64_t kMissesShown = 20;

int run_gateway(const std::map<std::string, std::string>& a) {
  const std::string instance = arg(a, "instance");
  const int in_fd = std::stoi(arg(a, "fd")), result_fd = std::stoi(arg(a, "result-fd"));
  auto client = open_client(instance);
  uint64_t ok = 0, errors = 0, timeouts = 0, completes = 0;
  std::map<int32_t, uint64_t> error_codes;
  FILE* in = ::fdopen(in_fd, "r");
  char line[256];
  while (std::fgets(line, sizeof line, in)) {
    std::string id(line);
    if (!id.empty() && id.back() == '\n') id.pop_back();
    // Generous for the first miss, then a look: while this gateway waited,
    // the decision table kept evicting the decisions queued behind the
    // missing one, so a miss fails the run once instead of stalling it
    // (200 ms per queued id used to outlast the watchdog).
    auto d = client->wait_decision(id, timeouts == 0 ? 10000 : 0);
    if (!d) {
      if (d.status().code() != Errc::timeout) die("gateway wait: " + d.status().to_string());
      if (++timeouts <= kMissesShown)
        std::fprintf(stderr, "gateway: no decision for %s%s\n", id.c_str(),
                     timeouts == kMissesShown ? " (further misses only counted)" : "");
      continue;
    }
    if (d->status != 0) {
      ++errors;
      ++error_codes[d->status];
      continue;
    }
    ++ok;
    for (;;) {  // the decode finished: give the worker its slot back
      // The gateway did not push the footprint: it presents the decision's token.
      Status s = client->push_complete(id, d->completion_token);
      if (s.code() == Errc::ring_full) {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
        continue;
      }
      if (!s) die("gateway complete: " + s.to_string());
      ++completes;
      break;
    }
  }
  std::ostringstream r;
  r << ok << ' ' << errors << ' ' << timeouts << ' ' << completes;
  write_line(result_fd, r.str());
  for (auto [code, count] : error_codes)
    std::fprintf(stderr, "gateway: %llu decisions with status %d (%s)\n",
                 static_cast<unsigned long long>(count), code, errc_name(static_cast<Errc>(code)));
  return 0;
}

int run_reporter(const std::map<std::string, std::string>& a) {
  auto client = open_client(arg(a, "instance"));
  Rng rng(7);
  uint64_t reports = 0;
  while (!g_stop) {
    for (uint32_t w = 0; w < kWorkers && !g_stop; ++w) {
      Status s = client->push_worker_report(w, static_cast<uint32_t>(rng.next() % 64),
                                            static_cast<float>(rng.next() % 100) / 100.0f);
      if (s.code() == Errc::ring_full) continue;
      if (!s) die("reporter: " + s.to_string());
      ++reports;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  std::fprintf(stderr, "reporter: %llu load reports\n", static_cast<unsigned long long>(reports));
  return 0;
}

// ---- conductor --------------------------------------------------------------

pid_t spawn(const std::vector<std::string>& argv, const std::vector<int>& keep_fds = {},
            const std::string& stderr_path = "") {
  std::vector<char*> cargv;
  for (const auto& s : argv) cargv.push_back(const_cast<char*>(s.c_str()));
  cargv.push_back(nullptr);
  for (int fd : keep_fds) ::fcntl(fd, F_SETFD, 0);  // inherited across exec
  posix_spawn_file_actions_t actions;
  ::posix_spawn_file_actions_init(&actions);
  if (!stderr_path.empty())
    ::posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, stderr_path.c_str(),
                                       O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = 0;
  int rc = ::posix_spawn(&pid, cargv[0], &actions, nullptr, cargv.data(), environ);
  ::posix_spawn_file_actions_destroy(&actions);
  for (int fd : keep_fds) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  if (rc != 0) die("posix_spawn " + argv[0] + ": " + std::strerror(rc));
  return pid;
}

int wait_exit(pid_t pid) {
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

uint64_t rss_kib(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string key;
  while (f >> key) {
    if (key == "VmRSS:") {
      uint64_t v = 0;
      f >> v;
      return v;
    }
    std::getline(f, key);
  }
  return 0;
}

void fit_and_save(uint64_t seed, const std::string& path) {
  auto cal = make_requests(seed, 600);
  FitOptions fo;
  fo.workers = kWorkers;
  fo.seed = seed;
  fo.model = "soak";
  auto table = fit_table({kGeometry, cal.prefill.n, cal.prefill.data, cal.decode.data, {}}, fo);
  if (!table) die("fit: " + table.status().to_string());
  if (Status s = save_table(*table, path); !s) die(s.to_string());
}

int run_conductor(const std::map<std::string, std::string>& a) {
  const std::string eldrd = arg(a, "eldrd");
  const double duration = std::stod(arg(a, "duration", "60"));
  const uint32_t producers = std::stoul(arg(a, "producers", "3"));
  const uint32_t gateways = std::stoul(arg(a, "gateways", "2"));
  const double kill_every = std::stod(arg(a, "kill-every", "3"));
  const std::string self = std::filesystem::read_symlink("/proc/self/exe");
  ::setpgid(0, 0);
  g_conductor = true;
  ::signal(SIGALRM, on_watchdog);
  ::alarm(static_cast<unsigned>(duration) + 180);
  const std::string instance = "soak-" + std::to_string(::getpid());
  const std::string segment_path = "/dev/shm" + shm::segment_name(instance);
  std::snprintf(g_daemon_paths[0], sizeof g_daemon_paths[0], "%s", segment_path.c_str());
  std::snprintf(g_daemon_paths[1], sizeof g_daemon_paths[1], "%s.lock", segment_path.c_str());
  std::snprintf(g_daemon_paths[2], sizeof g_daemon_paths[2], "%s.sock", segment_path.c_str());
  std::snprintf(g_daemon_paths[3], sizeof g_daemon_paths[3], "/dev/shm/eldr-v1-%s",
                instance.c_str());
  const auto dir = std::filesystem::temp_directory_path() / instance;
  std::filesystem::create_directories(dir);
  const std::string table = dir / "table.eldr", table_a = dir / "a.eldr", table_b = dir / "b.eldr";
  fit_and_save(1, table_a);
  fit_and_save(2, table_b);
  std::filesystem::copy_file(table_a, table);

  // The daemon's log goes to a file (thousands of reclaim lines); its tail is
  // printed when a check fails.
  const std::string daemon_log = dir / "eldrd.log";
  const std::string config = dir / "eldrd.toml";
  std::ofstream(config) << "decision_slots = " << arg(a, "decision-slots", "65536") << "\n";
  pid_t daemon =
      spawn({eldrd, "--config", config, "--instance", instance, "--table", table}, {}, daemon_log);
  auto admin = open_client(instance);  // waits for READY
  std::printf("soak: eldrd pid %d on instance %s, %u producers, %u gateways, %.0f s\n", daemon,
              instance.c_str(), producers, gateways, duration);
  std::fflush(stdout);

  int result_pipe[2];
  if (::pipe2(result_pipe, O_CLOEXEC) != 0) die("pipe");
  std::vector<int> gateway_in(gateways);
  std::vector<pid_t> gateway_pid(gateways);
  for (uint32_t g = 0; g < gateways; ++g) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) die("pipe");
    // A small pipe bounds how far a gateway trails the daemon (its producers
    // block on it): ~1,400 ids, well inside what the decision table retains
    // (a third of decision_slots), even when the gateway is descheduled.
    if (::fcntl(p[1], F_SETPIPE_SZ, 16384) < 0) die("F_SETPIPE_SZ");
    gateway_pid[g] = spawn({self, "--role", "gateway", "--instance", instance, "--fd",
                            std::to_string(p[0]), "--result-fd", std::to_string(result_pipe[1])},
                           {p[0], result_pipe[1]});
    ::close(p[0]);
    gateway_in[g] = p[1];  // kept open here: producers come and go
  }
  uint64_t generation = 0;
  auto start_producer = [&](uint32_t i) {
    const int fd = gateway_in[i % gateways];
    const std::string tag = "p" + std::to_string(i) + "g" + std::to_string(generation++);
    return spawn({self, "--role", "producer", "--instance", instance, "--tag", tag, "--seed",
                  std::to_string(100 + generation), "--fd", std::to_string(fd)},
                 {fd});
  };
  std::vector<pid_t> producer_pid(producers);
  for (uint32_t i = 0; i < producers; ++i) producer_pid[i] = start_producer(i);
  pid_t reporter = spawn({self, "--role", "reporter", "--instance", instance});

  uint64_t kills = 0, reloads = 0, worker_changes = 0, rss_warm = 0, rss_peak = 0;
  Rng rng(11);
  const auto t0 = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  double next_kill = kill_every, next_reload = 5, next_worker = 2;
  int32_t removed_worker = -1;
  while (elapsed() < duration) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const double t = elapsed();
    if (t >= next_kill) {
      next_kill += kill_every;
      const uint32_t victim = static_cast<uint32_t>(rng.next() % producers);
      ::kill(producer_pid[victim], SIGKILL);
      wait_exit(producer_pid[victim]);
      producer_pid[victim] = start_producer(victim);
      ++kills;
    }
    if (t >= next_reload) {
      next_reload += 5;
      std::filesystem::copy_file(reloads % 2 == 0 ? table_b : table_a, dir / "next.eldr",
                                 std::filesystem::copy_options::overwrite_existing);
      std::filesystem::rename(dir / "next.eldr", table);  // atomic: never half a table
      ::kill(daemon, SIGHUP);
      ++reloads;
    }
    if (t >= next_worker) {
      next_worker += 2;
      Status s;
      if (removed_worker < 0) {
        removed_worker = static_cast<int32_t>(rng.next() % kWorkers);
        s = admin->push_worker_control(removed_worker, shm::WorkerOp::remove);
      } else {
        s = admin->push_worker_control(removed_worker, shm::WorkerOp::add);
        removed_worker = -1;
      }
      if (!s && s.code() != Errc::ring_full) die("worker control: " + s.to_string());
      ++worker_changes;
    }
    if (t > 10 && rss_warm == 0) rss_warm = rss_kib(daemon);
    rss_peak = std::max(rss_peak, rss_kib(daemon));
    if (::waitpid(daemon, nullptr, WNOHANG) == daemon) die("eldrd exited during the soak");
  }
  const uint64_t rss_end = rss_kib(daemon);

  // Wind down: producers stop, gateways drain every logged id, then read the daemon.
  // A role started just before the stop may take SIGTERM before its handler
  // is installed: that is a clean stop too (only logged ids are accounted).
  auto stopped_cleanly = [](int rc) { return rc == 0 || rc == 128 + SIGTERM; };
  for (pid_t p : producer_pid) ::kill(p, SIGTERM);
  for (pid_t p : producer_pid)
    if (!stopped_cleanly(wait_exit(p))) die("a producer failed");
  ::kill(reporter, SIGTERM);
  if (!stopped_cleanly(wait_exit(reporter))) die("the reporter failed");
  for (int fd : gateway_in) ::close(fd);
  uint64_t ok = 0, errors = 0, timeouts = 0, completes = 0;
  for (pid_t p : gateway_pid)
    if (wait_exit(p) != 0) die("a gateway failed");
  ::close(result_pipe[1]);
  FILE* results = ::fdopen(result_pipe[0], "r");
  for (uint32_t g = 0; g < gateways; ++g) {
    unsigned long long o = 0, e = 0, to = 0, c = 0;
    if (std::fscanf(results, "%llu %llu %llu %llu", &o, &e, &to, &c) != 4) die("gateway result");
    ok += o, errors += e, timeouts += to, completes += c;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // last completes consumed
  auto snap = shm::read_snapshot(instance);
  if (!snap) die("snapshot: " + snap.status().to_string());
  uint32_t max_inflight = 0;
  for (const auto& w : snap->workers) max_inflight = std::max(max_inflight, w.inflight);
  const uint64_t refused = snap->router ? snap->router->completes_refused : 0;
  admin.reset();
  ::kill(daemon, SIGTERM);
  const int daemon_rc = wait_exit(daemon);

  const uint64_t logged = ok + errors + timeouts;
  const uint64_t published = snap->decisions_published;
  std::printf(
      "{\"seconds\": %.0f, \"footprints\": %llu, \"decisions_ok\": %llu, \"decision_errors\": "
      "%llu, \"timeouts\": %llu, \"published\": %llu, \"completes\": %llu, \"kills\": %llu, "
      "\"reloads\": %llu, \"worker_changes\": %llu, \"rss_warm_kib\": %llu, \"rss_end_kib\": "
      "%llu, \"rss_peak_kib\": %llu, \"max_inflight\": %u, \"completes_refused\": %llu, "
      "\"daemon_exit\": %d}\n",
      duration, (unsigned long long)logged, (unsigned long long)ok, (unsigned long long)errors,
      (unsigned long long)timeouts, (unsigned long long)published, (unsigned long long)completes,
      (unsigned long long)kills, (unsigned long long)reloads, (unsigned long long)worker_changes,
      (unsigned long long)rss_warm, (unsigned long long)rss_end, (unsigned long long)rss_peak,
      max_inflight, (unsigned long long)refused, daemon_rc);

  int failures = 0;
  auto check = [&](bool cond, const char* what) {
    if (!cond) {
      std::fprintf(stderr, "soak FAILED: %s\n", what);
      ++failures;
    }
  };
  check(logged > 0, "no footprint went through");
  check(timeouts == 0, "a pushed footprint got no decision");
  check(published >= logged, "the daemon published fewer decisions than footprints logged");
  check(published <= logged + kills, "the daemon published more decisions than were pushed");
  check(completes == ok, "a completion was not delivered");
  check(refused == 0, "the daemon refused a gateway's complete (completion token)");
  check(kills > 0 || duration < kill_every, "no producer was killed");
  // In-flight counts are unsigned: a count that went below zero shows up huge.
  check(max_inflight < 1000000, "a worker's in-flight count wrapped below zero");
  // Warm-up allocates the maps and caches; after it the daemon must not grow.
  check(rss_warm == 0 || rss_end <= rss_warm + rss_warm / 4 + 4096, "eldrd's memory grew");
  check(daemon_rc == 0, "eldrd did not shut down cleanly");
  if (failures) {
    // The run's directory (tables, config, the whole daemon log) stays for a post-mortem.
    std::fprintf(stderr, "eldrd log tail (%s, kept):\n", daemon_log.c_str());
    std::system(("tail -n 30 '" + daemon_log + "' >&2").c_str());
  } else {
    std::filesystem::remove_all(dir);
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  struct sigaction sa {};
  sa.sa_handler = on_stop;
  ::sigaction(SIGTERM, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  const auto args = parse_args(argc, argv);
  const std::string role = arg(args, "role", "conductor");
  if (role == "producer") return run_producer(args);
  if (role == "gateway") return run_gateway(args);
  if (role == "reporter") return run_reporter(args);
  if (role == "conductor") return run_conductor(args);
  die("unknown role " + role);
}
