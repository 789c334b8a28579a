// Private to core/io's .npy codec (npy.cpp reads, npy_write.cpp writes,
// npy_convert.cpp converts elements): the format's constants and the helpers
// they share.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <new>
#include <span>
#include <string>

#include "eldr/status.hpp"

namespace eldr::npy_detail {

inline constexpr char kMagic[] = "\x93NUMPY";
inline constexpr size_t kMagicLen = 6;
// NumPy 2 allows 64 dimensions; more is certainly not a capture dump.
inline constexpr size_t kMaxDims = 64;

inline Status with_path(const std::string& path, const Status& s) {
  if (s.is_ok() || path.empty()) return s;
  return {s.code(), path + ": " + s.message()};
}

inline std::string shape_string(std::span<const uint64_t> shape) {
  std::string out = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(shape[i]);
  }
  if (shape.size() == 1) out += ",";
  out += ")";
  return out;
}

// Copies one element of the given dtype into T without alignment assumptions.
template <class T>
T load_elem(const uint8_t* base, uint64_t i) {
  T v;
  std::memcpy(&v, base + i * sizeof(T), sizeof(T));
  return v;
}

// Public entry points run their body through this so that an allocation
// failure on a huge (or lying) input comes back as a Status, not an exception.
template <class F>
auto guarded(const char* what, F&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return Status{Errc::internal, std::string(what) + ": out of memory"};
  } catch (const std::exception& e) {
    return Status{Errc::internal, std::string(what) + ": " + e.what()};
  }
}

}  // namespace eldr::npy_detail
