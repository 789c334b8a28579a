// XXH3 built for AVX2: this file alone is compiled with -mavx2 (see
// core/CMakeLists.txt), and kernels::xxh3_64 calls it only on CPUs that have
// AVX2. XXH3's result does not depend on the vector width it runs with.
#include "eldr/internal/vector_kernels.hpp"

#if defined(ELDR_XXH3_AVX2)
#include <xxhash.h>  // XXH_INLINE_ALL: every XXH symbol stays local to this file

static_assert(XXH_VECTOR == XXH_AVX2, "this file must be compiled with -mavx2");

namespace eldr::kernels::detail {
uint64_t xxh3_64_avx2(const void* data, size_t n) noexcept { return XXH3_64bits(data, n); }
}  // namespace eldr::kernels::detail
#endif
