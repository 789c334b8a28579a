// The daemon's end of the transport: segment creation and recreation, the
// registrar thread (the socket: hellos, ring memory, refusals), the record
// consumer (poll), decision publishing, liveness (maintain: hang-ups, reclaim)
// and the doorbell. poll/publish/maintain/wait_for_work run on one thread.
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

// The daemon's private view of one slot: never read back from shared memory.
// `phase` hands the slot between the registrar thread (free -> active) and
// the consumer thread (active -> dead -> free); whoever does not own a phase
// touches nothing else of it.
enum class Phase : uint32_t { free = 0, active = 1, dead = 2 };
struct SlotState {
  std::atomic<uint32_t> phase{static_cast<uint32_t>(Phase::free)};
  RingCursor cursor;
  uint64_t epoch = 0;  // registrations of this slot so far
  uint64_t records = 0;
  uint64_t rejected = 0;
  bool quarantined = false;
  uint32_t pid = 0;  // SO_PEERCRED
  uint32_t uid = 0;
  RingMemory ring;
  Fd socket;
  // A copy of socket's number for the registrar, which only polls it for a
  // hang-up to say how many slots exited clients hold.
  std::atomic<int> socket_fd{-1};

  // Everything of the last registration but the epoch (which only grows)
  // and the phase (the caller hands the slot on).
  void clear() {
    socket_fd.store(-1, std::memory_order_release);
    socket.reset();
    ring = RingMemory{};
    cursor = RingCursor{};
    records = rejected = 0;
    quarantined = false;
    pid = uid = 0;
  }
};

constexpr size_t kMaxPendingHellos = 64;
constexpr uint64_t kHelloTimeoutNs = 1'000'000'000;
constexpr int kRegistrarTickMs = 250;  // also how often the socket's path is checked

}  // namespace

struct Host::Impl {
  SegmentConfig config;
  std::optional<gid_t> group;
  std::string name;
  std::string lock_path;
  std::string socket_path;
  LockFile lock;
  std::unique_ptr<Mapping> mapping;
  std::string tombstone_name;          // "/eldr-v1-<instance>"
  std::unique_ptr<Mapping> tombstone;  // at the v1 name, telling v1 clients which version runs
  SegmentView view;
  uint64_t generation = 0;
  std::unique_ptr<SlotState[]> slots;
  std::atomic<uint32_t> slots_in_use{0};  // 1 + the highest slot ever registered
  PayloadBuffer payload;                  // private copy of the record being validated
  uint32_t next_slot = 0;                 // round-robin start of the next poll
  Status create_error;                    // why the last recreation failed (ok: mapped)
  Fd epoll;                               // the consumer's: every registered client's socket

  // The registrar thread: accepts, reads hellos, hands out rings.
  std::mutex registry;  // registration vs. segment recreation
  Fd listener;
  std::optional<FileId> listener_id;
  Fd stop_event;
  // Host::wake(): ends the consumer's epoll wait for work that comes from
  // outside the rings (the pool's messages).
  Fd wake_event;
  static constexpr uint32_t kWakeTag = UINT32_MAX;
  std::thread registrar;
  std::atomic<uint64_t> registrations_refused{0};
  // Set by the registrar when no slot is free: the consumer looks for
  // hang-ups and reclaims at its next poll rather than its next maintain.
  std::atomic<bool> reclaim_wanted{false};
  uint64_t clients_quarantined = 0;
  std::vector<uint32_t> reclaimed;  // since the last maintain() (which returns them)

  Status create_segment();
  void create_tombstone();
  void remove_tombstone();
  void drain_segment();  // DRAINING, wake everyone
  void drop_all_slots();
  void quarantine(uint32_t slot, RecordHandler& handler, const ReadResult& r);
  void hang_up(uint32_t slot);
  void reclaim(uint32_t slot);
  uint64_t ring_used(uint32_t slot) const;  // committed, not consumed (0 if positions are garbage)
  bool any_pending() const;
  void handle_socket_events(std::chrono::nanoseconds timeout);
  void reclaim_dead();

