#include "eldr/peer_twins.hpp"

#include <algorithm>
#include <cmath>

namespace eldr {

PeerTwins::PeerTwins(uint32_t peers, double view_delay_ms) noexcept {
  set_twins_per_pick(peers);
  set_view_delay_ms(view_delay_ms);
}

void PeerTwins::set_twins_per_pick(double twins) noexcept {
  m_per_pick = std::isfinite(twins) && twins > 0.0 ? std::min(twins, kMaxTwinsPerPick) : 0.0;
  if (m_per_pick == 0.0) m_carry = 0.0;
}

void PeerTwins::set_view_delay_ms(double view_delay_ms) noexcept {
  m_delay_ms = std::isfinite(view_delay_ms) && view_delay_ms > 0.0 ? view_delay_ms : 0.0;
}

Status PeerTwins::after_route(Router& router, int32_t worker_id, std::span<const int16_t> counts,
                              double now_ms) {
  if (m_per_pick <= 0.0 || m_delay_ms <= 0.0) return Status::ok();
  // Whole twins now, the fraction owed to a later pick.
  const double owed = m_per_pick + m_carry;
  const auto twins = static_cast<uint32_t>(owed);
  m_carry = owed - twins;
  if (twins == 0) return Status::ok();
  Group g{now_ms + m_delay_ms, m_next_id, 0};
  for (uint32_t i = 0; i < twins; ++i) {
    Status s = router.book(worker_id, counts, g.first_id + i);
    if (!s) {  // none booked beyond this one: release what was
      for (uint32_t j = 0; j < g.count; ++j) (void)router.complete_request(g.first_id + j);
      return s;
    }
    ++g.count;
  }
  m_next_id += twins;
  // A shorter delay than before must not release the group early: keep due times ordered.
  if (!m_groups.empty()) g.due_ms = std::max(g.due_ms, m_groups.back().due_ms);
  m_groups.push_back(g);
  return Status::ok();
}

void PeerTwins::release_due(Router& router, double now_ms) {
  while (!m_groups.empty() && m_groups.front().due_ms <= now_ms) {
    const Group& g = m_groups.front();
    for (uint32_t i = 0; i < g.count; ++i) (void)router.complete_request(g.first_id + i);
    m_groups.pop_front();
  }
}

size_t PeerTwins::pending() const noexcept {
  size_t n = 0;
  for (const Group& g : m_groups) n += g.count;
  return n;
}

}  // namespace eldr
