// Internal numeric kernels shared by the fit and the router. Built once per
// ISA level (target_clones) so one binary runs everywhere and uses AVX2+FMA
// where the CPU has it. Plain loops with several accumulators: the compiler
// vectorises them without -ffast-math.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define ELDR_MULTIVERSION __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define ELDR_MULTIVERSION
#endif

namespace eldr::kernels {

// Sum of a[i] * b[i].
float dot(const float* a, const float* b, size_t n) noexcept;

// Scores of one footprint against K clusters, without materialising the
// signature: acc[c] = sum over masked cells i of count_i * m[i][c], where
// m[i][c] = idf_i * centroid_c[i] is stored cell-major with row stride
// `stride` (>= k, multiple of 8); returns |count * idf|^2 over the mask.
// counts: the full [L][E] footprint; mask: |mask| layer ids; idf: |mask|*E.
// acc must hold `stride` floats. Allocation-free.
double project_counts(const int16_t* counts, const uint32_t* mask, size_t mask_len,
                      uint32_t experts, const float* idf, const float* m, size_t stride,
                      float* acc) noexcept;

}  // namespace eldr::kernels
