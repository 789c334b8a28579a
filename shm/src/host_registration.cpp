// The daemon's registrar thread: listens on the instance's socket, reads
// hellos, hands out ring memory (a slot, its epoch) or refuses with a reason,
// and binds the socket again when its path is removed.
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

constexpr size_t kMaxPendingHellos = 64;
constexpr uint64_t kHelloTimeoutNs = 1'000'000'000;
constexpr int kRegistrarTickMs = 250;  // also how often the socket's path is checked

}  // namespace

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

}  // namespace eldr::shm
