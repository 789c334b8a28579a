#include "eldr/internal/vector_kernels.hpp"

#include <xxhash.h>

#include <algorithm>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#endif

namespace eldr::kernels {

ELDR_MULTIVERSION
float dot(const float* a, const float* b, size_t n) noexcept {
  float acc[16] = {};
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (size_t j = 0; j < 16; ++j) acc[j] += a[i + j] * b[i + j];
  float tail = 0.0f;
  for (; i < n; ++i) tail += a[i] * b[i];
  float sum = 0.0f;
  for (float v : acc) sum += v;
  return sum + tail;
}

namespace {

// always_inline: the helpers must be compiled inside each target_clones
// clone, with that clone's ISA, or they stay scalar baseline code.
#define ELDR_INLINE inline __attribute__((always_inline))

// Eight floats as one GCC vector: AVX registers in the x86-64-v3 clone, pairs
// of SSE registers in the baseline one. Explicit, because the auto-vectoriser
// turns the short fixed loops below into scalar code.
typedef float v8f __attribute__((vector_size(32)));

ELDR_INLINE v8f load8(const float* p) noexcept {
  v8f v;
  __builtin_memcpy(&v, p, sizeof(v));
  return v;
}

typedef int16_t v8s __attribute__((vector_size(16)));

ELDR_INLINE v8f load_counts8(const int16_t* p) noexcept {
  v8s c;
  __builtin_memcpy(&c, p, sizeof(c));
  return __builtin_convertvector(c, v8f);
}

ELDR_INLINE float sum8(v8f v) noexcept {
  float sum = 0.0f;
  for (int i = 0; i < 8; ++i) sum += v[i];
  return sum;
}

}  // namespace

ELDR_MULTIVERSION
MaskedNorms masked_norms(const int16_t* counts, const uint32_t* mask, size_t mask_len,
                         uint32_t experts, const float* idf) noexcept {
  MaskedNorms out{0.0, 0.0};
  for (size_t s = 0; s < mask_len; ++s) {
    const int16_t* row = counts + size_t{mask[s]} * experts;
    const float* w = idf + s * experts;
    // Four chains: one would wait on the FMA latency at every step.
    v8f acc[4] = {}, raw[4] = {};
    uint32_t e = 0;
    for (; e + 32 <= experts; e += 32)
      for (uint32_t u = 0; u < 4; ++u) {
        const v8f c = load_counts8(row + e + 8 * u);
        const v8f v = c * load8(w + e + 8 * u);
        acc[u] += v * v;
        raw[u] += c * c;
      }
    for (; e + 8 <= experts; e += 8) {
      const v8f c = load_counts8(row + e);
      const v8f v = c * load8(w + e);
      acc[0] += v * v;
      raw[0] += c * c;
    }
    float sum = sum8((acc[0] + acc[1]) + (acc[2] + acc[3]));
    float raw_sum = sum8((raw[0] + raw[1]) + (raw[2] + raw[3]));
    for (; e < experts; ++e) {
      const float c = static_cast<float>(row[e]);
      const float v = c * w[e];
      sum += v * v;
      raw_sum += c * c;
    }
    out.weighted2 += sum;
    out.counts2 += raw_sum;
  }
  return out;
}

ELDR_MULTIVERSION
float masked_dot(const int16_t* counts, const uint32_t* mask, size_t mask_len, uint32_t experts,
                 const float* w) noexcept {
  // Four chains hide the FMA latency; one per layer would not.
  v8f acc[4] = {};
  float tail = 0.0f;
  for (size_t s = 0; s < mask_len; ++s) {
    const int16_t* row = counts + size_t{mask[s]} * experts;
    const float* ws = w + s * experts;
    uint32_t e = 0;
    for (; e + 32 <= experts; e += 32)
      for (uint32_t u = 0; u < 4; ++u)
        acc[u] += load_counts8(row + e + 8 * u) * load8(ws + e + 8 * u);
    for (; e + 8 <= experts; e += 8) acc[0] += load_counts8(row + e) * load8(ws + e);
    for (; e < experts; ++e) tail += static_cast<float>(row[e]) * ws[e];
  }
  return sum8((acc[0] + acc[1]) + (acc[2] + acc[3])) + tail;
}

ELDR_MULTIVERSION
Range16 range16(const int16_t* values, size_t n) noexcept {
  // Lane-wise min and max, no early exit and no branch: it vectorises.
  typedef int16_t v16s __attribute__((vector_size(32)));
  v16s lo = v16s{} + INT16_MAX, hi = v16s{} + INT16_MIN;
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    v16s v;
    __builtin_memcpy(&v, values + i, sizeof(v));
    lo = v < lo ? v : lo;
    hi = v > hi ? v : hi;
  }
  Range16 r{INT16_MAX, INT16_MIN};
  for (int k = 0; k < 16; ++k) {
    r.min = std::min(r.min, lo[k]);
    r.max = std::max(r.max, hi[k]);
  }
  for (; i < n; ++i) {
    r.min = std::min(r.min, values[i]);
    r.max = std::max(r.max, values[i]);
  }
  return r;
}

