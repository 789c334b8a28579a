#include "eldr/internal/file_io.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace eldr {

Result<std::vector<uint8_t>> read_file(const std::string& path, uint64_t max_bytes) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return Status{Errc::io, path + ": cannot open: " + std::strerror(errno)};
  struct Closer {
    std::FILE* f;
    ~Closer() { std::fclose(f); }
  } closer{f};
  std::vector<uint8_t> bytes;
  std::error_code ec;
  const auto size_hint = std::filesystem::file_size(path, ec);
  if (!ec && size_hint <= max_bytes) bytes.reserve(static_cast<size_t>(size_hint));
  // Read in chunks rather than trusting a seek-derived size: pipes and procfs
  // files report 0, and a file may change between the stat and the read.
  uint8_t chunk[1 << 16];
  for (;;) {
    size_t got = std::fread(chunk, 1, sizeof chunk, f);
    if (got > 0) {
      if (bytes.size() + got > max_bytes)
        return Status{Errc::io,
                      path + ": file larger than " + std::to_string(max_bytes) + " bytes"};
      bytes.insert(bytes.end(), chunk, chunk + got);
    }
    if (got < sizeof chunk) {
      if (std::ferror(f)) return Status{Errc::io, path + ": read error"};
      break;
    }
  }
  return bytes;
}

namespace {

Status write_fd_all(int fd, const uint8_t* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return {Errc::io, std::strerror(errno)};
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return Status::ok();
}

}  // namespace

Status write_atomically(const std::string& path, const std::vector<uint8_t>& bytes) {
  // The sequence number keeps two threads of one process that save the same
  // path from sharing a temporary file.
  static std::atomic<uint64_t> sequence{0};
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." +
                          std::to_string(sequence.fetch_add(1, std::memory_order_relaxed));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return {Errc::io, tmp + ": cannot create: " + std::strerror(errno)};
  Status st = write_fd_all(fd, bytes.data(), bytes.size());
  // fsync before rename: otherwise a crash can leave the new name pointing at
  // an empty file, which is worse than the old table.
  if (st && ::fsync(fd) != 0) st = {Errc::io, std::string("fsync: ") + std::strerror(errno)};
  if (::close(fd) != 0 && st) st = {Errc::io, std::string("close: ") + std::strerror(errno)};
  if (st && ::rename(tmp.c_str(), path.c_str()) != 0)
    st = {Errc::io, std::string("rename: ") + std::strerror(errno)};
  if (!st) {
    ::unlink(tmp.c_str());
    return {Errc::io, path + ": " + st.message()};
  }
  // Make the rename itself durable; best effort, some filesystems refuse it.
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
  return Status::ok();
}

}  // namespace eldr
