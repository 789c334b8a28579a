#include "pool_peers.hpp"

#include <bit>
#include <cmath>

#include "log.hpp"

namespace eldr::sidecar {

PoolPeers::PoolPeers(const PoolConfig& config, std::string node, uint64_t incarnation,
                     Service& service, pool::PublishFn publish, double refit_window_per_s,
                     LeaseHolder holder)
    : m_config(config),
      m_service(service),
      m_publish(std::move(publish)),
      m_encoder(node, incarnation),
      m_subject(pool::node_subject(config.name, node)),
      m_sample_rate(refit_window_per_s),
      m_sample_encoder(node, incarnation),
      m_holder(std::move(holder)) {
  pool::PeerViewOptions vo;
  vo.self = node;
  vo.peer_timeout_ns = uint64_t{config.peer_timeout_ms} * 1'000'000;
  vo.max_bookings = config.max_peer_bookings;
  m_view.emplace(service.shared_router(), service.router().table()->geometry, vo,
                 [s = &service](const PeerLoad& l) { s->apply_peer_load(l); });
  // In a pool, the node that refits sees every node's traffic.
  if (m_sample_rate > 0)
    m_view->on_booked_footprint(
        [s = &service](std::span<const int16_t> counts) { s->keep_for_refit(counts); });
}

PoolPeers::~PoolPeers() = default;

void PoolPeers::send(std::span<const uint8_t> bytes) {
  // A refusal (disconnected past the library's buffer) is counted by the
  // link; the next snapshot carries what it held.
  (void)m_publish(m_subject, bytes, {});
}

void PoolPeers::booked(uint64_t key, int32_t worker, std::span<const int16_t> counts) {
  ++m_own_picks;
  const Router& router = m_service.router();
  const Geometry& geometry = router.table()->geometry;
  if (m_config.compact_bookings) {
    if (m_sample_rate > 0) sample_to_holder(key, worker, counts);
    const CostCells cells = router.cost_cells();
    m_demand.resize(cells.count());
    // counts passed the ring's checks; a refusal here would be a bug, and
    // the full booking still carries the request.
    if (router.demand_codes(counts, m_demand)) {
      send(m_encoder.book(key, worker, geometry, cells, m_demand));
      return;
    }
  }
  send(m_encoder.book(key, worker, geometry, counts));
}

void PoolPeers::sample_to_holder(uint64_t key, int32_t worker, std::span<const int16_t> counts) {
  const std::string holder = m_holder();
  if (holder.empty() || holder == "?" || holder == node()) return;
  const uint64_t now = monotonic_ns();
  // The pool's rate is shared among the nodes this one hears of.
  const double rate = m_sample_rate / static_cast<double>(m_view->peers() + 1);
  const double burst = std::max(1.0, rate);
  m_sample_tokens =
      std::min(burst, m_sample_tokens + rate * static_cast<double>(now - m_sample_last_ns) / 1e9);
  m_sample_last_ns = now;
  if (m_sample_tokens < 1.0) return;
  m_sample_tokens -= 1.0;
  const auto bytes =
      m_sample_encoder.book(key, worker, m_service.router().table()->geometry, counts);
  if (m_publish(pool::sample_subject(m_config.name, holder), bytes, {})) ++m_counts.samples_sent;
}

void PoolPeers::released(uint64_t key) { send(m_encoder.release(key)); }

void PoolPeers::reported(const PeerLoad& load) { send(m_encoder.load(load)); }

void PoolPeers::send_snapshot(int64_t max_payload) {
  const auto held = m_service.local_requests();
  std::vector<uint8_t> bytes = m_encoder.snapshot(held);
  if (max_payload > 0 && bytes.size() > static_cast<uint64_t>(max_payload)) {
    if (std::has_single_bit(++m_counts.snapshot_too_large))
      ELDR_LOG(error,
               "pool: a snapshot of %zu requests is %zu bytes, the server's max_payload is "
               "%lld: not sent (lower request_map_capacity or raise max_payload) [%llu so far]",
               held.size(), bytes.size(), static_cast<long long>(max_payload),
               static_cast<unsigned long long>(m_counts.snapshot_too_large));
    return;
  }
  send(bytes);
}

void PoolPeers::apply(const pool::InboxMessage& in, std::string_view peer, uint64_t now_ns,
                      uint64_t now_real_ns) {
  if (peer == node()) return;  // our own
  const Router& router = m_service.router();
  pool::Decoded d =
      pool::decode_peer_message(in.data, router.table()->geometry, router.cost_cells(), peer);
  if (!d.ok) {
    ++m_counts.malformed[static_cast<size_t>(d.error.fault)];
    if (std::has_single_bit(++m_faults_logged))
      ELDR_LOG(warn, "pool: dropped a message on %s (%s): %s [%llu so far]", in.subject.c_str(),
               pool::wire_fault_name(d.error.fault), d.error.message.c_str(),
               static_cast<unsigned long long>(m_faults_logged));
    return;
  }
  m_view->apply(d.message, now_ns, now_real_ns);
}

void PoolPeers::sampled(const pool::InboxMessage& in, bool lease_held) {
  const Router& router = m_service.router();
  const pool::Decoded d =
      pool::decode_peer_message(in.data, router.table()->geometry, router.cost_cells(), "");
  if (!d.ok || d.message.kind != PeerKind::book || d.message.counts.empty()) {
    ++m_counts.malformed[static_cast<size_t>(d.ok ? pool::WireFault::bad_field : d.error.fault)];
    return;
  }
  if (!lease_held) return;
  m_service.keep_for_refit(d.message.counts);
  ++m_counts.samples_received;
}

void PoolPeers::expire(uint64_t now_ns) {
  for (const std::string& gone : m_view->expire(now_ns))
    ELDR_LOG(warn, "pool: node %s silent for %u ms: its bookings expired", gone.c_str(),
             m_config.peer_timeout_ms);
}

double PoolPeers::twins_per_pick(uint64_t now_ns) {
  // The peers' booking rate over ours, each smoothed over about 2 s: a
  // gateway node that takes most of the traffic expects few unseen peer
  // picks per pick of its own, a node that takes little expects many.
  const uint64_t peer_books = m_view->counters().applied[static_cast<size_t>(PeerKind::book)];
  if (m_rate_last_ns != 0 && now_ns > m_rate_last_ns) {
    const double dt = static_cast<double>(now_ns - m_rate_last_ns) / 1e9;
    const double keep = std::exp(-dt / 2.0);
    m_own_rate =
        keep * m_own_rate + (1 - keep) * static_cast<double>(m_own_picks - m_own_seen) / dt;
    m_peer_rate =
        keep * m_peer_rate + (1 - keep) * static_cast<double>(peer_books - m_peer_seen) / dt;
  }
  m_rate_last_ns = now_ns;
  m_own_seen = m_own_picks;
  m_peer_seen = peer_books;
  // Until this node routes, every node is taken to route as much as it
  // will: a twin per peer.
  if (m_own_rate < 0.5) return static_cast<double>(m_view->peers());
  return m_peer_rate / m_own_rate;
}

}  // namespace eldr::sidecar
