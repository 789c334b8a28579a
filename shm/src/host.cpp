// The daemon's end of the transport: segment creation and recreation, the
// record consumer (poll), decision publishing, liveness (maintain) and the
// doorbell. Single-threaded by contract.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <optional>

#include "eldr/shm.hpp"
#include "eldr/shm/decisions.hpp"
#include "eldr/shm/futex.hpp"
#include "eldr/shm/layout.hpp"
#include "eldr/shm/records.hpp"
#include "eldr/shm/ring.hpp"
#include "eldr/shm/segment.hpp"

namespace eldr::shm {

using namespace detail;

namespace {

constexpr uint64_t kFirstEpoch = 1;

Status validate_config(const SegmentConfig& c) {
  ELDR_TRY(validate_instance_name(c.instance));
  if (c.max_clients == 0 || c.max_clients > kMaxClientsLimit)
    return {Errc::invalid_argument,
            "max_clients must be in [1, " + std::to_string(kMaxClientsLimit) + "]"};
  if (!valid_ring_capacity(c.ring_bytes))
    return {Errc::invalid_argument,
            "ring_bytes must be a power of two in [" + std::to_string(kMinRingBytes) + ", " +
                std::to_string(kMaxRingBytes) + "], got " + std::to_string(c.ring_bytes)};
  if (c.decision_slots < kMinDecisionSlots || c.decision_slots > kMaxDecisionSlots ||
      (c.decision_slots & (c.decision_slots - 1)) != 0)
    return {Errc::invalid_argument, "decision_slots must be a power of two in [" +
                                        std::to_string(kMinDecisionSlots) + ", " +
                                        std::to_string(kMaxDecisionSlots) + "]"};
  if (c.max_workers == 0 || c.max_workers > kMaxWorkersLimit)
    return {Errc::invalid_argument,
            "max_workers must be in [1, " + std::to_string(kMaxWorkersLimit) + "]"};
  if ((c.mode & ~0777u) != 0) return {Errc::invalid_argument, "mode must be a permission mask"};
  if (c.lock_dir.empty()) return {Errc::invalid_argument, "lock_dir is empty"};
  return Status::ok();
}

// The consumer's private view of one slot: never read back from shared memory.
struct SlotState {
  RingCursor cursor;
  uint64_t epoch = kFirstEpoch;
  uint64_t records = 0;
  uint64_t rejected = 0;
  bool quarantined = false;
};

}  // namespace

struct Host::Impl {
  SegmentConfig config;
  std::optional<gid_t> group;
  std::string name;
  std::string lock_path;
  LockFile lock;
  std::unique_ptr<Mapping> mapping;
  SegmentView view;
  uint64_t generation = 0;
  std::vector<SlotState> slots;
  PayloadBuffer payload;   // private copy of the record being validated
  uint32_t next_slot = 0;  // round-robin start of the next poll
  Status create_error;     // why the last recreation failed (ok: mapped)

