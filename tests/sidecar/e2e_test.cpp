// End-to-end: the built eldrd as a real process on a private instance, real
// clients (this binary, and copies of it re-executed as producers), real
// signals. Every wait is bounded; a watchdog aborts a hung test.
#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <sstream>
#include <string_view>
#include <thread>

#include "eldr/cluster_table.hpp"
#include "eldr/shm.hpp"
#include "process_support.hpp"
#include "temp_dir.hpp"
#include "test_tables.hpp"

namespace eldr::sidecar {
namespace {

using namespace std::chrono_literals;
using eldr::testing::axis_table;
using eldr::testing::eventually;
using eldr::testing::free_loopback_port;
using eldr::testing::http_get;
using eldr::testing::layer0;
using eldr::testing::read_file;
using eldr::testing::spawn;
using eldr::testing::wait_exit;
using eldr::testing::Watchdog;
using SteadyClock = std::chrono::steady_clock;

// Requests in flight over every worker of a snapshot.
uint64_t inflight_total(const shm::SegmentSnapshot& s) {
  uint64_t n = 0;
  for (const auto& w : s.workers) n += w.inflight;
  return n;
}

// Sanitizer builds leave the CLI out (ELDR_BUILD_TOOLS=OFF): the checks that
// drive it then stop there, the rest of each test still runs.
bool have_cli() { return std::string_view(ELDR_CLI_PATH).size() > 0; }

std::string run_cli(const std::vector<std::string>& args, int* exit_code) {
  std::string cmd = ELDR_CLI_PATH;
  for (const auto& a : args) cmd += " '" + a + "'";
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

int g_instance_counter = 0;

class EldrdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    instance = "e2e-" + std::to_string(getpid()) + "-" + std::to_string(++g_instance_counter);
    ASSERT_TRUE(save_table(axis_table(), table_path).is_ok());
    // The daemon's mechanics are checked with the locality band (eldr), whose
    // picks follow the footprint alone; the tests of the default policy
    // (eldr_cost) write a config without this line (default_config()).
    std::ofstream(config_path) << default_config() << "policy = \"eldr\"\n";
  }
  static std::string default_config() {
    return "max_clients = 4\nring_bytes = 65536\ndecision_slots = 1024\nlog_level = \"info\"\n";
  }
  void TearDown() override {
    if (daemon > 0) {
      kill(daemon, SIGKILL);
      (void)wait_exit(daemon);
    }
    // A SIGKILLed daemon leaves its segment and lock files: remove this instance's only.
    for (const auto& e : std::filesystem::directory_iterator("/dev/shm"))
      if (e.path().filename().string().find(instance) != std::string::npos)
        std::filesystem::remove(e.path());
    if (HasFailure()) std::fprintf(stderr, "--- eldrd log ---\n%s\n", read_file(log_path).c_str());
  }

  void start_daemon(std::vector<std::string> extra = {}, std::vector<std::string> env = {}) {
    std::vector<std::string> args = {ELDRD_PATH, "--config", config_path, "--instance",
                                     instance,   "--table",  table_path};
    args.insert(args.end(), extra.begin(), extra.end());
    daemon = spawn(args, log_path, env);
    ASSERT_GT(daemon, 0);
    ASSERT_TRUE(eventually([&] {
      auto s = shm::read_snapshot(instance);
      return s && s->state == "ready" && s->daemon_pid == static_cast<uint32_t>(daemon);
    })) << "eldrd did not become ready";
  }

  std::unique_ptr<shm::Client> open_client() {
    auto c = shm::Client::open(instance);
    EXPECT_TRUE(c.is_ok()) << c.status().to_string();
    return c ? std::move(*c) : nullptr;
  }

  // Push one footprint whose top worker is 100 + cell; the decision.
  Result<shm::DecisionIn> route(shm::Client& c, const std::string& id, int cell) {
    std::vector<int16_t> counts(8, 0);
    counts[static_cast<size_t>(cell)] = 5;
    shm::FootprintOut f;
    f.request_id = id;
    f.layers = 2;
    f.experts = 4;
    f.counts = counts;
    ELDR_TRY(c.push_footprint(f));
    return c.wait_decision(id, 2000);
  }

