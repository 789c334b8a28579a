#include "kernels.hpp"

#include <cstring>

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

// Sum of squares of count*idf over one layer, dense and vectorised.
ELDR_INLINE float weighted_norm2(const int16_t* row, const float* idf, uint32_t experts) noexcept {
  v8f acc = {};
  uint32_t e = 0;
  for (; e + 8 <= experts; e += 8) {
    v8s c;
    __builtin_memcpy(&c, row + e, sizeof(c));
    const v8f w = __builtin_convertvector(c, v8f) * load8(idf + e);
    acc += w * w;
  }
  float sum = 0.0f;
  for (int i = 0; i < 8; ++i) sum += acc[i];
  for (; e < experts; ++e) {
    const float w = static_cast<float>(row[e]) * idf[e];
    sum += w * w;
  }
  return sum;
}

// acc[0..V) += f * w[0..8V): one cell's weights for V*8 clusters.
template <size_t V>
ELDR_INLINE void axpy_cell(v8f* acc, float f, const float* w) noexcept {
  const v8f fv = v8f{} + f;
  for (size_t v = 0; v < V; ++v) acc[v] += fv * load8(w + 8 * v);
}

// Cluster columns [col0, col0 + W) of the scores, unnormalised.
template <size_t W>
ELDR_INLINE void project_fixed(const int16_t* counts, const uint32_t* mask, size_t mask_len,
                               uint32_t experts, const float* m, size_t stride, size_t col0,
                               float* acc) noexcept {
  static_assert(W % 8 == 0);
  constexpr size_t V = W / 8;
  // Independent accumulator chains: one chain would wait on the FMA latency
  // (4 cycles) for every cell; U chains keep the FMA units busy.
  constexpr size_t U = V <= 2 ? 4 : 2;
  constexpr uint32_t kChunk = 512;
  uint32_t idx[kChunk];
  float val[kChunk];
  v8f local[U][V] = {};
  for (size_t s = 0; s < mask_len; ++s) {
    const int16_t* row = counts + size_t{mask[s]} * experts;
    const float* base = m + s * experts * stride + col0;
    for (uint32_t e0 = 0; e0 < experts; e0 += kChunk) {
      const uint32_t e1 = experts - e0 < kChunk ? experts : e0 + kChunk;
      // Most prompts of a few hundred tokens touch most experts: walk such a
      // layer densely. Sparse layers are compacted first, without branches
      // (zeros sit in unpredictable places, so a skip branch mispredicts).
      uint32_t zeros = 0;
      for (uint32_t e = e0; e < e1; ++e) zeros += row[e] == 0;
      if (2 * zeros <= e1 - e0) {
        const int16_t* r = row + e0;
        const float* w = base + size_t{e0} * stride;
        const uint32_t n = e1 - e0;
        uint32_t j = 0;
        for (; j + U <= n; j += U)
          for (size_t u = 0; u < U; ++u)
            axpy_cell<V>(local[u], static_cast<float>(r[j + u]), w + size_t{j + u} * stride);
        for (; j < n; ++j) axpy_cell<V>(local[0], static_cast<float>(r[j]), w + size_t{j} * stride);
        continue;
      }
      uint32_t n = 0;
      for (uint32_t e = e0; e < e1; ++e) {
        idx[n] = e;
        val[n] = static_cast<float>(row[e]);
        n += row[e] != 0;
      }
      uint32_t j = 0;
      for (; j + U <= n; j += U)
        for (size_t u = 0; u < U; ++u)
          axpy_cell<V>(local[u], val[j + u], base + size_t{idx[j + u]} * stride);
      for (; j < n; ++j) axpy_cell<V>(local[0], val[j], base + size_t{idx[j]} * stride);
    }
  }
  for (size_t u = 1; u < U; ++u)
    for (size_t v = 0; v < V; ++v) local[0][v] += local[u][v];
  __builtin_memcpy(acc + col0, local[0], sizeof(local[0]));
}

}  // namespace

ELDR_MULTIVERSION
double project_counts(const int16_t* counts, const uint32_t* mask, size_t mask_len,
                      uint32_t experts, const float* idf, const float* m, size_t stride,
                      float* acc) noexcept {
  double norm2 = 0.0;
  for (size_t s = 0; s < mask_len; ++s)
    norm2 += weighted_norm2(counts + size_t{mask[s]} * experts, idf + s * experts, experts);
  // Clusters in blocks of up to 32 columns (4 AVX registers of accumulators).
  for (size_t col = 0; col < stride;) {
    const size_t left = stride - col;
    if (left >= 32) {
      project_fixed<32>(counts, mask, mask_len, experts, m, stride, col, acc);
      col += 32;
    } else if (left >= 16) {
      project_fixed<16>(counts, mask, mask_len, experts, m, stride, col, acc);
      col += 16;
    } else {
      project_fixed<8>(counts, mask, mask_len, experts, m, stride, col, acc);
      col += 8;
    }
  }
  return norm2;
}

}  // namespace eldr::kernels
