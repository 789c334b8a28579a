// The daemon's consumer thread: the record consumer (poll), decision and
// status publishing, liveness (maintain: hang-ups, reclaim) and the doorbell
// (wake, wait_for_work). poll/publish/maintain/wait_for_work run on one thread.
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <new>
#include <optional>
#include <thread>

#include "eldr/shm.hpp"
#include "eldr/shm/channel.hpp"
#include "eldr/shm/decisions.hpp"
#include "eldr/shm/futex.hpp"
#include "eldr/shm/host_state.hpp"
#include "eldr/shm/layout.hpp"
#include "eldr/shm/records.hpp"
#include "eldr/shm/ring.hpp"
#include "eldr/shm/segment.hpp"

namespace eldr::shm {

using namespace detail;

// ---- consuming --------------------------------------------------------------------

void Host::Impl::quarantine(uint32_t slot, RecordHandler& handler, const ReadResult& r) {
  SlotState& s = slots[slot];
  s.quarantined = true;
  ++s.rejected;
  ClientRow* row = view.row(slot);
  row->quarantined.store(1, std::memory_order_relaxed);
  row->rejected.store(s.rejected, std::memory_order_relaxed);
  view.header->clients_quarantined.store(++clients_quarantined, std::memory_order_relaxed);
  handler.on_rejected(
      slot, r.reason, {},
      Status{r.why.code(), "client " + std::to_string(slot) + " (pid " + std::to_string(s.pid) +
                               ") quarantined: " + r.why.message()});
}

size_t Host::poll(RecordHandler& handler, size_t max_records) {
  Impl& m = *m_impl;
  if (!m.mapping) return 0;
  if (m.reclaim_wanted.load(std::memory_order_relaxed) &&
      m.reclaim_wanted.exchange(false, std::memory_order_acquire)) {
    m.handle_socket_events({});
    m.reclaim_dead();
  }
  const uint32_t n = m.slots_in_use.load(std::memory_order_acquire);
  if (n == 0) return 0;
  size_t consumed = 0;
  // Round-robin, one record per client per round: a busy client cannot starve the rest.
  bool progress = true;
  while (progress && consumed < max_records) {
    progress = false;
    for (uint32_t k = 0; k < n && consumed < max_records; ++k) {
      const uint32_t slot = (m.next_slot + k) % n;
      SlotState& s = m.slots[slot];
      if (s.phase.load(std::memory_order_acquire) == static_cast<uint32_t>(Phase::free) ||
          s.quarantined)
        continue;
      RingControl* ctl = s.ring.view().control();
      const uint64_t producer = ctl->producer.load(std::memory_order_acquire);
      const std::span<const uint8_t> ring(s.ring.view().data(), m.config.ring_bytes);
      const ReadResult r =
          read_record(ring, producer, static_cast<uint32_t>(s.epoch), s.cursor, m.payload);
      if (r.outcome == ReadOutcome::empty) continue;
      progress = true;
      ++consumed;
      if (r.outcome == ReadOutcome::violation) {
        m.quarantine(slot, handler, r);
        continue;
      }
      const uint64_t seen = monotonic_ns();
      if (r.outcome == ReadOutcome::rejected) {
        ++s.rejected;
        handler.on_rejected(slot, r.reason, {}, r.why);
      } else {
        DecodedRecord d;
        Status valid = decode_record(r.type, r.schema, m.payload, d);
        if (!valid) {
          ++s.rejected;
          handler.on_rejected(slot, RejectReason::bad_payload, d.request_id, valid);
        } else {
          ++s.records;
          switch (r.type) {
            case RecordType::footprint:
              d.footprint.client = slot;
              d.footprint.seen_ns = seen;
              d.footprint.client_pid = s.pid;
              handler.on_footprint(d.footprint);
              break;
            case RecordType::complete:
              handler.on_complete_ex({slot, s.pid, d.request_id, d.completion_token});
              break;
            case RecordType::worker_report:
              handler.on_worker_report_ex(
                  slot, {d.worker, d.running, d.kv_usage, d.batch_size, d.step_ms});
              break;
            case RecordType::worker_control:
              handler.on_worker_control(slot, d.worker, d.op);
              break;
            case RecordType::prompt:
              d.prompt.client = slot;
              d.prompt.seen_ns = seen;
              d.prompt.client_pid = s.pid;
              handler.on_prompt(d.prompt);
              break;
            case RecordType::padding:
              break;
          }
        }
      }
      ClientRow* row = m.view.row(slot);
      row->records.store(s.records, std::memory_order_relaxed);
      row->rejected.store(s.rejected, std::memory_order_relaxed);
      ctl->consumer.store(s.cursor.consumer, std::memory_order_release);
    }
  }
  m.next_slot = (m.next_slot + 1) % n;
  return consumed;
}

// ---- decisions and status -----------------------------------------------------------

std::optional<uint64_t> Host::publish(std::string_view request_id, const DecisionIn& decision) {
  Impl& m = *m_impl;
  // Ids reaching the daemon were validated when their record was decoded.
  if (!m.mapping || !validate_request_id(request_id)) return std::nullopt;
  SegmentHeader* h = m.view.header;
  const uint64_t now = std::max(monotonic_ns(), m.last_publish_ns + 1000);
  m.last_publish_ns = now;
  const std::optional<uint64_t> evicted =
      publish_decision(m.view.decisions(), m.config.decision_slots, request_id, decision, now);
  h->decisions_published.fetch_add(1, std::memory_order_relaxed);
  // Dekker pairing with wait_decision: bump the word, then look for sleepers
  // (each client counts its own in its ring; one wake-up serves them all).
  h->decision_seq.fetch_add(1, std::memory_order_seq_cst);
  const uint32_t n = m.slots_in_use.load(std::memory_order_acquire);
  for (uint32_t i = 0; i < n; ++i) {
    const SlotState& s = m.slots[i];
    if (s.phase.load(std::memory_order_acquire) != static_cast<uint32_t>(Phase::active)) continue;
    if (s.ring.view().control()->decision_waiters.load(std::memory_order_seq_cst) != 0) {
      futex_wake(&h->decision_seq);
      break;
    }
  }
  if (!evicted) return std::nullopt;
  return now > *evicted ? now - *evicted : 0;
}

void Host::publish_workers(std::span<const WorkerRow> rows, uint64_t table_epoch) {
  Impl& m = *m_impl;
  if (!m.mapping) return;
  write_workers(*m.view.header, m.view.workers(), m.config.max_workers, rows, table_epoch);
}

void Host::publish_workers(std::span<const WorkerRow> rows, uint64_t table_epoch,
                           const RouterRow& router) {
  Impl& m = *m_impl;
  if (!m.mapping) return;
  write_workers(*m.view.header, m.view.workers(), m.config.max_workers, rows, table_epoch, &router);
}

void Host::publish_pool_status(std::string_view json) {
  Impl& m = *m_impl;
  if (!m.mapping) return;
  write_pool_status(*m.view.header, *m.view.pool_status(), json);
}

std::vector<ClientInfo> Host::clients() const {
  const Impl& m = *m_impl;
  std::vector<ClientInfo> out;
  if (!m.mapping) return out;
  const uint32_t n = m.slots_in_use.load(std::memory_order_acquire);
  for (uint32_t i = 0; i < n; ++i) {
    const SlotState& s = m.slots[i];
    if (s.phase.load(std::memory_order_acquire) == static_cast<uint32_t>(Phase::free)) continue;
    ClientInfo c;
    c.slot = i;
    c.pid = s.pid;
    c.uid = s.uid;
    c.epoch = s.epoch;
    c.ring_capacity = m.config.ring_bytes;
    c.ring_used = m.ring_used(i);
    c.records = s.records;
    c.rejected = s.rejected;
    c.quarantined = s.quarantined;
    out.push_back(c);
  }
  return out;
}

// ---- liveness -------------------------------------------------------------------------

uint64_t Host::Impl::ring_used(uint32_t slot) const {
  const SlotState& s = slots[slot];
  const uint64_t producer = s.ring.view().control()->producer.load(std::memory_order_acquire);
  // A claimed but uncommitted record is invisible: committed bytes are all that count.
  return check_positions(producer, s.cursor.consumer, config.ring_bytes)
             ? producer - s.cursor.consumer
             : 0;
}

// The client's socket hung up: the registration is over. Its committed
// records are still consumed; maintain() reclaims the slot once drained.
void Host::Impl::hang_up(uint32_t slot) {
  SlotState& s = slots[slot];
  if (s.phase.load(std::memory_order_acquire) != static_cast<uint32_t>(Phase::active)) return;
  (void)::epoll_ctl(epoll.get(), EPOLL_CTL_DEL, s.socket.get(), nullptr);
  s.socket_fd.store(-1, std::memory_order_release);
  s.socket.reset();
  view.row(slot)->state.store(static_cast<uint32_t>(RowState::dead), std::memory_order_release);
  s.phase.store(static_cast<uint32_t>(Phase::dead), std::memory_order_release);
  // A quarantined ring is never read again: nothing to drain, free it now
  // (a client that keeps breaking the protocol and re-registering must not
  // hold the slots of others meanwhile).
  if (s.quarantined) {
    reclaim(slot);
    reclaimed.push_back(slot);
  }
}

void Host::Impl::reclaim_dead() {
  const uint32_t n = slots_in_use.load(std::memory_order_acquire);
  for (uint32_t i = 0; i < n; ++i)
    if (slots[i].phase.load(std::memory_order_acquire) == static_cast<uint32_t>(Phase::dead) &&
        (slots[i].quarantined || ring_used(i) == 0)) {
      reclaim(i);
      reclaimed.push_back(i);
    }
}

void Host::Impl::reclaim(uint32_t slot) {
  SlotState& s = slots[slot];
  ClientRow* row = view.row(slot);
  s.clear();  // the ring unmapped: whatever the client still writes there reaches nobody
  row->pid.store(0, std::memory_order_relaxed);
  row->uid.store(0, std::memory_order_relaxed);
  row->records.store(0, std::memory_order_relaxed);
  row->rejected.store(0, std::memory_order_relaxed);
  row->ring_used.store(0, std::memory_order_relaxed);
  row->quarantined.store(0, std::memory_order_relaxed);
  row->state.store(static_cast<uint32_t>(RowState::free), std::memory_order_release);
  // Free last: the registrar hands the slot out only after seeing it (acquire).
  s.phase.store(static_cast<uint32_t>(Phase::free), std::memory_order_release);
}

// Doorbells (drained: their content means nothing) and hang-ups.
void Host::Impl::handle_socket_events(std::chrono::nanoseconds timeout) {
  epoll_event events[64];
  timespec ts{};
  if (timeout.count() > 0) {
    ts.tv_sec = static_cast<time_t>(timeout.count() / 1'000'000'000);
    ts.tv_nsec = static_cast<long>(timeout.count() % 1'000'000'000);
  }
  const int n = ::epoll_pwait2(epoll.get(), events, 64, &ts, nullptr);
  for (int e = 0; e < n; ++e) {
    const uint32_t slot = events[e].data.u32;
    if (slot == kWakeTag) {
      uint64_t count = 0;
      (void)!::read(wake_event.get(), &count, sizeof(count));
      continue;
    }
    if (slot >= config.max_clients) continue;
    SlotState& s = slots[slot];
    if (s.phase.load(std::memory_order_acquire) != static_cast<uint32_t>(Phase::active)) continue;
    bool gone = (events[e].events & (EPOLLHUP | EPOLLRDHUP | EPOLLERR)) != 0;
    char bell[16];
    for (int i = 0; !gone && i < 256; ++i) {
      const ssize_t got = receive_message(s.socket.get(), bell, sizeof(bell), nullptr, false);
      if (got == -EAGAIN) break;
      if (got <= 0) gone = true;  // EOF (or a reset)
    }
    if (gone) hang_up(slot);
  }
}

std::vector<uint32_t> Host::maintain() {
  Impl& m = *m_impl;
  std::vector<uint32_t> reclaimed;
  if (m.mapping && m.mapping->unlinked()) {
    // Someone removed /dev/shm/<name> under us (systemd RemoveIPC, a cleanup
    // script): clients can no longer find us. Tell the old segment's clients,
    // end every registration and build a new one; they re-register.
    std::lock_guard lock(m.registry);
    m.drain_segment();
    m.drop_all_slots();
    m.mapping.reset();
  }
  if (!m.mapping) {
    // (Re)creation failed before (e.g. /dev/shm full): try again each call.
    std::lock_guard lock(m.registry);
    Mapping::remove(m.name);
    m.create_error = m.create_segment();
    return reclaimed;
  }
  m.view.header->heartbeat_ns.store(monotonic_ns(), std::memory_order_release);
  m.handle_socket_events({});
  m.reclaim_dead();
  const uint32_t n = m.slots_in_use.load(std::memory_order_acquire);
  for (uint32_t i = 0; i < n; ++i)
    if (m.slots[i].phase.load(std::memory_order_acquire) == static_cast<uint32_t>(Phase::active))
      m.view.row(i)->ring_used.store(m.ring_used(i), std::memory_order_relaxed);
  reclaimed.swap(m.reclaimed);
  return reclaimed;
}

bool Host::Impl::any_pending() const {
  const uint32_t n = slots_in_use.load(std::memory_order_acquire);
  for (uint32_t i = 0; i < n; ++i) {
    const SlotState& s = slots[i];
    if (s.phase.load(std::memory_order_acquire) == static_cast<uint32_t>(Phase::free) ||
        s.quarantined)
      continue;
    if (s.ring.view().control()->producer.load(std::memory_order_acquire) != s.cursor.consumer)
      return true;
  }
  return false;
}

void Host::wake() noexcept {
  const uint64_t one = 1;
  (void)!::write(m_impl->wake_event.get(), &one, sizeof(one));
}

void Host::wait_for_work(std::chrono::microseconds timeout) {
  Impl& m = *m_impl;
  if (!m.mapping) return;
  SegmentHeader* h = m.view.header;
  h->daemon_sleeping.store(1, std::memory_order_seq_cst);
  // Dekker pairing with the producers' commit: announce sleep, then re-check
  // the rings; a producer that committed after our look sees the flag and
  // sends its doorbell, which ends the epoll wait.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (!m.any_pending()) m.handle_socket_events(timeout);
  h->daemon_sleeping.store(0, std::memory_order_relaxed);
}

}  // namespace eldr::shm
