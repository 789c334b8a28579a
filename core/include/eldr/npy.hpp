// NumPy .npy files: what capture scripts dump (calibration counts, labels,
// traces). Every malformed or truncated file is an error, never a crash.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "eldr/geometry.hpp"
#include "eldr/status.hpp"

namespace eldr {

enum class NpyDtype : uint8_t { i8, u8, i16, u16, i32, u32, i64, u64, f32, f64 };

struct NpyArray {
  NpyDtype dtype = NpyDtype::u8;
  std::vector<uint64_t> shape;
  std::vector<uint8_t> bytes;  // C order, native little-endian (big-endian files are byte-swapped)
  uint64_t count() const noexcept;  // product of shape (1 for a 0-d array)
};

size_t npy_dtype_size(NpyDtype dtype) noexcept;
const char* npy_dtype_descr(NpyDtype dtype) noexcept;  // "<i2", "|u1", ...

// The preamble and header dict of an .npy image, without its data: what a
// streaming reader (the base64 routed-expert decoder) needs before it sees the
// element bytes, parsed by the same code as parse_npy.
struct NpyHeader {
  NpyDtype dtype = NpyDtype::u8;
  bool big_endian = false;  // multi-byte elements stored '>' (parse_npy swaps them)
  bool fortran_order = false;
  std::vector<uint64_t> shape;
  uint64_t data_offset = 0;  // bytes before the first element
  uint64_t data_bytes = 0;   // product of shape times the element width
};
// The smallest prefix that holds the whole header: needs the first 10 bytes
// (12 for formats 2.0 and 3.0) of the image; corrupt or unsupported otherwise.
inline constexpr size_t kNpyPreambleMax = 12;
Result<uint64_t> npy_header_size(std::span<const uint8_t> prefix);
// Parses the header from a prefix of at least npy_header_size() bytes.
// Does not check the data length or the memory order: callers do.
Result<NpyHeader> parse_npy_header(std::span<const uint8_t> prefix);

// Formats 1.0, 2.0 and 3.0; C order only (fortran_order True is unsupported).
Result<NpyArray> parse_npy(std::span<const uint8_t> file_bytes);
Result<NpyArray> read_npy(const std::string& path);
Status write_npy(const std::string& path, NpyDtype dtype, std::span<const uint64_t> shape,
                 const void* data);
// The .npy image numpy writes for a C-order array of `shape` (`data`: its
// bytes, native little-endian): the format 1.0 preamble (2.0 when the header
// passes 64 KiB), the header dict padded with spaces and ended by '\n' so that
// the data starts on a multiple of 64 bytes, then the data. invalid_argument for
// more than 64 dimensions, a shape whose size overflows, or a NULL `data` for a
// non-empty array. The one .npy writer: write_npy streams the same header.
Result<std::vector<uint8_t>> encode_npy(NpyDtype dtype, std::span<const uint64_t> shape,
                                        const void* data);
// The header alone (the image less its data): for callers that append the data
// themselves.
Result<std::string> encode_npy_header(NpyDtype dtype, std::span<const uint64_t> shape);

// Element conversion with range checks (out_of_range names the first bad
// element); floats must be integral to convert to an integer type.
Result<std::vector<int16_t>> npy_to_int16(const NpyArray& array);
Result<std::vector<int32_t>> npy_to_int32(const NpyArray& array);
Result<std::vector<int64_t>> npy_to_int64(const NpyArray& array);
Result<std::vector<float>> npy_to_float(const NpyArray& array);

// Calibration counts [N, L, E] (any integer dtype that fits int16, values >= 0).
struct CountsTensor {
  uint64_t n = 0;
  uint32_t layers = 0;
  uint32_t experts = 0;
  std::vector<int16_t> data;  // n * layers * experts
  std::span<const int16_t> row(uint64_t i) const noexcept {
    return {data.data() + i * size_t{layers} * experts, size_t{layers} * experts};
  }
};
Result<CountsTensor> load_counts_npy(const std::string& path);
Status save_counts_npy(const std::string& path, const CountsTensor& counts);

// Labels, one per request: a text file (one label per line, blank lines are
// errors) or an integer .npy vector (labels become their decimal strings).
Result<std::vector<std::string>> load_labels(const std::string& path);

}  // namespace eldr