ELDR_MULTIVERSION
int64_t sum16(const int16_t* values, size_t n) noexcept {
  // int32 lanes cannot overflow within 65,536 values; longer runs are split.
  typedef int16_t v16s __attribute__((vector_size(32)));
  typedef int32_t v16i __attribute__((vector_size(64)));
  int64_t total = 0;
  for (size_t first = 0; first < n; first += 65536) {
    const size_t end = std::min(n, first + 65536);
    v16i acc = {};
    size_t i = first;
    for (; i + 16 <= end; i += 16) {
      v16s v;
      __builtin_memcpy(&v, values + i, sizeof(v));
      acc += __builtin_convertvector(v, v16i);
    }
    for (int k = 0; k < 16; ++k) total += acc[k];
    for (; i < end; ++i) total += values[i];
  }
  return total;
}

ELDR_MULTIVERSION
float scaled_counts(const int16_t* counts, size_t n, float scale, float* p) noexcept {
  const v8f cap = v8f{} + kMaxDemand;
  v8f acc = {};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const v8f v = load_counts8(counts + i) * scale;
    const v8f r = v < cap ? v : cap;
    __builtin_memcpy(p + i, &r, sizeof(r));
    acc += r;
  }
  float sum = sum8(acc);
  for (; i < n; ++i) sum += p[i] = std::min(static_cast<float>(counts[i]) * scale, kMaxDemand);
  return sum;
}

namespace {

typedef int32_t v8i __attribute__((vector_size(32)));

// -log2(x) * 4096 for x in [1 - kMaxDemand, 1]: exponent plus log2 of the
// mantissa m in [1, 2) by the series 2/ln2 (t + t^3/3 + t^5/5 + t^7/7),
// t = (m - 1) / (m + 1) <= 1/3 (error < 2e-5).
ELDR_INLINE v8f neg_log2_q12(v8f x) noexcept {
  v8i bits;
  __builtin_memcpy(&bits, &x, sizeof(bits));
  const v8i exponent = ((bits >> 23) & 0xff) - 127;
  const v8i mant_bits = (bits & 0x7fffff) | 0x3f800000;
  v8f m;
  __builtin_memcpy(&m, &mant_bits, sizeof(m));
  const v8f t = (m - 1.0f) / (m + 1.0f);
  const v8f t2 = t * t;
  const v8f series = t * (1.0f + t2 * (1.0f / 3 + t2 * (1.0f / 5 + t2 * (1.0f / 7))));
  const v8f log2x = __builtin_convertvector(exponent, v8f) + 2.8853900817779268f * series;
  return log2x * -static_cast<float>(kQ12One);
}

// 2^(-s / 4096), s >= 0: the integer part of s / 4096 shifts the exponent,
// the fraction f goes through exp(-u), u = f ln2 < 0.7, to degree 7 (error
// < 2e-6). Past 2^-125 the result is 0.
ELDR_INLINE v8f keep_q12(v8i s) noexcept {
  const v8i whole = s >> 12;
  const v8f u = __builtin_convertvector(s & (kQ12One - 1), v8f) * (0.69314718056f / kQ12One);
  // Horner form of sum_{k <= 7} (-u)^k / k!.
  v8f e = 1.0f / 720 - u * (1.0f / 5040);
  e = 1.0f / 120 - u * e;
  e = 1.0f / 24 - u * e;
  e = 1.0f / 6 - u * e;
  e = 0.5f - u * e;
  e = 1.0f - u * e;
  e = 1.0f - u * e;
  v8i bits;
  __builtin_memcpy(&bits, &e, sizeof(bits));
  // Clamped before the shift, so no lane overflows (both sides of the
  // select are computed); past 2^-124 the lane is 0.
  const v8i capped = whole < 125 ? whole : v8i{} + 125;
  const v8i shifted = whole < 125 ? bits - (capped << 23) : v8i{};
  v8f out;
  __builtin_memcpy(&out, &shifted, sizeof(out));
  const v8f one = v8f{} + 1.0f;
  return out < one ? out : one;
}

}  // namespace

