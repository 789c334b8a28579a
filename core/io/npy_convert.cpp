// The element side of core/io's .npy codec: the dtype table (element widths,
// descriptors, NpyArray::count) and the range-checked conversions from an
// array of any supported dtype to int16, int32, int64 or float
// (npy_to_int16 and friends), which name the first element that does not fit.
// Parsing the file and its header is in npy.cpp, writing in npy_write.cpp.
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>

#include "eldr/internal/checked_math.hpp"
#include "eldr/npy.hpp"
#include "npy_common.hpp"

namespace eldr {

namespace {

using npy_detail::guarded;
using npy_detail::load_elem;
using npy_detail::shape_string;

template <class F>
decltype(auto) visit_dtype(NpyDtype dtype, F&& f) {
  switch (dtype) {
    case NpyDtype::i8:
      return f(int8_t{});
    case NpyDtype::u8:
      return f(uint8_t{});
    case NpyDtype::i16:
      return f(int16_t{});
    case NpyDtype::u16:
      return f(uint16_t{});
    case NpyDtype::i32:
      return f(int32_t{});
    case NpyDtype::u32:
      return f(uint32_t{});
    case NpyDtype::i64:
      return f(int64_t{});
    case NpyDtype::u64:
      return f(uint64_t{});
    case NpyDtype::f32:
      return f(float{});
    case NpyDtype::f64:
      return f(double{});
  }
  return f(uint8_t{});
}

template <class Dst>
const char* type_name() {
  if constexpr (std::is_same_v<Dst, int16_t>) return "int16";
  if constexpr (std::is_same_v<Dst, int32_t>) return "int32";
  if constexpr (std::is_same_v<Dst, int64_t>) return "int64";
  return "float32";
}

template <class Src>
std::string value_string(Src v) {
  if constexpr (std::is_floating_point_v<Src>) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", static_cast<double>(v));
    return buf;
  } else {
    return std::to_string(v);
  }
}

// Returns false when `v` has no exact-enough Dst counterpart.
template <class Dst, class Src>
bool convert_one(Src v, Dst* out) {
  if constexpr (std::is_integral_v<Dst>) {
    if constexpr (std::is_integral_v<Src>) {
      if (!std::in_range<Dst>(v)) return false;
      *out = static_cast<Dst>(v);
      return true;
    } else {
      const double d = static_cast<double>(v);
      // Bounds as powers of two are exact in double, unlike max() for int64.
      const double lo = static_cast<double>(std::numeric_limits<Dst>::min());
      if (!std::isfinite(d) || std::trunc(d) != d || d < lo || d >= -lo) return false;
      *out = static_cast<Dst>(d);
      return true;
    }
  } else {
    if constexpr (std::is_same_v<Src, double>) {
      // NaN and infinities have float counterparts; finite overflow does not.
      if (std::isfinite(v) && std::fabs(v) > static_cast<double>(FLT_MAX)) return false;
    }
    *out = static_cast<Dst>(v);
    return true;
  }
}

template <class Dst>
Result<std::vector<Dst>> convert_all(const NpyArray& array) {
  const uint64_t n = array.count();
  const size_t width = npy_dtype_size(array.dtype);
  uint64_t need = 0;
  if (!checked_mul(n, width, &need) || array.bytes.size() != need)
    return Status{Errc::shape_mismatch, "npy array holds " + std::to_string(array.bytes.size()) +
                                            " bytes but shape " + shape_string(array.shape) +
                                            " needs " + std::to_string(need)};
  std::vector<Dst> out(static_cast<size_t>(n));
  Status st = visit_dtype(array.dtype, [&](auto tag) -> Status {
    using Src = decltype(tag);
    const uint8_t* base = array.bytes.data();
    for (uint64_t i = 0; i < n; ++i) {
      Src v = load_elem<Src>(base, i);
      if (!convert_one<Dst>(v, &out[static_cast<size_t>(i)]))
        return {Errc::out_of_range, "element " + std::to_string(i) + " (value " + value_string(v) +
                                        ") does not convert to " + type_name<Dst>()};
    }
    return Status::ok();
  });
  if (!st) return st;
  return out;
}

}  // namespace

uint64_t NpyArray::count() const noexcept {
  uint64_t n = 1;
  for (uint64_t d : shape)
    if (!checked_mul(n, d, &n)) return std::numeric_limits<uint64_t>::max();
  return n;
}

size_t npy_dtype_size(NpyDtype dtype) noexcept {
  switch (dtype) {
    case NpyDtype::i8:
    case NpyDtype::u8:
      return 1;
    case NpyDtype::i16:
    case NpyDtype::u16:
      return 2;
    case NpyDtype::i32:
    case NpyDtype::u32:
    case NpyDtype::f32:
      return 4;
    case NpyDtype::i64:
    case NpyDtype::u64:
    case NpyDtype::f64:
      return 8;
  }
  return 1;
}

const char* npy_dtype_descr(NpyDtype dtype) noexcept {
  switch (dtype) {
    case NpyDtype::i8:
      return "|i1";
    case NpyDtype::u8:
      return "|u1";
    case NpyDtype::i16:
      return "<i2";
    case NpyDtype::u16:
      return "<u2";
    case NpyDtype::i32:
      return "<i4";
    case NpyDtype::u32:
      return "<u4";
    case NpyDtype::i64:
      return "<i8";
    case NpyDtype::u64:
      return "<u8";
    case NpyDtype::f32:
      return "<f4";
    case NpyDtype::f64:
      return "<f8";
  }
  return "|u1";
}

Result<std::vector<int16_t>> npy_to_int16(const NpyArray& array) {
  return guarded("npy_to_int16",
                 [&]() -> Result<std::vector<int16_t>> { return convert_all<int16_t>(array); });
}
Result<std::vector<int32_t>> npy_to_int32(const NpyArray& array) {
  return guarded("npy_to_int32",
                 [&]() -> Result<std::vector<int32_t>> { return convert_all<int32_t>(array); });
}
Result<std::vector<int64_t>> npy_to_int64(const NpyArray& array) {
  return guarded("npy_to_int64",
                 [&]() -> Result<std::vector<int64_t>> { return convert_all<int64_t>(array); });
}
Result<std::vector<float>> npy_to_float(const NpyArray& array) {
  return guarded("npy_to_float",
                 [&]() -> Result<std::vector<float>> { return convert_all<float>(array); });
}

}  // namespace eldr
