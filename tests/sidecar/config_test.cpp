#include "config.hpp"

#include <gtest/gtest.h>

#include <fstream>

#include "temp_dir.hpp"

namespace eldr::sidecar {
namespace {

TEST(daemon_config, the_shipped_eldrd_toml_parses_and_validates) {
  DaemonConfig sut;
  const Status s = load_config_file(ELDR_SOURCE_DIR "/sidecar/eldrd.toml", sut);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  EXPECT_TRUE(sut.validate().is_ok()) << sut.validate().to_string();
  EXPECT_FALSE(sut.refit.enabled);
  EXPECT_EQ(sut.mode, 0660u);
  // The shipped file spells out the defaults.
  const DaemonConfig defaults;
  EXPECT_EQ(sut.policy, Policy::eldr_cost);
  EXPECT_EQ(sut.policy, defaults.policy);
  EXPECT_FALSE(sut.router_step.step_cost.has_value());
  EXPECT_TRUE(sut.router_step.fit_step_cost);
  EXPECT_EQ(sut.router().policy, Policy::eldr_cost);
  EXPECT_EQ(sut.router().max_inflight, sut.request_map_capacity);
  // [pool] spelled out, no servers: this node routes alone.
  EXPECT_FALSE(sut.pool.enabled());
  EXPECT_EQ(sut.pool.name, defaults.pool.name);
  EXPECT_EQ(sut.pool.snapshot_ms, defaults.pool.snapshot_ms);
  EXPECT_EQ(sut.pool.peer_timeout_ms, defaults.pool.peer_timeout_ms);
  EXPECT_EQ(sut.pool.gateway_timeout_ms, defaults.pool.gateway_timeout_ms);
  EXPECT_EQ(sut.pool.max_peer_bookings, defaults.pool.max_peer_bookings);
  EXPECT_EQ(sut.pool.anticipate, defaults.pool.anticipate);
  EXPECT_TRUE(sut.pool.compact_bookings);
  EXPECT_EQ(sut.pool.compact_bookings, defaults.pool.compact_bookings);
}

TEST(daemon_config, the_pool_table_takes_urls_as_a_list_or_an_array) {
  DaemonConfig sut;
  ASSERT_TRUE(parse_config_toml(R"(
[pool]
nats = "nats://a:4222, nats://b:4222"
node = "gpu-7"
name = "decode_a"
)",
                                sut)
                  .is_ok());
  EXPECT_EQ(sut.pool.nats, (std::vector<std::string>{"nats://a:4222", "nats://b:4222"}));
  EXPECT_TRUE(sut.validate().is_ok()) << sut.validate().to_string();
  // In a pool the router's records also hold the peers' bookings and the twins.
  EXPECT_EQ(sut.router().max_inflight,
            sut.request_map_capacity + sut.pool.max_peer_bookings + kMaxPeerTwins);
  ASSERT_TRUE(parse_config_toml("[pool]\nnats = [\"nats://c:1\"]\n", sut).is_ok());
  EXPECT_EQ(sut.pool.nats, std::vector<std::string>{"nats://c:1"});
}

TEST(daemon_config, bad_pool_values_name_their_key) {
  DaemonConfig sut;
  Status s = parse_config_toml("[pool]\nsnapshot_ms = 5000\n", sut);
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("pool.snapshot_ms"), std::string::npos) << s.message();
  s = parse_config_toml("[pool]\nbogus = 1\n", sut);
  EXPECT_NE(s.message().find("pool.bogus"), std::string::npos) << s.message();
  s = parse_config_toml("[pool]\nbookings = \"tiny\"\n", sut);
  EXPECT_NE(s.message().find("pool.bookings"), std::string::npos) << s.message();
  DaemonConfig full;
  ASSERT_TRUE(parse_config_toml("[pool]\nbookings = \"full\"\n", full).is_ok());
  EXPECT_FALSE(full.pool.compact_bookings);
  DaemonConfig dotted;
  ASSERT_TRUE(parse_config_toml("[pool]\nnats = \"nats://a:1\"\nname = \"a.b\"\n", dotted).is_ok());
  s = dotted.validate();
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("pool.name"), std::string::npos) << s.message();
  DaemonConfig hasty;
  ASSERT_TRUE(
      parse_config_toml(
          "[pool]\nnats = \"nats://a:1\"\nsnapshot_ms = 800\npeer_timeout_ms = 1000\n", hasty)
          .is_ok());
  EXPECT_NE(hasty.validate().message().find("peer_timeout_ms"), std::string::npos);
  // A gateway beats every second: a timeout under two beats is refused.
  DaemonConfig twitchy;
  const Status t = parse_config_toml("[pool]\ngateway_timeout_ms = 1500\n", twitchy);
  EXPECT_FALSE(t.is_ok());
  EXPECT_NE(t.message().find("gateway_timeout_ms"), std::string::npos) << t.message();
}

