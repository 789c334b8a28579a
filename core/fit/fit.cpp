#include "eldr/fit.hpp"

#include <xxhash.h>

#include <algorithm>
#include <cmath>
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
#include "fit_common.hpp"

namespace eldr {

namespace {

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

namespace fit_detail {

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

}  // namespace fit_detail

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
  ELDR_TRY(fit_detail::check_calibration(g, in.n, in.prefill, in.decode));
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