ELDR_MULTIVERSION
float add_codes(int32_t* s, float* keep, const uint8_t* codes, size_t n, const int32_t* level,
                const float* factor) noexcept {
  v8f acc = {};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    v8i add;
    v8f f;
    for (int k = 0; k < 8; ++k) {
      add[k] = level[codes[i + k]];
      f[k] = factor[codes[i + k]];
    }
    v8i sum;
    __builtin_memcpy(&sum, s + i, sizeof(sum));
    sum += add;
    __builtin_memcpy(s + i, &sum, sizeof(sum));
    const v8f k = load8(keep + i) * f;
    __builtin_memcpy(keep + i, &k, sizeof(k));
    acc += k;
  }
  float total = sum8(acc);
  for (; i < n; ++i) {
    s[i] += level[codes[i]];
    total += keep[i] *= factor[codes[i]];
  }
  return total;
}

ELDR_MULTIVERSION
void sub_codes(int32_t* s, const uint8_t* codes, size_t n, const int32_t* level) noexcept {
  for (size_t i = 0; i < n; ++i) s[i] -= level[codes[i]];
}

ELDR_MULTIVERSION
void log_keep_q12(const float* p, size_t n, uint16_t* q) noexcept {
  size_t i = 0;
  float tail_in[8] = {1, 1, 1, 1, 1, 1, 1, 1};
  for (; i + 8 <= n; i += 8) {
    const v8f v = neg_log2_q12(1.0f - load8(p + i)) + 0.5f;
    const v8i r = __builtin_convertvector(v > 0.0f ? v : v8f{}, v8i);
    for (int k = 0; k < 8; ++k) q[i + k] = static_cast<uint16_t>(r[k]);
  }
  if (i == n) return;
  const size_t rest = n - i;
  for (size_t k = 0; k < rest; ++k) tail_in[k] = 1.0f - p[i + k];
  const v8f v = neg_log2_q12(load8(tail_in)) + 0.5f;
  const v8i r = __builtin_convertvector(v > 0.0f ? v : v8f{}, v8i);
  for (size_t k = 0; k < rest; ++k) q[i + k] = static_cast<uint16_t>(r[k]);
}

ELDR_MULTIVERSION
float keep_from_q12(const int32_t* s, size_t n, float* keep) noexcept {
  v8f acc = {};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    v8i v;
    __builtin_memcpy(&v, s + i, sizeof(v));
    const v8f k = keep_q12(v);
    __builtin_memcpy(keep + i, &k, sizeof(k));
    acc += k;
  }
  float sum = sum8(acc);
  if (i == n) return sum;
  int32_t tail[8] = {};
  const size_t rest = n - i;
  for (size_t k = 0; k < rest; ++k) tail[k] = s[i + k];
  v8i v;
  __builtin_memcpy(&v, tail, sizeof(v));
  const v8f k8 = keep_q12(v);
  for (size_t k = 0; k < rest; ++k) sum += keep[i + k] = k8[k];
  return sum;
}

void gather_counts(const int16_t* counts, const uint32_t* mask, uint32_t experts, uint32_t shift,
                   size_t first, size_t n, int16_t* x) noexcept {
  const int32_t half = shift == 0 ? 0 : int32_t{1} << (shift - 1);
  for (size_t i = first; i < first + n;) {
    const size_t s = i / experts;
    const uint32_t e0 = static_cast<uint32_t>(i % experts);
    const uint32_t e1 = static_cast<uint32_t>(std::min<size_t>(experts, e0 + (first + n - i)));
    const int16_t* row = counts + size_t{mask[s]} * experts;
    int16_t* out = x + (i - first) - e0;
    if (shift == 0)
      std::copy(row + e0, row + e1, out + e0);
    else
      for (uint32_t e = e0; e < e1; ++e)
        out[e] = static_cast<int16_t>((int32_t{row[e]} + half) >> shift);
    i += e1 - e0;
  }
}