TEST(daemon_config, a_node_answers_under_inbox_prefixes_only) {
  DaemonConfig sut;
  ASSERT_TRUE(parse_config_toml("[pool]\nnats = \"nats://a:1\"\n"
                                "reply_prefixes = [\"_INBOX\", \"_GW.a\"]\n",
                                sut)
                  .is_ok());
  EXPECT_EQ(sut.pool.reply_prefixes, (std::vector<std::string>{"_INBOX", "_GW.a"}));
  EXPECT_TRUE(sut.validate().is_ok());
  // The pool's own subjects, the server's, wildcards: no inbox.
  for (const char* bad : {"eldr.p", "$KV", "_INBOX.>", "_INBOX."}) {
    DaemonConfig c;
    ASSERT_TRUE(parse_config_toml(std::string("[pool]\nnats = \"nats://a:1\"\n"
                                              "reply_prefixes = [\"") +
                                      bad + "\"]\n",
                                  c)
                    .is_ok());
    const Status s = c.validate();
    EXPECT_FALSE(s.is_ok()) << bad;
    EXPECT_NE(s.message().find("pool.reply_prefixes"), std::string::npos) << s.message();
  }
  DaemonConfig single;
  const Status s = parse_config_toml("[pool]\nreply_prefixes = \"_INBOX\"\n", single);
  EXPECT_NE(s.message().find("pool.reply_prefixes"), std::string::npos) << s.message();
}

TEST(daemon_config, the_router_table_sets_the_step_constants_all_or_none) {
  DaemonConfig sut;
  Status s = parse_config_toml(R"(
policy = "eldr_cost"
[router]
t0_ms = 2.5
tseq_ms = 0.05
alpha_us = 2
max_batch = 48
fit_step_cost = false
)",
                               sut);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  ASSERT_TRUE(sut.validate().is_ok());
  ASSERT_TRUE(sut.router_step.step_cost.has_value());
  EXPECT_EQ(*sut.router().step_cost, (StepCost{2.5, 0.05, 2.0, 48}));
  EXPECT_FALSE(sut.router().fit_step_cost);
  // The older policies stay selectable.
  for (const char* name : {"eldr", "eldr_guard", "round_robin", "random", "jsq", "p2c"}) {
    DaemonConfig c;
    ASSERT_TRUE(parse_config_toml(std::string("policy = \"") + name + "\"", c).is_ok()) << name;
    EXPECT_STREQ(policy_name(c.policy), name);
  }
  const std::pair<const char*, const char*> bad[] = {
      {"[router]\nt0_ms = 3.0", "missing router.tseq_ms, router.alpha_us, router.max_batch"},
      {"[router]\nt0_ms = 3\ntseq_ms = 0.03\nalpha_us = 1.78", "missing router.max_batch"},
      {"[router]\nt0_ms = -1", "router.t0_ms"},
      {"[router]\nalpha_us = \"fast\"", "router.alpha_us"},
      {"[router]\nt0_ms = inf", "router.t0_ms"},
      {"[router]\nmax_batch = 0", "router.max_batch"},
      {"[router]\nt0 = 3", "router.t0"},
      {"router = 1", "router"},
  };
  for (const auto& [text, key] : bad) {
    DaemonConfig c;
    s = parse_config_toml(text, c);
    EXPECT_EQ(s.code(), Errc::invalid_argument) << text;
    EXPECT_NE(s.message().find(key), std::string::npos) << text << " -> " << s.message();
  }
}

TEST(daemon_config, every_key_is_read) {
  DaemonConfig sut;
  const Status s = parse_config_toml(R"(
instance = "node-7"
table = "/var/lib/eldr/table.eldr"
policy = "eldr_guard"
tau = 0.2
min2_band = true
seed = 9
max_clients = 8
ring_bytes = 131072
decision_slots = 1024
max_workers = 64
mode = "0640"
group = "eldr"
worker_report_timeout_ms = 1500
request_map_capacity = 100
block_size = 32
signature_cache_mb = 8
metrics_port = 9464
log_level = "debug"
[refit]
enabled = true
window = 512
period_s = 60
min_samples = 128
[predictor]
save_interval_s = 0
save_path = "/var/lib/eldr/table.eldr"
save_on_exit = false
)",
                                     sut);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  EXPECT_EQ(sut.instance, "node-7");
  EXPECT_EQ(sut.policy, Policy::eldr_guard);
  EXPECT_FLOAT_EQ(sut.tau, 0.2f);
  EXPECT_TRUE(sut.min2_band);
  EXPECT_EQ(sut.ring_bytes, 131072u);
  EXPECT_EQ(sut.mode, 0640u);
  EXPECT_EQ(sut.worker_report_timeout_ms, 1500u);
  EXPECT_EQ(sut.block_size, 32u);
  EXPECT_EQ(sut.metrics_port, 9464u);
  EXPECT_EQ(sut.log_level, LogLevel::debug);
  EXPECT_TRUE(sut.refit.enabled);
  EXPECT_EQ(sut.refit.window, 512u);
  EXPECT_EQ(sut.refit.period_s, 60u);
  EXPECT_EQ(sut.predictor.save_interval_s, 0u);
  EXPECT_EQ(sut.predictor.save_path, "/var/lib/eldr/table.eldr");
  EXPECT_FALSE(sut.predictor.save_on_exit);
  EXPECT_EQ(sut.predictor.target("t.eldr"), "/var/lib/eldr/table.eldr");
  EXPECT_TRUE(sut.validate().is_ok()) << sut.validate().to_string();
  EXPECT_EQ(sut.segment().mode, 0640u);
  EXPECT_EQ(sut.router().policy, Policy::eldr_guard);
}