  Status listen();
  void run_registrar();
  void answer_hello(Fd connection);
  void refuse(int fd, Errc code, const std::string& why, uint32_t flags = 0);
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

// ---- registration -------------------------------------------------------------------

Status Host::Impl::listen() {
  auto fd = listen_at(socket_path, config.mode, group);
  if (!fd) return fd.status();
  listener = std::move(*fd);
  listener_id = file_id(socket_path);
  return Status::ok();
}

void Host::Impl::refuse(int fd, Errc code, const std::string& why, uint32_t flags) {
  WelcomeMsg w{};
  std::memcpy(w.magic, kWelcomeMagic, sizeof(w.magic));
  w.status = static_cast<int32_t>(code);
  w.flags = flags;
  w.format_major = kFormatMajor;
  w.layout_hash = kLayoutHash;
  std::snprintf(w.message, sizeof(w.message), "%s", why.c_str());
  {  // counted before the peer hears it
    const uint64_t n = registrations_refused.fetch_add(1, std::memory_order_relaxed) + 1;
    std::lock_guard guard(registry);
    if (mapping) view.header->registrations_refused.store(n, std::memory_order_relaxed);
  }
  (void)send_message(fd, &w, sizeof(w));
}

void Host::Impl::answer_hello(Fd connection) {
  HelloMsg hello{};
  const ssize_t n = receive_message(connection.get(), &hello, sizeof(hello), nullptr, false);
  if (n == -EAGAIN) return;  // (poll said readable) nothing after all: drop it
  if (n != static_cast<ssize_t>(sizeof(hello)) ||
      std::memcmp(hello.magic, kHelloMagic, sizeof(hello.magic)) != 0)
    return refuse(connection.get(), Errc::incompatible, "not an eldr hello");
  if (hello.format_major != kFormatMajor)
    return refuse(connection.get(), Errc::incompatible,
                  "client speaks format version " + std::to_string(hello.format_major) +
                      ", this eldrd speaks version " + std::to_string(kFormatMajor));
  if (hello.layout_hash != kLayoutHash)
    return refuse(connection.get(), Errc::incompatible,
                  "client layout hash differs from this eldrd's (both format version " +
                      std::to_string(kFormatMajor) + "): rebuild the client against its eldr");
  const auto peer = peer_credentials(connection.get());
  if (!peer) return refuse(connection.get(), Errc::io, "cannot read the client's credentials");

  std::unique_lock guard(registry);
  if (!mapping) {
    guard.unlock();
    return refuse(connection.get(), Errc::no_daemon, "the daemon has no segment right now");
  }
  uint32_t slot = config.max_clients;
  uint32_t dead = 0;
  for (uint32_t i = 0; i < config.max_clients; ++i) {
    const uint32_t phase = slots[i].phase.load(std::memory_order_acquire);
    if (phase == static_cast<uint32_t>(Phase::free)) {
      slot = i;
      break;
    }
    if (phase == static_cast<uint32_t>(Phase::dead)) ++dead;
    const int fd = slots[i].socket_fd.load(std::memory_order_acquire);
    if (phase == static_cast<uint32_t>(Phase::active) && fd >= 0 && peer_closed(fd)) ++dead;
  }
  if (slot == config.max_clients) {
    reclaim_wanted.store(true, std::memory_order_release);
    guard.unlock();
    return refuse(connection.get(), Errc::capacity,
                  "all " + std::to_string(config.max_clients) +
                      " client slots of the eldrd segment are in use" +
                      (dead == 0 ? std::string()
                                 : " (" + std::to_string(dead) +
                                       " by exited clients, not reclaimed by the daemon yet)"),
                  dead == 0 ? 0 : kWelcomeRetrySoon);
  }
  const Layout l = view.layout;
  auto ring = RingMemory::create(l.ring_size, config.ring_bytes);
  if (!ring) {
    guard.unlock();
    return refuse(connection.get(), ring.status().code(), ring.status().message());
  }
  // A free slot and its row are clear (reclaim, drop_all_slots, a fresh segment).
  SlotState& s = slots[slot];
  Fd memfd(ring->release_fd());
  new (ring->view().control()) RingControl{};
  s.ring = std::move(*ring);
  s.pid = static_cast<uint32_t>(peer->pid);
  s.uid = static_cast<uint32_t>(peer->uid);
  s.epoch += 1;
  ClientRow* row = view.row(slot);
  row->pid.store(s.pid, std::memory_order_relaxed);
  row->uid.store(s.uid, std::memory_order_relaxed);
  row->epoch.store(s.epoch, std::memory_order_relaxed);
  row->state.store(static_cast<uint32_t>(RowState::active), std::memory_order_release);

  WelcomeMsg w{};
  std::memcpy(w.magic, kWelcomeMagic, sizeof(w.magic));
  w.status = 0;
  w.slot = slot;
  w.epoch = s.epoch;
  w.generation = generation;
  w.ring_size = l.ring_size;
  w.ring_bytes = config.ring_bytes;
  w.format_major = kFormatMajor;
  w.layout_hash = kLayoutHash;
  // The consumer watches the socket from now on: its hang-up ends the
  // registration, and a message on it is a doorbell.
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.u32 = slot;
  if (::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, connection.get(), &ev) != 0) {
    reclaim(slot);  // still free: nothing but this thread has seen it
    guard.unlock();
    return refuse(connection.get(), Errc::io, "the daemon cannot watch this connection");
  }
  // The welcome is sent on a descriptor of our own: once the slot is
  // active, its socket is the consumer's, which closes it on a hang-up.
  Fd sender(::dup(connection.get()));
  s.socket = std::move(connection);
  s.socket_fd.store(s.socket.get(), std::memory_order_release);
  uint32_t in_use = slots_in_use.load(std::memory_order_relaxed);
  while (in_use < slot + 1 &&
         !slots_in_use.compare_exchange_weak(in_use, slot + 1, std::memory_order_release)) {
  }
  // Active before the welcome: a client whose open returned is read by the
  // next poll.
  s.phase.store(static_cast<uint32_t>(Phase::active), std::memory_order_release);
  // A welcome that cannot be sent ends the registration like a hang-up.
  if (!sender || send_message(sender.get(), &w, sizeof(w), memfd.get()) != 0)
    ::shutdown(sender ? sender.get() : -1, SHUT_RDWR);
}

