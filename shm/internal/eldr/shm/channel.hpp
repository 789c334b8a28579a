// The Unix-socket channel between the daemon and each client: registration
// (hello, then a welcome carrying the client's ring memory as SCM_RIGHTS),
// the peer's pid and uid as the kernel names them (SO_PEERCRED), liveness
// (a closed socket is a gone peer, whoever closed it and however) and the
// doorbell (any message after the welcome). SOCK_SEQPACKET: messages keep
// their boundaries, and a peer's death shows as EOF.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "eldr/status.hpp"

namespace eldr::shm::detail {

// An owned file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) noexcept : m_fd(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& other) noexcept : m_fd(other.release()) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  int get() const noexcept { return m_fd; }
  int release() noexcept {
    const int fd = m_fd;
    m_fd = -1;
    return fd;
  }
  void reset(int fd = -1) noexcept;
  explicit operator bool() const noexcept { return m_fd >= 0; }

 private:
  int m_fd = -1;
};

// Longest path a sockaddr_un holds (NUL excluded). Longer socket paths are
// bound and connected through their directory's fd.
size_t max_socket_path();

// Daemon: binds path (replacing what is there: the caller holds the instance
// lock), gives it mode and group, and only then listens, so nobody connects
// before the permissions are in place. Non-blocking.
Result<Fd> listen_at(const std::string& path, uint32_t mode, std::optional<gid_t> group);
// The identity of what path names now (none if nothing is there): the
// daemon keeps its socket's from bind time, and a change means someone
// removed or replaced the socket (systemd RemoveIPC, a cleanup script).
struct FileId {
  uint64_t dev = 0, ino = 0;
  bool operator==(const FileId&) const = default;
};
std::optional<FileId> file_id(const std::string& path);
// Client: connects to path. ENOENT and ECONNREFUSED -> no_daemon (nobody
// listens there), EACCES -> permission.
Result<Fd> connect_to(const std::string& path);

struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};
std::optional<PeerCredentials> peer_credentials(int fd);

// Sends one message, with fd_to_pass (>= 0) as SCM_RIGHTS. Never blocks and
// never raises SIGPIPE. Returns the errno (0 = sent).
int send_message(int fd, const void* data, size_t size, int fd_to_pass = -1);
// Receives one message of at most `size` bytes (MSG_DONTWAIT unless
// `block`), taking over at most one passed descriptor into *received (others
// are closed). Returns the bytes read, 0 at EOF, -errno on error; a message
// longer than size is cut (MSG_TRUNC reports its real length, returned).
ssize_t receive_message(int fd, void* data, size_t size, Fd* received, bool block);

// poll(2) on one fd for readability: 1 readable (or hung up), 0 timed out,
// -errno on error.
int wait_readable(int fd, int timeout_ms);
// Whether the peer closed its end (checked without consuming anything).
bool peer_closed(int fd);

}  // namespace eldr::shm::detail
