// File helpers of the routing library: whole-file reads of untrusted files
// and the crash-safe write of the files it saves.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "eldr/status.hpp"

namespace eldr {

// Reads a whole file; anything above max_bytes is refused (a wrong path such
// as /dev/zero must fail, not exhaust memory). Errors carry the path.
Result<std::vector<uint8_t>> read_file(const std::string& path, uint64_t max_bytes);

// Replaces path with bytes atomically: a temporary file beside it, fsync,
// rename, then an fsync of the directory (best effort). A crash leaves either
// the old file or the new one, never a torn or empty one.
Status write_atomically(const std::string& path, const std::vector<uint8_t>& bytes);

}  // namespace eldr
