// Size arithmetic on untrusted shapes (file headers, C API arguments) that
// must refuse to wrap around.
#pragma once

#include <cstdint>

namespace eldr {

// a * b without wrap-around; false on overflow (out is then unspecified).
inline bool checked_mul(uint64_t a, uint64_t b, uint64_t* out) noexcept {
  return !__builtin_mul_overflow(a, b, out);
}

}  // namespace eldr