  Watchdog watchdog{60s};
  eldr::testing::TempDir dir{"eldrd_e2e"};
  std::string table_path = dir.file("table.eldr");
  std::string config_path = dir.file("eldrd.toml");
  std::string log_path = dir.file("eldrd.log");
  std::string instance;
  pid_t daemon = -1;
};

TEST_F(EldrdTest, routes_pushed_footprints_and_status_shows_the_live_state) {
  start_daemon();
  auto client = open_client();
  ASSERT_TRUE(client);
  for (int i = 0; i < 20; ++i) {
    auto d = route(*client, "req-" + std::to_string(i), i % 4);
    ASSERT_TRUE(d.is_ok()) << d.status().to_string();
    EXPECT_EQ(d->status, 0);
    EXPECT_EQ(d->worker, 100 + i % 4);
  }
  ASSERT_TRUE(client->push_complete("req-0").is_ok());
  // A footprint of the wrong geometry gets an explicit error decision.
  std::vector<int16_t> wrong(12, 1);
  shm::FootprintOut f;
  f.request_id = "wrong-shape";
  f.layers = 3;
  f.experts = 4;
  f.counts = wrong;
  ASSERT_TRUE(client->push_footprint(f).is_ok());
  auto d = client->wait_decision("wrong-shape", 2000);
  ASSERT_TRUE(d.is_ok()) << d.status().to_string();
  EXPECT_EQ(d->status, static_cast<int32_t>(Errc::shape_mismatch));

  if (!have_cli()) return;
  nlohmann::json status;
  ASSERT_TRUE(eventually([&] {
    int rc = 0;
    const std::string out = run_cli({"status", "--instance", instance, "--json"}, &rc);
    if (rc != 0) return false;
    status = nlohmann::json::parse(out, nullptr, false);
    if (status.is_discarded()) return false;
    uint64_t routed = 0;
    for (const auto& w : status["workers"]) routed += w["routed"].get<uint64_t>();
    return routed == 20;  // worker rows are republished every ~100 ms
  })) << status.dump();
  EXPECT_EQ(status["daemon_pid"], daemon);
  EXPECT_EQ(status["state"], "ready");
  EXPECT_EQ(status["workers"].size(), 4u);
  EXPECT_GE(status["clients"].size(), 1u);
  int rc = 0;
  const std::string text = run_cli({"status", "--instance", instance}, &rc);
  EXPECT_EQ(rc, 0) << text;
  EXPECT_NE(text.find("daemon pid " + std::to_string(daemon)), std::string::npos) << text;
}

// The default policy is eldr_cost, end to end: the decisions say so, and so
// do the status (with the step constants in force) and the metrics.
TEST_F(EldrdTest, routes_with_eldr_cost_by_default_and_status_shows_the_router) {
  std::ofstream(config_path) << default_config();
  const std::string port = free_loopback_port();
  start_daemon({"--metrics-port", port});
  auto client = open_client();
  ASSERT_TRUE(client);
  for (int i = 0; i < 8; ++i) {
    auto d = route(*client, "cost-" + std::to_string(i), i % 4);
    ASSERT_TRUE(d.is_ok()) << d.status().to_string();
    EXPECT_EQ(d->status, 0);
    EXPECT_EQ(d->policy, 7u) << "ELDR_POLICY_ELDR_COST";
  }
  auto s = shm::read_snapshot(instance);
  ASSERT_TRUE(eventually([&] {
    s = shm::read_snapshot(instance);
    if (!s || !s->router) return false;
    uint64_t routed = 0;
    for (const auto& w : s->workers) routed += w.routed;
    return routed == 8;
  }));
  EXPECT_EQ(s->format_major, shm::kFormatMajor);
  EXPECT_EQ(s->format_minor, shm::kFormatMinor);
  EXPECT_EQ(s->router->policy, 7u);
  // The axis table's 2x4 geometry has no preset: StepCost's defaults.
  EXPECT_EQ(s->router->t0_ms, 3.0);
  EXPECT_EQ(s->router->tseq_ms, 0.03);
  EXPECT_EQ(s->router->alpha_us, 1.78);
  EXPECT_EQ(s->router->max_batch, 64u);
  double experts = 0.0;
  for (const auto& w : s->workers) experts += w.batch_experts;
  EXPECT_GT(experts, 0.0) << "8 requests in flight fill the batch footprints";

  std::string body;
  ASSERT_TRUE(eventually([&] {
    body = http_get(port, "/metrics");
    return body.find("eldr_router_policy{policy=\"eldr_cost\"} 1") != std::string::npos;
  })) << body;
  for (const char* family :
       {"eldr_step_cost{constant=\"t0_ms\"} 3", "eldr_step_cost{constant=\"max_batch\"} 64",
        "eldr_step_samples_total 0", "eldr_router_untracked_total 0",
        "eldr_worker_batch_experts{worker=\"100\"}", "eldr_report_bad_value_total 0"})
    EXPECT_NE(body.find(family), std::string::npos) << family;

  if (!have_cli()) return;
  nlohmann::json status;
  int rc = 0;
  const std::string out = run_cli({"status", "--instance", instance, "--json"}, &rc);
  ASSERT_EQ(rc, 0) << out;
  status = nlohmann::json::parse(out, nullptr, false);
  ASSERT_FALSE(status.is_discarded()) << out;
  EXPECT_EQ(status["format"],
            std::to_string(shm::kFormatMajor) + "." + std::to_string(shm::kFormatMinor));
  EXPECT_EQ(status["router"]["policy"], "eldr_cost") << status.dump();
  EXPECT_EQ(status["router"]["step_cost"]["t0_ms"], 3.0);
  EXPECT_EQ(status["router"]["step_cost"]["max_batch"], 64);
  EXPECT_EQ(status["router"]["step_samples"], 0);
  EXPECT_EQ(status["router"]["completes_unknown"], 0);
  EXPECT_EQ(status["router"]["untracked"], 0);
  ASSERT_EQ(status["workers"].size(), 4u);
  EXPECT_TRUE(status["workers"][0].contains("batch_experts"));
  const std::string text = run_cli({"status", "--instance", instance}, &rc);
  EXPECT_NE(text.find("router: policy eldr_cost"), std::string::npos) << text;
}

// [router] step constants reach the router; engine reports with a batch
// size and a step time feed its fit (status: step_samples) and set the
// worker's in-flight count; a step time without a batch size is counted.
TEST_F(EldrdTest, step_reports_reach_the_router_and_configured_constants_apply) {
  std::ofstream(config_path) << default_config()
                             << "[router]\nt0_ms = 2.5\ntseq_ms = 0.05\nalpha_us = 2.0\n"
                                "max_batch = 32\n";
  const std::string port = free_loopback_port();
  start_daemon({"--metrics-port", port});
  auto client = open_client();
  ASSERT_TRUE(client);
  std::optional<shm::Host::RouterRow> router;
  ASSERT_TRUE(eventually([&] {
    auto s = shm::read_snapshot(instance);
    if (s && s->router) router = s->router;
    return router.has_value();
  }));
  EXPECT_EQ(router->t0_ms, 2.5);
  EXPECT_EQ(router->tseq_ms, 0.05);
  EXPECT_EQ(router->alpha_us, 2.0);
  EXPECT_EQ(router->max_batch, 32u);
  ASSERT_TRUE(route(*client, "warm", 1).is_ok());  // a batch footprint on worker 101
  constexpr int kReports = 40;
  for (int i = 0; i < kReports; ++i)
    ASSERT_TRUE(
        client->push_worker_report(shm::WorkerReportRecord{101, 1, 0.5f, 6, 3.0f + 0.01f * i}));
  // A step time without its batch size: the rest applies, the value is counted.
  ASSERT_TRUE(client->push_worker_report(shm::WorkerReportRecord{102, 2, 0.5f, 0, 5.0f}));
  shm::SegmentSnapshot snap;
  ASSERT_TRUE(eventually([&] {
    auto s = shm::read_snapshot(instance);
    if (!s || !s->router) return false;
    snap = *s;
    return s->router->step_samples == kReports;
  })) << (snap.router ? snap.router->step_samples : 0);
  EXPECT_EQ(snap.router->max_batch, 32u);
  for (const auto& w : snap.workers) {
    if (w.worker == 101) {
      EXPECT_EQ(w.inflight, 6u) << "batch_size replaces the in-flight count";
    } else if (w.worker == 102) {
      EXPECT_EQ(w.inflight, 2u) << "without batch_size: running";
    }
  }
  std::string body;
  ASSERT_TRUE(eventually([&] {
    body = http_get(port, "/metrics");
    return body.find("eldr_step_samples_total " + std::to_string(kReports)) != std::string::npos;
  })) << body;
  EXPECT_NE(body.find("eldr_report_bad_value_total 1"), std::string::npos) << body;
  EXPECT_NE(body.find("eldr_step_cost{constant=\"max_batch\"} 32"), std::string::npos) << body;
  if (!have_cli()) return;
  int rc = 0;
  const std::string out = run_cli({"status", "--instance", instance, "--json"}, &rc);
  ASSERT_EQ(rc, 0) << out;
  const auto status = nlohmann::json::parse(out, nullptr, false);
  EXPECT_EQ(status["router"]["step_samples"], kReports) << out;
}

// Completes go to the router by the daemon's request key: the footprint
// leaves the worker's batch; an unknown id and a second complete of the same
// id are counted and change nothing else.
TEST_F(EldrdTest, completes_by_request_id_and_counts_unknown_and_double_completions) {
  std::ofstream(config_path) << default_config();
  const std::string port = free_loopback_port();
  start_daemon({"--metrics-port", port});
  auto client = open_client();
  ASSERT_TRUE(client);
  std::vector<int32_t> picked;
  for (int i = 0; i < 4; ++i) {
    auto d = route(*client, "done-" + std::to_string(i), i);
    ASSERT_TRUE(d.is_ok()) << d.status().to_string();
    picked.push_back(d->worker);
  }
  const auto snapshot_when = [&](auto pred) {
    shm::SegmentSnapshot snap;
    EXPECT_TRUE(eventually([&] {
      auto s = shm::read_snapshot(instance);
      if (!s || !s->router) return false;
      snap = *s;
      return pred(snap);
    }));
    return snap;
  };
  const auto experts_of = [](const shm::SegmentSnapshot& s, int32_t worker) {
    for (const auto& w : s.workers)
      if (w.worker == worker) return static_cast<double>(w.batch_experts);
    return -1.0;
  };
  auto before = snapshot_when([&](const auto& s) { return inflight_total(s) == 4; });
  const double experts_before = experts_of(before, picked[0]);
  EXPECT_GT(experts_before, 0.0);

  ASSERT_TRUE(client->push_complete("done-0"));
  ASSERT_TRUE(client->push_complete("done-0"));      // again: counted, nothing else
  ASSERT_TRUE(client->push_complete("never-sent"));  // unknown: counted
  auto after = snapshot_when(
      [&](const auto& s) { return inflight_total(s) == 3 && s.router->completes_unknown == 2; });
  EXPECT_EQ(inflight_total(after), 3u);
  EXPECT_LT(experts_of(after, picked[0]), experts_before) << "done-0 left its worker's batch";
  EXPECT_EQ(after.router->untracked, 0u);
  // The other three stay in flight and complete normally.
  for (int i = 1; i < 4; ++i) ASSERT_TRUE(client->push_complete("done-" + std::to_string(i)));
  auto drained = snapshot_when([&](const auto& s) { return inflight_total(s) == 0; });
  EXPECT_EQ(drained.router->completes_unknown, 2u);
  for (const auto& w : drained.workers) EXPECT_EQ(w.batch_experts, 0.0f) << w.worker;
  std::string body;
  ASSERT_TRUE(eventually([&] {
    body = http_get(port, "/metrics");
    return body.find("eldr_complete_unknown_total 2") != std::string::npos;
  })) << body;
  EXPECT_NE(body.find("eldr_router_completes_unknown_total 0"), std::string::npos) << body;
}

// Who may complete: the process that pushed a request (no token needed), or
// any process presenting the request's completion token from its decision.
// Another process completing without the token, or with a wrong one, is
// refused and counted, and every in-flight count stays exact.
TEST_F(EldrdTest, only_the_pusher_or_a_holder_of_the_token_completes_a_request) {
  std::ofstream(config_path) << default_config();
  const std::string port = free_loopback_port();
  start_daemon({"--metrics-port", port});
  auto client = open_client();
  ASSERT_TRUE(client);
  std::vector<uint64_t> tokens;
  for (int i = 0; i < 4; ++i) {
    auto d = route(*client, "owned-" + std::to_string(i), i);
    ASSERT_TRUE(d.is_ok()) << d.status().to_string();
    EXPECT_NE(d->completion_token, 0u);
    tokens.push_back(d->completion_token);
  }
  EXPECT_NE(tokens[0], tokens[1]);
  // (in flight, refused completes), once the daemon published its router row.
  const auto counts = [&]() -> std::optional<std::pair<uint64_t, uint64_t>> {
    auto s = shm::read_snapshot(instance);
    if (!s || !s->router) return std::nullopt;
    return std::make_pair(inflight_total(*s), s->router->completes_refused);
  };
  ASSERT_TRUE(eventually([&] { return counts() == std::make_pair(uint64_t{4}, uint64_t{0}); }));

  // Another process (a gateway, a stray engine): no token, a wrong token, a
  // token of another request are refused; the right token completes owned-2.
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int rc = 10;
    if (auto other = shm::Client::open(instance)) {
      rc = (*other)->push_complete("owned-0") ? 0 : 1;
      rc |= (*other)->push_complete("owned-1", tokens[1] ^ 1) ? 0 : 2;
      rc |= (*other)->push_complete("owned-3", tokens[1]) ? 0 : 4;
      rc |= (*other)->push_complete("owned-2", tokens[2]) ? 0 : 8;
    }
    ::_exit(rc);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  ASSERT_TRUE(eventually([&] { return counts() == std::make_pair(uint64_t{3}, uint64_t{3}); }))
      << "three refused, owned-2 completed";
  // The pusher itself needs no token; a token works from it too.
  ASSERT_TRUE(client->push_complete("owned-0"));
  ASSERT_TRUE(client->push_complete("owned-1", tokens[1]));
  ASSERT_TRUE(client->push_complete("owned-3"));
  ASSERT_TRUE(eventually([&] { return counts() == std::make_pair(uint64_t{0}, uint64_t{3}); }));
  std::string body;
  ASSERT_TRUE(eventually([&] {
    body = http_get(port, "/metrics");
    return body.find("eldr_complete_refused_total 3") != std::string::npos;
  })) << body;
  EXPECT_NE(body.find("eldr_complete_unknown_total 0"), std::string::npos) << body;
}

TEST_F(EldrdTest, sigterm_stops_gracefully_and_removes_the_segment) {
  start_daemon();
  ASSERT_TRUE(std::filesystem::exists("/dev/shm" + shm::segment_name(instance)));
  ASSERT_EQ(kill(daemon, SIGTERM), 0);
  EXPECT_EQ(wait_exit(daemon), 0);
  daemon = -1;
  EXPECT_FALSE(std::filesystem::exists("/dev/shm" + shm::segment_name(instance)));
  EXPECT_NE(read_file(log_path).find("SIGTERM"), std::string::npos);
}

TEST_F(EldrdTest, a_second_daemon_on_the_same_instance_refuses_to_start) {
  start_daemon();
  const pid_t second =
      spawn({ELDRD_PATH, "--config", config_path, "--instance", instance, "--table", table_path},
            dir.file("second.log"));
  EXPECT_EQ(wait_exit(second), 1);
  auto s = shm::read_snapshot(instance);
  ASSERT_TRUE(s.is_ok());
  EXPECT_EQ(s->daemon_pid, static_cast<uint32_t>(daemon));
}

TEST_F(EldrdTest, reload_swaps_the_table_while_serving) {
  if (!have_cli()) GTEST_SKIP() << "eldr CLI not built (ELDR_BUILD_TOOLS=OFF)";
  start_daemon();
  auto client = open_client();
  ASSERT_TRUE(client);
  auto before = route(*client, "before", 2);
  ASSERT_TRUE(before.is_ok());
  EXPECT_EQ(before->worker, 102);
  ClusterTable next = axis_table();
  std::swap(next.worker_ids[0], next.worker_ids[2]);
  ASSERT_TRUE(save_table(next, table_path).is_ok());
  int rc = 0;
  const std::string out = run_cli({"reload", "--instance", instance}, &rc);
  ASSERT_EQ(rc, 0) << out;
  auto after = route(*client, "after", 2);
  ASSERT_TRUE(after.is_ok());
  EXPECT_EQ(after->worker, 100);
  EXPECT_EQ(after->table_epoch, before->table_epoch + 1);
  // A plain SIGHUP does the same.
  ASSERT_EQ(kill(daemon, SIGHUP), 0);
  EXPECT_TRUE(eventually([&] {
    auto s = shm::read_snapshot(instance);
    return s && s->table_epoch == after->table_epoch + 1;
  }));
}

TEST_F(EldrdTest, a_client_killed_mid_stream_does_not_disturb_the_others) {
  start_daemon();
  const std::string producer_log = dir.file("producer.log");
  const pid_t producer = spawn({ELDR_SELF_PATH, "--producer", instance}, producer_log);
  ASSERT_GT(producer, 0);
  // Let it stream for a while, then kill it wherever it is.
  ASSERT_TRUE(
      eventually([&] { return read_file(producer_log).find("streaming") != std::string::npos; }));
  std::this_thread::sleep_for(50ms);
  ASSERT_EQ(kill(producer, SIGKILL), 0);
  EXPECT_EQ(wait_exit(producer), 128 + SIGKILL);

  auto client = open_client();
  ASSERT_TRUE(client);
  for (int i = 0; i < 200; ++i) {
    auto d = route(*client, "survivor-" + std::to_string(i), i % 4);
    ASSERT_TRUE(d.is_ok()) << i << ": " << d.status().to_string();
    EXPECT_EQ(d->worker, 100 + i % 4);
  }
  // The dead producer's slot is reclaimed.
  EXPECT_TRUE(eventually([&] {
    auto s = shm::read_snapshot(instance);
    if (!s) return false;
    for (const auto& c : s->clients)
      if (c.pid == static_cast<uint32_t>(producer)) return false;
    return true;
  }));
  EXPECT_EQ(kill(daemon, 0), 0) << "the daemon must still be running";
}

// ---- isolation between clients of different users ---------------------------

// Two unprivileged users of the daemon's group: raw uids with no passwd
// entry (the kernel needs none), the group "users" as their only group.
constexpr uid_t kScribblerUid = 61001;
constexpr uid_t kHonestUid = 61002;

bool drop_to(uid_t uid, gid_t gid) {
  return ::setgroups(1, &gid) == 0 && ::setresgid(gid, gid, gid) == 0 &&
         ::setresuid(uid, uid, uid) == 0;
}

// How many entries of a /proc/<pid>/<dir> this process could open for
// writing (or at all, for map_files): every one of them would reach memory
// of another process.
int openable_entries(pid_t pid, const char* dir) {
  int opened = 0;
  std::error_code ec;
  for (const auto& e :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/" + dir, ec)) {
    const int fd = ::open(e.path().c_str(), O_RDWR | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd >= 0) {
      ++opened;
      ::close(fd);
    }
  }
  return opened;
}

struct ScribblerReport {
  int32_t dropped = 0;            // 1 once it runs as kScribblerUid
  int32_t segment_rw_errno = 0;   // opening the daemon's segment for writing
  int32_t daemon_fds_opened = 0;  // /proc/<eldrd>/fd and map_files entries it could open
  int32_t registered = 0;
};

// Scribbles over every byte it can map writable (its own ring: a claim's
// ring span), commits the garbage, re-registers when quarantined and does it
// again; also sends garbage hellos. Never returns.
[[noreturn]] void scribble(const std::string& instance, pid_t daemon, int report_fd, gid_t gid) {
  ScribblerReport r;
  r.dropped = drop_to(kScribblerUid, gid) ? 1 : 0;
  const std::string segment = "/dev/shm" + shm::segment_name(instance);
  const int fd = ::open(segment.c_str(), O_RDWR | O_CLOEXEC);
  r.segment_rw_errno = fd >= 0 ? 0 : errno;
  if (fd >= 0) ::close(fd);
  r.daemon_fds_opened = openable_entries(daemon, "fd") + openable_entries(daemon, "map_files");
  shm::ClientOptions options;
  options.open_timeout = 2000ms;
  auto client = shm::Client::open(instance, options);
  r.registered = client.is_ok() ? 1 : 0;
  (void)!::write(report_fd, &r, sizeof r);
  ::close(report_fd);
  if (!client) ::_exit(3);
  uint64_t x = 0x9e3779b97f4a7c15ull ^ static_cast<uint64_t>(::getpid());
  auto next = [&] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  const std::string socket_path = segment + ".sock";
  for (uint64_t round = 0;; ++round) {
    auto claim = (*client)->claim(shm::RecordType::footprint, 64 + next() % 512);
    if (claim) {
      const std::span<uint8_t> ring = claim->ring;
      for (int page = 0; page < 16; ++page) {
        const size_t at = next() % ring.size();
        const size_t n = std::min<size_t>(4096, ring.size() - at);
        for (size_t i = 0; i < n; i += 8) {
          const uint64_t v = next();
          std::memcpy(ring.data() + at + i, &v, std::min<size_t>(8, n - i));
        }
      }
      (void)(*client)->commit(*claim);
    }
    if (round % 256 == 0) {  // a peer that is no eldr client at all
      const int s = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
      sockaddr_un a{};
      a.sun_family = AF_UNIX;
      std::snprintf(a.sun_path, sizeof a.sun_path, "%s", socket_path.c_str());
      if (::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
        uint64_t junk[5] = {next(), next(), next(), next(), next()};
        (void)::send(s, junk, sizeof junk, MSG_NOSIGNAL | MSG_DONTWAIT);
      }
      ::close(s);
    }
    std::this_thread::sleep_for(50us);  // leave the honest client a core
  }
}

struct HonestReport {
  int32_t dropped = 0;
  int32_t open_code = 0;
  int32_t routed = 0;
  int32_t push_failures = 0;
  int32_t timeouts = 0;
  int32_t errors = 0;  // other wait failures, or an error decision
  int32_t wrong = 0;   // a decision for another worker than the footprint's
  int32_t complete_failures = 0;
  int32_t scribbler_fds_opened = 0;  // /proc/<scribbler>/fd and map_files entries opened
  char first_problem[256] = {};
};

HonestReport route_honestly(const std::string& instance, int requests, pid_t scribbler, gid_t gid) {
  HonestReport r;
  r.dropped = drop_to(kHonestUid, gid) ? 1 : 0;
  r.scribbler_fds_opened =
      openable_entries(scribbler, "fd") + openable_entries(scribbler, "map_files");
  auto client = shm::Client::open(instance);
  r.open_code = static_cast<int32_t>(client.status().code());
  if (!client) return r;
  auto note = [&](const std::string& what) {
    if (r.first_problem[0] == '\0')
      std::snprintf(r.first_problem, sizeof r.first_problem, "%s", what.c_str());
  };
  std::vector<int16_t> counts(8, 0);
  for (int i = 0; i < requests; ++i) {
    const std::string id = "honest-" + std::to_string(i);
    std::fill(counts.begin(), counts.end(), int16_t{0});
    counts[static_cast<size_t>(i % 4)] = 5;
    shm::FootprintOut f;
    f.request_id = id;
    f.layers = 2;
    f.experts = 4;
    f.counts = counts;
    if (Status s = (*client)->push_footprint(f); !s) {
      ++r.push_failures;
      note(id + ": " + s.to_string());
      continue;
    }
    auto d = (*client)->wait_decision(id, 2000);
    if (!d) {
      ++(d.status().code() == Errc::timeout ? r.timeouts : r.errors);
      note(id + ": " + d.status().to_string());
      continue;
    }
    if (d->status != 0) {
      ++r.errors;
      note(id + ": decision status " + std::to_string(d->status));
      continue;
    }
    ++r.routed;
    if (d->worker != 100 + i % 4) {
      ++r.wrong;
      note(id + ": worker " + std::to_string(d->worker));
    }
    if (Status s = (*client)->push_complete(id, d->completion_token); !s) {
      ++r.complete_failures;
      note(id + " complete: " + s.to_string());
    }
  }
  return r;
}

// One user's client scribbles over all the shared memory it can write while
// another user's client routes 20,000 requests: the honest one sees no
// failure, no timeout and no wrong decision, the in-flight counts end at
// exactly zero, and the kernel keeps each out of the other's memory and the
// daemon's. Needs root (it creates the two users' processes).
TEST_F(EldrdTest, a_scribbling_client_of_another_user_disturbs_no_other_client) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: drops two children to uids 61001 and 61002";
  const group* users = ::getgrnam("users");
  if (users == nullptr) GTEST_SKIP() << "no group \"users\"";
  const gid_t gid = users->gr_gid;
  std::ofstream(config_path) << default_config() << "policy = \"eldr\"\ngroup = \"users\"\n"
                             << "mode = \"0660\"\n";
  // The table and config are read by the daemon (root); the children need nothing from dir.
  const std::string port = free_loopback_port();
  start_daemon({"--metrics-port", port});

  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  const pid_t scribbler = ::fork();
  ASSERT_GE(scribbler, 0);
  if (scribbler == 0) {
    ::close(pipe_fds[0]);
    scribble(instance, daemon, pipe_fds[1], gid);
  }
  ::close(pipe_fds[1]);
  ScribblerReport sr;
  ASSERT_EQ(::read(pipe_fds[0], &sr, sizeof sr), static_cast<ssize_t>(sizeof sr));
  ::close(pipe_fds[0]);
  EXPECT_EQ(sr.dropped, 1);
  EXPECT_EQ(sr.segment_rw_errno, EACCES) << "the daemon's segment must not open for writing";
  EXPECT_EQ(sr.daemon_fds_opened, 0);
  ASSERT_EQ(sr.registered, 1);
  // Let it get going (quarantined at least once) before the honest client starts.
  ASSERT_TRUE(eventually([&] {
    auto s = shm::read_snapshot(instance);
    return s && s->clients_quarantined >= 1;
  })) << "the scribbler was never quarantined";

