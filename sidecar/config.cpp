#include "config.hpp"

#include <toml++/toml.h>

#include <cctype>
#include <charconv>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include "eldr/pool/inbox.hpp"
#include "eldr/pool/nats_link.hpp"
#include "eldr/pool/peer_wire.hpp"

namespace eldr::sidecar {

using namespace ::eldr::pool;

namespace {

Status bad_value(std::string_view source, std::string_view key, const std::string& why) {
  return {Errc::invalid_argument, std::string(source) + ": key '" + std::string(key) + "': " + why};
}

// Each reader checks the node's TOML type and range and names the key on error.
Status read_string(std::string_view source, std::string_view key, const toml::node& node,
                   std::string& out) {
  const auto v = node.value<std::string>();
  if (!node.is_string() || !v) return bad_value(source, key, "expected a string");
  out = *v;
  return Status::ok();
}

Status read_bool(std::string_view source, std::string_view key, const toml::node& node, bool& out) {
  if (!node.is_boolean()) return bad_value(source, key, "expected true or false");
  out = *node.value<bool>();
  return Status::ok();
}

template <class T>
Status read_uint(std::string_view source, std::string_view key, const toml::node& node, T& out,
                 uint64_t lo = 0, uint64_t hi = std::numeric_limits<T>::max()) {
  if (!node.is_integer()) return bad_value(source, key, "expected an integer");
  const int64_t v = *node.value<int64_t>();
  if (v < 0 || static_cast<uint64_t>(v) < lo || static_cast<uint64_t>(v) > hi)
    return bad_value(
        source, key,
        std::to_string(v) + " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  out = static_cast<T>(v);
  return Status::ok();
}

Status read_float(std::string_view source, std::string_view key, const toml::node& node,
                  float& out) {
  if (!node.is_floating_point() && !node.is_integer())
    return bad_value(source, key, "expected a number");
  out = static_cast<float>(*node.value<double>());
  return Status::ok();
}

// mode: an integer (write it as 0o660) or an octal string ("0660").
Status read_mode(std::string_view source, const toml::node& node, uint32_t& out) {
  if (node.is_integer()) return read_uint(source, "mode", node, out, 0, 0777);
  std::string text;
  ELDR_TRY(read_string(source, "mode", node, text));
  uint32_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v, 8);
  if (text.empty() || ec != std::errc{} || end != text.data() + text.size() || v > 0777)
    return bad_value(source, "mode", "expected an octal mode such as \"0660\", got '" + text + "'");
  out = v;
  return Status::ok();
}

Status read_refit(std::string_view source, const toml::table& table, RefitConfig& refit) {
  for (const auto& [k, node] : table) {
    const std::string key = "refit." + std::string(k.str());
    if (k == "enabled") {
      ELDR_TRY(read_bool(source, key, node, refit.enabled));
    } else if (k == "window") {
      ELDR_TRY(read_uint(source, key, node, refit.window, 16, 1u << 20));
    } else if (k == "period_s") {
      ELDR_TRY(read_uint(source, key, node, refit.period_s, 1, 86400 * 7));
    } else if (k == "min_samples") {
      ELDR_TRY(read_uint(source, key, node, refit.min_samples, 1, 1u << 20));
    } else {
      return bad_value(source, key, "unknown key");
    }
  }
  return Status::ok();
}

Status read_predictor(std::string_view source, const toml::table& table,
                      PredictorConfig& predictor) {
  for (const auto& [k, node] : table) {
    const std::string key = "predictor." + std::string(k.str());
    if (k == "save_interval_s") {
      ELDR_TRY(read_uint(source, key, node, predictor.save_interval_s, 0, 86400 * 7));
    } else if (k == "save_path") {
      ELDR_TRY(read_string(source, key, node, predictor.save_path));
    } else if (k == "save_on_exit") {
      ELDR_TRY(read_bool(source, key, node, predictor.save_on_exit));
    } else {
      return bad_value(source, key, "unknown key");
    }
  }
  return Status::ok();
}

Status read_double(std::string_view source, std::string_view key, const toml::node& node,
                   double& out) {
  if (!node.is_floating_point() && !node.is_integer())
    return bad_value(source, key, "expected a number");
  out = *node.value<double>();
  if (!std::isfinite(out) || out < 0.0)
    return bad_value(source, key, "must be a finite number >= 0, got " + std::to_string(out));
  return Status::ok();
}

// [router]: the step constants come all together or not at all, so a
// half-written table never mixes the operator's numbers with a preset's.
Status read_router(std::string_view source, const toml::table& table, RouterConfig& router) {
  StepCost cost;
  bool given[4] = {false, false, false, false};
  static constexpr const char* kStepKeys[4] = {"t0_ms", "tseq_ms", "alpha_us", "max_batch"};
  for (const auto& [k, node] : table) {
    const std::string key = "router." + std::string(k.str());
    if (k == "t0_ms") {
      ELDR_TRY(read_double(source, key, node, cost.t0_ms));
      given[0] = true;
    } else if (k == "tseq_ms") {
      ELDR_TRY(read_double(source, key, node, cost.tseq_ms));
      given[1] = true;
    } else if (k == "alpha_us") {
      ELDR_TRY(read_double(source, key, node, cost.alpha_us));
      given[2] = true;
    } else if (k == "max_batch") {
      ELDR_TRY(read_uint(source, key, node, cost.max_batch, 1, 1u << 20));
      given[3] = true;
    } else if (k == "fit_step_cost") {
      ELDR_TRY(read_bool(source, key, node, router.fit_step_cost));
    } else {
      return bad_value(source, key, "unknown key");
    }
  }
  const int count = given[0] + given[1] + given[2] + given[3];
  if (count == 0) {
    router.step_cost.reset();
    return Status::ok();
  }
  if (count < 4) {
    std::string missing;
    for (int i = 0; i < 4; ++i)
      if (!given[i]) missing += std::string(missing.empty() ? "" : ", ") + "router." + kStepKeys[i];
    return {Errc::invalid_argument,
            std::string(source) +
                ": the step constants router.t0_ms, router.tseq_ms, router.alpha_us and "
                "router.max_batch come all together or not at all (missing " +
                missing + ")"};
  }
  router.step_cost = cost;
  return Status::ok();
}

// nats: "URL[,URL...]" or an array of URLs.
Status read_urls(std::string_view source, std::string_view key, const toml::node& node,
                 std::vector<std::string>& out) {
  out.clear();
  if (const toml::array* a = node.as_array()) {
    for (const toml::node& u : *a) {
      std::string url;
      ELDR_TRY(read_string(source, key, u, url));
      out.push_back(url);
    }
    return Status::ok();
  }
  std::string text;
  ELDR_TRY(read_string(source, key, node, text));
  out = split_urls(text);
  return Status::ok();
}

// The TLS and credentials key `name` names, or null.
const pool::NatsAuthField* auth_field(std::string_view name) {
  for (const pool::NatsAuthField& f : pool::kNatsAuthFields)
    if (f.key == name) return &f;
  return nullptr;
}

Status read_pool(std::string_view source, const toml::table& table, PoolConfig& pool) {
  for (const auto& [k, node] : table) {
    const std::string key = "pool." + std::string(k.str());
    if (k == "nats") {
      ELDR_TRY(read_urls(source, key, node, pool.nats));
    } else if (k == "node") {
      ELDR_TRY(read_string(source, key, node, pool.node));
    } else if (k == "name") {
      ELDR_TRY(read_string(source, key, node, pool.name));
    } else if (k == "snapshot_ms") {
      ELDR_TRY(read_uint(source, key, node, pool.snapshot_ms, 50, 1000));
    } else if (k == "peer_timeout_ms") {
      ELDR_TRY(read_uint(source, key, node, pool.peer_timeout_ms, 200, 600000));
    } else if (k == "gateway_timeout_ms") {
      ELDR_TRY(read_uint(source, key, node, pool.gateway_timeout_ms, 2000, 3600000));
    } else if (k == "max_peer_bookings") {
      ELDR_TRY(read_uint(source, key, node, pool.max_peer_bookings, 1, 1u << 22));
    } else if (k == "anticipate") {
      ELDR_TRY(read_bool(source, key, node, pool.anticipate));
    } else if (k == "table_replicas") {
      ELDR_TRY(read_uint(source, key, node, pool.table_replicas, 0, 5));
    } else if (k == "reply_prefixes") {
      const toml::array* a = node.as_array();
      if (a == nullptr) return bad_value(source, key, "expected an array of inbox prefixes");
      pool.reply_prefixes.clear();
      for (const toml::node& p : *a) {
        std::string prefix;
        ELDR_TRY(read_string(source, key, p, prefix));
        pool.reply_prefixes.push_back(prefix);
      }
    } else if (const auto* f = auth_field(k.str())) {
      ELDR_TRY(read_string(source, key, node, pool.auth.*f->member));
    } else if (k == "bookings") {
      std::string text;
      ELDR_TRY(read_string(source, key, node, text));
      if (text != "compact" && text != "full")
        return bad_value(source, key, "must be \"compact\" or \"full\"");
      pool.compact_bookings = text == "compact";
    } else {
      return bad_value(source, key, "unknown key");
    }
  }
  return Status::ok();
}

}  // namespace

const char* log_level_name(LogLevel level) noexcept {
  switch (level) {
    case LogLevel::debug:
      return "debug";
    case LogLevel::info:
      return "info";
    case LogLevel::warn:
      return "warn";
    case LogLevel::error:
      return "error";
  }
  return "?";
}

Status parse_config_toml(std::string_view text, DaemonConfig& c, std::string_view source) {
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    std::ostringstream msg;
    msg << source << ":" << e.source().begin.line << ":" << e.source().begin.column << ": "
        << e.description();
    return {Errc::invalid_argument, msg.str()};
  }
  for (const auto& [k, node] : root) {
    const std::string_view key = k.str();
    if (key == "instance") {
      ELDR_TRY(read_string(source, key, node, c.instance));
    } else if (key == "table") {
      ELDR_TRY(read_string(source, key, node, c.table));
    } else if (key == "synthetic_table") {
      ELDR_TRY(read_string(source, key, node, c.synthetic_table));
    } else if (key == "policy") {
      std::string name;
      ELDR_TRY(read_string(source, key, node, name));
      const auto p = parse_policy(name);
      if (!p) return bad_value(source, key, "unknown policy '" + name + "'");
      c.policy = *p;
    } else if (key == "tau") {
      ELDR_TRY(read_float(source, key, node, c.tau));
    } else if (key == "min2_band") {
      ELDR_TRY(read_bool(source, key, node, c.min2_band));
    } else if (key == "seed") {
      ELDR_TRY(read_uint(source, key, node, c.seed, 0, std::numeric_limits<int64_t>::max()));
    } else if (key == "max_clients") {
      ELDR_TRY(read_uint(source, key, node, c.max_clients, 1, 4096));
    } else if (key == "ring_bytes") {
      ELDR_TRY(read_uint(source, key, node, c.ring_bytes, 1u << 16, 1u << 30));
    } else if (key == "decision_slots") {
      ELDR_TRY(read_uint(source, key, node, c.decision_slots, 64, 1u << 24));
    } else if (key == "max_workers") {
      ELDR_TRY(read_uint(source, key, node, c.max_workers, 1, 65536));
    } else if (key == "mode") {
      ELDR_TRY(read_mode(source, node, c.mode));
    } else if (key == "group") {
      ELDR_TRY(read_string(source, key, node, c.group));
    } else if (key == "lock_dir") {
      ELDR_TRY(read_string(source, key, node, c.lock_dir));
    } else if (key == "worker_report_timeout_ms") {
      ELDR_TRY(read_uint(source, key, node, c.worker_report_timeout_ms, 0, 86400000));
    } else if (key == "request_map_capacity") {
      ELDR_TRY(read_uint(source, key, node, c.request_map_capacity, 1, kMaxRequestMapCapacity));
    } else if (key == "block_size") {
      ELDR_TRY(read_uint(source, key, node, c.block_size, 1, kMaxBlockSize));
    } else if (key == "signature_cache_mb") {
      ELDR_TRY(read_uint(source, key, node, c.signature_cache_mb, 1, 1u << 20));
    } else if (key == "metrics_port") {
      ELDR_TRY(read_uint(source, key, node, c.metrics_port, 0, 65535));
    } else if (key == "log_level") {
      std::string name;
      ELDR_TRY(read_string(source, key, node, name));
      bool found = false;
      for (LogLevel l : {LogLevel::debug, LogLevel::info, LogLevel::warn, LogLevel::error})
        if (name == log_level_name(l)) {
          c.log_level = l;
          found = true;
        }
      if (!found) return bad_value(source, key, "expected debug, info, warn or error");
    } else if (key == "router") {
      if (!node.is_table()) return bad_value(source, key, "expected a [router] table");
      ELDR_TRY(read_router(source, *node.as_table(), c.router_step));
    } else if (key == "refit") {
      if (!node.is_table()) return bad_value(source, key, "expected a [refit] table");
      ELDR_TRY(read_refit(source, *node.as_table(), c.refit));
    } else if (key == "predictor") {
      if (!node.is_table()) return bad_value(source, key, "expected a [predictor] table");
      ELDR_TRY(read_predictor(source, *node.as_table(), c.predictor));
    } else if (key == "pool") {
      if (!node.is_table()) return bad_value(source, key, "expected a [pool] table");
      ELDR_TRY(read_pool(source, *node.as_table(), c.pool));
    } else {
      return bad_value(source, key, "unknown key");
    }
  }
  return Status::ok();
}

