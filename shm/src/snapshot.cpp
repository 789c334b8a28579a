// `eldr status`: a read-only look at a daemon's segment. No registration, no
// writes; every field is read from shared memory the daemon may be changing.
#include <algorithm>

#include "eldr/shm.hpp"
#include "eldr/shm/decisions.hpp"
#include "eldr/shm/segment.hpp"

namespace eldr::shm {

using namespace detail;

Result<SegmentSnapshot> read_snapshot(std::string_view instance) {
  ELDR_TRY(validate_instance_name(instance));
  const std::string name = segment_name(instance);
  auto mapped = Mapping::open(name, false);
  if (!mapped) return mapped.status();
  const Mapping& m = **mapped;
  bool not_ready = false;
  ELDR_TRY(check_header(m.base(), m.size(), not_ready));
  if (not_ready) return Status{Errc::no_daemon, "eldrd segment " + name + " is being created"};
  const SegmentView v = make_view(m.base());
  const SegmentHeader& h = *v.header;

  SegmentSnapshot s;
  s.format_major = h.format_major;
  s.format_minor = h.format_minor;
  s.generation = h.generation;
  s.daemon_pid = h.daemon_pid;
  const int64_t age =
      int64_t(monotonic_ns()) - int64_t(h.heartbeat_ns.load(std::memory_order_acquire));
  s.heartbeat_age_ms = age > 0 ? uint64_t(age) / 1'000'000 : 0;
  s.state = state_name(h.state.load(std::memory_order_acquire));
  s.decisions_published = h.decisions_published.load(std::memory_order_relaxed);
  s.clients_quarantined = h.clients_quarantined.load(std::memory_order_relaxed);
  s.registrations_refused = h.registrations_refused.load(std::memory_order_relaxed);
  for (uint32_t i = 0; i < v.max_clients; ++i) {
    const ClientRow* row = v.row(i);
    if (row->state.load(std::memory_order_acquire) == static_cast<uint32_t>(RowState::free))
      continue;
    ClientInfo c;
    c.slot = i;
    c.pid = row->pid.load(std::memory_order_relaxed);
    c.uid = row->uid.load(std::memory_order_relaxed);
    c.epoch = row->epoch.load(std::memory_order_relaxed);
    c.ring_capacity = v.ring_bytes;
    c.ring_used = std::min<uint64_t>(row->ring_used.load(std::memory_order_relaxed), v.ring_bytes);
    c.records = row->records.load(std::memory_order_relaxed);
    c.rejected = row->rejected.load(std::memory_order_relaxed);
    c.quarantined = row->quarantined.load(std::memory_order_relaxed) != 0;
    s.clients.push_back(c);
  }
  // The table epoch is written inside the workers' seqlock.
  if (read_workers(h, v.workers(), v.max_workers, s.workers, &s.router))
    s.table_epoch = h.table_epoch.load(std::memory_order_relaxed);
  (void)read_pool_status(h, *v.pool_status(), s.pool);
  return s;
}

}  // namespace eldr::shm