void reference::dot_q16_block(const int16_t* x, const int16_t* q, size_t chunks,
                              int64_t* out) noexcept {
  for (size_t c = 0; c < 8; ++c) {
    int64_t acc = 0;
    for (size_t j = 0; j < chunks; ++j) {
      const int16_t* qc = q + (j * 8 + c) * 16;
      for (size_t k = 0; k < 16; ++k) acc += int32_t{x[j * 16 + k]} * qc[k];
    }
    out[c] += acc;
  }
}

namespace {

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
bool has_avx2() noexcept {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}

// One vpmaddwd per 16 cells and cluster: 16 multiply-adds per instruction,
// twice the fp32 FMA rate, from half the bytes of an fp32 matrix.
__attribute__((target("avx2"))) void dot_q16_block_avx2(const int16_t* x, const int16_t* q,
                                                        size_t chunks, int64_t* out) noexcept {
  __m256i a[8];
  for (auto& v : a) v = _mm256_setzero_si256();
  for (size_t j = 0; j < chunks; ++j) {
    const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + j * 16));
    const __m256i* qj = reinterpret_cast<const __m256i*>(q + j * 128);
    for (int c = 0; c < 8; ++c)
      a[c] = _mm256_add_epi32(a[c], _mm256_madd_epi16(xv, _mm256_loadu_si256(qj + c)));
  }
  // Transpose-and-add the eight accumulators into one vector of 8 totals.
  const __m256i t0 =
      _mm256_hadd_epi32(_mm256_hadd_epi32(a[0], a[1]), _mm256_hadd_epi32(a[2], a[3]));
  const __m256i t1 =
      _mm256_hadd_epi32(_mm256_hadd_epi32(a[4], a[5]), _mm256_hadd_epi32(a[6], a[7]));
  const __m256i sum = _mm256_add_epi32(_mm256_permute2x128_si256(t0, t1, 0x20),
                                       _mm256_permute2x128_si256(t0, t1, 0x31));
  alignas(32) int32_t totals[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(totals), sum);
  for (int c = 0; c < 8; ++c) out[c] += totals[c];
}
#endif

}  // namespace

void dot_q16_block(const int16_t* x, const int16_t* q, size_t chunks, int64_t* out) noexcept {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (has_avx2()) return dot_q16_block_avx2(x, q, chunks, out);
#endif
  reference::dot_q16_block(x, q, chunks, out);
}

namespace {

// Whole 32-byte moves, the last one overlapping (n >= 32). A macro, not a
// helper: the move must be inlined into each ISA's loop.
#define ELDR_COPY_IN_32S(MOVE32)                       \
  do {                                                 \
    size_t i = 0;                                      \
    for (; i + 128 <= n; i += 128) {                   \
      MOVE32(d + i, s + i);                            \
      MOVE32(d + i + 32, s + i + 32);                  \
      MOVE32(d + i + 64, s + i + 64);                  \
      MOVE32(d + i + 96, s + i + 96);                  \
    }                                                  \
    for (; i + 32 <= n; i += 32) MOVE32(d + i, s + i); \
    if (i < n) MOVE32(d + n - 32, s + n - 32);         \
  } while (0)

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define ELDR_MOVE32_AVX2(to, from)                    \
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(to), \
                      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(from)))
__attribute__((target("avx2"))) void copy_bytes_avx2(char* d, const char* s, size_t n) noexcept {
  ELDR_COPY_IN_32S(ELDR_MOVE32_AVX2);
}
#endif

// Portable: the compiler picks the widest moves of the baseline ISA.
#define ELDR_MOVE32_PORTABLE(to, from) \
  do {                                 \
    char v[32];                        \
    __builtin_memcpy(v, from, 32);     \
    __builtin_memcpy(to, v, 32);       \
  } while (0)
void copy_bytes_portable(char* d, const char* s, size_t n) noexcept {
  ELDR_COPY_IN_32S(ELDR_MOVE32_PORTABLE);
}

}  // namespace

uint64_t xxh3_64(const void* data, size_t n) noexcept {
#if defined(ELDR_XXH3_AVX2)
  if (has_avx2()) return detail::xxh3_64_avx2(data, n);
#endif
  return XXH3_64bits(data, n);
}

void copy_bytes(void* dst, const void* src, size_t n) noexcept {
  if (n == 0) return;  // an empty span may have no storage: memcpy(nullptr, ...) is UB
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  if (n < 32) {  // far below glibc's rep-movsb threshold
    std::memcpy(d, s, n);
    return;
  }
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (has_avx2()) return copy_bytes_avx2(d, s, n);
#endif
  copy_bytes_portable(d, s, n);
}

}  // namespace eldr::kernels
