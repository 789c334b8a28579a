// A text file, gzip-compressed or not (zlib reads a plain file as it is):
// traces' tokens.jsonl.gz and the calibration records of `eldr fit`.
#pragma once

#include <string>

#include "eldr/status.hpp"

namespace eldr {

// The whole (uncompressed) file; io on an unreadable or corrupt file and past
// 2 GiB uncompressed.
Result<std::string> read_text_file(const std::string& path);

}  // namespace eldr
