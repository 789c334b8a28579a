// Offline fit (docs/design.md §4): calibration footprints -> cluster table.
//   IDF -> greedy forward layer selection by Spearman rho -> unit signatures
//   -> balanced spherical k-means (k-means++ init, exact capacitated
//   assignment, cap = ceil(N/K)) -> optional Hungarian alignment to the
//   workers of an existing table.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "eldr/cluster_table.hpp"
#include "eldr/geometry.hpp"
#include "eldr/status.hpp"

namespace eldr {

struct FitInput {
  Geometry geometry;                    // L, E from the arrays; k for the table
  uint64_t n = 0;                       // calibration requests
  std::span<const int16_t> prefill;     // [N][L][E]
  std::span<const int16_t> decode;      // [N][L][E] or empty (then no layer selection)
  std::span<const std::string> labels;  // N labels or empty (then no domain pools)
};

// Stage name and completed fraction in [0, 1]; called from the fitting thread.
using FitProgress = std::function<void(std::string_view stage, double fraction)>;

struct FitOptions {
  uint32_t workers = 0;  // K
  uint64_t seed = 1;
  uint32_t rho_pairs = 30000;  // random pairs for Spearman rho (paper: 30,000, seed 1)
  bool select_layers = true;   // ignored (all layers) without decode footprints
  bool balanced = true;        // false: plain spherical k-means (ablation)
  uint32_t max_iterations = 50;
  float default_tau = kDefaultTau;
  std::string model;
  std::vector<int32_t> worker_ids;         // K ids; empty = 0..K-1
  const ClusterTable* align_to = nullptr;  // refit: keep each worker's locality
  uint32_t threads = 0;                    // 0 = hardware concurrency
  FitProgress progress;
};

Result<ClusterTable> fit_table(const FitInput& input, const FitOptions& options);

// ---- building blocks, exposed for tests and the simulator ------------------

// Spearman rank correlation with average ranks for ties; 0 when either side is
// constant.
double spearman(std::span<const float> x, std::span<const float> y);

struct LayerSelection {
  std::vector<uint32_t> order;   // layers in the order the greedy added them (all L)
  std::vector<float> rho_curve;  // rho after each step
  std::vector<uint32_t> mask;    // sorted prefix of `order` up to the peak rho
  float peak_rho = 0.0f;
};
// idf: full [L][E] weights (fit_idf).
Result<LayerSelection> select_layers(const Geometry& geometry, uint64_t n,
                                     std::span<const int16_t> prefill,
                                     std::span<const int16_t> decode, std::span<const float> idf,
                                     uint32_t pairs, uint64_t seed, uint32_t threads = 0,
                                     const FitProgress& progress = {});

struct KMeansResult {
  std::vector<float> centroids;      // k * d, unit rows (an empty cluster keeps its seed)
  std::vector<uint32_t> assignment;  // n
  uint32_t iterations = 0;
  double cost = 0.0;  // sum of 1 - x.c at the end
};
// points: n unit rows of d floats.
Result<KMeansResult> spherical_kmeans(std::span<const float> points, uint64_t n, size_t d,
                                      uint32_t k, uint64_t seed, bool balanced,
                                      uint32_t max_iterations, uint32_t threads = 0,
                                      const FitProgress& progress = {});

// Oracle domain pools (docs/design.md §5): K workers split among labelled domains in
// proportion to the calibration mix; domains below N/K share a misc pool.
DomainPools build_domain_pools(std::span<const std::string> labels, uint32_t workers);

// Hungarian alignment of a refit: returns perm with new centroid c -> slot
// perm[c] of `old_table`, maximising total similarity (centroids compared in
// the full [L][E] idf-weighted space, so masks may differ). K must match.
Result<std::vector<uint32_t>> align_centroids(const ClusterTable& old_table,
                                              const ClusterTable& new_table);

}  // namespace eldr
