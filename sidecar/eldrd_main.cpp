// eldrd: the per-node eldr daemon. Owns the instance's shared-memory segment
// and registration socket, routes every footprint engines push and
// publishes the decisions.
//
//   eldrd --config /etc/eldr/eldrd.toml
//   eldrd --instance demo --table table.eldr      (no config file)
//
// Signals are taken by a dedicated thread (sigtimedwait), never in a handler:
// SIGTERM/SIGINT stop gracefully (segment removed, exit 0), SIGHUP reloads the
// table file without stopping routing.
#if ELDRD_MIMALLOC
// Every new/delete of the daemon goes to mimalloc (not in sanitizer builds,
// whose allocator must see every allocation).
#include <mimalloc-new-delete.h>
#include <mimalloc.h>
#endif
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cstdio>
#include <thread>

#include "config.hpp"
#include "daemon.hpp"
#include "eldr/cluster_table.hpp"
#include "eldr/pool/nats_auth_cli.hpp"
#include "log.hpp"
#include "service.hpp"
#include "synthetic_table.hpp"

namespace {

using namespace eldr;
using namespace eldr::sidecar;

struct Flags {
  std::string config_path, instance, table, synthetic_table, policy, log_level, group;
  std::string nats, node, pool;
  pool::NatsAuth auth;
  uint32_t metrics_port = 0, worker_report_timeout_ms = 0;
};

Result<DaemonConfig> build_config(const Flags& f, const CLI::App& app) {
  DaemonConfig c;
  if (!f.config_path.empty()) ELDR_TRY(load_config_file(f.config_path, c));
  // Flags given on the command line override the file.
  const auto given = [&](const char* name) { return app.count(name) > 0; };
  if (given("--instance")) c.instance = f.instance;
  if (given("--table")) {
    c.table = f.table;
    c.synthetic_table.clear();
  }
  if (given("--synthetic-table")) {
    c.synthetic_table = f.synthetic_table;
    c.table.clear();
  }
  if (given("--policy")) {
    const auto p = parse_policy(f.policy);
    if (!p) return Status{Errc::invalid_argument, "unknown policy '" + f.policy + "'"};
    c.policy = *p;
  }
  if (given("--metrics-port")) c.metrics_port = f.metrics_port;
  if (given("--group")) c.group = f.group;
  if (given("--worker-report-timeout-ms")) c.worker_report_timeout_ms = f.worker_report_timeout_ms;
  if (given("--nats")) c.pool.nats = split_urls(f.nats);
  pool::merge_given_nats_auth(app, f.auth, c.pool.auth);
  if (given("--node")) c.pool.node = f.node;
  if (given("--pool")) c.pool.name = f.pool;
  if ((given("--node") || given("--pool")) && !c.pool.enabled())
    return Status{Errc::invalid_argument, "--node and --pool need --nats (or pool.nats)"};
  if (given("--log-level")) {
    DaemonConfig probe;
    ELDR_TRY(parse_config_toml("log_level = \"" + f.log_level + "\"", probe, "--log-level"));
    c.log_level = probe.log_level;
  }
  ELDR_TRY(c.validate());
  return c;
}

Result<std::shared_ptr<const ClusterTable>> load_initial_table(const DaemonConfig& c) {
  if (!c.table.empty()) {
    auto t = load_table(c.table);
    if (!t) return t.status();
    ELDR_LOG(info, "table %s: %s, %s, %u workers, %zu layers masked", c.table.c_str(),
             t->model.c_str(), t->geometry.to_string().c_str(), t->num_clusters(),
             t->layer_mask.size());
    return std::make_shared<const ClusterTable>(std::move(*t));
  }
  const std::string spec_text =
      c.synthetic_table.empty() ? std::string(kDefaultSyntheticTable) : c.synthetic_table;
  auto spec = parse_synthetic_table_spec(spec_text);
  if (!spec) return spec.status();
  ELDR_LOG(info, "no table file: fitting a synthetic table %s (%s)", spec_text.c_str(),
           spec->geometry.to_string().c_str());
  auto t = make_synthetic_table(*spec, c.seed + 1);
  if (!t) return t.status();
  return std::make_shared<const ClusterTable>(std::move(*t));
}

int run_daemon(const DaemonConfig& config) {
  set_log_level(config.log_level);
#if ELDRD_MIMALLOC
  const int allocator_version = mi_version();
#else
  const int allocator_version = 0;
#endif
  ELDR_LOG(info, "eldrd starting: instance '%s', pid %d, allocator %s %d", config.instance.c_str(),
           static_cast<int>(getpid()), allocator_version ? "mimalloc" : "libc", allocator_version);

  // All threads created from here on inherit the blocked set; the signal
  // thread is the only one that takes these signals.
  sigset_t signals;
  sigemptyset(&signals);
  for (int s : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&signals, s);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  auto table = load_initial_table(config);
  if (!table) {
    ELDR_LOG(error, "%s", table.status().to_string().c_str());
    return 1;
  }
  auto daemon = Daemon::create(config, std::move(*table));
  if (!daemon) {
    ELDR_LOG(error, "cannot start: %s", daemon.status().to_string().c_str());
    return 1;
  }
  Daemon& d = **daemon;
  ELDR_LOG(info, "segment %s ready (generation %llu, table epoch %llu)%s",
           eldr::shm::segment_name(config.instance).c_str(),
           static_cast<unsigned long long>(d.host().generation()),
           static_cast<unsigned long long>(d.service().table_epoch()),
           config.metrics_port
               ? (", metrics on 127.0.0.1:" + std::to_string(d.metrics_port()) + "/metrics").c_str()
               : "");

  std::atomic<bool> stop{false};
  std::thread signal_thread([&] {
    const timespec poll_interval{0, 100'000'000};
    while (!stop.load()) {
      siginfo_t info{};
      const int sig = sigtimedwait(&signals, &info, &poll_interval);
      if (sig == SIGHUP) {
        ELDR_LOG(info, "SIGHUP: reloading the table");
        (void)d.reload();
      } else if (sig == SIGTERM || sig == SIGINT) {
        ELDR_LOG(info, "%s: shutting down", sig == SIGTERM ? "SIGTERM" : "SIGINT");
        stop.store(true);
      }
    }
  });

  // Watchdog: ping at half of WATCHDOG_USEC from the consumer loop, so a
  // wedged loop stops the pings and systemd restarts us.
  uint64_t watchdog_usec = 0;
  const bool watchdog = sd_watchdog_enabled(0, &watchdog_usec) > 0 && watchdog_usec > 0;
  uint64_t last_ping = monotonic_ns();
  sd_notifyf(0, "READY=1\nSTATUS=routing for instance %s (table epoch %llu)\nMAINPID=%d",
             config.instance.c_str(), static_cast<unsigned long long>(d.service().table_epoch()),
             static_cast<int>(getpid()));
  d.run(stop, [&] {
    if (!watchdog) return;
    const uint64_t now = monotonic_ns();
    if (now - last_ping >= watchdog_usec * 500) {  // half the interval, in ns
      sd_notify(0, "WATCHDOG=1");
      last_ping = now;
    }
  });
  sd_notify(0, "STOPPING=1\nSTATUS=stopping");
  signal_thread.join();
  daemon->reset();  // unlinks the segment
  if (config.pool.enabled()) nats_shutdown();
  ELDR_LOG(info, "stopped");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"eldrd: the eldr routing daemon (shared-memory footprints in, decisions out)"};
  Flags f;
  app.add_option("--config", f.config_path, "TOML config file (see eldrd.toml)");
  app.add_option("--instance", f.instance, "instance name: segment /dev/shm/eldr-v2-NAME");
  app.add_option("--table", f.table, "cluster table file (eldr fit)");
  app.add_option(
      "--synthetic-table", f.synthetic_table,
      "no table file: fit one on a synthetic workload, MODEL:K (qwen3-30b-a3b:8, 8x16x2:4)");
  app.add_option("--policy", f.policy,
                 "eldr_cost (default) | eldr | eldr_guard | round_robin | random | jsq | p2c");
  app.add_option("--metrics-port", f.metrics_port, "Prometheus port on 127.0.0.1, 0 = off")
      ->check(CLI::Range(0u, 65535u));
  app.add_option("--group", f.group,
                 "group of the segment (read-only to it) and the registration socket");
  app.add_option("--worker-report-timeout-ms", f.worker_report_timeout_ms,
                 "take a worker out of routing when its reports stop this long (0 = never)");
  app.add_option("--log-level", f.log_level, "debug | info | warn | error");
  app.add_option("--nats", f.nats,
                 "URL[,URL...]: route one pool with the eldrd of other nodes over NATS");
  app.add_option("--node", f.node, "this node's name in the pool (default: the host name)");
  app.add_option("--pool", f.pool, "the pool's name (default: default)");
  pool::add_nats_auth_options(app, f.auth);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  // Not dumpable: no process of our uid may ptrace us or open what is under
  // /proc/<pid> (our mappings hold every client's ring). Costs core dumps.
  (void)::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  auto config = build_config(f, app);
  if (!config) {
    std::fprintf(stderr, "eldrd: %s\n", config.status().to_string().c_str());
    return 2;
  }
  return run_daemon(*config);
}
