// The fit's greedy forward layer selection (docs/design.md §4): which layers'
// prefill signatures best rank request pairs the way their decode footprints
// do. It samples request pairs, ranks their decode-side cosine distances once,
// then adds one layer at a time, the one whose addition gives the highest
// Spearman rho between prefill- and decode-side distance ranks; the mask is
// the order's prefix up to the peak rho. Also the Spearman correlation itself
// (an O(n) radix-sort ranker). The rest of the fit is in fit.cpp.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "eldr/fit.hpp"
#include "eldr/internal/parallel.hpp"
#include "eldr/internal/vector_kernels.hpp"
#include "eldr/random.hpp"
#include "fit_common.hpp"

namespace eldr {

namespace {

// Maps a float to a uint32 whose unsigned order is the float's order.
inline uint32_t sortable_bits(float f) noexcept {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Average ranks (1-based) of v; ties share the mean of their positions.
// keys/tmp are scratch of v.size(). LSD radix sort on the value bits keeps
// this O(n): the greedy layer search ranks 30,000 distances ~1,000 times.
void average_ranks(std::span<const float> v, std::span<float> ranks, std::vector<uint64_t>& keys,
                   std::vector<uint64_t>& tmp) {
  const size_t n = v.size();
  keys.resize(n);
  tmp.resize(n);
  for (size_t i = 0; i < n; ++i) keys[i] = (uint64_t{sortable_bits(v[i])} << 32) | i;
  constexpr int kBits = 11;
  constexpr size_t kBuckets = size_t{1} << kBits;
  size_t count[kBuckets];
  for (int shift = 32; shift < 64; shift += kBits) {
    std::fill(count, count + kBuckets, size_t{0});
    for (uint64_t k : keys) ++count[(k >> shift) & (kBuckets - 1)];
    size_t sum = 0;
    for (auto& c : count) {
      const size_t x = c;
      c = sum;
      sum += x;
    }
    for (uint64_t k : keys) tmp[count[(k >> shift) & (kBuckets - 1)]++] = k;
    keys.swap(tmp);
  }
  for (size_t i = 0; i < n;) {
    size_t j = i + 1;
    while (j < n && (keys[j] >> 32) == (keys[i] >> 32)) ++j;
    const float r = static_cast<float>(0.5 * static_cast<double>(i + 1 + j));  // mean of i+1..j
    for (size_t t = i; t < j; ++t) ranks[keys[t] & 0xffffffffu] = r;
    i = j;
  }
}

// Pearson correlation of x against a pre-centred y with sum of squares syy.
double pearson_centred(std::span<const float> x, std::span<const float> yc, double syy) {
  const size_t n = x.size();
  if (n == 0 || syy <= 0.0) return 0.0;
  double mean = 0.0;
  for (float v : x) mean += v;
  mean /= static_cast<double>(n);
  double sxy = 0.0, sxx = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double dx = x[i] - mean;
    sxy += dx * yc[i];
    sxx += dx * dx;
  }
  if (sxx <= 0.0) return 0.0;
  return sxy / std::sqrt(sxx * syy);
}

struct PairSet {
  std::vector<uint32_t> a, b;
};

PairSet sample_pairs(uint64_t n, uint32_t pairs, uint64_t seed) {
  PairSet p;
  p.a.resize(pairs);
  p.b.resize(pairs);
  Rng rng(seed);
  for (uint32_t t = 0; t < pairs; ++t) {
    const uint64_t i = rng.below(n);
    uint64_t j = rng.below(n - 1);
    if (j >= i) ++j;
    p.a[t] = static_cast<uint32_t>(i);
    p.b[t] = static_cast<uint32_t>(j);
  }
  return p;
}

inline float cosine_distance(double dotv, double na, double nb) {
  if (na <= 0.0 || nb <= 0.0) return 1.0f;  // a zero signature is similar to nothing
  return static_cast<float>(1.0 - dotv / std::sqrt(na * nb));
}

// Decode-side distances: cosine distance of L2-normalised raw decode counts.
std::vector<float> decode_distances(const Geometry& g, uint64_t n, std::span<const int16_t> decode,
                                    const PairSet& pairs, unsigned threads) {
  const size_t cells = g.cells();
  std::vector<float> rows(n * cells);
  std::vector<double> norms(n);
  for (uint64_t i = 0; i < n; ++i) {
    double s = 0.0;
    for (size_t c = 0; c < cells; ++c) {
      rows[i * cells + c] = decode[i * cells + c];
      s += double{rows[i * cells + c]} * rows[i * cells + c];
    }
    norms[i] = s;
  }
  std::vector<float> dist(pairs.a.size());
  parallel_for(dist.size(), threads, [&](size_t b, size_t e, unsigned) {
    for (size_t p = b; p < e; ++p) {
      const uint32_t i = pairs.a[p], j = pairs.b[p];
      dist[p] = cosine_distance(kernels::dot(&rows[i * cells], &rows[j * cells], cells), norms[i],
                                norms[j]);
    }
  });
  return dist;
}

// Per-layer pieces of the signature geometry: squared norms per request and
// dot products per sampled pair, so any mask's cosine is a sum over its layers.
struct LayerTerms {
  std::vector<float> norm2;  // [L][n]
  std::vector<float> dots;   // [L][pairs]
};

LayerTerms layer_terms(const Geometry& g, uint64_t n, std::span<const int16_t> prefill,
                       std::span<const float> idf, const PairSet& pairs, unsigned threads) {
  const size_t cells = g.cells(), P = pairs.a.size();
  const uint32_t L = g.layers, E = g.experts;
  std::vector<float> weighted(n * cells);
  for (uint64_t i = 0; i < n; ++i)
    for (size_t c = 0; c < cells; ++c) weighted[i * cells + c] = prefill[i * cells + c] * idf[c];
  LayerTerms t;
  t.norm2.resize(size_t{L} * n);
  t.dots.resize(size_t{L} * P);
  for (uint64_t i = 0; i < n; ++i)
    for (uint32_t l = 0; l < L; ++l) {
      const float* w = &weighted[i * cells + size_t{l} * E];
      t.norm2[l * n + i] = kernels::dot(w, w, E);
    }
  parallel_for(P, threads, [&](size_t b, size_t e, unsigned) {
    for (size_t p = b; p < e; ++p) {
      const float* wa = &weighted[pairs.a[p] * cells];
      const float* wb = &weighted[pairs.b[p] * cells];
      for (uint32_t l = 0; l < L; ++l)
        t.dots[l * P + p] = kernels::dot(wa + size_t{l} * E, wb + size_t{l} * E, E);
    }
  });
  return t;
}

}  // namespace

double spearman(std::span<const float> x, std::span<const float> y) {
  if (x.size() != y.size() || x.size() < 2) return 0.0;
  std::vector<float> rx(x.size()), ry(y.size());
  std::vector<uint64_t> keys, tmp;
  average_ranks(x, rx, keys, tmp);
  average_ranks(y, ry, keys, tmp);
  double mean = 0.0;
  for (float v : ry) mean += v;
  mean /= static_cast<double>(ry.size());
  std::vector<float> yc(ry.size());
  double syy = 0.0;
  for (size_t i = 0; i < ry.size(); ++i) {
    yc[i] = static_cast<float>(ry[i] - mean);
    syy += double{yc[i]} * yc[i];
  }
  return pearson_centred(rx, yc, syy);
}

Result<LayerSelection> select_layers(const Geometry& g, uint64_t n,
                                     std::span<const int16_t> prefill,
                                     std::span<const int16_t> decode, std::span<const float> idf,
                                     uint32_t pair_count, uint64_t seed, uint32_t threads_req,
                                     const FitProgress& progress) {
  ELDR_TRY(fit_detail::check_calibration(g, n, prefill, decode));
  if (decode.empty()) return Status{Errc::invalid_argument, "layer selection needs decode counts"};
  if (idf.size() != g.cells()) return Status{Errc::shape_mismatch, "idf must have L*E values"};
  if (pair_count < 2) return Status{Errc::invalid_argument, "need at least 2 pairs"};
  const unsigned threads = resolve_threads(threads_req);
  const PairSet pairs = sample_pairs(n, pair_count, seed);
  const size_t P = pair_count;
  const uint32_t L = g.layers;

  // Decode ranks are fixed for the whole search: rank and centre them once.
  std::vector<float> ry(P), yc(P);
  {
    std::vector<uint64_t> keys, tmp;
    average_ranks(decode_distances(g, n, decode, pairs, threads), ry, keys, tmp);
  }
  const double ymean = 0.5 * static_cast<double>(P + 1);
  double syy = 0.0;
  for (size_t p = 0; p < P; ++p) {
    yc[p] = static_cast<float>(ry[p] - ymean);
    syy += double{yc[p]} * yc[p];
  }
  const LayerTerms terms = layer_terms(g, n, prefill, idf, pairs, threads);

  std::vector<double> sel_dot(P, 0.0), sel_norm(n, 0.0);
  std::vector<bool> used(L, false);
  LayerSelection out;
  struct Scratch {
    std::vector<float> dist, ranks;
    std::vector<uint64_t> keys, tmp;
  };
  std::vector<Scratch> scratch(threads);
  for (auto& s : scratch) {
    s.dist.resize(P);
    s.ranks.resize(P);
  }
  std::vector<double> rho(L);
  const double total_evals = 0.5 * L * (L + 1.0);
  double done_evals = 0.0;
  for (uint32_t step = 0; step < L; ++step) {
    std::vector<uint32_t> candidates;
    for (uint32_t l = 0; l < L; ++l)
      if (!used[l]) candidates.push_back(l);
    parallel_for(candidates.size(), threads, [&](size_t b, size_t e, unsigned w) {
      Scratch& s = scratch[w];
      for (size_t c = b; c < e; ++c) {
        const uint32_t l = candidates[c];
        const float* ld = &terms.dots[size_t{l} * P];
        const float* ln = &terms.norm2[size_t{l} * n];
        for (size_t p = 0; p < P; ++p) {
          const uint32_t i = pairs.a[p], j = pairs.b[p];
          s.dist[p] = cosine_distance(sel_dot[p] + ld[p], sel_norm[i] + ln[i], sel_norm[j] + ln[j]);
        }
        average_ranks(s.dist, s.ranks, s.keys, s.tmp);
        rho[l] = pearson_centred(s.ranks, yc, syy);
      }
    });
    uint32_t best = candidates.front();
    for (uint32_t l : candidates)
      if (rho[l] > rho[best]) best = l;  // ties: lowest layer id
    used[best] = true;
    out.order.push_back(best);
    out.rho_curve.push_back(static_cast<float>(rho[best]));
    for (size_t p = 0; p < P; ++p) sel_dot[p] += terms.dots[size_t{best} * P + p];
    for (uint64_t i = 0; i < n; ++i) sel_norm[i] += terms.norm2[size_t{best} * n + i];
    done_evals += static_cast<double>(candidates.size());
    if (progress) progress("layer selection", done_evals / total_evals);
  }
  const size_t peak = static_cast<size_t>(
      std::max_element(out.rho_curve.begin(), out.rho_curve.end()) - out.rho_curve.begin());
  out.peak_rho = out.rho_curve[peak];
  out.mask.assign(out.order.begin(), out.order.begin() + static_cast<std::ptrdiff_t>(peak) + 1);
  std::sort(out.mask.begin(), out.mask.end());
  return out;
}

}  // namespace eldr