  ASSERT_EQ(::pipe(pipe_fds), 0);
  constexpr int kRequests = 20'000;
  const pid_t honest = ::fork();
  ASSERT_GE(honest, 0);
  if (honest == 0) {
    ::close(pipe_fds[0]);
    const HonestReport r = route_honestly(instance, kRequests, scribbler, gid);
    const bool sent = ::write(pipe_fds[1], &r, sizeof r) == static_cast<ssize_t>(sizeof r);
    ::_exit(sent ? 0 : 1);
  }
  ::close(pipe_fds[1]);
  HonestReport hr;
  const ssize_t got = ::read(pipe_fds[0], &hr, sizeof hr);
  ::close(pipe_fds[0]);
  EXPECT_EQ(wait_exit(honest), 0);
  auto during = shm::read_snapshot(instance);
  ::kill(scribbler, SIGKILL);
  EXPECT_EQ(wait_exit(scribbler), 128 + SIGKILL);
  ASSERT_EQ(got, static_cast<ssize_t>(sizeof hr));
  EXPECT_EQ(hr.dropped, 1);
  ASSERT_EQ(static_cast<Errc>(hr.open_code), Errc::ok);
  EXPECT_EQ(hr.scribbler_fds_opened, 0) << "another user's ring must not open";
  EXPECT_EQ(hr.routed, kRequests) << hr.first_problem;
  EXPECT_EQ(hr.push_failures, 0) << hr.first_problem;
  EXPECT_EQ(hr.timeouts, 0) << hr.first_problem;
  EXPECT_EQ(hr.errors, 0) << hr.first_problem;
  EXPECT_EQ(hr.wrong, 0) << hr.first_problem;
  EXPECT_EQ(hr.complete_failures, 0) << hr.first_problem;
  ASSERT_TRUE(during.is_ok());
  EXPECT_GE(during->clients_quarantined, 1u);
  EXPECT_GE(during->registrations_refused, 1u);  // the garbage hellos
  // Every honest request was completed with its token: nothing stays in flight.
  ASSERT_TRUE(eventually([&] {
    auto s = shm::read_snapshot(instance);
    return s && s->router && inflight_total(*s) == 0 && s->router->completes_refused == 0;
  }));
  std::string body;
  ASSERT_TRUE(eventually([&] {
    body = http_get(port, "/metrics");
    return body.find("eldr_clients_quarantined_total 0") == std::string::npos &&
           body.find("eldr_clients_quarantined_total") != std::string::npos;
  })) << body;
  EXPECT_EQ(kill(daemon, 0), 0) << "the daemon must still be running";
  std::fprintf(stderr, "scribbler quarantined %llu times; %llu registrations refused\n",
               static_cast<unsigned long long>(during->clients_quarantined),
               static_cast<unsigned long long>(during->registrations_refused));
}

