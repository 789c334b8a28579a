#include "eldr/pool/peer_view.hpp"

#include <algorithm>

namespace eldr::pool {

PeerView::PeerView(Router& router, const Geometry& geometry, PeerViewOptions options,
                   LoadSink loads)
    : m_router(router),
      m_geometry(geometry),
      m_options(std::move(options)),
      m_loads(std::move(loads)),
      m_zero_counts(geometry.cells(), 0) {}

PeerView::~PeerView() {
  for (auto& [name, peer] : m_peers) release_all(peer);
}

void PeerView::apply(const PeerMessage& m, uint64_t now_ns, uint64_t now_real_ns) {
  if (m.head.node == m_options.self) return;  // our own, echoed by the server
  auto [it, fresh] = m_peers.try_emplace(m.head.node);
  Peer& peer = it->second;
  if (!fresh && peer.incarnation != m.head.incarnation) {
    // The node restarted: what its last incarnation had in flight is gone
    // with it (a new one starts with nothing and says so in its snapshots).
    release_all(peer);
    peer = Peer{};
    ++m_counters.restarts;
  }
  if (peer.incarnation == m.head.incarnation && m.head.sequence <= peer.sequence) {
    ++m_counters.stale;
    return;
  }
  if (peer.incarnation == m.head.incarnation && m.head.sequence > peer.sequence + 1)
    m_counters.lost += m.head.sequence - peer.sequence - 1;
  peer.incarnation = m.head.incarnation;
  peer.sequence = m.head.sequence;
  peer.features = m.head.features;
  peer.last_seen_ns = now_ns;
  // Clocks of two nodes differ a little: an arrival "before" its sending is 0 ms old.
  const double age_ms =
      now_real_ns > m.head.sent_ns ? static_cast<double>(now_real_ns - m.head.sent_ns) / 1e6 : 0.0;
  peer.view_age_ms = peer.aged ? 0.9 * peer.view_age_ms + 0.1 * age_ms : age_ms;
  peer.aged = true;
  ++m_counters.applied[static_cast<size_t>(m.kind)];
  switch (m.kind) {
    case PeerKind::book:
      book(peer, m.key, m.worker, m.counts, m.demand);
      ++peer.books;
      if (m_footprints && !m.counts.empty()) m_footprints(m.counts);
      if (m_delays.size() < kDelaySamples)
        m_delays.push_back(static_cast<float>(age_ms));
      else
        m_delays[m_next_delay++ % kDelaySamples] = static_cast<float>(age_ms);
      break;
    case PeerKind::release:
      release(peer, m.key);
      break;
    case PeerKind::load:
      if (m_loads) m_loads(m.load);
      break;
    case PeerKind::snapshot:
      reconcile(peer, m.held);
      break;
  }
}

void PeerView::book(Peer& peer, uint64_t key, int32_t worker, std::span<const int16_t> counts,
                    std::span<const uint8_t> demand) {
  if (peer.bookings.contains(key) || m_total >= m_options.max_bookings) {
    ++m_counters.refused;
    return;
  }
  const uint64_t id = m_next_id++;
  const Status booked =
      demand.empty() ? m_router.book(worker, counts, id) : m_router.book_demand(worker, demand, id);
  if (!booked) {
    ++m_counters.refused;  // a worker this node's table does not have
    return;
  }
  peer.bookings.emplace(key, Booking{id, worker});
  ++m_total;
}

void PeerView::release(Peer& peer, uint64_t key) {
  const auto it = peer.bookings.find(key);
  if (it == peer.bookings.end()) {
    ++m_counters.unknown_release;
    return;
  }
  (void)m_router.complete_request(it->second.router_id);
  peer.bookings.erase(it);
  --m_total;
}

void PeerView::release_all(Peer& peer) {
  for (const auto& [key, b] : peer.bookings) (void)m_router.complete_request(b.router_id);
  m_total -= peer.bookings.size();
  peer.bookings.clear();
}

void PeerView::reconcile(Peer& peer, const std::vector<std::pair<uint64_t, int32_t>>& held) {
  std::unordered_map<uint64_t, int32_t> want;
  want.reserve(held.size());
  for (const auto& [key, worker] : held) want.emplace(key, worker);
  // Ours that the peer no longer has (their release was lost), or has on
  // another worker: out.
  std::vector<uint64_t> gone;
  for (const auto& [key, b] : peer.bookings) {
    const auto w = want.find(key);
    if (w == want.end() || w->second != b.worker) gone.push_back(key);
  }
  for (uint64_t key : gone) {
    release(peer, key);
    ++m_counters.repaired;
  }
  // Theirs that we never heard of (their booking was lost): in, without the
  // footprint it carried (counted in flight, an empty batch entry).
  for (const auto& [key, worker] : want) {
    if (peer.bookings.contains(key)) continue;
    const uint64_t refused = m_counters.refused;
    book(peer, key, worker, m_zero_counts, {});
    if (m_counters.refused == refused) ++m_counters.repaired;
  }
}

std::vector<PeerView::Name> PeerView::names() const {
  std::vector<Name> out;
  out.reserve(m_peers.size());
  for (const auto& [name, peer] : m_peers) out.push_back({name, peer.features});
  return out;
}

std::vector<std::string> PeerView::expire(uint64_t now_ns) {
  std::vector<std::string> dropped;
  for (auto it = m_peers.begin(); it != m_peers.end();) {
    if (now_ns > it->second.last_seen_ns &&
        now_ns - it->second.last_seen_ns > m_options.peer_timeout_ns) {
      release_all(it->second);
      dropped.push_back(it->first);
      ++m_counters.expired_peers;
      it = m_peers.erase(it);
    } else {
      ++it;
    }
  }
  return dropped;
}

std::vector<PeerInfo> PeerView::info(uint64_t now_ns) const {
  std::vector<PeerInfo> out;
  out.reserve(m_peers.size());
  for (const auto& [name, p] : m_peers)
    out.push_back({name, now_ns > p.last_seen_ns ? (now_ns - p.last_seen_ns) / 1'000'000 : 0,
                   static_cast<uint32_t>(p.bookings.size()), p.books, p.view_age_ms});
  std::sort(out.begin(), out.end(),
            [](const PeerInfo& a, const PeerInfo& b) { return a.node < b.node; });
  return out;
}

double PeerView::view_age_ms() const noexcept {
  double age = 0.0;
  for (const auto& [name, p] : m_peers) age = std::max(age, p.view_age_ms);
  return age;
}

std::unordered_map<int32_t, uint32_t> PeerView::bookings_by_worker() const {
  std::unordered_map<int32_t, uint32_t> out;
  for (const auto& [name, p] : m_peers)
    for (const auto& [key, b] : p.bookings) ++out[b.worker];
  return out;
}

}  // namespace eldr::pool
