// The daemon's end of the transport: segment creation and recreation, the
// v1 tombstone, Host's creation (instance lock, socket, registrar thread) and
// teardown. The registrar thread (the socket: hellos, ring memory, refusals)
// is in host_registration.cpp; the consumer's side (poll, decision
// publishing, liveness, the doorbell) in host_consumer.cpp.
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

namespace {

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

}  // namespace

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
  // row (FREE, empty decision cells).
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
  h->ring_size = l.ring_size;
  h->decisions_offset = l.decisions_offset;
  h->workers_offset = l.workers_offset;
  h->pool_status_offset = l.pool_status_offset;
  h->generation = generation;
  h->daemon_pid = static_cast<uint32_t>(::getpid());
  h->daemon_start_time = process_start_time(::getpid());
  std::strncpy(h->socket_path, socket_path.c_str(), sizeof(h->socket_path) - 1);
  h->heartbeat_ns.store(monotonic_ns(), std::memory_order_relaxed);
  h->registrations_refused.store(registrations_refused.load(), std::memory_order_relaxed);
  h->clients_quarantined.store(clients_quarantined, std::memory_order_relaxed);
  view = make_view(base);
  for (uint32_t i = 0; i < config.max_clients; ++i) {
    ClientRow* row = new (view.row(i)) ClientRow{};
    row->epoch.store(slots[i].epoch, std::memory_order_relaxed);
  }
  std::memcpy(h->magic, kMagic, sizeof(kMagic));
  h->state.store(static_cast<uint32_t>(SegmentState::ready), std::memory_order_release);

  // Open up to the engines and gateways only now that it is complete, and
  // for reading only: nothing here is theirs to write.
  Status s;
  if (::fchmod(mapping->fd(), config.mode & 0444u) != 0)
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

// A client of format 1 opens "/eldr-v1-<instance>" read-write and checks its
// header's format first: a page that says "format 2" makes it fail with
// Errc::incompatible naming both versions instead of "no daemon". Left alone
// when the name is taken (an eldrd of format 1 may serve it).
void Host::Impl::create_tombstone() {
  auto created = Mapping::create(tombstone_name, kPage);
  if (!created) return;
  auto* h = reinterpret_cast<SegmentHeader*>((*created)->base());
  h->format_major = kFormatMajor;
  h->format_minor = kFormatMinor;
  h->header_size = sizeof(SegmentHeader);
  std::memcpy(h->magic, kMagic, sizeof(kMagic));
  (void)::fchmod((*created)->fd(), config.mode);
  if (group) (void)::fchown((*created)->fd(), static_cast<uid_t>(-1), *group);
  tombstone = std::move(*created);
}

void Host::Impl::remove_tombstone() {
  if (!tombstone) return;
  // Only the file we created: a format-1 daemon may have replaced it since.
  struct stat mine {};
  const auto named = file_id("/dev/shm" + tombstone_name);
  if (::fstat(tombstone->fd(), &mine) == 0 && named && named->dev == uint64_t(mine.st_dev) &&
      named->ino == uint64_t(mine.st_ino))
    Mapping::remove(tombstone_name);
  tombstone.reset();
}

void Host::Impl::drain_segment() {
  SegmentHeader* h = view.header;
  h->state.store(static_cast<uint32_t>(SegmentState::draining), std::memory_order_seq_cst);
  h->decision_seq.fetch_add(1, std::memory_order_seq_cst);
  futex_wake(&h->decision_seq);
}

// Every registration ends (its socket closes: the client re-attaches);
// each slot keeps its epoch, so the next registration's records are new.
void Host::Impl::drop_all_slots() {
  for (uint32_t i = 0; i < config.max_clients; ++i) {
    SlotState& s = slots[i];
    if (s.phase.load(std::memory_order_acquire) == static_cast<uint32_t>(Phase::free)) continue;
    s.clear();
    s.phase.store(static_cast<uint32_t>(Phase::free), std::memory_order_release);
  }
}

Result<std::unique_ptr<Host>> Host::create(const SegmentConfig& config) {
  ELDR_TRY(validate_config(config));
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  impl->name = segment_name(config.instance);
  impl->lock_path = lock_file_path(config.lock_dir, config.instance);
  impl->socket_path = socket_file_path(config.lock_dir, config.instance);
  impl->tombstone_name = "/eldr-v1-" + config.instance;
  if (impl->socket_path.size() >= sizeof(SegmentHeader::socket_path))
    return Status{Errc::invalid_argument,
                  "lock_dir path too long: the socket path " + impl->socket_path + " is " +
                      std::to_string(impl->socket_path.size()) + " bytes, at most " +
                      std::to_string(sizeof(SegmentHeader::socket_path) - 1) + " fit"};
  if (!config.group.empty()) {
    auto gid = lookup_group(config.group);
    if (!gid) return gid.status();
    impl->group = *gid;
  }
  // Take byte 0 of the lock file. A racing daemon may unlink the file between
  // our open and our lock: only a lock on the file the path still names counts.
  for (int attempt = 0;; ++attempt) {
    auto lock = LockFile::open(impl->lock_path, true, 0600, std::nullopt);
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
  impl->slots = std::make_unique<SlotState[]>(config.max_clients);
  impl->epoll.reset(::epoll_create1(EPOLL_CLOEXEC));
  impl->stop_event.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  impl->wake_event.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!impl->epoll || !impl->stop_event || !impl->wake_event)
    return errno_status(errno, "cannot create epoll");
  epoll_event wake{};
  wake.events = EPOLLIN;
  wake.data.u32 = Impl::kWakeTag;
  if (::epoll_ctl(impl->epoll.get(), EPOLL_CTL_ADD, impl->wake_event.get(), &wake) != 0)
    return errno_status(errno, "cannot watch the wake event");
  // Whatever carries our name now is a crashed predecessor's: we hold the lock.
  Mapping::remove(impl->name);
  ELDR_TRY(impl->create_segment());
  ELDR_TRY(impl->listen());
  impl->create_tombstone();
  impl->registrar = std::thread([m = impl.get()] { m->run_registrar(); });
  return std::unique_ptr<Host>(new Host(std::move(impl)));
}

Host::Host(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}

Host::~Host() {
  if (!m_impl) return;
  Impl& m = *m_impl;
  const uint64_t one = 1;
  (void)!::write(m.stop_event.get(), &one, sizeof(one));
  if (m.registrar.joinable()) m.registrar.join();
  if (m.listener_id && file_id(m.socket_path) == m.listener_id) ::unlink(m.socket_path.c_str());
  m.listener.reset();
  m.remove_tombstone();
  if (m.mapping) {
    m.drain_segment();
    if (!m.mapping->unlinked()) Mapping::remove(m.name);
    m.mapping.reset();
  }
  m.drop_all_slots();
  // Unlink before closing: a daemon that opens the old file after this fails
  // its still_at() check instead of locking a file nobody else will see.
  if (m.lock.still_at(m.lock_path)) ::unlink(m.lock_path.c_str());
  m.lock.close();
}

uint64_t Host::generation() const noexcept { return m_impl->generation; }
Host::Counters Host::counters() const noexcept {
  return {m_impl->clients_quarantined,
          m_impl->registrations_refused.load(std::memory_order_relaxed)};
}
Status Host::segment_status() const { return m_impl->create_error; }
const SegmentConfig& Host::config() const noexcept { return m_impl->config; }

}  // namespace eldr::shm