TEST_F(EldrdTest, a_restarted_daemon_is_found_again_by_an_existing_client) {
  start_daemon();
  auto client = open_client();
  ASSERT_TRUE(client);
  ASSERT_TRUE(route(*client, "first", 1).is_ok());
  const uint64_t generation = client->daemon_generation();
  ASSERT_EQ(kill(daemon, SIGKILL), 0);
  ASSERT_EQ(wait_exit(daemon), 128 + SIGKILL);
  daemon = -1;
  start_daemon();  // cleans the crashed daemon's leftovers
  bool routed = eventually(
      [&] {
        auto d = route(*client, "after-restart", 3);
        return d.is_ok() && d->status == 0 && d->worker == 103;
      },
      15s);
  EXPECT_TRUE(routed);
  EXPECT_GE(client->reattachments(), 1u);
  EXPECT_NE(client->daemon_generation(), generation);
}

TEST_F(EldrdTest, the_metrics_endpoint_serves_every_family) {
  const std::string port = free_loopback_port();
  start_daemon({"--metrics-port", port});
  auto client = open_client();
  ASSERT_TRUE(client);
  ASSERT_TRUE(route(*client, "m1", 0).is_ok());
  std::string body;
  ASSERT_TRUE(eventually([&] {
    body = http_get(port, "/metrics");
    // Gauges are refreshed every ~100 ms, counters at once.
    return body.find("eldr_routed_total{worker=\"100\",policy=\"eldr\"} 1") != std::string::npos &&
           body.find("eldr_worker_inflight{worker=\"100\"} 1") != std::string::npos;
  })) << body;
  EXPECT_NE(body.find("HTTP/1.1 200"), std::string::npos);
  for (const char* family :
       {"eldr_ring_used_bytes{", "eldr_rejected_total{reason=",
        "eldr_decision_latency_seconds_bucket", "eldr_worker_healthy{worker=\"100\"",
        "eldr_worker_inflight{worker=\"100\"} 1", "eldr_table_epoch ", "eldr_clients 1",
        "eldr_complete_unknown_total 0", "eldr_decision_evicted_age_seconds_count 0",
        "eldr_clients_quarantined_total 0", "eldr_registrations_refused_total 0"})
    EXPECT_NE(body.find(family), std::string::npos) << family;
}

