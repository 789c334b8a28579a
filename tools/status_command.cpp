// eldr status | reload: the live state of an eldrd instance, read-only from
// its segment (no registration, nothing written), and a table reload request.
#include <signal.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli_common.hpp"
#include "commands.hpp"
#include "eldr/router.hpp"
#include "eldr/shm.hpp"

namespace eldr::cli {

namespace {

struct StatusArgs {
  std::string instance = "default";
  bool json = false;
  uint32_t timeout_ms = 5000;
};

const char* state_name(uint8_t state) {
  return state <= static_cast<uint8_t>(WorkerState::removed)
             ? worker_state_name(static_cast<WorkerState>(state))
             : "?";
}

const char* policy_of(uint32_t policy) {
  for (Policy p : kAllPolicies)
    if (static_cast<uint32_t>(p) == policy) return policy_name(p);
  return "?";
}

nlohmann::json to_json(const std::string& instance, const shm::SegmentSnapshot& s) {
  nlohmann::json j;
  j["instance"] = instance;
  j["segment"] = shm::segment_name(instance);
  j["format"] = std::to_string(s.format_major) + "." + std::to_string(s.format_minor);
  j["state"] = s.state;
  j["daemon_pid"] = s.daemon_pid;
  j["generation"] = s.generation;
  j["heartbeat_age_ms"] = s.heartbeat_age_ms;
  j["table_epoch"] = s.table_epoch;
  j["decisions_published"] = s.decisions_published;
  j["clients_quarantined"] = s.clients_quarantined;
  j["registrations_refused"] = s.registrations_refused;
  // The router's state; null until the daemon published it.
  if (s.router) {
    const shm::Host::RouterRow& r = *s.router;
    j["router"] = {{"policy", policy_of(r.policy)},
                   {"step_cost",
                    {{"t0_ms", r.t0_ms},
                     {"tseq_ms", r.tseq_ms},
                     {"alpha_us", r.alpha_us},
                     {"max_batch", r.max_batch}}},
                   {"step_samples", r.step_samples},
                   {"completes_unknown", r.completes_unknown},
                   {"completes_refused", r.completes_refused},
                   {"untracked", r.untracked}};
  } else {
    j["router"] = nullptr;
  }
  // The table's footprint predictor (format 2.2); null: none (or an older daemon).
  if (s.router && s.router->predictor_kinds != 0) {
    const shm::Host::RouterRow& r = *s.router;
    nlohmann::json kinds = nlohmann::json::array();
    for (uint32_t k = 0; k < kPromptKinds; ++k)
      if (r.predictor_kinds & (1u << k))
        kinds.push_back(prompt_kind_name(static_cast<PromptKind>(k)));
    j["predictor"] = {
        {"prototypes", r.predictor_prototypes}, {"kinds", kinds}, {"learned", r.predictor_learned}};
  } else {
    j["predictor"] = nullptr;
  }
  j["clients"] = nlohmann::json::array();
  for (const auto& c : s.clients)
    j["clients"].push_back({{"slot", c.slot},
                            {"pid", c.pid},
                            {"uid", c.uid},
                            {"epoch", c.epoch},
                            {"ring_used", c.ring_used},
                            {"ring_capacity", c.ring_capacity},
                            {"records", c.records},
                            {"rejected", c.rejected},
                            {"quarantined", c.quarantined}});
  j["workers"] = nlohmann::json::array();
  for (const auto& w : s.workers)
    j["workers"].push_back({{"worker", w.worker},
                            {"state", state_name(w.state)},
                            {"healthy", w.healthy != 0},
                            {"inflight", w.inflight},
                            {"inflight_local", w.inflight_local},
                            {"running", w.running},
                            {"kv_usage", w.kv_usage},
                            {"routed", w.routed},
                            {"batch_experts", w.batch_experts}});
  // The daemon writes the pool object itself; a torn or foreign text is
  // reported as such, never passed on as JSON.
  if (!s.pool.empty()) {
    auto pool = nlohmann::json::parse(s.pool, nullptr, false);
    j["pool"] = pool.is_object() ? pool : nlohmann::json{{"error", "unreadable"}};
  }
  return j;
}

void print_text(const std::string& instance, const shm::SegmentSnapshot& s) {
  std::printf("instance %s: segment %s, format v%u.%u, state %s\n", instance.c_str(),
              shm::segment_name(instance).c_str(), s.format_major, s.format_minor, s.state.c_str());
  std::printf(
      "daemon pid %u, generation %llu, heartbeat %llu ms ago, table epoch %llu, "
      "%llu decisions published\n",
      s.daemon_pid, static_cast<unsigned long long>(s.generation),
      static_cast<unsigned long long>(s.heartbeat_age_ms),
      static_cast<unsigned long long>(s.table_epoch),
      static_cast<unsigned long long>(s.decisions_published));
  if (s.router) {
    const shm::Host::RouterRow& r = *s.router;
    std::printf(
        "router: policy %s, step t0 %.4g ms + tseq %.4g ms/request + alpha %.4g us/expert "
        "(max batch %u), %llu step samples, %llu unknown completes, %llu refused completes, "
        "%llu untracked\n",
        policy_of(r.policy), r.t0_ms, r.tseq_ms, r.alpha_us, r.max_batch,
        static_cast<unsigned long long>(r.step_samples),
        static_cast<unsigned long long>(r.completes_unknown),
        static_cast<unsigned long long>(r.completes_refused),
        static_cast<unsigned long long>(r.untracked));
  }
  if (s.router && s.router->predictor_kinds != 0)
    std::printf("predictor: %u prototypes (%s%s%s), %llu learned\n", s.router->predictor_prototypes,
                (s.router->predictor_kinds & 1u) ? "tokens" : "",
                s.router->predictor_kinds == 3u ? ", " : "",
                (s.router->predictor_kinds & 2u) ? "text" : "",
                static_cast<unsigned long long>(s.router->predictor_learned));
  std::printf("clients: %zu (%llu quarantined, %llu registrations refused since start)\n",
              s.clients.size(), static_cast<unsigned long long>(s.clients_quarantined),
              static_cast<unsigned long long>(s.registrations_refused));
  if (!s.clients.empty()) {
    std::printf("  %4s %8s %6s %6s %12s %8s %10s %9s\n", "slot", "pid", "uid", "epoch", "ring used",
                "ring %", "records", "rejected");
    for (const auto& c : s.clients)
      std::printf(
          "  %4u %8u %6u %6llu %12llu %7.1f%% %10llu %9llu%s\n", c.slot, c.pid, c.uid,
          static_cast<unsigned long long>(c.epoch), static_cast<unsigned long long>(c.ring_used),
          c.ring_capacity
              ? 100.0 * static_cast<double>(c.ring_used) / static_cast<double>(c.ring_capacity)
              : 0.0,
          static_cast<unsigned long long>(c.records), static_cast<unsigned long long>(c.rejected),
          c.quarantined ? "  QUARANTINED" : "");
  }
  std::printf("workers: %zu\n", s.workers.size());
  if (!s.workers.empty()) {
    std::printf("  %6s %-9s %-8s %8s %8s %8s %6s %10s %14s\n", "worker", "state", "health",
                "inflight", "local", "running", "kv", "routed", "batch experts");
    for (const auto& w : s.workers)
      std::printf("  %6d %-9s %-8s %8u %8u %8u %5.0f%% %10llu %14.1f\n", w.worker,
                  state_name(w.state), w.healthy ? "ok" : "stale", w.inflight, w.inflight_local,
                  w.running, 100.0 * w.kv_usage, static_cast<unsigned long long>(w.routed),
                  w.batch_experts);
  }
  if (!s.pool.empty()) {
    auto c = nlohmann::json::parse(s.pool, nullptr, false);
    if (!c.is_object()) {
      std::printf("pool: status unreadable\n");
      return;
    }
    const std::string revision =
        c.contains("table_revision") && !c["table_revision"].is_null()
            ? c["table_revision"].dump()
            : "- (" + c.value("table_source", std::string("local")) + " table)";
    const std::string link = c.value("connected", false) ? "connected"
                             : c.contains("error") && c["error"].is_string()
                                 ? "DISCONNECTED (" + c["error"].get<std::string>() + ")"
                                 : "DISCONNECTED";
    std::printf("pool: %s, node %s, %s, view age %.1f ms, table revision %s\n",
                c.value("pool", "?").c_str(), c.value("node", "?").c_str(), link.c_str(),
                c.value("view_age_ms", 0.0), revision.c_str());
    if (c.contains("peers") && c["peers"].is_array())
      for (const auto& p : c["peers"])
        std::printf("  peer %-20s last seen %6llu ms ago, %6u bookings\n",
                    p.value("name", "?").c_str(),
                    static_cast<unsigned long long>(p.value("last_seen_age_ms", uint64_t{0})),
                    p.value("bookings", 0u));
  }
}

int run_status(const StatusArgs& a) {
  auto snapshot = shm::read_snapshot(a.instance);
  if (!snapshot) return report(snapshot.status());
  if (a.json)
    std::printf("%s\n", to_json(a.instance, *snapshot).dump().c_str());
  else
    print_text(a.instance, *snapshot);
  return 0;
}

// The pid in the segment must be an eldrd: never signal an unrelated process
// that reused a dead daemon's pid.
Status check_is_eldrd(uint32_t pid) {
  std::ifstream comm("/proc/" + std::to_string(pid) + "/comm");
  std::string name;
  if (!comm || !std::getline(comm, name))
    return {Errc::no_daemon, "daemon pid " + std::to_string(pid) + " is not running"};
  if (name.rfind("eldrd", 0) != 0)
    return {Errc::state, "pid " + std::to_string(pid) + " is '" + name + "', not eldrd"};
  return Status::ok();
}

int run_reload(const StatusArgs& a) {
  auto before = shm::read_snapshot(a.instance);
  if (!before) return report(before.status());
  if (Status s = check_is_eldrd(before->daemon_pid); !s) return report(s);
  if (::kill(static_cast<pid_t>(before->daemon_pid), SIGHUP) != 0)
    return report({errno == EPERM ? Errc::permission : Errc::no_daemon,
                   "cannot signal eldrd pid " + std::to_string(before->daemon_pid) + ": " +
                       std::strerror(errno)});
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(a.timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    auto now = shm::read_snapshot(a.instance);
    if (now && now->table_epoch > before->table_epoch) {
      std::printf("reloaded: table epoch %llu -> %llu\n",
                  static_cast<unsigned long long>(before->table_epoch),
                  static_cast<unsigned long long>(now->table_epoch));
      return 0;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return report({Errc::timeout, "eldrd (pid " + std::to_string(before->daemon_pid) +
                                    ") did not swap in a new table within " +
                                    std::to_string(a.timeout_ms) +
                                    " ms; its log says why (no table file, or a bad one)"});
}

}  // namespace

void register_status_commands(CLI::App& app) {
  auto a = std::make_shared<StatusArgs>();
  auto* status = app.add_subcommand("status", "live state of an eldrd instance (read-only)");
  status->add_option("--instance", a->instance, "eldrd instance name");
  status->add_flag("--json", a->json, "one JSON object");
  status->callback([a] { g_exit_code = run_status(*a); });

  auto r = std::make_shared<StatusArgs>();
  auto* reload =
      app.add_subcommand("reload", "make eldrd reload its table file (SIGHUP), wait for it");
  reload->add_option("--instance", r->instance, "eldrd instance name");
  reload->add_option("--timeout-ms", r->timeout_ms, "how long to wait for the new table epoch");
  reload->callback([r] { g_exit_code = run_reload(*r); });
}

}  // namespace eldr::cli