Status load_config_file(const std::string& path, DaemonConfig& config) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {Errc::io, "cannot open config file '" + path + "'"};
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return {Errc::io, "cannot read config file '" + path + "'"};
  return parse_config_toml(text.str(), config, path);
}

Status DaemonConfig::validate() const {
  ELDR_TRY(shm::validate_instance_name(instance));
  if (ring_bytes < (1u << 16) || (ring_bytes & (ring_bytes - 1)) != 0)
    return {Errc::invalid_argument,
            "ring_bytes must be a power of two >= 65536, got " + std::to_string(ring_bytes)};
  if ((decision_slots & (decision_slots - 1)) != 0)
    return {Errc::invalid_argument,
            "decision_slots must be a power of two, got " + std::to_string(decision_slots)};
  if (tau > 2.0f || tau != tau)
    return {Errc::invalid_argument, "tau must be in [0, 2] (or negative for the table's default)"};
  if (!table.empty() && !synthetic_table.empty())
    return {Errc::invalid_argument, "give either table or synthetic_table, not both"};
  if (!synthetic_table.empty()) {
    auto spec = parse_synthetic_table_spec(synthetic_table);
    if (!spec) return spec.status();
  }
  if (request_map_capacity == 0 || request_map_capacity > kMaxRequestMapCapacity)
    return {Errc::invalid_argument,
            "request_map_capacity must be in [1, " + std::to_string(kMaxRequestMapCapacity) + "]"};
  if (router_step.step_cost)
    if (Status s = router_step.step_cost->validate(); !s)
      return {Errc::invalid_argument, "[router] " + s.message()};
  if (refit.enabled && refit.min_samples > refit.window)
    return {Errc::invalid_argument, "refit.min_samples must not exceed refit.window"};
  if (pool.enabled()) {
    for (const std::string& url : pool.nats)
      if (url.empty() || url.find_first_of(" \t\n") != std::string::npos)
        return {Errc::invalid_argument,
                "pool.nats: '" + pool::redact_url(url) + "' is not a server URL"};
    ELDR_TRY(validate_pool_name("pool.name", pool.name));
    if (!pool.node.empty()) ELDR_TRY(validate_pool_name("pool.node", pool.node));
    if (Status s = pool.auth.check(); !s) return {s.code(), "[pool] " + s.message()};
    if (auto replies = ReplyPolicy::create(pool.reply_prefixes); !replies)
      return {replies.status().code(), "pool.reply_prefixes: " + replies.status().message()};
    if (pool.peer_timeout_ms < 2 * pool.snapshot_ms)
      return {Errc::invalid_argument,
              "pool.peer_timeout_ms must be at least twice pool.snapshot_ms (a live node "
              "is heard of at least every snapshot)"};
  }
  return Status::ok();
}

