// What this node knows of the other nodes of its pool: each peer's requests
// in flight (its bookings, applied to the router with Router::book so they
// count, and for eldr_cost weigh, exactly like this node's own), its load
// reports, and when it was last heard of. Fed the decoded messages of
// peer_wire.hpp on the consumer thread; no NATS here, so the whole
// bookkeeping (ordering, lost messages, snapshots, restarts, expiry) is
// tested without a broker.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "eldr/pool/peer_wire.hpp"
#include "eldr/router.hpp"

namespace eldr::pool {

struct PeerViewOptions {
  std::string self;                          // this node: its own messages are skipped
  uint64_t peer_timeout_ns = 3'000'000'000;  // a peer silent this long: its bookings expire
  uint32_t max_bookings = 1u << 16;          // all peers' bookings together (router records)
};

// Counters since start (metrics and tests).
struct PeerViewCounters {
  uint64_t applied[4] = {0, 0, 0, 0};  // by PeerKind
  uint64_t lost = 0;                   // sequence gaps: messages that never came
  uint64_t stale = 0;                  // sequences at or below one seen (dropped)
  uint64_t refused = 0;          // bookings not applied: capacity, unknown worker, duplicate key
  uint64_t unknown_release = 0;  // releases of keys not held (their booking was lost)
  uint64_t repaired = 0;         // bookings a snapshot added or removed
  uint64_t expired_peers = 0;    // peers dropped after peer_timeout
  uint64_t restarts = 0;         // peers seen with a new incarnation
};

struct PeerInfo {
  std::string node;
  uint64_t last_seen_age_ms = 0;
  uint32_t bookings = 0;          // its requests in flight, as this node counts them
  uint64_t bookings_applied = 0;  // its bookings applied here since this node heard of it
  double view_age_ms = 0.0;       // how old its messages are on arrival (smoothed)
};

class PeerView {
 public:
  // Applies a peer's load report (the service's own report path).
  using LoadSink = std::function<void(const PeerLoad&)>;

  PeerView(Router& router, const Geometry& geometry, PeerViewOptions options, LoadSink loads);
  ~PeerView();  // releases every booking it made
  PeerView(const PeerView&) = delete;
  PeerView& operator=(const PeerView&) = delete;

  // now_ns: CLOCK_MONOTONIC (last seen); now_real_ns: CLOCK_REALTIME (view age).
  void apply(const PeerMessage& message, uint64_t now_ns, uint64_t now_real_ns);
  // Each applied full booking's footprint also goes here (the refit window;
  // a compact booking carries none).
  using FootprintSink = std::function<void(std::span<const int16_t>)>;
  void on_booked_footprint(FootprintSink sink) { m_footprints = std::move(sink); }
  // Drops the peers silent for peer_timeout and releases their bookings.
  // Returns the names dropped.
  std::vector<std::string> expire(uint64_t now_ns);

  size_t peers() const noexcept { return m_peers.size(); }
  // The peers heard of, each with the features its latest message named.
  struct Name {
    std::string node;
    uint32_t features = 0;
  };
  std::vector<Name> names() const;
  size_t bookings() const noexcept { return m_total; }
  std::vector<PeerInfo> info(uint64_t now_ns) const;
  // The oldest peer's view age (ms): how late this node hears of the others.
  double view_age_ms() const noexcept;
  // Per worker: the peers' requests in flight there.
  std::unordered_map<int32_t, uint32_t> bookings_by_worker() const;
  const PeerViewCounters& counters() const noexcept { return m_counters; }
  // The most recent bookings' delays (ms) from their node's publish to this
  // router counting them, at most kDelaySamples (eldr bench pool).
  static constexpr size_t kDelaySamples = 4096;
  const std::vector<float>& booking_delays_ms() const noexcept { return m_delays; }

 private:
  struct Booking {
    uint64_t router_id;
    int32_t worker;
  };
  struct Peer {
    uint64_t incarnation = 0;
    uint64_t sequence = 0;  // the last applied
    uint64_t last_seen_ns = 0;
    uint32_t features = 0;  // PeerHeader::features of its latest message
    double view_age_ms = 0.0;
    bool aged = false;                               // view_age_ms holds a sample
    uint64_t books = 0;                              // bookings applied
    std::unordered_map<uint64_t, Booking> bookings;  // the peer's key -> ours
  };
  // A booking's demand: codes (compact), else the footprint's counts.
  void book(Peer& peer, uint64_t key, int32_t worker, std::span<const int16_t> counts,
            std::span<const uint8_t> demand);
  void release(Peer& peer, uint64_t key);
  void release_all(Peer& peer);
  void reconcile(Peer& peer, const std::vector<std::pair<uint64_t, int32_t>>& held);

  Router& m_router;
  Geometry m_geometry;
  PeerViewOptions m_options;
  LoadSink m_loads;
  FootprintSink m_footprints;
  std::vector<int16_t> m_zero_counts;  // a repaired booking's footprint (it was lost)
  std::unordered_map<std::string, Peer> m_peers;
  size_t m_total = 0;
  // Router request ids of peers' bookings: bit 62 set, so they meet neither
  // the service's keys (counting from 1) nor PeerTwins' (bit 63).
  uint64_t m_next_id = uint64_t{1} << 62;
  PeerViewCounters m_counters;
  std::vector<float> m_delays;  // a ring of kDelaySamples
  size_t m_next_delay = 0;
};

}  // namespace eldr::pool
