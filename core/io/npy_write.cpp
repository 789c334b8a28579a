// The .npy writer: encode_npy builds the image numpy writes, write_npy streams
// the same header and the data to a file (no second copy of a large array).
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <utility>

#include "eldr/internal/checked_math.hpp"
#include "eldr/npy.hpp"
#include "npy_common.hpp"

namespace eldr {

namespace {

using npy_detail::guarded;
using npy_detail::kMagic;
using npy_detail::kMagicLen;
using npy_detail::kMaxDims;
using npy_detail::shape_string;
using npy_detail::with_path;

// The data size of a C-order array of `shape`, or invalid_argument.
Result<size_t> encoded_data_bytes(NpyDtype dtype, std::span<const uint64_t> shape) {
  if (shape.size() > kMaxDims)
    return Status{Errc::invalid_argument,
                  "npy arrays have at most " + std::to_string(kMaxDims) + " dimensions"};
  uint64_t count = 1, data_bytes = 0;
  for (uint64_t d : shape)
    if (!checked_mul(count, d, &count))
      return Status{Errc::invalid_argument, "shape " + shape_string(shape) + " overflows"};
  if (!checked_mul(count, npy_dtype_size(dtype), &data_bytes) ||
      data_bytes > std::numeric_limits<size_t>::max())
    return Status{Errc::invalid_argument, "shape " + shape_string(shape) + " overflows"};
  return static_cast<size_t>(data_bytes);
}

// The preamble and the dict as numpy writes them: format 1.0 (2.0 when the
// header passes 64 KiB), the dict padded with spaces and ended by '\n' so that
// the data starts on a 64-byte boundary (mmap readers can use aligned loads).
std::string header_bytes(NpyDtype dtype, std::span<const uint64_t> shape) {
  const std::string dict = std::string("{'descr': '") + npy_dtype_descr(dtype) +
                           "', 'fortran_order': False, 'shape': " + shape_string(shape) + ", }";
  auto build = [&](size_t len_bytes) {
    const size_t preamble = kMagicLen + 2 + len_bytes;
    const size_t total = (preamble + dict.size() + 1 + 63) / 64 * 64;
    const size_t hlen = total - preamble;
    std::string out(kMagic, kMagicLen);
    out += static_cast<char>(len_bytes == 2 ? 1 : 2);
    out += '\0';
    for (size_t i = 0; i < len_bytes; ++i) out += static_cast<char>((hlen >> (8 * i)) & 0xff);
    out += dict;
    out.append(hlen - dict.size() - 1, ' ');
    out += '\n';
    return std::make_pair(out, hlen);
  };
  auto [header, hlen] = build(2);
  return hlen > 0xffff ? build(4).first : header;
}

Status write_all(const std::string& path, const std::string& header, const void* data,
                 uint64_t data_bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return {Errc::io, path + ": cannot create: " + std::strerror(errno)};
  bool ok = std::fwrite(header.data(), 1, header.size(), f) == header.size();
  if (ok && data_bytes > 0)
    ok = std::fwrite(data, 1, static_cast<size_t>(data_bytes), f) == data_bytes;
  // fclose flushes; a full disk often only shows up here.
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    std::remove(path.c_str());
    return {Errc::io, path + ": write failed"};
  }
  return Status::ok();
}

}  // namespace

Result<std::string> encode_npy_header(NpyDtype dtype, std::span<const uint64_t> shape) {
  return guarded("encode_npy_header", [&]() -> Result<std::string> {
    if (auto data_bytes = encoded_data_bytes(dtype, shape); !data_bytes) return data_bytes.status();
    return header_bytes(dtype, shape);
  });
}

Result<std::vector<uint8_t>> encode_npy(NpyDtype dtype, std::span<const uint64_t> shape,
                                        const void* data) {
  return guarded("encode_npy", [&]() -> Result<std::vector<uint8_t>> {
    auto data_bytes = encoded_data_bytes(dtype, shape);
    if (!data_bytes) return data_bytes.status();
    if (*data_bytes > 0 && data == nullptr)
      return Status{Errc::invalid_argument, "data is NULL for a non-empty array"};
    const std::string header = header_bytes(dtype, shape);
    std::vector<uint8_t> out;
    out.reserve(header.size() + *data_bytes);
    out.assign(header.begin(), header.end());
    const auto* p = static_cast<const uint8_t*>(data);
    if (*data_bytes > 0) out.insert(out.end(), p, p + *data_bytes);
    return out;
  });
}

Status write_npy(const std::string& path, NpyDtype dtype, std::span<const uint64_t> shape,
                 const void* data) {
  return guarded("write_npy", [&]() -> Status {
    auto data_bytes = encoded_data_bytes(dtype, shape);
    if (!data_bytes) return with_path(path, data_bytes.status());
    if (*data_bytes > 0 && data == nullptr)
      return {Errc::invalid_argument, path + ": data is NULL for a non-empty array"};
    // The header and the data go out separately: no second copy of the array.
    return write_all(path, header_bytes(dtype, shape), data, *data_bytes);
  });
}

Status save_counts_npy(const std::string& path, const CountsTensor& counts) {
  return guarded("save_counts_npy", [&]() -> Status {
    uint64_t need = 0;
    if (!checked_mul(counts.n, uint64_t{counts.layers} * counts.experts, &need) ||
        need != counts.data.size())
      return {Errc::shape_mismatch,
              path + ": counts tensor holds " + std::to_string(counts.data.size()) + " values, [" +
                  std::to_string(counts.n) + ", " + std::to_string(counts.layers) + ", " +
                  std::to_string(counts.experts) + "] needs " + std::to_string(need)};
    const uint64_t shape[3] = {counts.n, counts.layers, counts.experts};
    return write_npy(path, NpyDtype::i16, shape, counts.data.data());
  });
}

}  // namespace eldr