shm::SegmentConfig DaemonConfig::segment() const {
  shm::SegmentConfig s;
  s.instance = instance;
  s.max_clients = max_clients;
  s.ring_bytes = ring_bytes;
  s.decision_slots = decision_slots;
  s.max_workers = max_workers;
  s.mode = mode;
  s.group = group;
  s.lock_dir = lock_dir;
  return s;
}

RouterOptions DaemonConfig::router() const {
  RouterOptions o;
  o.policy = policy;
  o.tau = tau;
  o.min2_band = min2_band;
  o.seed = seed;
  o.max_workers = max_workers;
  o.step_cost = router_step.step_cost;
  o.fit_step_cost = router_step.fit_step_cost;
  // One router record per request the map can hold: every request the
  // daemon completes by id is tracked, never "untracked".
  o.max_inflight = request_map_capacity;
  // In a pool the same records also hold the peers' bookings and the twins.
  if (pool.enabled()) o.max_inflight += pool.max_peer_bookings + kMaxPeerTwins;
  return o;
}

Result<SyntheticTableSpec> parse_synthetic_table_spec(std::string_view spec) {
  const auto bad = [&](const std::string& why) {
    return Status{Errc::invalid_argument,
                  "synthetic table '" + std::string(spec) + "': " + why +
                      " (expected MODEL:K, MODEL a preset such as qwen3-30b-a3b or LxExk)"};
  };
  const size_t colon = spec.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return bad("missing ':K'");
  SyntheticTableSpec out;
  out.model = std::string(spec.substr(0, colon));
  const std::string_view k = spec.substr(colon + 1);
  const auto [kend, kec] = std::from_chars(k.data(), k.data() + k.size(), out.workers);
  if (k.empty() || kec != std::errc{} || kend != k.data() + k.size() || out.workers == 0 ||
      out.workers > kMaxClusters)
    return bad("K must be an integer in [1, " + std::to_string(kMaxClusters) + "]");
  if (auto preset = find_preset(out.model)) {
    out.geometry = *preset;
    return out;
  }
  // LxExk
  uint32_t dims[3] = {0, 0, 0};
  const char* p = out.model.data();
  const char* end = p + out.model.size();
  for (int i = 0; i < 3; ++i) {
    const auto [next, ec] = std::from_chars(p, end, dims[i]);
    if (ec != std::errc{}) return bad("unknown model '" + out.model + "'");
    p = next;
    if (i < 2) {
      if (p == end || (*p != 'x' && *p != 'X')) return bad("unknown model '" + out.model + "'");
      ++p;
    }
  }
  if (p != end) return bad("unknown model '" + out.model + "'");
  out.geometry = {dims[0], dims[1], dims[2]};
  if (Status s = out.geometry.validate(); !s) return bad(s.message());
  if (out.geometry.top_k == 0 || out.geometry.top_k > out.geometry.experts)
    return bad("k must be in [1, E]");
  return out;
}

}  // namespace eldr::sidecar
