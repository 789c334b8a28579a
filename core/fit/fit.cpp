#include "eldr/fit.hpp"

#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <ctime>
#include <limits>
#include <map>
#include <numeric>

#include "eldr/assignment.hpp"
#include "eldr/footprint.hpp"
#include "eldr/internal/parallel.hpp"
#include "eldr/internal/vector_kernels.hpp"
#include "eldr/random.hpp"
#include "eldr/signature.hpp"

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

Status check_calibration(const Geometry& g, uint64_t n, std::span<const int16_t> prefill,
                         std::span<const int16_t> decode) {
  ELDR_TRY(g.validate());
  if (n < 2) return {Errc::invalid_argument, "need at least 2 calibration requests"};
  if (prefill.size() != n * g.cells())
    return {Errc::shape_mismatch, "prefill has " + std::to_string(prefill.size()) +
                                      " counts, expected N*L*E = " + std::to_string(n * g.cells())};
  if (!decode.empty() && decode.size() != prefill.size())
    return {Errc::shape_mismatch, "decode counts must have the same shape as prefill counts"};
  for (uint64_t i = 0; i < n; ++i) {
    if (Status s = validate_footprint(g, prefill.subspan(i * g.cells(), g.cells())); !s)
      return {s.code(), "prefill request " + std::to_string(i) + ": " + s.message()};
    if (!decode.empty())
      if (Status s = validate_footprint(g, decode.subspan(i * g.cells(), g.cells())); !s)
        return {s.code(), "decode request " + std::to_string(i) + ": " + s.message()};
  }
  return Status::ok();
}

std::string calibration_digest(const Geometry& g, std::span<const int16_t> prefill,
                               std::span<const int16_t> decode) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_128bits_reset(st);
  const uint32_t shape[2] = {g.layers, g.experts};
  XXH3_128bits_update(st, shape, sizeof(shape));
  XXH3_128bits_update(st, prefill.data(), prefill.size_bytes());
  XXH3_128bits_update(st, decode.data(), decode.size_bytes());
  const XXH128_hash_t h = XXH3_128bits_digest(st);
  XXH3_freeState(st);
  char buf[64];
  std::snprintf(buf, sizeof(buf), "xxh3-128:%016llx%016llx",
                static_cast<unsigned long long>(h.high64),
                static_cast<unsigned long long>(h.low64));
  return buf;
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
  ELDR_TRY(check_calibration(g, n, prefill, decode));
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

Result<KMeansResult> spherical_kmeans(std::span<const float> points, uint64_t n, size_t d,
                                      uint32_t k, uint64_t seed, bool balanced,
                                      uint32_t max_iterations, uint32_t threads_req,
                                      const FitProgress& progress) {
  if (k == 0) return Status{Errc::invalid_argument, "k must be >= 1"};
  if (n < k)
    return Status{Errc::invalid_argument, "need at least as many calibration requests (" +
                                              std::to_string(n) + ") as workers (" +
                                              std::to_string(k) + ")"};
  if (d == 0 || points.size() != n * d)
    return Status{Errc::shape_mismatch, "points must hold n*d values"};
  if (max_iterations == 0) return Status{Errc::invalid_argument, "max_iterations must be >= 1"};
  const unsigned threads = resolve_threads(threads_req);
  const size_t cap = static_cast<size_t>((n + k - 1) / k);

  // k-means++ on cosine distance.
  KMeansResult r;
  r.centroids.assign(size_t{k} * d, 0.0f);
  Rng rng(seed);
  std::vector<double> best_sim(n, -std::numeric_limits<double>::infinity());
  std::vector<bool> chosen(n, false);
  uint64_t pick = rng.below(n);
  for (uint32_t c = 0; c < k; ++c) {
    chosen[pick] = true;
    std::copy_n(&points[pick * d], d, &r.centroids[size_t{c} * d]);
    if (c + 1 == k) break;
    double total = 0.0;
    std::vector<double> weight(n);
    for (uint64_t i = 0; i < n; ++i) {
      best_sim[i] = std::max(best_sim[i],
                             double{kernels::dot(&points[i * d], &r.centroids[size_t{c} * d], d)});
      const double dist = std::max(0.0, 1.0 - best_sim[i]);
      weight[i] = chosen[i] ? 0.0 : dist * dist;
      total += weight[i];
    }
    if (total > 0.0) {
      double u = rng.uniform() * total;
      pick = n;
      for (uint64_t i = 0; i < n; ++i) {
        if (weight[i] <= 0.0) continue;
        pick = i;
        if (u < weight[i]) break;
        u -= weight[i];
      }
    } else {  // every point coincides with a centroid: take any unchosen one
      uint64_t idx = rng.below(n - (c + 1));
      for (pick = 0; chosen[pick] || idx-- > 0; ++pick) {
      }
    }
  }

  std::vector<double> cost(n * k);
  std::vector<uint32_t> previous;
  std::vector<double> sums(size_t{k} * d);
  for (uint32_t it = 0; it < max_iterations; ++it) {
    parallel_for(n, threads, [&](size_t b, size_t e, unsigned) {
      for (size_t i = b; i < e; ++i)
        for (uint32_t c = 0; c < k; ++c)
          cost[i * k + c] = 1.0 - kernels::dot(&points[i * d], &r.centroids[size_t{c} * d], d);
    });
    if (balanced) {
      auto assigned = assign_capacitated(cost, n, k, cap);
      if (!assigned) return assigned.status();
      r.assignment = std::move(*assigned);
    } else {
      r.assignment.resize(n);
      for (uint64_t i = 0; i < n; ++i)
        r.assignment[i] =
            static_cast<uint32_t>(std::min_element(&cost[i * k], &cost[i * k] + k) - &cost[i * k]);
    }
    r.iterations = it + 1;
    r.cost = 0.0;
    for (uint64_t i = 0; i < n; ++i) r.cost += cost[i * k + r.assignment[i]];
    if (progress) progress("k-means", static_cast<double>(it + 1) / max_iterations);
    if (r.assignment == previous) break;  // centroids would not move
    previous = r.assignment;
    std::fill(sums.begin(), sums.end(), 0.0);
    for (uint64_t i = 0; i < n; ++i) {
      double* s = &sums[size_t{r.assignment[i]} * d];
      const float* x = &points[i * d];
      for (size_t j = 0; j < d; ++j) s[j] += x[j];
    }
    for (uint32_t c = 0; c < k; ++c) {
      const double* s = &sums[size_t{c} * d];
      double norm2 = 0.0;
      for (size_t j = 0; j < d; ++j) norm2 += s[j] * s[j];
      if (norm2 <= 0.0) continue;  // empty (or all-zero) cluster keeps its centroid
      const double inv = 1.0 / std::sqrt(norm2);
      for (size_t j = 0; j < d; ++j)
        r.centroids[size_t{c} * d + j] = static_cast<float>(s[j] * inv);
    }
  }
  if (progress) progress("k-means", 1.0);
  return r;
}

