// The daemon's private state (Host::Impl) and its view of each client slot,
// shared by the files of Host: host.cpp (segment creation and teardown),
// host_registration.cpp (the registrar thread) and host_consumer.cpp (poll,
// publish, maintain, wait_for_work: the consumer thread).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "eldr/shm.hpp"
#include "eldr/shm/channel.hpp"
#include "eldr/shm/layout.hpp"
#include "eldr/shm/records.hpp"
#include "eldr/shm/ring.hpp"
#include "eldr/shm/segment.hpp"

namespace eldr::shm {

namespace detail {

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

}  // namespace detail

// As in every file of the transport (only Host's files include this header).
using namespace detail;

struct Host::Impl {
  // The last decision's publish time: each publish is >= 1 us later (the
  // cells order evictions by microseconds).
  uint64_t last_publish_ns = 0;
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

}  // namespace eldr::shm