void Host::Impl::run_registrar() {
  struct Pending {
    Fd fd;
    uint64_t deadline_ns;
  };
  std::deque<Pending> pending;
  std::vector<pollfd> fds;
  uint64_t next_check_ns = monotonic_ns() + uint64_t(kRegistrarTickMs) * 1'000'000;
  for (;;) {
    fds.clear();
    fds.push_back({stop_event.get(), POLLIN, 0});
    fds.push_back({listener.get(), POLLIN, 0});
    for (const Pending& p : pending) fds.push_back({p.fd.get(), POLLIN, 0});
    const int rc = ::poll(fds.data(), fds.size(), kRegistrarTickMs);
    if (rc < 0 && errno != EINTR) break;
    if (fds[0].revents != 0) break;
    const uint64_t now = monotonic_ns();
    // Hellos first (their fds are the ones polled), then new connections.
    std::deque<Pending> waiting;
    for (size_t i = 0; i < pending.size(); ++i) {
      if (fds[2 + i].revents != 0)
        answer_hello(std::move(pending[i].fd));
      else if (now < pending[i].deadline_ns)
        waiting.push_back(std::move(pending[i]));
    }
    pending = std::move(waiting);
    if (fds[1].revents != 0) {
      for (;;) {
        const int c = ::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (c < 0) break;
        if (pending.size() == kMaxPendingHellos) pending.pop_front();  // the oldest silent one
        pending.push_back({Fd(c), now + kHelloTimeoutNs});
      }
    }
    if (now >= next_check_ns) {
      next_check_ns = now + uint64_t(kRegistrarTickMs) * 1'000'000;
      // Removed under us (systemd RemoveIPC, a cleanup script): bind again,
      // or nobody new could register.
      if (file_id(socket_path) != listener_id) {
        Fd old = std::move(listener);
        if (!listen()) listener = std::move(old);
      }
    }
  }
}

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
  const uint64_t now = monotonic_ns();
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