DomainPools build_domain_pools(std::span<const std::string> labels, uint32_t workers) {
  DomainPools pools;
  if (labels.empty() || workers == 0) return pools;
  std::map<std::string, uint64_t> counts;  // sorted: deterministic pool order
  for (const auto& l : labels) ++counts[l];
  for (const auto& [name, c] : counts) {
    pools.names.push_back(name);
    pools.counts.push_back(c);
  }
  const double n = static_cast<double>(labels.size());
  // Major domains own pools; the rest (below N/K) share misc. When there are
  // more pools than workers, the smallest majors fold into misc.
  std::vector<size_t> major;
  uint64_t misc = 0;
  for (size_t i = 0; i < pools.names.size(); ++i) {
    if (static_cast<double>(pools.counts[i]) >= n / workers)
      major.push_back(i);
    else
      misc += pools.counts[i];
  }
  std::stable_sort(major.begin(), major.end(),
                   [&](size_t a, size_t b) { return pools.counts[a] > pools.counts[b]; });
  while (major.size() + (misc ? 1 : 0) > workers) {
    misc += pools.counts[major.back()];
    major.pop_back();
  }
  // Largest-remainder apportionment with at least one worker per pool.
  struct Pool {
    int32_t domain;
    uint64_t count;
    uint32_t seats;
    double remainder;
  };
  std::vector<Pool> plan;
  for (size_t i : major) plan.push_back({static_cast<int32_t>(i), pools.counts[i], 0, 0.0});
  if (misc) plan.push_back({-1, misc, 0, 0.0});
  uint32_t given = 0;
  for (auto& p : plan) {
    const double exact = static_cast<double>(p.count) * workers / n;
    p.seats = std::max<uint32_t>(1, static_cast<uint32_t>(exact));
    p.remainder = exact - p.seats;
    given += p.seats;
  }
  while (given > workers) {  // minimum seats overshot: take from the largest pools
    auto it = std::max_element(plan.begin(), plan.end(),
                               [](const Pool& a, const Pool& b) { return a.seats < b.seats; });
    --it->seats;
    --given;
  }
  while (given < workers) {
    auto it = std::max_element(plan.begin(), plan.end(), [](const Pool& a, const Pool& b) {
      return a.remainder < b.remainder;
    });
    ++it->seats;
    it->remainder -= 1.0;
    ++given;
  }
  for (const auto& p : plan)
    for (uint32_t s = 0; s < p.seats; ++s) pools.worker_domain.push_back(p.domain);
  return pools;
}

