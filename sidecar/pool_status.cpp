#include "pool_status.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace eldr::sidecar {

std::string PoolStatus::json() const {
  nlohmann::json j;
  j["connected"] = connected;
  j["server"] = server;
  if (!join_error.empty()) j["error"] = join_error;  // why it is not connected
  j["node"] = node;
  j["pool"] = pool;
  j["incarnation"] = incarnation;
  j["view_age_ms"] = view_age_ms;
  j["peer_bookings"] = peer_bookings;
  j["twins"] = twins;
  // Routing rates (smoothed, per second) and the twins each pick books.
  j["rate"] = {{"own", own_rate}, {"peers", peer_rate}};
  j["twins_per_pick"] = twins_per_pick;
  // What the pool costs this node on the wire (scripts/bench-cluster.py reads it).
  j["nats"] = {{"received", nats.received},
               {"received_bytes", nats.received_bytes},
               {"published", nats.published},
               {"published_bytes", nats.published_bytes},
               {"reopened", nats.reopened}};
  // Routes made for gateways over NATS, what was refused and why, and
  // those released without their gateway's complete.
  j["gateway_routes"] = {{"routed", gateways.routed},
                         {"cancelled", gateways.cancelled},
                         {"refused", gateways.refused_cancelled},
                         {"refused_owned", gateways.refused_owned},
                         {"orphaned", gateways.orphaned},
                         {"completes_refused", gateways.completes_refused},
                         {"replies_refused", gateways.replies_refused},
                         {"held", gateways.held},
                         {"gateways", gateways.gateways}};
  j["table_source"] = table_revision ? "pool" : "local";
  j["table_revision"] = table_revision ? nlohmann::json(*table_revision) : nlohmann::json(nullptr);
  j["table_epoch"] = table_epoch;
  j["table_errors"] = table_errors;
  if (!table_error.empty()) j["table_error"] = table_error;
  if (refit)
    j["refit_lease"] = {
        {"held_here", lease_held},
        {"holder", lease_holder.empty() ? nlohmann::json(nullptr) : nlohmann::json(lease_holder)}};
  // Publish-to-counted delays of the latest bookings (same clock on one
  // host; across hosts it includes their clock offset).
  if (!booking_delays_ms.empty()) {
    std::vector<float> delays = booking_delays_ms;
    std::sort(delays.begin(), delays.end());
    const auto at = [&](double q) {
      return delays[std::min(delays.size() - 1, static_cast<size_t>(q * delays.size()))];
    };
    j["booking_delay_ms"] = {
        {"samples", delays.size()}, {"p50", at(0.5)}, {"p99", at(0.99)}, {"max", delays.back()}};
  }
  j["peers"] = nlohmann::json::array();
  for (const pool::PeerInfo& p : peer_info)
    j["peers"].push_back({{"name", p.node},
                          {"last_seen_age_ms", p.last_seen_age_ms},
                          {"bookings", p.bookings},
                          {"bookings_applied", p.bookings_applied},
                          {"view_age_ms", p.view_age_ms}});
  std::string text = j.dump();
  // The status cell holds 16 KiB: with hundreds of peers, the list is cut.
  if (text.size() > 16000) {
    j["peers"] = nlohmann::json::array();
    j["peers_truncated"] = peers;
    text = j.dump();
  }
  return text;
}

PoolGauge PoolStatus::gauge() const {
  PoolGauge g;
  g.connected = connected;
  g.peers = peers;
  g.peer_bookings = peer_bookings;
  g.twins = twins;
  g.view_age_ms = view_age_ms;
  for (size_t k = 0; k < g.received.size(); ++k) g.received[k] = view.applied[k];
  g.published = nats.published;
  g.published_bytes = nats.published_bytes;
  g.received_bytes = nats.received_bytes;
  g.publish_failed = nats.publish_failed;
  g.dropped = nats.dropped;
  g.malformed = peer_counts.malformed;
  g.foreign_subject = foreign_subject;
  g.lost = view.lost;
  g.stale = view.stale;
  g.refused = view.refused;
  g.unknown_release = view.unknown_release;
  g.repaired = view.repaired;
  g.expired_peers = view.expired_peers;
  g.restarts = view.restarts;
  g.disconnects = nats.disconnects;
  g.reconnects = nats.reconnects;
  g.reopened = nats.reopened;
  g.snapshot_too_large = peer_counts.snapshot_too_large;
  g.remote_routes = gateways.routed;
  g.remote_malformed = gateways.malformed + completes.malformed;
  g.routes_cancelled = gateways.cancelled;
  g.routes_refused = gateways.refused_cancelled;
  g.routes_refused_owned = gateways.refused_owned;
  g.routes_orphaned = gateways.orphaned;
  g.completes_refused = gateways.completes_refused;
  g.replies_refused = gateways.replies_refused;
  g.completes_forwarded = completes.forwarded;
  g.completes_direct = completes.direct;
  g.completes_resent = completes.resent;
  g.completes_unanswered = completes.unanswered;
  g.completes_received = completes.received + gateways.completes;
  g.join_errors = join_errors;
  g.refit_samples_sent = peer_counts.samples_sent;
  g.refit_samples_received = peer_counts.samples_received;
  return g;
}

}  // namespace eldr::sidecar
