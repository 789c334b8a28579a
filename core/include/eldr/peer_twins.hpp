// Against herding when several routers share one pool (one eldrd per node,
// or gateway replicas) and each hears of the others' picks only after a
// delay. Within that delay every router sees the same stale state, so each
// would send its next request to the same "best" worker. A router that
// routes a request therefore assumes that each of its peers has just sent a
// twin of it to the same worker, one it has not heard of yet: it books
// `peers` copies of the request there (Router::book) and releases them once
// the peers' real bookings can have arrived (view delay later). When every
// router gets as many arrivals as each peer, one twin per peer per pick is
// the expected unseen load, placed where the same view would put it; when
// rates differ, the peers route R_peers / R_own requests per pick of this
// router (set_twins_per_pick), fractions carried from pick to pick.
// docs/design.md §7 ("Several routers") has the measurements.
#pragma once

#include <cstdint>
#include <deque>
#include <span>

#include "eldr/router.hpp"
#include "eldr/status.hpp"

namespace eldr {

class PeerTwins {
 public:
  // peers: the other routers; view_delay_ms: how old this router's view of
  // their bookings is. 0 of either: nothing is anticipated.
  PeerTwins(uint32_t peers, double view_delay_ms) noexcept;
  // Peers come and go, their rates change, and the view's age is measured:
  // later picks use the new values, twins booked before keep theirs.
  // The peers' picks per pick of this router (their rate over this one's),
  // at most kMaxTwinsPerPick; not finite or <= 0: none.
  void set_twins_per_pick(double twins) noexcept;
  static constexpr double kMaxTwinsPerPick = 64.0;
  double twins_per_pick() const noexcept { return m_per_pick; }
  void set_view_delay_ms(double view_delay_ms) noexcept;

  // After router.route() put a request (counts) on worker_id at now_ms:
  // books its twins there. Their ids come from a range no caller's request
  // id reaches (bit 63 set).
  Status after_route(Router& router, int32_t worker_id, std::span<const int16_t> counts,
                     double now_ms);
  // Releases the twins due by now_ms (their peers' bookings are visible).
  void release_due(Router& router, double now_ms);
  size_t pending() const noexcept;  // twins booked, not released

 private:
  struct Group {
    double due_ms;
    uint64_t first_id;
    uint32_t count;
  };
  double m_per_pick = 0.0;
  double m_carry = 0.0;  // the fraction of a twin owed from earlier picks
  double m_delay_ms = 0.0;
  uint64_t m_next_id = uint64_t{1} << 63;
  std::deque<Group> m_groups;  // by due time: the delay only changes between picks
};

}  // namespace eldr
