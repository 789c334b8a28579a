// OS plumbing of the transport: the mapped POSIX shared-memory object (the
// daemon's segment), a client's ring memory (a sealed memfd), the daemon's
// instance lock file (an OFD lock on byte 0, released by the kernel when the
// daemon dies), clocks, process identity, and the header checks shared by
// every opener.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "eldr/shm/layout.hpp"
#include "eldr/status.hpp"

namespace eldr::shm::detail {

uint64_t monotonic_ns() noexcept;
uint64_t realtime_ns() noexcept;
// /proc/<pid>/stat field 22 (clock ticks after boot); 0 when unreadable.
uint64_t process_start_time(pid_t pid) noexcept;
uint64_t random_generation();
std::string lock_file_path(std::string_view dir, std::string_view instance);
std::string socket_file_path(std::string_view dir, std::string_view instance);
// errno -> Errc: ENOENT no_daemon, EACCES/EPERM permission, ENOSPC/ENOMEM
// out_of_memory, else io; the message is what, then strerror.
Status errno_status(int err, const std::string& what);
Result<gid_t> lookup_group(const std::string& name);

// A mapped POSIX shared-memory object (Boost.Interprocess). Raw bytes only:
// there is no managed segment and no Boost segment manager.
class Mapping {
 public:
  // Exclusively, mode 0600, fully allocated (ENOSPC -> out_of_memory).
  static Result<std::unique_ptr<Mapping>> create(const std::string& name, uint64_t size);
  // ENOENT -> no_daemon, EACCES -> permission.
  static Result<std::unique_ptr<Mapping>> open(const std::string& name, bool writable);
  static bool remove(const std::string& name) noexcept;
  ~Mapping();
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  uint8_t* base() const noexcept { return m_base; }
  uint64_t size() const noexcept { return m_size; }
  int fd() const noexcept;
  bool unlinked() const noexcept;  // fstat().st_nlink == 0: removed under us

 private:
  struct Boost;
  explicit Mapping(std::unique_ptr<Boost> b);
  std::unique_ptr<Boost> m_boost;
  uint8_t* m_base = nullptr;
  uint64_t m_size = 0;
};

// One client's ring memory: an anonymous memfd, fully allocated, sealed
// against shrinking and growing (so no client can make the daemon's reads
// fault), mapped read-write by the daemon and by that client only.
class RingMemory {
 public:
  // Daemon: creates and maps it; release_fd() gives up the fd that travels
  // to the client.
  static Result<RingMemory> create(uint64_t size, uint32_t ring_bytes);
  // Client: maps the fd it was sent (takes it over) after checking its size
  // and seals.
  static Result<RingMemory> adopt(int fd, uint64_t size, uint32_t ring_bytes);
  RingMemory() = default;
  ~RingMemory();
  RingMemory(RingMemory&& other) noexcept;
  RingMemory& operator=(RingMemory&& other) noexcept;

  const RingView& view() const noexcept { return m_view; }
  // The fd, now the caller's (to send, then close): the mapping stays, and
  // no fd of the ring is left here (nothing of it in /proc/<pid>/fd).
  int release_fd() noexcept {
    const int fd = m_fd;
    m_fd = -1;
    return fd;
  }
  explicit operator bool() const noexcept { return m_view.base != nullptr; }

 private:
  void close_fd() noexcept;  // adopt: once mapped, the client needs no fd either
  void release() noexcept;
  RingView m_view;
  int m_fd = -1;
};

// The daemon's instance lock file (mode 0600: only the daemon opens it).
class LockFile {
 public:
  // Opens (creating if asked, with mode and group) the file at path for writing.
  static Result<LockFile> open(const std::string& path, bool create, uint32_t mode,
                               std::optional<gid_t> group);
  LockFile() = default;
  ~LockFile();
  LockFile(LockFile&& other) noexcept;
  LockFile& operator=(LockFile&& other) noexcept;

  bool try_lock(uint64_t byte);  // exclusive, non-blocking
  // Whether path still names this very file (not unlinked or replaced).
  bool still_at(const std::string& path) const;
  int fd() const noexcept { return m_fd; }
  void close();

 private:
  int m_fd = -1;
};

// Validates a mapped segment's header against this build: magic, format
// major, header size and layout hash (Errc::incompatible with distinct
// messages naming both versions), capacities and size (Errc::corrupt).
// `not_ready` is set (and ok returned) while the creator has not stored its
// identity yet.
Status check_header(const uint8_t* base, uint64_t file_size, bool& not_ready);
// After check_header: the view with offsets recomputed from the capacities.
SegmentView make_view(uint8_t* base);

const char* state_name(uint32_t state) noexcept;

}  // namespace eldr::shm::detail
