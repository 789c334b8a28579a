#include "eldr/internal/file_io.hpp"

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

}  // namespace eldr
