// This eldrd as one node of a pool: it publishes its own bookings and the
// load reports its engines send (pool/'s peer_wire.hpp over nats_link.hpp),
// applies every other node's (peer_view.hpp), sends a snapshot of its
// requests in flight every snapshot_ms, and tells the service how many peers
// to anticipate and how late it hears of them (PeerTwins). Everything but
// the publishing runs on the consumer thread; a message arriving wakes it.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "config.hpp"
#include "eldr/pool/nats_link.hpp"
#include "eldr/pool/peer_view.hpp"
#include "eldr/pool/recent_map.hpp"
#include "metrics.hpp"
#include "service.hpp"

namespace eldr::sidecar {

// Multi-node mode's names (pool/), unqualified in the daemon.
using namespace ::eldr::pool;

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
  // Applies the messages that arrived; returns how many.
  size_t drain();
  // Every maintenance tick: snapshot when due, peer expiry, anticipation,
  // gauges. Returns the status object for eldr status (JSON).
  std::string maintain();

  // ---- PoolPublisher (consumer thread, from the service) ----
  void booked(uint64_t key, int32_t worker, std::span<const int16_t> counts) override;
  void released(uint64_t key) override;
  void reported(const PeerLoad& load) override;
  void forward_complete(std::string_view request_id, uint64_t token) override;
  uint32_t node_tag() const noexcept override { return m_tag; }

  const std::string& node() const noexcept { return m_encoder.node(); }
  // Whether this node holds the pool's refit lease now (any thread).
  bool holds_refit_lease() const noexcept { return m_lease_held.load(); }
  // Any thread: publishes `table` as the pool's table (the refit's install);
  // every node, this one included, swaps it in from the bucket.
  Status publish_table(std::shared_ptr<const ClusterTable> table);
  // The revision of the pool's table this node routes with; 0: its local one.
  uint64_t table_revision() const noexcept { return m_table_revision.load(); }
  const PeerView& view() const noexcept { return *m_view; }
  bool connected() const noexcept { return m_link->connected(); }

 private:
  PoolNode(const PoolConfig& config, std::string node, Service& service, Metrics& metrics);
  void send(std::vector<uint8_t> bytes);
  void send_snapshot();
  // eldr.<pool>.route: a FootprintMsg in, routed here, a RouteReply out.
  void serve_route(const InboxMessage& in);
  // eldr.<pool>.complete.<node>: a RouteComplete of a request routed so;
  // eldr.<pool>.complete (pool_wide): one forwarded by another node.
  void serve_complete(const InboxMessage& in, bool pool_wide);
  // eldr.<pool>.cancel: a gateway's RouteCancel of a route it never heard
  // the answer to; released here when it routed here with that key.
  void serve_cancel(const InboxMessage& in);
  // eldr.<pool>.gateway: a pool handle's GatewayBeat.
  void serve_gateway_beat(const InboxMessage& in);
  // Releases the routes of gateways not heard for gateway_timeout_ms, or
  // that said they are leaving (maintain, when connected).
  void expire_gateways(uint64_t now_ns);
  void release_gateway(uint64_t gateway, const char* why);
  std::string status_json(uint64_t now_ns) const;
  std::string not_connected_reason() const;
  // The table watcher's thread: the pool's table bucket, watched, each new
  // revision read, checked and swapped in at the pool's epoch.
  void table_loop();
  void note_table_error(const Status& s);
  // One step of the refit lease (table thread, about every second): take
  // it when it is free or its holder stopped renewing, renew it when held.
  void lease_tick(uint64_t now_ns);

