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

// Over the masked layers of a [L][E] footprint: |count * idf|^2 (the
// signature's norm) and |count|^2 (the raw counts the int16 pass multiplies),
// each summed in fp32 per layer, then in double. Allocation-free.
struct MaskedNorms {
  double weighted2;
  double counts2;
};
MaskedNorms masked_norms(const int16_t* counts, const uint32_t* mask, size_t mask_len,
                         uint32_t experts, const float* idf) noexcept;

// sum over masked cells i of count_i * w[i] (w: |mask| * E, the cell order of
// idf): one cluster's unnormalised score, in fp32. Allocation-free.
float masked_dot(const int16_t* counts, const uint32_t* mask, size_t mask_len, uint32_t experts,
                 const float* w) noexcept;

// Smallest and largest of n values ({INT16_MAX, INT16_MIN} when n = 0), and
// their sum: the footprint checks, without a branch per cell.
struct Range16 {
  int16_t min, max;
};
Range16 range16(const int16_t* values, size_t n) noexcept;
int64_t sum16(const int16_t* values, size_t n) noexcept;

// memcpy for payload-sized copies (ring records, FlatBuffers holes) with plain
// vector moves. glibc's memcpy switches to `rep movsb` above 2 KiB, which on
// AMD Zen guests runs ~25x slower when source and destination share their
// offset within a page (4.4 us instead of 0.15 us for 12 KiB); ring records
// land at every offset. Regions must not overlap.
void copy_bytes(void* dst, const void* src, size_t n) noexcept;

// XXH3_64bits(data, n), with AVX2 where the CPU has it (the same value on
// every CPU).
uint64_t xxh3_64(const void* data, size_t n) noexcept;
namespace detail {
uint64_t xxh3_64_avx2(const void* data, size_t n) noexcept;  // xxh3_avx2.cpp
}  // namespace detail

// Cells [first, first + n) of the masked footprint as int16, each count
// rounded to a multiple of 2^shift and divided by it: x[j] =
// (count + 2^(shift-1)) >> shift (the count itself when shift = 0).
void gather_counts(const int16_t* counts, const uint32_t* mask, uint32_t experts, uint32_t shift,
                   size_t first, size_t n, int16_t* x) noexcept;

// Integer scores of one chunk of counts against 8 clusters:
// out[c] += sum_j x[j] * q[j / 16][c][j % 16] over j < 16 * chunks, with q laid
// out as [chunks][8 clusters][16 cells] int16 (x: 16 * chunks cells). The
// caller keeps |x| |q_c| (L2 norms) below 2^31, so no partial sum overflows
// int32 (Cauchy-Schwarz holds for every subset of cells).
// Exact integer arithmetic: every ISA gives the same result.
void dot_q16_block(const int16_t* x, const int16_t* q, size_t chunks, int64_t* out) noexcept;

// ---- the live batch footprint of eldr_cost (route/live_batch.hpp) ----------
// A batch's chance that no request uses a cell is a product of (1 - p) over
// its requests; it is kept as an exact integer sum of -log2(1 - p) in units
// of 2^-12 ("q12"), so a request leaves exactly what it added.
inline constexpr int32_t kQ12One = 4096;
inline constexpr float kMaxDemand = 0.999f;  // p is capped: 1 - p stays > 0

// p[i] = min(counts[i] * scale, kMaxDemand): a footprint's per-token usage;
// returns the sum of p.
float scaled_counts(const int16_t* counts, size_t n, float scale, float* p) noexcept;
// q[i] = round(-log2(1 - p[i]) * 4096), p[i] in [0, kMaxDemand] (<= 40,822).
void log_keep_q12(const float* p, size_t n, uint16_t* q) noexcept;
// A request's demand codes join a batch: s[i] += level[codes[i]] and
// keep[i] *= factor[codes[i]]; returns the sum of keep. (Codes index the
// tables unchecked: each below their size.)
float add_codes(int32_t* s, float* keep, const uint8_t* codes, size_t n, const int32_t* level,
                const float* factor) noexcept;
// They leave it: s[i] -= level[codes[i]].
void sub_codes(int32_t* s, const uint8_t* codes, size_t n, const int32_t* level) noexcept;
// keep[i] = 2^(-s[i] / 4096) for s[i] >= 0 (relative error < 2e-5, never
// above 1); returns the sum of keep.
float keep_from_q12(const int32_t* s, size_t n, float* keep) noexcept;

// Plain scalar version of the int16 kernel, which the vector code must equal
// bit for bit (tested); used where the CPU lacks AVX2.
namespace reference {
void dot_q16_block(const int16_t* x, const int16_t* q, size_t chunks, int64_t* out) noexcept;
}  // namespace reference

}  // namespace eldr::kernels