Result<std::vector<uint32_t>> align_centroids(const ClusterTable& old_table,
                                              const ClusterTable& new_table) {
  const uint32_t k = new_table.num_clusters();
  if (old_table.num_clusters() != k)
    return Status{Errc::invalid_argument, "alignment needs the same number of workers (old " +
                                              std::to_string(old_table.num_clusters()) + ", new " +
                                              std::to_string(k) + ")"};
  if (old_table.geometry.layers != new_table.geometry.layers ||
      old_table.geometry.experts != new_table.geometry.experts)
    return Status{Errc::shape_mismatch, "alignment needs the same model geometry"};
  const size_t cells = new_table.geometry.cells();
  const uint32_t E = new_table.geometry.experts;
  auto expand = [&](const ClusterTable& t) {
    std::vector<float> full(size_t{k} * cells, 0.0f);
    for (uint32_t c = 0; c < k; ++c) {
      auto src = t.centroid(c);
      for (size_t s = 0; s < t.layer_mask.size(); ++s)
        std::copy_n(&src[s * E], E, &full[c * cells + size_t{t.layer_mask[s]} * E]);
    }
    return full;
  };
  const auto a = expand(old_table), b = expand(new_table);
  std::vector<double> cost(size_t{k} * k);
  for (uint32_t c = 0; c < k; ++c)
    for (uint32_t w = 0; w < k; ++w)
      cost[size_t{c} * k + w] = -kernels::dot(&b[c * cells], &a[w * cells], cells);
  return hungarian_min(cost, k, k);
}

Result<ClusterTable> fit_table(const FitInput& in, const FitOptions& o) {
  const Geometry& g = in.geometry;
  ELDR_TRY(check_calibration(g, in.n, in.prefill, in.decode));
  if (o.workers == 0) return Status{Errc::invalid_argument, "workers must be >= 1"};
  if (!in.labels.empty() && in.labels.size() != in.n)
    return Status{Errc::shape_mismatch, "got " + std::to_string(in.labels.size()) + " labels for " +
                                            std::to_string(in.n) + " requests"};
  if (!o.worker_ids.empty() && o.worker_ids.size() != o.workers)
    return Status{Errc::invalid_argument, "worker_ids must list one id per worker"};
  if (!(o.default_tau >= 0.0f && o.default_tau <= 2.0f))
    return Status{Errc::invalid_argument, "default_tau must be in [0, 2]"};
  const unsigned threads = resolve_threads(o.threads);

  std::vector<float> idf = fit_idf(g, in.prefill, in.n);
  ClusterTable table;
  table.model = o.model;
  table.geometry = g;
  table.default_tau = o.default_tau;
  if (!in.decode.empty() && o.select_layers) {
    auto sel = select_layers(g, in.n, in.prefill, in.decode, idf, o.rho_pairs, o.seed, threads,
                             o.progress);
    if (!sel) return sel.status();
    table.layer_mask = sel->mask;
    table.fit.rho_curve = sel->rho_curve;
    table.fit.peak_rho = sel->peak_rho;
  } else {
    table.layer_mask.resize(g.layers);
    std::iota(table.layer_mask.begin(), table.layer_mask.end(), 0u);
  }
  const uint32_t E = g.experts;
  for (uint32_t l : table.layer_mask)
    table.idf.insert(table.idf.end(), idf.begin() + size_t{l} * E, idf.begin() + size_t{l + 1} * E);

  auto space = SignatureSpace::create(g, table.layer_mask, table.idf);
  if (!space) return space.status();
  const size_t d = space->dim();
  std::vector<float> points(in.n * d);
  for (uint64_t i = 0; i < in.n; ++i)
    ELDR_TRY(space->signature(in.prefill.subspan(i * g.cells(), g.cells()),
                              std::span<float>(&points[i * d], d)));
  auto km = spherical_kmeans(points, in.n, d, o.workers, o.seed, o.balanced, o.max_iterations,
                             threads, o.progress);
  if (!km) return km.status();

  table.centroids = std::move(km->centroids);
  table.worker_ids.resize(o.workers);
  for (uint32_t c = 0; c < o.workers; ++c)
    table.worker_ids[c] = o.worker_ids.empty() ? static_cast<int32_t>(c) : o.worker_ids[c];
  table.fit.n_requests = in.n;
  table.fit.seed = o.seed;
  table.fit.iterations = km->iterations;
  table.fit.cluster_sizes.assign(o.workers, 0);
  for (uint32_t a : km->assignment) ++table.fit.cluster_sizes[a];
  table.fit.calibration_hash = calibration_digest(g, in.prefill, in.decode);
  table.fit.created_unix = static_cast<int64_t>(std::time(nullptr));
  table.fit.source = o.balanced ? "eldr fit (balanced k-means)" : "eldr fit (plain k-means)";
  if (!in.labels.empty()) table.domains = build_domain_pools(in.labels, o.workers);
  if (o.align_to) {
    auto perm = align_centroids(*o.align_to, table);
    if (!perm) return perm.status();
    for (uint32_t c = 0; c < o.workers; ++c)
      table.worker_ids[c] = o.align_to->worker_ids[(*perm)[c]];
  }
  ELDR_TRY(table.validate());
  return table;
}

}  // namespace eldr
