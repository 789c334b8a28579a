// This node's share of the pool's bookings (docs/design.md section 10): it
// publishes what it routes, releases and hears from its engines (bookings,
// releases, load reports, snapshots) on eldr.<pool>.node.<node>, applies
// every other node's (pool::PeerView, against the service's router), samples
// whole footprints to the refit lease holder, and measures the booking rates
// anticipation needs. Consumer thread only; messages go out through
// `publish`.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "config.hpp"
#include "eldr/pool/nats_link.hpp"
#include "eldr/pool/peer_view.hpp"
#include "service.hpp"

namespace eldr::sidecar {

struct PeerCounters {
  std::array<uint64_t, pool::kWireFaults> malformed{};  // peers' messages refused, by fault
  uint64_t snapshot_too_large = 0;                      // snapshots over max_payload, not sent
  uint64_t samples_sent = 0, samples_received = 0;      // full bookings for the refit window
};

class PoolPeers {
 public:
  // The refit lease's holder ("" when none or unknown), and whether this
  // node holds it (the table thread keeps both).
  using LeaseHolder = std::function<std::string()>;
  // refit_window_per_s: footprints a second the refit holder needs (0: no refit).
  PoolPeers(const PoolConfig& config, std::string node, uint64_t incarnation, Service& service,
            pool::PublishFn publish, double refit_window_per_s, LeaseHolder holder);
  ~PoolPeers();  // the peers' bookings leave the router

  // ---- out (the service's PoolPublisher) ----
  void booked(uint64_t key, int32_t worker, std::span<const int16_t> counts);
  void released(uint64_t key);
  void reported(const PeerLoad& load);
  // Every request this node holds, for every node; max_payload: the
  // server's (a larger snapshot is counted, logged and not sent).
  void send_snapshot(int64_t max_payload);

  // ---- in ----
  // eldr.<pool>.node.<peer>: `peer` is the subject's last token.
  void apply(const pool::InboxMessage& in, std::string_view peer, uint64_t now_ns,
             uint64_t now_real_ns);
  // eldr.<pool>.sample.<node>: a full booking for the refit window, kept
  // while this node holds the lease.
  void sampled(const pool::InboxMessage& in, bool lease_held);

  // Every maintenance tick: peers silent for peer_timeout_ms dropped (their
  // bookings released), and the twins each pick should book.
  void expire(uint64_t now_ns);
  double twins_per_pick(uint64_t now_ns);
  // This node's and its peers' bookings a second (smoothed over about 2 s).
  double own_rate() const noexcept { return m_own_rate; }
  double peer_rate() const noexcept { return m_peer_rate; }

  const pool::PeerView& view() const noexcept { return *m_view; }
  const PeerCounters& counters() const noexcept { return m_counts; }
  const std::string& node() const noexcept { return m_encoder.node(); }
  uint64_t incarnation() const noexcept { return m_encoder.incarnation(); }

 private:
  void send(std::span<const uint8_t> bytes);
  // Publishes counts to the lease holder when it is another node and the
  // sample bucket has a token.
  void sample_to_holder(uint64_t key, int32_t worker, std::span<const int16_t> counts);

  const PoolConfig& m_config;
  Service& m_service;
  pool::PublishFn m_publish;
  pool::PeerEncoder m_encoder;
  std::string m_subject;  // ours
  std::optional<pool::PeerView> m_view;
  std::vector<uint8_t> m_demand;  // a compact booking's codes
  PeerCounters m_counts;
  uint64_t m_faults_logged = 0;
  // The twins per pick from the peers' booking rate over ours.
  uint64_t m_own_picks = 0, m_own_seen = 0, m_peer_seen = 0, m_rate_last_ns = 0;
  double m_own_rate = 0.0, m_peer_rate = 0.0;  // per second, smoothed
  // Samples to the lease holder: a token bucket of window / period_s / nodes
  // a second (at least one), so the holder hears about window per period.
  double m_sample_rate = 0.0;  // 0: no refit
  double m_sample_tokens = 0.0;
  uint64_t m_sample_last_ns = 0;
  pool::PeerEncoder m_sample_encoder;  // its own sequence: samples skip the node subject
  LeaseHolder m_holder;
};

}  // namespace eldr::sidecar
