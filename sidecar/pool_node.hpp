// This eldrd as one node of a pool (docs/design.md section 10): its NATS
// link and the parts that speak over it, each in a room of its own:
//  - PoolPeers (pool_peers.*): the pool's shared bookings, loads, snapshots;
//  - PoolGateways (pool_gateways.*): routes, completes, cancels and beats of
//    gateways over NATS, and who owns each request;
//  - PoolCompletes (pool_completes.*): completes forwarded between nodes;
//  - PoolStatus (pool_status.*): what `eldr status` and the metrics say;
//  - the pool's table and the refit lease (pool_node_table.cpp), on a thread
//    of their own.
// PoolNode owns the link, hands each message to its part by subject, and is
// the service's PoolPublisher. Everything but the table thread runs on the
// consumer thread; a message arriving wakes it.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "config.hpp"
#include "eldr/pool/nats_link.hpp"
#include "metrics.hpp"
#include "pool_completes.hpp"
#include "pool_gateways.hpp"
#include "pool_peers.hpp"
#include "pool_status.hpp"
#include "service.hpp"

namespace eldr::sidecar {

class PoolNode final : public PoolPublisher {
 public:
  // Starts connecting (unreachable servers are retried in the background:
  // the node routes alone meanwhile). `wake` ends the consumer's idle wait.
  // refit: the daemon's online refit, when on; then this node competes for
  // the pool's refit lease, only its holder refits (publish_table), and with
  // compact bookings every node samples its footprints to the holder.
  static Result<std::unique_ptr<PoolNode>> create(const PoolConfig& config, Service& service,
                                                  Metrics& metrics, std::function<void()> wake,
                                                  const RefitConfig* refit = nullptr);
  ~PoolNode() override;  // leaves the service's pool first

  // ---- consumer thread ----
  // Hands the messages that arrived to their parts; returns how many.
  size_t drain();
  // Every maintenance tick: snapshot when due, peer and gateway expiry,
  // resends, anticipation, gauges. Returns the status object for eldr
  // status (JSON).
  std::string maintain();

  // ---- PoolPublisher (consumer thread, from the service) ----
  void booked(uint64_t key, int32_t worker, std::span<const int16_t> counts) override {
    m_peers->booked(key, worker, counts);
  }
  void released(uint64_t key) override {
    m_peers->released(key);
    m_gateways->released(key);
  }
  void reported(const PeerLoad& load) override { m_peers->reported(load); }
  void forward_complete(std::string_view request_id, uint64_t token) override {
    m_completes->forward(request_id, token);
  }
  uint32_t node_tag() const noexcept override { return m_tag; }

  const std::string& node() const noexcept { return m_node; }
  // Whether this node holds the pool's refit lease now (any thread).
  bool holds_refit_lease() const noexcept { return m_lease_held.load(); }
  // Any thread: publishes `table` as the pool's table (the refit's install);
  // every node, this one included, swaps it in from the bucket.
  Status publish_table(std::shared_ptr<const ClusterTable> table);
  // The revision of the pool's table this node routes with; 0: its local one.
  uint64_t table_revision() const noexcept { return m_table_revision.load(); }
  const PeerView& view() const noexcept { return m_peers->view(); }
  bool connected() const noexcept { return m_link->connected(); }

 private:
  PoolNode(const PoolConfig& config, std::string node, Service& service, Metrics& metrics);
  PoolStatus status(uint64_t now_ns) const;
  // Why the link is down: what NATS last said, else that no server answers.
  std::string not_connected_reason() const;
  // The table watcher's thread: the pool's table bucket, watched, each new
  // revision read, checked and swapped in at the pool's epoch.
  void table_loop();
  void note_table_error(const Status& s);
  // One step of the refit lease (table thread, about every second): take
  // it when it is free or its holder stopped renewing, renew it when held.
  void lease_tick(uint64_t now_ns);
  std::string lease_holder() const;

  PoolConfig m_config;
  Service& m_service;
  Metrics& m_metrics;
  std::string m_node;
  uint64_t m_incarnation;  // random per start: peers tell our restarts apart
  uint32_t m_tag;          // node_tag(node): in our completion tokens
  // The subjects this node listens on, each with its part.
  std::string m_nodes_prefix;  // "eldr.<pool>.node."
  std::string m_route_subject, m_complete_subject, m_cancel_subject, m_gateway_subject;
  std::string m_forward_subject, m_complete_any_subject, m_ack_subject, m_sample_subject;
  std::unique_ptr<NatsLink> m_link;
  std::unique_ptr<PoolPeers> m_peers;
  std::unique_ptr<PoolGateways> m_gateways;
  std::unique_ptr<PoolCompletes> m_completes;
  std::vector<InboxMessage> m_batch;
  uint64_t m_next_snapshot_ns = 0;
  uint64_t m_foreign_subject = 0;
  bool m_was_connected = false;
  std::string m_join_error;    // what NATS last said while not connected ("" when connected)
  uint64_t m_join_errors = 0;  // distinct such reasons, each logged once

  std::thread m_table_thread;
  std::atomic<bool> m_stop{false};
  std::atomic<uint64_t> m_table_revision{0};
  std::atomic<uint64_t> m_table_errors{0};
  mutable std::mutex m_table_mutex;
  std::string m_table_error;  // the last one, for eldr status

  // The refit lease: the key "refit" of the bucket eldr_<pool>_lease. A
  // holder renews it every second (update on its revision); a revision
  // that nobody renews for kLeaseMs frees it (the 3.4 client has no per-key
  // TTL, and this needs no synchronised clocks).
  static constexpr uint64_t kLeaseMs = 5000;
  bool m_refit = false;
  std::unique_ptr<KeyValue> m_lease_kv;
  std::atomic<bool> m_lease_held{false};
  uint64_t m_lease_revision = 0;  // ours while held, else the last seen
  uint64_t m_lease_seen_ns = 0;   // when m_lease_revision was first seen or renewed
  std::string m_lease_holder;     // under m_table_mutex
};

// The host name as a node name ([A-Za-z0-9_-], at most 64 characters).
std::string default_node_name();

}  // namespace eldr::sidecar