TEST_F(EldrdTest, systemd_hears_ready_watchdog_pings_and_stopping) {
  // A NOTIFY_SOCKET of our own stands in for systemd.
  const std::string socket_path = dir.file("notify.sock");
  const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  ASSERT_LT(socket_path.size(), sizeof addr.sun_path);
  std::memcpy(addr.sun_path, socket_path.c_str(), socket_path.size());
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  timeval tv{0, 100000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string heard;
  const auto drain = [&] {
    char buf[1024];
    ssize_t n;
    while ((n = recv(fd, buf, sizeof buf, 0)) > 0)
      heard.append(buf, static_cast<size_t>(n)) += '\n';
  };
  start_daemon({}, {"NOTIFY_SOCKET=" + socket_path, "WATCHDOG_USEC=400000"});
  EXPECT_TRUE(eventually([&] {
    drain();
    return heard.find("READY=1") != std::string::npos &&
           heard.find("WATCHDOG=1") != std::string::npos;
  })) << heard;
  EXPECT_NE(heard.find("STATUS=routing for instance " + instance), std::string::npos) << heard;
  ASSERT_EQ(kill(daemon, SIGTERM), 0);
  EXPECT_EQ(wait_exit(daemon), 0);
  daemon = -1;
  drain();
  EXPECT_NE(heard.find("STOPPING=1"), std::string::npos) << heard;
  close(fd);
}

TEST_F(EldrdTest, a_bad_config_file_is_refused_with_the_key_named) {
  std::ofstream(config_path) << "ring_bytes = 65536\nrign_slots = 3\n";
  const pid_t pid = spawn({ELDRD_PATH, "--config", config_path, "--instance", instance}, log_path);
  EXPECT_EQ(wait_exit(pid), 2);
  EXPECT_NE(read_file(log_path).find("rign_slots"), std::string::npos) << read_file(log_path);
  EXPECT_FALSE(shm::read_snapshot(instance).is_ok());
}

// ---- routing from the prompt ---------------------------------------------------

// The value of an unlabelled (or fully labelled) sample in a metrics body;
// UINT64_MAX when absent.
uint64_t metric_value(const std::string& body, const std::string& sample) {
  const size_t at = body.find("\n" + sample + " ");
  if (at == std::string::npos) return UINT64_MAX;
  return std::stoull(body.substr(at + sample.size() + 2));
}

class PromptTest : public EldrdTest {
 protected:
  void SetUp() override {
    EldrdTest::SetUp();
    ASSERT_TRUE(save_table(eldr::testing::axis_table_with_predictor(), table_path).is_ok());
  }
  Result<shm::DecisionIn> route_tokens(shm::Client& c, const std::string& id,
                                       std::span<const uint32_t> tokens, bool* cut = nullptr) {
    ELDR_TRY(c.push_prompt({id, Prompt::of_tokens(tokens)}, cut));
    return c.wait_decision(id, 2000);
  }
  Result<shm::DecisionIn> route_text(shm::Client& c, const std::string& id, std::string_view text) {
    ELDR_TRY(c.push_prompt({id, Prompt::of_text(text)}));
    return c.wait_decision(id, 2000);
  }
  // eldr status --json's predictor object (null without the CLI or a predictor).
  nlohmann::json predictor_status() {
    if (!have_cli()) return {};
    int rc = 0;
    const auto j = nlohmann::json::parse(run_cli({"status", "--instance", instance, "--json"}, &rc),
                                         nullptr, false);
    return rc == 0 && j.is_object() ? j["predictor"] : nlohmann::json{};
  }
};

TEST_F(PromptTest, routes_by_tokens_and_by_text_cuts_long_prompts_and_rejects_bad_ones) {
  const std::string port = free_loopback_port();
  start_daemon({"--metrics-port", port});
  auto client = open_client();
  ASSERT_TRUE(client);
  for (uint32_t d = 0; d < 4; ++d) {
    const auto tokens = eldr::testing::domain_prompt_tokens(d, 7);
    auto by_tokens = route_tokens(*client, "t" + std::to_string(d), tokens);
    ASSERT_TRUE(by_tokens.is_ok()) << by_tokens.status().to_string();
    EXPECT_EQ(by_tokens->status, 0);
    EXPECT_EQ(by_tokens->worker, static_cast<int32_t>(100 + d));
    EXPECT_GT(by_tokens->confidence, 0.0f);
    EXPECT_LE(by_tokens->confidence, 1.0f);
    EXPECT_NE(by_tokens->completion_token, 0u);
    auto by_text =
        route_text(*client, "x" + std::to_string(d), eldr::testing::domain_prompt_text(d, 5));
    ASSERT_TRUE(by_text.is_ok()) << by_text.status().to_string();
    EXPECT_EQ(by_text->status, 0);
    EXPECT_EQ(by_text->worker, static_cast<int32_t>(100 + d));
  }
  // A footprint's decision says 1.
  auto f = route(*client, "footprint", 1);
  ASSERT_TRUE(f.is_ok());
  EXPECT_EQ(f->confidence, 1.0f);
  // 60,000 tokens do not fit a record of this 64 KiB ring: head and tail go,
  // the decision comes all the same (domain 2 at both ends).
  std::vector<uint32_t> longer;
  const auto head = eldr::testing::domain_prompt_tokens(2, 1);
  for (uint32_t i = 0; longer.size() < 60000; ++i) longer.push_back(head[i % head.size()]);
  bool cut = false;
  auto d = route_tokens(*client, "long", longer, &cut);
  ASSERT_TRUE(d.is_ok()) << d.status().to_string();
  EXPECT_TRUE(cut);
  EXPECT_EQ(d->status, 0);
  EXPECT_EQ(d->worker, 102);
  // Bad prompts get a rejected decision with the predictor's status.
  const std::vector<uint32_t> none, past{1, 2, kMaxVocabulary};
  const std::vector<uint32_t> too_long(kMaxPromptTokens + 1, 7);
  for (const auto& [id, tokens] : {std::pair{"empty", std::span<const uint32_t>(none)},
                                   std::pair{"past", std::span<const uint32_t>(past)},
                                   std::pair{"too-long", std::span<const uint32_t>(too_long)}}) {
    auto r = route_tokens(*client, id, tokens);
    ASSERT_TRUE(r.is_ok()) << id << ": " << r.status().to_string();
    EXPECT_EQ(r->status, static_cast<int32_t>(Errc::invalid_argument)) << id;
    EXPECT_EQ(r->worker, -1);
  }
  auto utf8 = route_text(*client, "bad-utf8", "abc \xff def");
  ASSERT_TRUE(utf8.is_ok());
  EXPECT_EQ(utf8->status, static_cast<int32_t>(Errc::invalid_argument));
  // ... and the daemon keeps routing.
  auto after = route_tokens(*client, "after", eldr::testing::domain_prompt_tokens(3, 2));
  ASSERT_TRUE(after.is_ok());
  EXPECT_EQ(after->worker, 103);
  std::string body;
  EXPECT_TRUE(eventually([&] {
    body = http_get(port, "/metrics");
    return metric_value(body, "eldr_predictor_prototypes") == 32;
  })) << body;
  EXPECT_EQ(metric_value(body, "eldr_prompt_routed_total"), 10u) << body;
  EXPECT_EQ(metric_value(body, "eldr_prompt_cut_total"), 2u) << body;  // "long" and "too-long"
  EXPECT_EQ(metric_value(body, "eldr_prompt_rejected_total{reason=\"bad_prompt\"}"), 3u) << body;
  EXPECT_EQ(metric_value(body, "eldr_prompt_rejected_total{reason=\"too_long\"}"), 1u) << body;
  EXPECT_EQ(metric_value(body, "eldr_prompt_rejected_total{reason=\"no_predictor\"}"), 0u) << body;
  EXPECT_GT(metric_value(body, "eldr_predictor_memory_bytes{component=\"demand\"}"), 0u) << body;
}

TEST_F(PromptTest, a_table_without_a_predictor_rejects_prompts_as_unsupported) {
  ASSERT_TRUE(save_table(axis_table(), table_path).is_ok());
  start_daemon();
  auto client = open_client();
  ASSERT_TRUE(client);
  auto d = route_text(*client, "no-predictor", "hello world");
  ASSERT_TRUE(d.is_ok());
  EXPECT_EQ(d->status, static_cast<int32_t>(Errc::unsupported));
  EXPECT_TRUE(route(*client, "still-routes", 1).is_ok());
  if (have_cli()) {
    EXPECT_TRUE(predictor_status().is_null());
  }
}

// The engine's footprint after prefill, pushed under the id a gateway routed
// from the prompt: learned from, not routed again, not counted twice.
TEST_F(PromptTest, learns_from_the_footprint_of_a_request_routed_from_its_prompt) {
  const std::string port = free_loopback_port();
  start_daemon({"--metrics-port", port});
  auto client = open_client();
  ASSERT_TRUE(client);
  auto d = route_tokens(*client, "req", eldr::testing::domain_prompt_tokens(1, 3));
  ASSERT_TRUE(d.is_ok());
  ASSERT_EQ(d->worker, 101);
  const auto real = eldr::testing::domain_footprint(1);
  shm::FootprintOut f;
  f.request_id = "req";
  f.layers = 2;
  f.experts = 4;
  f.counts = real;
  ASSERT_TRUE(client->push_footprint(f).is_ok());
  std::string body;
  ASSERT_TRUE(eventually([&] {
    body = http_get(port, "/metrics");
    return metric_value(body, "eldr_predictor_learned_total") == 1;
  })) << body;
  EXPECT_EQ(metric_value(body, "eldr_rerouted_total"), 0u) << body;
  EXPECT_TRUE(eventually([&] {
    auto s = shm::read_snapshot(instance);
    return s && inflight_total(*s) == 1 && s->router && s->router->predictor_learned == 33;
  }));
  if (have_cli()) {
    const auto p = predictor_status();
    EXPECT_EQ(p["learned"], 33) << p.dump();
    EXPECT_EQ(p["prototypes"], 33) << p.dump();
    EXPECT_EQ(p["kinds"], nlohmann::json::array({"tokens", "text"})) << p.dump();
  }
  // A second footprint of the id is a retry, as before: routed anew.
  ASSERT_TRUE(client->push_footprint(f).is_ok());
  EXPECT_TRUE(eventually(
      [&] { return metric_value(http_get(port, "/metrics"), "eldr_rerouted_total") == 1; }));
  auto s = shm::read_snapshot(instance);
  ASSERT_TRUE(s.is_ok());
  EXPECT_EQ(inflight_total(*s), 1u);
  // The complete releases it.
  ASSERT_TRUE(client->push_complete("req").is_ok());
  EXPECT_TRUE(eventually([&] {
    auto t = shm::read_snapshot(instance);
    return t && inflight_total(*t) == 0;
  }));
}

// What the predictor learned survives a restart: the daemon saves the table
// at a clean stop and loads it again; a truncated table at reload changes
// nothing.
TEST_F(PromptTest, what_was_learned_survives_a_restart_and_a_bad_table_is_refused) {
  const std::string port = free_loopback_port();
  std::ofstream(config_path) << default_config() << "policy = \"eldr\"\n"
                             << "[predictor]\nsave_interval_s = 0\n";
  start_daemon({"--metrics-port", port});
  auto client = open_client();
  ASSERT_TRUE(client);
  for (uint32_t i = 0; i < 3; ++i) {
    const std::string id = "learn-" + std::to_string(i);
    ASSERT_TRUE(route_text(*client, id, eldr::testing::domain_prompt_text(i, 9)).is_ok());
    const auto real = eldr::testing::domain_footprint(i);
    shm::FootprintOut f;
    f.request_id = id;
    f.layers = 2;
    f.experts = 4;
    f.counts = real;
    ASSERT_TRUE(client->push_footprint(f).is_ok());
  }
  ASSERT_TRUE(eventually([&] {
    return metric_value(http_get(port, "/metrics"), "eldr_predictor_learned_total") == 3;
  }));
  client.reset();
  ASSERT_EQ(kill(daemon, SIGTERM), 0);
  ASSERT_EQ(wait_exit(daemon), 0);
  daemon = -1;
  auto saved = load_table(table_path);
  ASSERT_TRUE(saved.is_ok()) << saved.status().to_string();
  ASSERT_TRUE(saved->predictor);
  EXPECT_EQ(saved->predictor->info().learned, 35u);
  EXPECT_EQ(saved->predictor->info().prototypes, 35u);
  // Restarted: it predicts with what it learned.
  start_daemon({"--metrics-port", port});
  EXPECT_TRUE(eventually([&] {
    auto s = shm::read_snapshot(instance);
    return s && s->router && s->router->predictor_learned == 35 &&
           s->router->predictor_prototypes == 35;
  }));
  // A truncated table at reload: refused, counted, the loaded one keeps routing.
  const std::string bytes = read_file(table_path);
  std::ofstream(table_path, std::ios::binary | std::ios::trunc)
      << bytes.substr(0, bytes.size() / 2);
  ASSERT_EQ(kill(daemon, SIGHUP), 0);
  EXPECT_TRUE(eventually(
      [&] { return metric_value(http_get(port, "/metrics"), "eldr_reload_failures_total") == 1; }));
  client = open_client();
  ASSERT_TRUE(client);
  auto d = route_tokens(*client, "after-reload", eldr::testing::domain_prompt_tokens(0, 1));
  ASSERT_TRUE(d.is_ok());
  EXPECT_EQ(d->status, 0);
  EXPECT_EQ(d->worker, 100);
  // Nothing was learned since the restart: the stop does not overwrite the
  // file (which changed under the daemon anyway).
  ASSERT_EQ(kill(daemon, SIGTERM), 0);
  ASSERT_EQ(wait_exit(daemon), 0);
  daemon = -1;
  EXPECT_EQ(read_file(table_path).size(), bytes.size() / 2);
}

// Child mode: a producer that registers and streams round trips until killed.
int producer_main(const std::string& instance) {
  auto c = shm::Client::open(instance);
  if (!c) {
    std::fprintf(stderr, "producer: %s\n", c.status().to_string().c_str());
    return 1;
  }
  std::vector<int16_t> counts = layer0({1, 2, 3, 4});
  for (uint64_t i = 0;; ++i) {
    const std::string id = "p-" + std::to_string(i);
    shm::FootprintOut f;
    f.request_id = id;
    f.layers = 2;
    f.experts = 4;
    f.counts = counts;
    if ((*c)->push_footprint(f)) (void)(*c)->wait_decision(id, 100);
    if (i == 100) {
      std::printf("streaming\n");
      std::fflush(stdout);
    }
  }
}

}  // namespace
}  // namespace eldr::sidecar

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--producer")
    return eldr::sidecar::producer_main(argv[2]);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
