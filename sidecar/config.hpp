// eldrd configuration: a TOML file (sidecar/eldrd.toml documents every key)
// overridden by command-line flags. Unknown keys and bad values are errors
// that name the key, never silently ignored.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "eldr/pool/nats_auth.hpp"
#include "eldr/router.hpp"
#include "eldr/shm.hpp"
#include "eldr/signature_cache.hpp"
#include "eldr/status.hpp"
#include "eldr/step_model.hpp"

namespace eldr::sidecar {

enum class LogLevel : uint8_t { debug = 0, info = 1, warn = 2, error = 3 };
const char* log_level_name(LogLevel level) noexcept;

struct RefitConfig {
  bool enabled = false;
  uint32_t window = 4096;      // most recent dense footprints kept for the refit
  uint32_t period_s = 300;     // seconds between refits
  uint32_t min_samples = 256;  // no refit before this many footprints were seen
};

// [predictor]: saving what the table's footprint predictor learns online.
struct PredictorConfig {
  uint32_t save_interval_s = 300;  // 0: no periodic save
  std::string save_path;           // empty: the table file the daemon loaded
  bool save_on_exit = true;        // on a clean stop (SIGTERM, SIGINT)
  // Where saves go for this config: save_path, else `table`; empty: nowhere.
  std::string target(const std::string& table) const {
    return save_path.empty() ? table : save_path;
  }
};

// [router]: the step model of the eldr_cost policy.
struct RouterConfig {
  // t0_ms, tseq_ms, alpha_us and max_batch, all or none. None: the table's
  // constants, else the preset of the table's geometry (step_model_for).
  std::optional<StepCost> step_cost;
  bool fit_step_cost = true;  // refine them from the engines' step-time reports
};

// [pool]: this node is one of several eldrd nodes routing one decode pool
// together over NATS (multi-node mode).
struct PoolConfig {
  std::vector<std::string> nats;    // server URLs; empty: this node routes alone
  pool::NatsAuth auth;              // TLS and credentials for those servers
  std::string node;                 // this node's name; empty: the host name
  std::string name = "default";     // the pool's name
  uint32_t snapshot_ms = 500;       // our in-flight requests, for every node, this often
  uint32_t peer_timeout_ms = 3000;  // a node silent this long: its bookings expire
  // A gateway (pool handle) silent this long (it beats every second): the
  // requests it routed through this node are released.
  uint32_t gateway_timeout_ms = 10000;
  // The inbox prefixes this node answers gateways' requests under (a reply
  // subject is "<prefix>.<more>"); none: libnats' "_INBOX". Any other reply
  // subject ($KV., $JS., eldr., ...) is refused: not answered, not routed.
  std::vector<std::string> reply_prefixes;
  uint32_t max_peer_bookings = 1u << 16;  // all peers' requests in flight, together
  bool anticipate = true;                 // PeerTwins: count the peers' picks not heard of yet
  // Bookings carry the request's demand codes (compact, O(cost cells)), or
  // its whole footprint (full: what nodes before compact bookings read, for
  // a rolling upgrade; the refit holder then also fits on peers' requests).
  bool compact_bookings = true;
  // Copies of the pool's table bucket (JetStream key-value) when a node
  // creates it; 0: as many as there are NATS servers, at most 3.
  uint32_t table_replicas = 0;
  bool enabled() const noexcept { return !nats.empty(); }
};

// Twins of anticipated peer picks held at once at most (router records).
inline constexpr uint32_t kMaxPeerTwins = 4096;

// The request map's bound: also the router's request records (max_inflight).
inline constexpr uint32_t kMaxRequestMapCapacity = 1u << 24;

struct DaemonConfig {
  std::string instance = "default";
  std::string table;            // FlatBuffers table file; empty: synthetic_table
  std::string synthetic_table;  // "MODEL:K" (preset or LxExk), empty = the embedded default
  Policy policy = Policy::eldr_cost;
  float tau = -1.0f;  // < 0: the table's default_tau
  bool min2_band = false;
  uint64_t seed = 0;
  uint32_t max_clients = 32;
  uint32_t ring_bytes = 1u << 20;
  uint32_t decision_slots = 1u << 16;
  uint32_t max_workers = 256;
  uint32_t mode = 0660;
  std::string group;
  std::string lock_dir = "/dev/shm";
  uint32_t worker_report_timeout_ms = 0;  // 0 = reports never expire
  uint32_t request_map_capacity = 1u << 16;
  uint32_t block_size = 16;          // KV block size of the engines' block-form footprints
  uint32_t signature_cache_mb = 64;  // block rows kept for hash-only blocks
  uint32_t metrics_port = 0;         // 0 = off; always bound to 127.0.0.1
  LogLevel log_level = LogLevel::info;
  RefitConfig refit;
  RouterConfig router_step;   // [router]
  PoolConfig pool;            // [pool]
  PredictorConfig predictor;  // [predictor]

  Status validate() const;
  shm::SegmentConfig segment() const;
  RouterOptions router() const;
};

// Parses a TOML document into `config` (keys present override its values).
Status parse_config_toml(std::string_view text, DaemonConfig& config,
                         std::string_view source = "config");
Status load_config_file(const std::string& path, DaemonConfig& config);

// "qwen3-30b-a3b:16" or "8x16x2:4" -> geometry and worker count.
struct SyntheticTableSpec {
  std::string model;
  Geometry geometry;
  uint32_t workers = 0;
};
Result<SyntheticTableSpec> parse_synthetic_table_spec(std::string_view spec);
inline constexpr std::string_view kDefaultSyntheticTable = "qwen3-30b-a3b:8";

}  // namespace eldr::sidecar
