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
  EXPECT_TRUE(sut.validate().is_ok()) << sut.validate().to_string();
  EXPECT_EQ(sut.segment().mode, 0640u);
  EXPECT_EQ(sut.router().policy, Policy::eldr_guard);
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