  PoolConfig m_config;
  Service& m_service;
  Metrics& m_metrics;
  PeerEncoder m_encoder;
  std::string m_subject;  // ours
  std::string m_prefix;   // "eldr.<pool>.node."
  std::string m_route_subject;
  std::string m_complete_subject;  // ours
  std::string m_complete_any_subject;
  std::string m_cancel_subject;
  std::string m_gateway_subject;
  std::string m_ack_subject;  // ours: answers to the completes we forward
  std::string m_ack_prefix;   // "eldr.<pool>.ack.": where we answer, nowhere else
  uint32_t m_tag;             // node_tag(node): in our completion tokens
  // The peers by the tag of their tokens, rebuilt every maintenance tick;
  // "" where two peers share a tag (their completes go to every node).
  std::unordered_map<uint32_t, std::string> m_peer_by_tag;
  uint64_t m_completes_direct = 0;     // forwarded to the node named by the token
  uint64_t m_completes_forwarded = 0;  // sent to eldr.<pool>.complete
  uint64_t m_completes_received = 0;   // forwarded by others, released here
  // Completes forwarded to the node their token names, by token, until that
  // node answers on m_ack_subject: sent again on a back-off (maintain), given
  // up after kForwardTries (about 12 s). Consumer thread only.
  struct Unacked {
    std::string subject;
    std::vector<uint8_t> bytes;
    uint64_t next_ns = 0;
    uint32_t tries = 1;
  };
  std::unordered_map<uint64_t, Unacked> m_unacked;
  uint64_t m_completes_resent = 0;      // forwards sent again (no answer yet)
  uint64_t m_completes_unanswered = 0;  // forwards given up on
  void resend_unacked(uint64_t now_ns);
  // The gateway routes this node holds, by request id: the key their
  // request carried, the gateway (pool handle) that sent it, the token they
  // hold, and the router's key of the request, by which released() takes
  // them out whichever way the request ends (so both hold only what is in
  // flight, at most the request map's capacity).
  struct GatewayRoute {
    uint64_t key = 0;
    uint64_t gateway = 0;
    uint64_t token = 0;
    uint64_t router_key = 0;
  };
  std::unordered_map<std::string, GatewayRoute> m_gateway_routes;
  std::unordered_map<uint64_t, std::string> m_gateway_route_ids;  // by router key
  // The keys cancelled before their route came here (the cancel overtook
  // it): such a route is refused. Bounded, oldest forgotten first.
  RecentMap<uint64_t, bool> m_cancelled;
  // The gateways with routes here, by id: when last heard (a beat or a
  // route). One silent for gateway_timeout_ms (a crashed gateway) has its
  // routes released: nobody is left to complete them.
  std::unordered_map<uint64_t, uint64_t> m_gateways;
  uint64_t m_routes_cancelled = 0;  // released by their gateway's cancel
  uint64_t m_routes_refused = 0;    // refused: cancelled before they came
  uint64_t m_routes_orphaned = 0;   // released: their gateway went silent or left
  uint64_t m_remote_routes = 0;     // footprints routed over NATS
  uint64_t m_remote_malformed = 0;  // route or complete requests refused as malformed
  std::unique_ptr<NatsLink> m_link;
  std::optional<PeerView> m_view;
  std::vector<InboxMessage> m_batch;
  std::vector<uint8_t> m_demand;  // a compact booking's codes
  uint64_t m_next_snapshot_ns = 0;
  std::array<uint64_t, kWireFaults> m_malformed{};
  uint64_t m_foreign_subject = 0;
  uint64_t m_snapshot_too_large = 0;
  uint64_t m_faults_logged = 0;
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
  // The twins per pick from the peers' booking rate over ours (maintain).
  double twins_per_pick(uint64_t now_ns);
  uint64_t m_own_picks = 0, m_own_seen = 0, m_peer_seen = 0, m_rate_last_ns = 0;
  double m_own_rate = 0.0, m_peer_rate = 0.0;  // per second, smoothed
  // Samples to the lease holder: a token bucket of window / period_s / nodes
  // a second (at least one), so the holder hears about window per period.
  double m_sample_rate = 0.0;
  double m_sample_tokens = 0.0;
  uint64_t m_sample_last_ns = 0;
  PeerEncoder m_sample_encoder;  // its own sequence: samples skip the node subject
  std::string m_sample_subject;  // ours
  uint64_t m_samples_sent = 0;
  uint64_t m_samples_received = 0;
  // Publishes counts to the lease holder when it is another node and the
  // bucket has a token.
  void sample_to_holder(uint64_t key, int32_t worker, std::span<const int16_t> counts);
  std::unique_ptr<KeyValue> m_lease_kv;
  std::atomic<bool> m_lease_held{false};
  uint64_t m_lease_revision = 0;  // ours while held, else the last seen
  uint64_t m_lease_seen_ns = 0;   // when m_lease_revision was first seen or renewed
  std::string m_lease_holder;     // under m_table_mutex
};

// The host name as a node name ([A-Za-z0-9_-], at most 64 characters).
std::string default_node_name();

}  // namespace eldr::sidecar
