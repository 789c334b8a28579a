// PoolNode's pool table and refit lease, both on the table watcher's thread:
// table_loop() watches the pool's table bucket (eldr_<pool>) and swaps each
// new revision into the service at the pool's epoch, note_table_error()
// keeps the last failure for eldr status, lease_tick() takes or renews the
// pool's refit lease, and publish_table() installs a refit as the pool's
// table while this node holds it. pool_node.cpp holds the rest: the link,
// the parts that speak over it, maintenance.
#include <algorithm>
#include <bit>
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "eldr/pool/pool_table.hpp"
#include "log.hpp"
#include "pool_node.hpp"

namespace eldr::sidecar {

// ---- the pool's table --------------------------------------------------------------

void PoolNode::note_table_error(const Status& s) {
  const uint64_t n = m_table_errors.fetch_add(1) + 1;
  {
    std::lock_guard lock(m_table_mutex);
    m_table_error = s.to_string();
  }
  if (std::has_single_bit(n))
    ELDR_LOG(warn, "pool: pool table: %s [%llu so far]", s.to_string().c_str(),
             static_cast<unsigned long long>(n));
}

void PoolNode::table_loop() {
  const auto pause = [this](int ms) {
    for (int waited = 0; waited < ms && !m_stop.load(); waited += 20)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  };
  const std::string bucket = pool_bucket(m_config.name);
  std::unique_ptr<KeyValue> kv;
  bool watching = false;
  uint64_t reconnects_seen = 0;
  uint64_t refused = 0;  // the last revision this node's router refused (another geometry)
  while (!m_stop.load()) {
    if (!m_link->connected()) {
      pause(100);
      continue;
    }
    if (!kv) {
      auto opened = m_link->key_value(bucket, static_cast<int>(m_config.table_replicas));
      if (!opened) {
        const Status& why = opened.status();
        note_table_error(why.message().find("No responders") == std::string::npos
                             ? why
                             : Status{why.code(), why.message() +
                                                      " (is JetStream enabled on the servers? "
                                                      "the pool's table needs it; this node "
                                                      "routes with its local table meanwhile)"});
        pause(1000);
        continue;
      }
      kv = std::move(*opened);
      watching = false;
    }
    // The 3.4 client's watchers stall silently after a reconnect: a new one
    // after each (it delivers the latest value first, so nothing is missed).
    const uint64_t reconnects = m_link->counters().reconnects;
    if (!watching || reconnects != reconnects_seen) {
      if (Status s = kv->watch(kPoolTableKey); !s) {
        note_table_error(s);
        pause(500);
        continue;
      }
      watching = true;
      reconnects_seen = reconnects;
    }
    if (m_refit) lease_tick(monotonic_ns());
    auto entry = kv->next(250);
    if (!entry) {
      watching = false;  // re-create it
      pause(200);
      continue;
    }
    if (!*entry || (*entry)->deleted ||
        (*entry)->revision <= std::max(m_table_revision.load(), refused))
      continue;
    auto pool_table = read_pool_table(*kv, **entry);
    if (!pool_table) {
      // not_found: a newer table replaced this one's chunks; its manifest comes next.
      if (pool_table.status().code() != Errc::not_found) note_table_error(pool_table.status());
      continue;
    }
    const uint64_t before = m_service.table_epoch();
    Status s = m_service.swap_table(
        std::make_shared<const ClusterTable>(std::move(pool_table->table)), pool_table->epoch());
    if (!s) {
      refused = pool_table->revision;  // not tried again; a later one is
      note_table_error(
          Status{s.code(), "revision " + std::to_string(pool_table->revision) +
                               " refused, the current table keeps routing: " + s.message()});
      continue;
    }
    m_table_revision.store(pool_table->revision);
    {
      std::lock_guard lock(m_table_mutex);
      m_table_error.clear();
    }
    ELDR_LOG(info, "pool: the pool's table revision %llu: table epoch %llu -> %llu",
             static_cast<unsigned long long>(pool_table->revision),
             static_cast<unsigned long long>(before),
             static_cast<unsigned long long>(m_service.table_epoch()));
  }
}

// ---- the refit lease ------------------------------------------------------------------

void PoolNode::lease_tick(uint64_t now_ns) {
  constexpr uint64_t kRenewNs = 1'000'000'000;
  constexpr uint64_t kLeaseNs = kLeaseMs * 1'000'000;
  if (m_lease_held.load() && now_ns - m_lease_seen_ns < kRenewNs) return;
  if (!m_lease_kv) {
    auto kv = m_link->key_value(pool_bucket(m_config.name) + "_lease",
                                static_cast<int>(m_config.table_replicas));
    if (!kv) {
      note_table_error(kv.status());
      return;
    }
    m_lease_kv = std::move(*kv);
  }
  const nlohmann::json me = {{"node", node()}, {"incarnation", m_incarnation}};
  const std::string text = me.dump();
  const std::span<const uint8_t> value(reinterpret_cast<const uint8_t*>(text.data()), text.size());
  const auto set_holder = [this](const std::string& holder) {
    std::lock_guard lock(m_table_mutex);
    m_lease_holder = holder;
  };
  if (m_lease_held.load()) {
    auto renewed = m_lease_kv->update("refit", value, m_lease_revision);
    if (renewed) {
      m_lease_revision = *renewed;
      m_lease_seen_ns = now_ns;
      return;
    }
    // Lost it (another node took it), or cannot reach the bucket: a lease
    // not renewed within kLeaseMs is anyone's, so stop refitting well before.
    if (renewed.status().code() == Errc::state || now_ns - m_lease_seen_ns > kLeaseNs / 2) {
      m_lease_held.store(false);
      set_holder("");
      ELDR_LOG(warn, "pool: refit lease lost: %s", renewed.status().to_string().c_str());
    }
    return;
  }
  auto current = m_lease_kv->get("refit");
  if (!current) return;
  bool take = false;
  uint64_t last = 0;
  if (!*current || (*current)->deleted) {
    take = true;
  } else {
    const auto holder = nlohmann::json::parse((*current)->value, nullptr, false);
    set_holder(holder.is_object() ? holder.value("node", std::string("?")) : "?");
    if ((*current)->revision != m_lease_revision) {
      m_lease_revision = (*current)->revision;  // renewed since we last looked
      m_lease_seen_ns = now_ns;
    } else if (now_ns - m_lease_seen_ns > kLeaseNs) {
      take = true;  // its holder stopped renewing
      last = (*current)->revision;
    }
  }
  if (!take) return;
  auto taken =
      last == 0 ? m_lease_kv->create("refit", value) : m_lease_kv->update("refit", value, last);
  if (!taken) return;  // another node was faster
  m_lease_revision = *taken;
  m_lease_seen_ns = now_ns;
  m_lease_held.store(true);
  set_holder(node());
  ELDR_LOG(info, "pool: this node holds the pool's refit lease (revision %llu)",
           static_cast<unsigned long long>(*taken));
}

Status PoolNode::publish_table(std::shared_ptr<const ClusterTable> table) {
  if (!m_lease_held.load()) return {Errc::state, "this node does not hold the refit lease"};
  auto kv =
      m_link->key_value(pool_bucket(m_config.name), static_cast<int>(m_config.table_replicas));
  if (!kv) return kv.status();
  const int64_t payload = m_link->max_payload();
  auto revision = publish_pool_table(**kv, *table, std::nullopt,
                                     static_cast<size_t>(std::max<int64_t>(payload - 8192, 1024)));
  if (!revision) return revision.status();
  ELDR_LOG(info, "pool: refit published as the pool's table revision %llu",
           static_cast<unsigned long long>(*revision));
  return Status::ok();
}
}  // namespace eldr::sidecar
