#include "eldr/shm/channel.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "eldr/shm/segment.hpp"

namespace eldr::shm::detail {

void Fd::reset(int fd) noexcept {
  if (m_fd >= 0) ::close(m_fd);
  m_fd = fd;
}

size_t max_socket_path() { return sizeof(sockaddr_un::sun_path) - 1; }

namespace {

// sun_path holds 107 bytes. A longer path (a deep lock_dir) is reached
// through its directory: /proc/self/fd/<O_PATH fd of the directory>/<name>,
// which the kernel resolves like the path itself (permissions included).
struct SocketAddress {
  sockaddr_un address{};
  Fd directory;  // held while the address is in use
};

Result<SocketAddress> address_of(const std::string& path) {
  SocketAddress a;
  a.address.sun_family = AF_UNIX;
  std::string usable = path;
  if (path.size() > max_socket_path()) {
    const size_t slash = path.rfind('/');
    if (slash == std::string::npos || slash == 0)
      return Status{Errc::invalid_argument, "socket path " + path + " is too long"};
    a.directory.reset(::open(path.substr(0, slash).c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!a.directory) return errno_status(errno, "cannot open the directory of " + path);
    usable = "/proc/self/fd/" + std::to_string(a.directory.get()) + path.substr(slash);
  }
  if (usable.empty() || usable.size() > max_socket_path())
    return Status{Errc::invalid_argument, "socket path " + path + " is " +
                                              std::to_string(path.size()) + " bytes, too long"};
  std::memcpy(a.address.sun_path, usable.data(), usable.size());
  return a;
}

}  // namespace

Result<Fd> listen_at(const std::string& path, uint32_t mode, std::optional<gid_t> group) {
  auto address = address_of(path);
  if (!address) return address.status();
  Fd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) return errno_status(errno, "cannot create the registration socket");
  ::unlink(path.c_str());
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&address->address), sizeof(sockaddr_un)) !=
      0)
    return errno_status(errno, "cannot bind the registration socket " + path);
  // Connecting takes write permission on the file: mode and group first,
  // listen() last (until then every connect is refused).
  if (::chmod(path.c_str(), mode) != 0)
    return errno_status(errno, "cannot chmod the registration socket " + path);
  if (group && ::chown(path.c_str(), static_cast<uid_t>(-1), *group) != 0)
    return Status{Errc::permission, "cannot give the registration socket " + path + " to group " +
                                        std::to_string(*group) + ": " + std::strerror(errno)};
  if (::listen(fd.get(), 128) != 0)
    return errno_status(errno, "cannot listen on the registration socket " + path);
  return fd;
}

std::optional<FileId> file_id(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return FileId{uint64_t(st.st_dev), uint64_t(st.st_ino)};
}

Result<Fd> connect_to(const std::string& path) {
  auto address = address_of(path);
  if (!address) return address.status();
  Fd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!fd) return errno_status(errno, "cannot create a socket");
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address->address),
                sizeof(sockaddr_un)) != 0) {
    const int err = errno;
    if (err == ENOENT || err == ECONNREFUSED)
      return Status{Errc::no_daemon, "nobody listens on " + path + " (is eldrd running?)"};
    if (err == EAGAIN)
      return Status{Errc::no_daemon, "the daemon's registration backlog at " + path + " is full"};
    return errno_status(err, "cannot connect to " + path);
  }
  return fd;
}

std::optional<PeerCredentials> peer_credentials(int fd) {
  ucred c{};
  socklen_t length = sizeof(c);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &c, &length) != 0 || length != sizeof(c))
    return std::nullopt;
  return PeerCredentials{c.pid, c.uid, c.gid};
}

int send_message(int fd, const void* data, size_t size, int fd_to_pass) {
  iovec io{const_cast<void*>(data), size};
  msghdr msg{};
  msg.msg_iov = &io;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (fd_to_pass >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd_to_pass, sizeof(int));
  }
  for (;;) {
    if (::sendmsg(fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL) >= 0) return 0;
    if (errno != EINTR) return errno;
  }
}

ssize_t receive_message(int fd, void* data, size_t size, Fd* received, bool block) {
  iovec io{data, size};
  msghdr msg{};
  msg.msg_iov = &io;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)] = {};
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n = 0;
  for (;;) {
    n = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC | MSG_TRUNC | (block ? 0 : MSG_DONTWAIT));
    if (n >= 0 || errno != EINTR) break;
  }
  if (n < 0) return -errno;
  // Whatever descriptors came: keep the first if asked, close the rest.
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int passed = -1;
      std::memcpy(&passed, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      if (received != nullptr && !*received)
        received->reset(passed);
      else
        ::close(passed);
    }
  }
  return n;
}

int wait_readable(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  for (;;) {
    const int rc = ::poll(&p, 1, timeout_ms);
    if (rc >= 0) return rc > 0 ? 1 : 0;
    if (errno != EINTR) return -errno;
  }
}

bool peer_closed(int fd) {
  pollfd p{fd, POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

}  // namespace eldr::shm::detail
