// Internal file helpers shared by the readers of untrusted files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "eldr/status.hpp"

namespace eldr {

// Reads a whole file; anything above max_bytes is refused (a wrong path such
// as /dev/zero must fail, not exhaust memory). Errors carry the path.
Result<std::vector<uint8_t>> read_file(const std::string& path, uint64_t max_bytes);

}  // namespace eldr
