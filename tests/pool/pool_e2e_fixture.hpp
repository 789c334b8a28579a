// The fixture of multi-node mode end to end (pool_e2e_test.cpp,
// pool_security_test.cpp): real nats-server processes (a 3-server cluster on
// loopback ports) and real eldrd nodes, each with its own instance, driven
// through shared memory like engines drive them. Every wait is bounded; a
// watchdog aborts a hung test; every process is killed at the end.
#pragma once

#include <gtest/gtest.h>
#include <nats/nats.h>
#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <future>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "eldr/cluster_table.hpp"
#include "eldr/eldr.h"
#include "eldr/eldr_prompt.h"
#include "eldr/pool/route_wire.hpp"
#include "eldr/shm.hpp"
#include "eldr/shm/records.hpp"
#include "process_support.hpp"
#include "temp_dir.hpp"
#include "test_tables.hpp"

namespace eldr::sidecar::e2e {

using namespace std::chrono_literals;
using eldr::testing::eventually;
using eldr::testing::free_loopback_port;
using eldr::testing::http_get;
using eldr::testing::read_file;
using eldr::testing::spawn;
using eldr::testing::SteadyClock;
using eldr::testing::wait_exit;
using eldr::testing::Watchdog;

struct Server {
  std::string port, cluster_port, log;
  pid_t pid = -1;
  std::string url() const { return "nats://127.0.0.1:" + port; }
};

struct Node {
  std::string name, instance, log, metrics_port;
  pid_t pid = -1;
};

inline int g_counter = 0;

class PoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string_view(NATS_SERVER_PATH).empty())
      GTEST_SKIP() << "nats-server is not installed (scripts/install-deps.sh installs it)";
    tag = std::to_string(getpid()) + "-" + std::to_string(++g_counter);
    pool_name = "p" + tag;
    ASSERT_TRUE(save_table(eldr::testing::axis_table(), table_path).is_ok());
    std::ofstream(config_path) << "max_clients = 4\nring_bytes = 65536\ndecision_slots = 1024\n"
                                  "policy = \"eldr\"\ntau = 0.0\n"
                                  "[pool]\nsnapshot_ms = 200\npeer_timeout_ms = 1000\n";
  }
  void TearDown() override {
    for (Node& n : nodes) stop_node(n);
    for (Server& s : servers) stop_server(s);
    for (const auto& e : std::filesystem::directory_iterator("/dev/shm"))
      if (e.path().filename().string().find(tag) != std::string::npos)
        std::filesystem::remove(e.path());
    if (HasFailure())
      for (const Node& n : nodes)
        std::fprintf(stderr, "--- %s log ---\n%s\n", n.name.c_str(), read_file(n.log).c_str());
  }

  // n servers routed to each other (one NATS cluster), on fresh loopback ports.
  // jetstream: each server with JetStream and a store of its own (the
  // pool's table bucket lives there).
  void start_servers(int n, bool with_jetstream = false) {
    jetstream = with_jetstream;
    servers.resize(static_cast<size_t>(n));
    for (Server& s : servers) {
      s.port = free_loopback_port();
      s.cluster_port = free_loopback_port();
    }
    for (size_t i = 0; i < servers.size(); ++i) start_server(i);
  }
  void start_server(size_t i) {
    Server& s = servers[i];
    s.log = dir.file("nats-" + std::to_string(i) + ".log");
    std::vector<std::string> args = {NATS_SERVER_PATH,
                                     "-a",
                                     "127.0.0.1",
                                     "-p",
                                     s.port,
                                     "-n",
                                     "n" + std::to_string(i) + "-" + tag};
    args.insert(args.end(), server_args.begin(), server_args.end());
    if (jetstream)
      args.insert(args.end(), {"-js", "--store_dir", dir.file("js-" + std::to_string(i))});
    if (servers.size() > 1) {
      std::string routes;
      for (size_t j = 0; j < servers.size(); ++j)
        if (j != i)
          routes += std::string(routes.empty() ? "" : ",") +
                    "nats://127.0.0.1:" + servers[j].cluster_port;
      args.insert(args.end(), {"--cluster_name", "eldr-test-" + tag, "--cluster",
                               "nats://127.0.0.1:" + s.cluster_port, "--routes", routes});
    }
    // In server_dir (a configuration's relative paths), with server_env.
    if (!server_dir.empty())
      args.insert(args.begin(), {"/bin/sh", "-c", "cd \"$0\" && exec \"$@\"", server_dir});
    s.pid = spawn(args, s.log, server_env);
    ASSERT_GT(s.pid, 0);
  }
  void stop_server(Server& s) {
    if (s.pid <= 0) return;
    kill(s.pid, SIGKILL);
    (void)wait_exit(s.pid);
    s.pid = -1;
  }
  std::string urls() const {
    std::string out;
    for (const Server& s : servers) out += (out.empty() ? "" : ",") + s.url();
    return out;
  }

  Node& start_node(const std::string& name) { return start_node(name, config_path); }
  Node& start_node(const std::string& name, const std::string& config) {
    Node& n = nodes.emplace_back();
    n.name = name;
    n.instance = "cl-" + tag + "-" + name;
    n.log = dir.file(name + ".log");
    n.metrics_port = free_loopback_port();
    std::vector<std::string> args = {ELDRD_PATH,
                                     "--config",
                                     config,
                                     "--instance",
                                     n.instance,
                                     "--table",
                                     table_path,
                                     "--nats",
                                     node_urls.empty() ? urls() : node_urls,
                                     "--node",
                                     name,
                                     "--pool",
                                     pool_name,
                                     "--metrics-port",
                                     n.metrics_port};
    args.insert(args.end(), node_args.begin(), node_args.end());
    n.pid = spawn(args, n.log);
    EXPECT_GT(n.pid, 0);
    EXPECT_TRUE(eventually([&] {
      auto s = shm::read_snapshot(n.instance);
      return s && s->state == "ready";
    })) << name
        << " did not become ready";
    return n;
  }
  void stop_node(Node& n) {
    if (n.pid <= 0) return;
    kill(n.pid, SIGKILL);
    (void)wait_exit(n.pid);
    n.pid = -1;
  }

  static nlohmann::json pool_of(const Node& n) {
    auto s = shm::read_snapshot(n.instance);
    if (!s || s->pool.empty()) return {};
    return nlohmann::json::parse(s->pool, nullptr, false);
  }
  static bool connected(const Node& n) {
    const auto c = pool_of(n);
    return c.is_object() && c.value("connected", false);
  }
  static bool sees_peers(const Node& n, size_t peers) {
    const auto c = pool_of(n);
    return c.is_object() && c.value("connected", false) && c["peers"].size() == peers;
  }
  // Requests in flight over all workers: (pool-wide, this node's own).
  static std::pair<uint64_t, uint64_t> inflight(const Node& n) {
    auto s = shm::read_snapshot(n.instance);
    uint64_t all = 0, local = 0;
    if (s)
      for (const auto& w : s->workers) {
        all += w.inflight;
        local += w.inflight_local;
      }
    return {all, local};
  }
  static uint32_t running_of(const Node& n, int32_t worker) {
    auto s = shm::read_snapshot(n.instance);
    if (s)
      for (const auto& w : s->workers)
        if (w.worker == worker) return w.running;
    return UINT32_MAX;
  }
  // One server and node "a" on it (with `config`), connected.
  Node& start_lone_node(const std::string& config) {
    start_servers(1);
    nodes.reserve(1);
    Node& n = start_node("a", config);
    EXPECT_TRUE(eventually([&] { return connected(n); }, 15s));
    return n;
  }
  Node& start_lone_node() { return start_lone_node(config_path); }
  // The same, releasing a silent gateway's routes after 2 s.
  Node& start_gateway_timeout_node() {
    const std::string config = dir.file("gateway_timeout.toml");
    std::ofstream(config) << read_file(config_path) << "gateway_timeout_ms = 2000\n";  // [pool]
    return start_lone_node(config);
  }
  // A gateway's handle on the first server (nullptr, the failure recorded,
  // when it does not open).
  eldr_pool_t* open_gateway() {
    eldr_pool_t* pool = nullptr;
    EXPECT_EQ(eldr_pool_open(servers[0].url().c_str(), pool_name.c_str(), 2000, &pool), ELDR_OK)
        << eldr_last_error_message();
    return pool;
  }
  // A [2][4] footprint whose top worker is 100 + cell.
  static std::vector<int16_t> one_cell(int cell) {
    std::vector<int16_t> counts(8, 0);
    counts[static_cast<size_t>(cell)] = 5;
    return counts;
  }
  static std::unique_ptr<shm::Client> client_of(const Node& n) {
    auto c = shm::Client::open(n.instance);
    EXPECT_TRUE(c.is_ok()) << c.status().to_string();
    return c ? std::move(*c) : nullptr;
  }
  // A footprint whose top worker is 100 + cell; its decision.
  static Result<shm::DecisionIn> route(shm::Client& c, const std::string& id, int cell) {
    const std::vector<int16_t> counts = one_cell(cell);
    shm::FootprintOut f;
    f.request_id = id;
    f.layers = 2;
    f.experts = 4;
    f.counts = counts;
    ELDR_TRY(c.push_footprint(f));
    return c.wait_decision(id, 2000);
  }
  static uint64_t metric(const Node& n, const std::string& line_prefix) {
    const std::string body = http_get(n.metrics_port, "/metrics");
    const size_t at = body.find("\n" + line_prefix + " ");
    if (at == std::string::npos) return UINT64_MAX;
    return std::stoull(body.substr(at + line_prefix.size() + 2));
  }

  // eldr table publish|show; its output, *exit_code set.
  std::string table_cli(const std::vector<std::string>& args, int* exit_code) const {
    std::string cmd = ELDR_CLI_PATH;
    cmd += " table";
    for (const auto& a : args) cmd += " '" + a + "'";
    cmd += " --nats '" + urls() + "' --pool " + pool_name;
    return run(cmd, exit_code);
  }
  // A shell command's output (stderr too); *exit_code set when given.
  static std::string run(const std::string& cmd, int* exit_code = nullptr) {
    FILE* p = popen((cmd + " 2>&1").c_str(), "r");
    std::string out;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    const int status = pclose(p);
    if (exit_code) *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return out;
  }
  static uint64_t table_revision(const Node& n) {
    const auto c = pool_of(n);
    return c.is_object() && c["table_revision"].is_number() ? c["table_revision"].get<uint64_t>()
                                                            : 0;
  }
  // The axis table with its workers in reverse: cell c's top worker is 103 - c.
  std::string reversed_table() {
    ClusterTable t = eldr::testing::axis_table();
    std::reverse(t.worker_ids.begin(), t.worker_ids.end());
    const std::string path = dir.file("reversed.eldr");
    EXPECT_TRUE(save_table(t, path).is_ok());
    return path;
  }

  bool jetstream = false;
  std::vector<std::string> server_args;  // more nats-server flags (e.g. --user/--pass)
  std::string server_dir;                // where nats-server runs ("": here)
  std::vector<std::string> server_env;   // more environment for it ("NAME=value")
  std::string node_urls;                 // the nodes' --nats, when not urls()
  std::vector<std::string> node_args;    // more eldrd flags (e.g. TLS and credentials)
  Watchdog watchdog{80s};
  eldr::testing::TempDir dir{"eldr_pool_e2e"};
  std::string table_path = dir.file("table.eldr");
  std::string config_path = dir.file("eldrd.toml");
  std::string tag;
  std::string pool_name;  // the nodes' --pool: "p<tag>"
  std::vector<Server> servers;
  std::vector<Node> nodes;
};

// Publishes raw bytes on a subject of the pool, like a broken or hostile peer.
inline void publish_raw(const std::string& url, const std::string& subject,
                        const std::vector<uint8_t>& bytes) {
  natsConnection* nc = nullptr;
  ASSERT_EQ(natsConnection_ConnectTo(&nc, url.c_str()), NATS_OK);
  ASSERT_EQ(
      natsConnection_Publish(nc, subject.c_str(), bytes.data(), static_cast<int>(bytes.size())),
      NATS_OK);
  ASSERT_EQ(natsConnection_FlushTimeout(nc, 2000), NATS_OK);
  natsConnection_Destroy(nc);
  // The library's global state too (LeakSanitizer would report it at exit).
  (void)nats_CloseAndWait(2000);
}

}  // namespace eldr::sidecar::e2e