TEST(daemon_config, the_pool_takes_tls_and_credentials_by_file_and_checks_them) {
  DaemonConfig sut;
  ASSERT_TRUE(parse_config_toml(R"(
[pool]
nats = "nats://a:4222"
tls_ca = "/etc/eldr/nats-ca.pem"
tls_cert = "/etc/eldr/node.pem"
tls_key = "/etc/eldr/node.key"
user = "node"
password_file = "/etc/eldr/nats.pw"
)",
                                sut)
                  .is_ok());
  EXPECT_EQ(sut.pool.auth.ca_file, "/etc/eldr/nats-ca.pem");
  EXPECT_EQ(sut.pool.auth.cert_file, "/etc/eldr/node.pem");
  EXPECT_EQ(sut.pool.auth.key_file, "/etc/eldr/node.key");
  EXPECT_EQ(sut.pool.auth.user, "node");
  EXPECT_EQ(sut.pool.auth.password_file, "/etc/eldr/nats.pw");
  // Files that are not there: validate names the section and the file.
  const Status s = sut.validate();
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("[pool]"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("/etc/eldr/"), std::string::npos) << s.message();
  DaemonConfig other;
  ASSERT_TRUE(parse_config_toml("[pool]\nnats = \"nats://a:1\"\ncreds = \"/x.creds\"\n"
                                "token_file = \"/t\"\n",
                                other)
                  .is_ok());
  EXPECT_EQ(other.validate().code(), Errc::invalid_argument);  // two kinds of credentials
}

TEST(daemon_config, unknown_keys_and_bad_values_are_errors_that_name_the_key) {
  const std::pair<const char*, const char*> cases[] = {
      {"instanse = \"x\"", "instanse"},
      {"policy = \"fastest\"", "policy"},
      {"ring_bytes = -1", "ring_bytes"},
      {"ring_bytes = \"big\"", "ring_bytes"},
      {"metrics_port = 70000", "metrics_port"},
      {"mode = \"rw\"", "mode"},
      {"log_level = \"loud\"", "log_level"},
      {"[refit]\nperiod = 5", "refit.period"},
      {"refit = 3", "refit"},
      {"[predictor]\nsave_interval = 5", "predictor.save_interval"},
      {"[predictor]\nsave_interval_s = -5", "predictor.save_interval_s"},
      {"tau = ", "config:1"},
  };
  for (const auto& [text, key] : cases) {
    DaemonConfig sut;
    const Status s = parse_config_toml(text, sut);
    EXPECT_EQ(s.code(), Errc::invalid_argument) << text;
    EXPECT_NE(s.message().find(key), std::string::npos) << text << " -> " << s.message();
  }
}

TEST(daemon_config, validate_rejects_inconsistent_settings) {
  DaemonConfig sut;
  sut.ring_bytes = 100000;  // not a power of two
  EXPECT_FALSE(sut.validate().is_ok());
  sut = {};
  sut.instance = "bad/name";
  EXPECT_FALSE(sut.validate().is_ok());
  sut = {};
  sut.table = "t.eldr";
  sut.synthetic_table = "qwen3-30b-a3b:4";
  EXPECT_FALSE(sut.validate().is_ok());
}

TEST(daemon_config, a_missing_file_is_an_io_error) {
  DaemonConfig sut;
  EXPECT_EQ(load_config_file("/nonexistent/eldrd.toml", sut).code(), Errc::io);
}

TEST(synthetic_table_spec, presets_and_explicit_geometries_parse) {
  auto preset = parse_synthetic_table_spec("qwen3-30b-a3b:16");
  ASSERT_TRUE(preset.is_ok()) << preset.status().to_string();
  EXPECT_EQ(preset->geometry.layers, 48u);
  EXPECT_EQ(preset->workers, 16u);
  auto explicit_geometry = parse_synthetic_table_spec("8x16x2:4");
  ASSERT_TRUE(explicit_geometry.is_ok());
  EXPECT_EQ(explicit_geometry->geometry, (Geometry{8, 16, 2}));
  for (const char* bad :
       {"qwen3-30b-a3b", "nomodel:4", "8x16:4", "8x16x2:0", "8x16x32:4", ":4", "8x16x2:abc"})
    EXPECT_FALSE(parse_synthetic_table_spec(bad).is_ok()) << bad;
}

}  // namespace
}  // namespace eldr::sidecar
