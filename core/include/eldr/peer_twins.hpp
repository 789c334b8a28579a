// Against herding when several routers share one pool (one eldrd per node,
// or gateway replicas) and each hears of the others' picks only after a
// delay. Within that delay every router sees the same stale state, so each
// would send its next request to the same "best" worker. A router that
// routes a request therefore assumes that each of its peers has just sent a
// twin of it to the same worker, one it has not heard of yet: it books
// `peers` copies of the request there (Router::book) and releases them once
// the peers' real bookings can have arrived (view delay later). A router
// gets about as many arrivals as each peer, so one twin per peer per pick is
// the expected unseen load, placed where the same view would put it.
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
  // Peers come and go, and the view's age is measured: later picks use the
  // new values, twins booked before keep theirs.
  void set_peers(uint32_t peers) noexcept { m_peers = peers; }
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
  uint32_t m_peers = 0;
  double m_delay_ms = 0.0;
  uint64_t m_next_id = uint64_t{1} << 63;
  std::deque<Group> m_groups;  // by due time: the delay only changes between picks
};

}  // namespace eldr
