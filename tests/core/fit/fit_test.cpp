#include "eldr/fit.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "eldr/footprint.hpp"
#include "eldr/lab/synthetic.hpp"
#include "eldr/random.hpp"
#include "eldr/signature.hpp"

namespace eldr {
namespace {

TEST(spearman, perfect_reversed_and_tied_by_hand) {
  const std::vector<float> x{1, 2, 3, 4}, y{10, 20, 30, 40}, r{4, 3, 2, 1};
  EXPECT_NEAR(spearman(x, y), 1.0, 1e-12);
  EXPECT_NEAR(spearman(x, r), -1.0, 1e-12);
  // Ties get average ranks: x ranks [1, 2.5, 2.5, 4] against [1, 2, 3, 4].
  EXPECT_NEAR(spearman(std::vector<float>{1, 2, 2, 3}, x), 4.5 / std::sqrt(4.5 * 5.0), 1e-6);
  EXPECT_EQ(spearman(std::vector<float>{1, 1, 1}, std::vector<float>{1, 2, 3}), 0.0);
}

// n unit points in d dimensions scattered around `groups` well separated axes.
std::vector<float> grouped_points(uint64_t n, size_t d, uint32_t groups,
                                  std::vector<uint32_t>& truth, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> pts(n * d);
  truth.resize(n);
  for (uint64_t i = 0; i < n; ++i) {
    truth[i] = static_cast<uint32_t>(i % groups);
    double norm = 0.0;
    for (size_t j = 0; j < d; ++j) {
      float v = static_cast<float>(0.05 * rng.uniform());
      if (j == truth[i]) v += 1.0f;
      pts[i * d + j] = v;
      norm += double{v} * v;
    }
    for (size_t j = 0; j < d; ++j)
      pts[i * d + j] = static_cast<float>(pts[i * d + j] / std::sqrt(norm));
  }
  return pts;
}

TEST(kmeans, balanced_recovers_separated_groups) {
  std::vector<uint32_t> truth;
  const auto pts = grouped_points(100, 8, 4, truth, 5);
  auto sut = spherical_kmeans(pts, 100, 8, 4, 1, true, 50);
  ASSERT_TRUE(sut.is_ok());
  // Every cluster is pure: points of one group share one cluster.
  for (uint64_t i = 0; i < 100; ++i)
    for (uint64_t j = 0; j < 100; ++j)
      EXPECT_EQ(truth[i] == truth[j], sut->assignment[i] == sut->assignment[j]);
  EXPECT_LE(sut->iterations, 50u);
  for (uint32_t c = 0; c < 4; ++c) {
    double norm = 0.0;
    for (size_t j = 0; j < 8; ++j)
      norm += double{sut->centroids[c * 8 + j]} * sut->centroids[c * 8 + j];
    EXPECT_NEAR(norm, 1.0, 1e-5);
  }
}

TEST(kmeans, cluster_sizes_never_exceed_the_cap_even_on_skewed_data) {
  for (uint64_t n : {10u, 37u, 100u, 250u}) {
    for (uint32_t k : {2u, 3u, 7u}) {
      std::vector<uint32_t> truth;
      // All points crowd around one axis: plain k-means would pile them up.
      auto pts = grouped_points(n, 6, 1, truth, n * 31 + k);
      auto sut = spherical_kmeans(pts, n, 6, k, 3, true, 50);
      ASSERT_TRUE(sut.is_ok());
      std::vector<uint64_t> sizes(k, 0);
      for (uint32_t a : sut->assignment) ++sizes[a];
      const uint64_t cap = (n + k - 1) / k;
      for (uint64_t s : sizes) EXPECT_LE(s, cap) << "n=" << n << " k=" << k;
    }
  }
}

TEST(kmeans, plain_kmeans_can_break_the_cap_that_balanced_keeps) {
  std::vector<uint32_t> truth;
  // 90 points on axis 0, 10 on axis 1: two natural clusters of 90 and 10.
  std::vector<float> pts(100 * 2, 0.0f);
  for (int i = 0; i < 100; ++i) pts[i * 2 + (i < 90 ? 0 : 1)] = 1.0f;
  auto plain = spherical_kmeans(pts, 100, 2, 2, 1, false, 50);
  auto balanced = spherical_kmeans(pts, 100, 2, 2, 1, true, 50);
  ASSERT_TRUE(plain.is_ok() && balanced.is_ok());
  auto max_size = [](const KMeansResult& r) {
    std::vector<int> s(2, 0);
    for (auto a : r.assignment) ++s[a];
    return *std::max_element(s.begin(), s.end());
  };
  EXPECT_EQ(max_size(*plain), 90);
  EXPECT_EQ(max_size(*balanced), 50);
}

TEST(kmeans, is_deterministic_for_a_seed_and_validates_arguments) {
  std::vector<uint32_t> truth;
  const auto pts = grouped_points(60, 5, 3, truth, 9);
  auto a = spherical_kmeans(pts, 60, 5, 3, 42, true, 50);
  auto b = spherical_kmeans(pts, 60, 5, 3, 42, true, 50);
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  EXPECT_EQ(a->assignment, b->assignment);
  EXPECT_EQ(a->centroids, b->centroids);
  EXPECT_EQ(spherical_kmeans(pts, 60, 5, 0, 1, true, 50).status().code(), Errc::invalid_argument);
  EXPECT_EQ(spherical_kmeans(pts, 2, 5, 3, 1, true, 50).status().code(), Errc::invalid_argument);
  EXPECT_EQ(spherical_kmeans(pts, 60, 4, 3, 1, true, 50).status().code(), Errc::shape_mismatch);
}

TEST(domain_pools, split_workers_in_proportion_with_a_misc_pool) {
  std::vector<std::string> labels;
  for (int i = 0; i < 60; ++i) labels.push_back("code");
  for (int i = 0; i < 30; ++i) labels.push_back("math");
  for (int i = 0; i < 5; ++i) labels.push_back("law");
  for (int i = 0; i < 5; ++i) labels.push_back("poetry");
  const auto sut = build_domain_pools(labels, 10);
  ASSERT_EQ(sut.names, (std::vector<std::string>{"code", "law", "math", "poetry"}));
  EXPECT_EQ(sut.counts, (std::vector<uint64_t>{60, 5, 30, 5}));
  // N/K = 10: code 6 workers, math 3, law + poetry share 1 misc worker.
  EXPECT_EQ(sut.worker_domain, (std::vector<int32_t>{0, 0, 0, 0, 0, 0, 2, 2, 2, -1}));
}

TEST(domain_pools, every_worker_gets_a_pool_and_every_pool_a_worker) {
  std::vector<std::string> labels(5, "a");
  labels.insert(labels.end(), 4, "b");
  labels.push_back("c");
  // N/K = 5: only "a" is major; "b" and "c" share misc.
  EXPECT_EQ(build_domain_pools(labels, 2).worker_domain, (std::vector<int32_t>{0, -1}));
  // No domain reaches N/K: everything is one misc pool.
  const std::vector<std::string> even{"a", "a", "b", "b", "c", "c"};
  EXPECT_EQ(build_domain_pools(even, 2).worker_domain, (std::vector<int32_t>{-1, -1}));
}

SyntheticWorkload small_workload(uint64_t n, uint64_t seed) {
  SyntheticOptions o;
  o.geometry = {8, 16, 2};
  o.domain_names = {"a", "b", "c"};
  o.domain_weights = {1, 1, 1};
  o.preferred_experts = 3;
  o.domain_affinity = 0.8;
  o.prompt_tokens_median = 24;
  o.decode_tokens = 31;
  o.seed = seed;
  auto w = generate_synthetic(o, n);
  EXPECT_TRUE(w.is_ok());
  return std::move(w.value());
}

TEST(synthetic, footprints_conserve_picks) {
  const auto w = small_workload(20, 3);
  const Geometry g{8, 16, 2};
  for (uint64_t i = 0; i < 20; ++i) {
    EXPECT_TRUE(validate_footprint(g, w.prefill.row(i), w.prompt_tokens[i]).is_ok());
    EXPECT_TRUE(validate_footprint(g, w.decode.row(i), 31u).is_ok());
  }
}

TEST(fit, end_to_end_table_is_valid_balanced_and_selects_a_sorted_mask) {
  const auto w = small_workload(150, 11);
  const auto labels = w.labels();
  FitInput in{{8, 16, 2}, 150, w.prefill.data, w.decode.data, labels};
  FitOptions o;
  o.workers = 6;
  o.rho_pairs = 3000;
  o.model = "synthetic";
  std::vector<std::pair<std::string, double>> progress;
  o.progress = [&](std::string_view stage, double f) { progress.emplace_back(stage, f); };
  auto sut = fit_table(in, o);
  ASSERT_TRUE(sut.is_ok()) << sut.status().to_string();
  EXPECT_TRUE(sut->validate().is_ok());
  EXPECT_EQ(sut->num_clusters(), 6u);
  EXPECT_TRUE(std::is_sorted(sut->layer_mask.begin(), sut->layer_mask.end()));
  EXPECT_EQ(sut->fit.rho_curve.size(), 8u);
  EXPECT_FLOAT_EQ(sut->fit.peak_rho,
                  *std::max_element(sut->fit.rho_curve.begin(), sut->fit.rho_curve.end()));
  EXPECT_GT(sut->fit.peak_rho, 0.2f);  // domain structure makes prefill predict decode
  const uint64_t cap = (150 + 5) / 6;
  EXPECT_EQ(std::accumulate(sut->fit.cluster_sizes.begin(), sut->fit.cluster_sizes.end(), 0u),
            150u);
  for (uint32_t s : sut->fit.cluster_sizes) EXPECT_LE(s, cap);
  EXPECT_EQ(sut->domains.names.size(), 3u);
  EXPECT_FALSE(progress.empty());
  EXPECT_EQ(sut->fit.calibration_hash.rfind("xxh3-128:", 0), 0u);
}

// Reference rho: explicit signatures for `mask`, explicit normalised decode
// vectors, the same pairs as the fit ((i, j != i) drawn from Rng(seed)).
double direct_rho(const Geometry& g, uint64_t n, const std::vector<int16_t>& pre,
                  const std::vector<int16_t>& dec, const std::vector<float>& idf,
                  const std::vector<uint32_t>& mask, uint32_t pairs, uint64_t seed) {
  std::vector<uint32_t> sorted = mask;
  std::sort(sorted.begin(), sorted.end());
  std::vector<float> sub;
  for (uint32_t l : sorted)
    sub.insert(sub.end(), idf.begin() + l * g.experts, idf.begin() + (l + 1) * g.experts);
  auto space = SignatureSpace::create(g, sorted, sub);
  const size_t d = space->dim(), cells = g.cells();
  std::vector<float> sig(n * d), decn(n * cells);
  for (uint64_t i = 0; i < n; ++i) {
    EXPECT_TRUE(
        space->signature(std::span(pre).subspan(i * cells, cells), std::span(sig).subspan(i * d, d))
            .is_ok());
    double s = 0.0;
    for (size_t c = 0; c < cells; ++c)
      s += static_cast<double>(dec[i * cells + c]) * dec[i * cells + c];
    for (size_t c = 0; c < cells; ++c)
      decn[i * cells + c] = static_cast<float>(dec[i * cells + c] / std::sqrt(s));
  }
  Rng rng(seed);
  std::vector<float> x, y;
  for (uint32_t t = 0; t < pairs; ++t) {
    const uint64_t i = rng.below(n);
    uint64_t j = rng.below(n - 1);
    if (j >= i) ++j;
    x.push_back(1.0f - dot(std::span(sig).subspan(i * d, d), std::span(sig).subspan(j * d, d)));
    y.push_back(1.0f - dot(std::span(decn).subspan(i * cells, cells),
                           std::span(decn).subspan(j * cells, cells)));
  }
  return spearman(x, y);
}

TEST(fit, greedy_layer_selection_matches_a_direct_evaluation) {
  // Layers 1 and 3 carry the domain (as the decode footprint does); the other
  // prefill layers are pure noise.
  const Geometry g{5, 8, 1};
  const uint64_t n = 200;
  Rng rng(17);
  std::vector<int16_t> pre(n * g.cells(), 0), dec(n * g.cells(), 0);
  auto domain_pick = [&](uint32_t domain) {
    return rng.uniform() < 0.8 ? domain * 2 + uint32_t(rng.below(2)) : uint32_t(rng.below(8));
  };
  for (uint64_t i = 0; i < n; ++i) {
    const uint32_t domain = static_cast<uint32_t>(i % 4);
    for (uint32_t l = 0; l < 5; ++l)
      for (int t = 0; t < 10; ++t) {
        const bool informative = l == 1 || l == 3;
        ++pre[i * g.cells() + l * 8 + (informative ? domain_pick(domain) : uint32_t(rng.below(8)))];
        ++dec[i * g.cells() + l * 8 + domain_pick(domain)];
      }
  }
  const auto idf = fit_idf(g, pre, n);
  auto sut = select_layers(g, n, pre, dec, idf, 5000, 1);
  ASSERT_TRUE(sut.is_ok()) << sut.status().to_string();
  ASSERT_EQ(sut->order.size(), 5u);
  // The best single layer is an informative one, and no single noise layer
  // comes close.
  EXPECT_TRUE(sut->order[0] == 1 || sut->order[0] == 3);
  for (uint32_t l : {0u, 2u, 4u}) EXPECT_LT(direct_rho(g, n, pre, dec, idf, {l}, 5000, 1), 0.1);
  // Every step's rho equals the direct computation for that prefix.
  for (size_t step = 0; step < 5; ++step) {
    std::vector<uint32_t> prefix(sut->order.begin(), sut->order.begin() + step + 1);
    EXPECT_NEAR(sut->rho_curve[step], direct_rho(g, n, pre, dec, idf, prefix, 5000, 1), 2e-4)
        << "step " << step;
  }
  // The mask is the sorted prefix up to the peak.
  const size_t peak =
      std::max_element(sut->rho_curve.begin(), sut->rho_curve.end()) - sut->rho_curve.begin();
  std::vector<uint32_t> expected(sut->order.begin(), sut->order.begin() + peak + 1);
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(sut->mask, expected);
}

TEST(fit, without_decode_counts_uses_all_layers) {
  const auto w = small_workload(40, 2);
  FitInput in{{8, 16, 2}, 40, w.prefill.data, {}, {}};
  FitOptions o;
  o.workers = 4;
  auto sut = fit_table(in, o);
  ASSERT_TRUE(sut.is_ok());
  EXPECT_EQ(sut->layer_mask, (std::vector<uint32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_TRUE(sut->fit.rho_curve.empty());
}

TEST(fit, rejects_bad_calibration_input) {
  const auto w = small_workload(10, 4);
  FitOptions o;
  o.workers = 4;
  const Geometry g{8, 16, 2};
  EXPECT_EQ(fit_table({g, 10, std::span(w.prefill.data).first(100), {}, {}}, o).status().code(),
            Errc::shape_mismatch);
  EXPECT_EQ(
      fit_table({g, 10, w.prefill.data, std::span(w.decode.data).first(5), {}}, o).status().code(),
      Errc::shape_mismatch);
  o.workers = 11;
  EXPECT_EQ(fit_table({g, 10, w.prefill.data, {}, {}}, o).status().code(), Errc::invalid_argument);
  o.workers = 2;
  std::vector<std::string> labels{"x"};
  EXPECT_EQ(fit_table({g, 10, w.prefill.data, {}, labels}, o).status().code(),
            Errc::shape_mismatch);
  auto negative = w.prefill.data;
  negative[17] = -2;
  EXPECT_EQ(fit_table({g, 10, negative, {}, {}}, o).status().code(), Errc::out_of_range);
}

TEST(fit, refit_aligns_new_centroids_to_the_same_workers) {
  const auto w = small_workload(120, 8);
  FitInput in{{8, 16, 2}, 120, w.prefill.data, {}, {}};
  FitOptions o;
  o.workers = 3;
  o.worker_ids = {10, 20, 30};
  auto first = fit_table(in, o);
  ASSERT_TRUE(first.is_ok());
  // A differently seeded refit finds the same clusters in another order;
  // alignment must hand each worker back its own cluster.
  o.seed = 99;
  o.align_to = &first.value();
  auto second = fit_table(in, o);
  ASSERT_TRUE(second.is_ok());
  for (uint32_t c = 0; c < 3; ++c) {
    const int32_t id = second->worker_ids[c];
    const auto it = std::find(first->worker_ids.begin(), first->worker_ids.end(), id);
    ASSERT_NE(it, first->worker_ids.end());
    const uint32_t old = static_cast<uint32_t>(it - first->worker_ids.begin());
    EXPECT_GT(dot(second->centroid(c), first->centroid(old)), 0.9f);
  }
}

TEST(fit, align_centroids_recovers_a_permutation) {
  ClusterTable a;
  a.geometry = {1, 3, 1};
  a.layer_mask = {0};
  a.idf = {1, 1, 1};
  a.centroids = {1, 0, 0, 0, 1, 0, 0, 0, 1};
  a.worker_ids = {0, 1, 2};
  ClusterTable b = a;
  b.centroids = {0, 0, 1, 1, 0, 0, 0, 1, 0};
  auto perm = align_centroids(a, b);
  ASSERT_TRUE(perm.is_ok());
  EXPECT_EQ(*perm, (std::vector<uint32_t>{2, 0, 1}));
}

}  // namespace
}  // namespace eldr
