#include "eldr/lab/text_file.hpp"

#include <zlib.h>

namespace eldr {

Result<std::string> read_text_file(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) return Status{Errc::io, path + ": cannot open"};
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) {
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > (size_t{1} << 31)) {
      gzclose(f);
      return Status{Errc::io, path + ": more than 2 GiB uncompressed"};
    }
  }
  int err = Z_OK;
  const char* msg = n < 0 ? gzerror(f, &err) : nullptr;
  const std::string what = msg ? msg : "";
  gzclose(f);
  if (n < 0) return Status{Errc::io, path + ": not a readable gzip file (" + what + ")"};
  return out;
}

}  // namespace eldr