  Status create_segment();
  void drain_segment();  // DRAINING, wake everyone
  void quarantine(uint32_t slot, RecordHandler& handler, const ReadResult& r);
  void reclaim(uint32_t slot);
  bool ring_drained(uint32_t slot) const;
  bool any_pending() const;
};

Status Host::Impl::create_segment() {
  const Layout l = compute_layout(config.max_clients, config.ring_bytes, config.decision_slots,
                                  config.max_workers);
  auto created = Mapping::create(name, l.segment_size);
  if (!created && created.status().code() == Errc::io) {
    // EEXIST: a leftover appeared between the removal and now; we hold the
    // instance lock, so it is not a live daemon's.
    Mapping::remove(name);
    created = Mapping::create(name, l.segment_size);
  }
  if (!created) return created.status();
  mapping = std::move(*created);
  uint8_t* base = mapping->base();
  generation = random_generation();

  // The fresh pages are zero: that is the initial state of every atomic and
  // row (FREE, positions 0, empty decision cells).
  auto* h = new (base) SegmentHeader{};
  h->format_major = kFormatMajor;
  h->format_minor = kFormatMinor;
  h->header_size = sizeof(SegmentHeader);
  h->cache_line = kCacheLine;
  h->segment_size = l.segment_size;
  h->layout_hash = kLayoutHash;
  h->max_clients = config.max_clients;
  h->ring_bytes = config.ring_bytes;
  h->decision_slots = config.decision_slots;
  h->max_workers = config.max_workers;
  h->clients_offset = l.clients_offset;
  h->rings_offset = l.rings_offset;
  h->ring_stride = l.ring_stride;
  h->decisions_offset = l.decisions_offset;
  h->workers_offset = l.workers_offset;
  h->generation = generation;
  h->daemon_pid = static_cast<uint32_t>(::getpid());
  h->daemon_start_time = process_start_time(::getpid());
  h->lock_dev = lock.dev();
  h->lock_ino = lock.ino();
  std::strncpy(h->lock_path, lock_path.c_str(), sizeof(h->lock_path) - 1);
  h->heartbeat_ns.store(monotonic_ns(), std::memory_order_relaxed);
  view = make_view(base);
  slots.assign(config.max_clients, SlotState{});
  for (uint32_t i = 0; i < config.max_clients; ++i) {
    ClientRow* row = new (view.row(i)) ClientRow{};
    row->ring_offset = l.rings_offset + uint64_t{i} * l.ring_stride;
    row->epoch.store(kFirstEpoch, std::memory_order_relaxed);
    new (view.ring_control(i)) RingControl{};
  }
  std::memcpy(h->magic, kMagic, sizeof(kMagic));
  h->state.store(static_cast<uint32_t>(SegmentState::ready), std::memory_order_release);

  // Open up to the engines and gateways only now that it is complete.
  Status s;
  if (::fchmod(mapping->fd(), config.mode) != 0)
    s = {Errc::permission, "cannot chmod " + name + ": " + std::strerror(errno)};
  else if (group && ::fchown(mapping->fd(), static_cast<uid_t>(-1), *group) != 0)
    s = {Errc::permission,
         "cannot give " + name + " to group " + config.group + ": " + std::strerror(errno)};
  if (!s) {
    mapping.reset();
    Mapping::remove(name);
  }
  return s;
}

void Host::Impl::drain_segment() {
  SegmentHeader* h = view.header;
  h->state.store(static_cast<uint32_t>(SegmentState::draining), std::memory_order_seq_cst);
  h->decision_seq.fetch_add(1, std::memory_order_seq_cst);
  futex_wake(&h->decision_seq);
  h->doorbell.fetch_add(1, std::memory_order_seq_cst);
  futex_wake(&h->doorbell);
}

Result<std::unique_ptr<Host>> Host::create(const SegmentConfig& config) {
  ELDR_TRY(validate_config(config));
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  impl->name = segment_name(config.instance);
  impl->lock_path = lock_file_path(config.lock_dir, config.instance);
  if (impl->lock_path.size() >= sizeof(SegmentHeader::lock_path))
    return Status{Errc::invalid_argument, "lock_dir path too long"};
  if (!config.group.empty()) {
    auto gid = lookup_group(config.group);
    if (!gid) return gid.status();
    impl->group = *gid;
  }
  // Take byte 0 of the lock file. A racing daemon may unlink the file between
  // our open and our lock: only a lock on the file the path still names counts.
  for (int attempt = 0;; ++attempt) {
    auto lock = LockFile::open(impl->lock_path, true, config.mode, impl->group);
    if (!lock) return lock.status();
    if (!lock->try_lock(0))
      return Status{Errc::state, "another eldrd holds instance \"" + config.instance +
                                     "\" (lock file " + impl->lock_path + ")"};
    if (lock->still_at(impl->lock_path)) {
      impl->lock = std::move(*lock);
      break;
    }
    if (attempt == 8)
      return Status{Errc::state, "lock file " + impl->lock_path + " keeps being replaced"};
  }
  // Whatever carries our name now is a crashed predecessor's: we hold the lock.
  Mapping::remove(impl->name);
  ELDR_TRY(impl->create_segment());
  return std::unique_ptr<Host>(new Host(std::move(impl)));
}

Host::Host(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}

Host::~Host() {
  if (!m_impl || !m_impl->mapping) return;
  m_impl->drain_segment();
  if (!m_impl->mapping->unlinked()) Mapping::remove(m_impl->name);
  m_impl->mapping.reset();
  // Unlink before closing: a daemon that opens the old file after this fails
  // its still_at() check instead of locking a file nobody else will see.
  if (m_impl->lock.still_at(m_impl->lock_path)) ::unlink(m_impl->lock_path.c_str());
  m_impl->lock.close();
}

uint64_t Host::generation() const noexcept { return m_impl->generation; }
Status Host::segment_status() const { return m_impl->create_error; }
const SegmentConfig& Host::config() const noexcept { return m_impl->config; }

// ---- consuming --------------------------------------------------------------------

void Host::Impl::quarantine(uint32_t slot, RecordHandler& handler, const ReadResult& r) {
  SlotState& s = slots[slot];
  s.quarantined = true;
  ++s.rejected;
  ClientRow* row = view.row(slot);
  row->quarantined.store(1, std::memory_order_relaxed);
  row->rejected.store(s.rejected, std::memory_order_relaxed);
  handler.on_rejected(
      slot, r.reason, {},
      Status{r.why.code(), "client " + std::to_string(slot) + " quarantined: " + r.why.message()});
}

size_t Host::poll(RecordHandler& handler, size_t max_records) {
  Impl& m = *m_impl;
  if (!m.mapping) return 0;
  const uint32_t n = m.config.max_clients;
  size_t consumed = 0;
  // Round-robin, one record per client per round: a busy client cannot starve the rest.
  bool progress = true;
  while (progress && consumed < max_records) {
    progress = false;
    for (uint32_t k = 0; k < n && consumed < max_records; ++k) {
      const uint32_t slot = (m.next_slot + k) % n;
      SlotState& s = m.slots[slot];
      ClientRow* row = m.view.row(slot);
      if (s.quarantined ||
          row->state.load(std::memory_order_acquire) == static_cast<uint32_t>(RowState::free))
        continue;
      RingControl* ctl = m.view.ring_control(slot);
      const uint64_t producer = ctl->producer.load(std::memory_order_acquire);
      const std::span<const uint8_t> ring(m.view.ring_data(slot), m.config.ring_bytes);
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
              d.footprint.client_pid = row->pid.load(std::memory_order_relaxed);
              handler.on_footprint(d.footprint);
              break;
            case RecordType::complete:
              handler.on_complete_ex({slot, row->pid.load(std::memory_order_relaxed), d.request_id,
                                      d.completion_token});
              break;
            case RecordType::worker_report:
              handler.on_worker_report_ex(
                  slot, {d.worker, d.running, d.kv_usage, d.batch_size, d.step_ms});
              break;
            case RecordType::worker_control:
              handler.on_worker_control(slot, d.worker, d.op);
              break;
            case RecordType::padding:
              break;
          }
        }
      }
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
  const uint64_t now = monotonic_ns();
  const std::optional<uint64_t> evicted =
      publish_decision(m.view.decisions(), m.config.decision_slots, request_id, decision, now);
  h->decisions_published.fetch_add(1, std::memory_order_relaxed);
  // Dekker pairing with wait_decision: bump the word, then look for sleepers.
  h->decision_seq.fetch_add(1, std::memory_order_seq_cst);
  if (h->decision_waiters.load(std::memory_order_seq_cst) > 0) futex_wake(&h->decision_seq);
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

std::vector<ClientInfo> Host::clients() const {
  const Impl& m = *m_impl;
  std::vector<ClientInfo> out;
  if (!m.mapping) return out;
  for (uint32_t i = 0; i < m.config.max_clients; ++i) {
    const ClientRow* row = m.view.row(i);
    if (row->state.load(std::memory_order_acquire) == static_cast<uint32_t>(RowState::free))
      continue;
    const SlotState& s = m.slots[i];
    const uint64_t producer = m.view.ring_control(i)->producer.load(std::memory_order_acquire);
    ClientInfo c;
    c.slot = i;
    c.pid = row->pid.load(std::memory_order_relaxed);
    c.epoch = s.epoch;
    c.ring_capacity = m.config.ring_bytes;
    c.ring_used = check_positions(producer, s.cursor.consumer, m.config.ring_bytes)
                      ? producer - s.cursor.consumer
                      : 0;
    c.records = s.records;
    c.rejected = s.rejected;
    c.quarantined = s.quarantined;
    out.push_back(c);
  }
  return out;
}

// ---- liveness -------------------------------------------------------------------------

bool Host::Impl::ring_drained(uint32_t slot) const {
  const uint64_t producer = view.ring_control(slot)->producer.load(std::memory_order_acquire);
  // A claimed but uncommitted record is invisible: committed bytes are all that count.
  return producer == slots[slot].cursor.consumer ||
         !check_positions(producer, slots[slot].cursor.consumer, config.ring_bytes);
}

void Host::Impl::reclaim(uint32_t slot) {
  ClientRow* row = view.row(slot);
  RingControl* ctl = view.ring_control(slot);
  SlotState& s = slots[slot];
  ctl->producer.store(0, std::memory_order_relaxed);
  ctl->consumer.store(0, std::memory_order_relaxed);
  row->pid.store(0, std::memory_order_relaxed);
  row->start_time.store(0, std::memory_order_relaxed);
  row->heartbeat_ns.store(0, std::memory_order_relaxed);
  row->records.store(0, std::memory_order_relaxed);
  row->rejected.store(0, std::memory_order_relaxed);
  row->quarantined.store(0, std::memory_order_relaxed);
  // The next registration's epoch comes from our private copy: a row's bytes
  // may have been scribbled on by any client.
  const uint64_t epoch = s.epoch + 1;
  s = SlotState{};
  s.epoch = epoch;
  row->epoch.store(epoch, std::memory_order_relaxed);
  // FREE last: a client claims the slot only after seeing it (acquire).
  row->state.store(static_cast<uint32_t>(RowState::free), std::memory_order_release);
}

std::vector<uint32_t> Host::maintain() {
  Impl& m = *m_impl;
  std::vector<uint32_t> reclaimed;
  if (m.mapping && m.mapping->unlinked()) {
    // Someone removed /dev/shm/<name> under us (systemd RemoveIPC, a cleanup
    // script): clients can no longer find us. Tell the old segment's clients
    // and build a new one; they re-attach to it.
    m.drain_segment();
    m.mapping.reset();
  }
  if (!m.mapping) {
    // (Re)creation failed before (e.g. /dev/shm full): try again each call.
    Mapping::remove(m.name);
    m.create_error = m.create_segment();
    return reclaimed;
  }
  m.view.header->heartbeat_ns.store(monotonic_ns(), std::memory_order_release);
  for (uint32_t i = 0; i < m.config.max_clients; ++i) {
    ClientRow* row = m.view.row(i);
    const uint32_t state = row->state.load(std::memory_order_acquire);
    if (state == static_cast<uint32_t>(RowState::free)) continue;
    if (state == static_cast<uint32_t>(RowState::active)) {
      auto held = m.lock.locked_elsewhere(1 + uint64_t{i});
      if (!held || *held) continue;  // alive (or cannot tell: look again next time)
      row->state.store(static_cast<uint32_t>(RowState::dead), std::memory_order_release);
    } else if (state != static_cast<uint32_t>(RowState::dead)) {
      // A state no party writes: the row was scribbled on. Reclaim it once
      // nobody holds the slot.
      auto held = m.lock.locked_elsewhere(1 + uint64_t{i});
      if (!held || *held) continue;
    }
    // Dead: its committed records are still consumed; reclaim once drained.
    if (m.slots[i].quarantined || m.ring_drained(i)) {
      m.reclaim(i);
      reclaimed.push_back(i);
    }
  }
  return reclaimed;
}

bool Host::Impl::any_pending() const {
  for (uint32_t i = 0; i < config.max_clients; ++i) {
    if (slots[i].quarantined ||
        view.row(i)->state.load(std::memory_order_acquire) == static_cast<uint32_t>(RowState::free))
      continue;
    if (view.ring_control(i)->producer.load(std::memory_order_acquire) != slots[i].cursor.consumer)
      return true;
  }
  return false;
}

void Host::wait_for_work(std::chrono::microseconds timeout) {
  Impl& m = *m_impl;
  if (!m.mapping) return;
  SegmentHeader* h = m.view.header;
  const uint32_t seen = h->doorbell.load(std::memory_order_acquire);
  h->daemon_sleeping.store(1, std::memory_order_seq_cst);
  // Dekker pairing with the producers' commit: announce sleep, then re-check the rings.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (!m.any_pending()) futex_wait(&h->doorbell, seen, timeout);
  h->daemon_sleeping.store(0, std::memory_order_relaxed);
}

}  // namespace eldr::shm
