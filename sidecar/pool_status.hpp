// What a pool node says about itself: one reading of its parts (the link,
// the peers, the gateways, the completes, the pool's table), rendered as the
// pool object of `eldr status` (JSON, into the segment's 16 KiB status cell)
// and as the eldr_pool_* metrics.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "eldr/pool/nats_link.hpp"
#include "eldr/pool/peer_view.hpp"
#include "metrics.hpp"
#include "pool_completes.hpp"
#include "pool_gateways.hpp"
#include "pool_peers.hpp"

namespace eldr::sidecar {

struct PoolStatus {
  bool connected = false;
  std::string server;      // "" when not connected
  std::string join_error;  // why it is not in the pool ("" when connected)
  uint64_t join_errors = 0;
  std::string node, pool;
  uint64_t incarnation = 0;
  // The peers.
  double view_age_ms = 0.0;
  uint64_t peers = 0, peer_bookings = 0, twins = 0;
  double own_rate = 0.0, peer_rate = 0.0, twins_per_pick = 0.0;
  std::vector<pool::PeerInfo> peer_info;
  std::vector<float> booking_delays_ms;
  pool::PeerViewCounters view;
  PeerCounters peer_counts;
  uint64_t foreign_subject = 0;  // messages on a subject that is no node's
  // The parts.
  pool::NatsLinkCounters nats;
  GatewayCounters gateways;
  CompleteCounters completes;
  // The pool's table and refit lease.
  std::optional<uint64_t> table_revision;  // nullopt: the node's local table
  uint64_t table_epoch = 0, table_errors = 0;
  std::string table_error;
  bool refit = false, lease_held = false;
  std::string lease_holder;

  // The object `eldr status` prints (at most 16,000 bytes: with hundreds of
  // peers, their list is cut).
  std::string json() const;
  PoolGauge gauge() const;
};

}  // namespace eldr::sidecar
