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

template <size_t W>
ELDR_INLINE double project_fixed(const int16_t* counts, const uint32_t* mask, size_t mask_len,
                                 uint32_t experts, const float* idf, const float* m, size_t stride,
                                 size_t col0, float* acc) noexcept {
  static_assert(W % 8 == 0);
  constexpr size_t V = W / 8;
  // Independent accumulator chains: one chain would wait on the FMA latency
  // (4 cycles) for every cell; U chains keep the FMA units busy.
  constexpr size_t U = V <= 2 ? 4 : 2;
  // Non-zero cells of one layer, compacted without branches first: footprints
  // have zeros in unpredictable places, and skipping them with a branch costs
  // more in mispredictions than it saves in loads.
  constexpr uint32_t kChunk = 512;
  uint32_t idx[kChunk];
  float val[kChunk];
  double norm2 = 0.0;
  v8f local[U][V] = {};
  for (size_t s = 0; s < mask_len; ++s) {
    const int16_t* row = counts + size_t{mask[s]} * experts;
    const size_t cell0 = s * experts;
    norm2 += weighted_norm2(row, idf + cell0, experts);
    for (uint32_t e0 = 0; e0 < experts; e0 += kChunk) {
      const uint32_t e1 = experts - e0 < kChunk ? experts : e0 + kChunk;
      // Most prompts of a few hundred tokens touch most experts: walk such a
      // layer densely. Sparse layers are compacted first, without branches
      // (zeros sit in unpredictable places).
      const float* base = m + cell0 * stride + col0;
      uint32_t zeros = 0;
      for (uint32_t e = e0; e < e1; ++e) zeros += row[e] == 0;
      if (2 * zeros <= e1 - e0) {
        const float* w0 = base + size_t{e0} * stride;
        const uint32_t len = e1 - e0;
        const int16_t* r0 = row + e0;
        uint32_t j = 0;
        for (; j + U <= len; j += U)
          for (size_t u = 0; u < U; ++u) {
            const float* w = w0 + size_t{j + u} * stride;
            const v8f f = v8f{} + static_cast<float>(r0[j + u]);
            for (size_t v = 0; v < V; ++v) local[u][v] += f * load8(w + 8 * v);
          }
        for (; j < len; ++j) {
          const v8f f = v8f{} + static_cast<float>(r0[j]);
          for (size_t v = 0; v < V; ++v) local[0][v] += f * load8(w0 + size_t{j} * stride + 8 * v);
        }
        continue;
      }
      uint32_t nz = 0;
      for (uint32_t e = e0; e < e1; ++e) {
        idx[nz] = e;
        val[nz] = static_cast<float>(row[e]);
        nz += row[e] != 0;
      }
      uint32_t j = 0;
      for (; j + U <= nz; j += U)
        for (size_t u = 0; u < U; ++u) {
          const float* w = base + size_t{idx[j + u]} * stride;
          const v8f f = v8f{} + val[j + u];
          for (size_t v = 0; v < V; ++v) local[u][v] += f * load8(w + 8 * v);
        }
      for (; j < nz; ++j) {
        const float* w = base + size_t{idx[j]} * stride;
        const v8f f = v8f{} + val[j];
        for (size_t v = 0; v < V; ++v) local[0][v] += f * load8(w + 8 * v);
      }
    }
  }
  for (size_t u = 1; u < U; ++u)
    for (size_t v = 0; v < V; ++v) local[0][v] += local[u][v];
  __builtin_memcpy(acc + col0, local[0], sizeof(local[0]));
  return norm2;
}

}  // namespace

ELDR_MULTIVERSION
double project_counts(const int16_t* counts, const uint32_t* mask, size_t mask_len,
                      uint32_t experts, const float* idf, const float* m, size_t stride,
                      float* acc) noexcept {
  // Clusters in blocks of up to 32 columns (4 AVX registers of accumulators).
  double norm2 = 0.0;
  size_t col = 0;
  bool first = true;
  while (col < stride) {
    const size_t left = stride - col;
    double n2;
    if (left >= 32) {
      n2 = project_fixed<32>(counts, mask, mask_len, experts, idf, m, stride, col, acc);
      col += 32;
    } else if (left >= 16) {
      n2 = project_fixed<16>(counts, mask, mask_len, experts, idf, m, stride, col, acc);
      col += 16;
    } else {
      n2 = project_fixed<8>(counts, mask, mask_len, experts, idf, m, stride, col, acc);
      col += 8;
    }
    if (first) norm2 = n2;
    first = false;
  }
  return norm2;
}

}  // namespace eldr::kernels
