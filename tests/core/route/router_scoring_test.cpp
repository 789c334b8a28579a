// The router's two-stage scoring (an int16 pass with a proven error bound,
// exact fp32 scores only where a decision needs them) must decide exactly as
// exact scores do. These tests check it against scores computed here in
// double, on random tables of awkward shapes, and with the band edge placed
// right next to a worker so that its interval straddles the edge.
#include <gtest/gtest.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "eldr/internal/vector_kernels.hpp"
#include "eldr/router.hpp"

namespace eldr {
namespace {

struct Case {
  uint32_t layers, experts, workers;
  std::vector<uint32_t> mask;
};

ClusterTable random_table(const Case& c, std::mt19937& rng) {
  ClusterTable t;
  t.model = "scoring-test";
  t.geometry = {c.layers, c.experts, std::min(4u, c.experts)};
  t.layer_mask = c.mask;
  const size_t dim = c.mask.size() * c.experts;
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  t.idf.resize(dim);
  for (float& v : t.idf) v = u(rng) < 0.1f ? 0.0f : 3.0f * u(rng);
  t.centroids.assign(size_t{c.workers} * dim, 0.0f);
  for (uint32_t w = 0; w < c.workers; ++w) {
    float* cen = &t.centroids[w * dim];
    if (w == 1) continue;           // a zero centroid scores 0 against everything
    if (w == 2 && c.workers > 3) {  // a twin: exact ties between two workers
      std::copy_n(&t.centroids[0], dim, cen);
      continue;
    }
    double norm2 = 0.0;
    for (size_t i = 0; i < dim; ++i) {
      cen[i] = u(rng) < 0.3f ? 0.0f : u(rng) * u(rng);
      norm2 += double{cen[i]} * cen[i];
    }
    for (size_t i = 0; i < dim; ++i) cen[i] = static_cast<float>(cen[i] / std::sqrt(norm2));
  }
  for (uint32_t w = 0; w < c.workers; ++w) t.worker_ids.push_back(static_cast<int32_t>(w));
  t.fit.source = "test";
  return t;
}

std::vector<int16_t> random_footprint(const ClusterTable& t, std::mt19937& rng) {
  std::vector<int16_t> f(t.geometry.cells(), 0);
  std::uniform_int_distribution<int> pick(0, 3);
  const int kind = pick(rng);
  std::uniform_int_distribution<int> count(0, kind == 3 ? 32767 : 300);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  const float density = kind == 0 ? 0.02f : kind == 1 ? 0.3f : 0.9f;
  for (int16_t& v : f) v = u(rng) < density ? static_cast<int16_t>(count(rng)) : 0;
  return f;
}

// Scores in double: count * idf over the mask, one global norm, dot centroid.
std::vector<double> reference_scores(const ClusterTable& t, const std::vector<int16_t>& f) {
  const size_t dim = t.dim();
  const uint32_t E = t.geometry.experts;
  std::vector<double> sig(dim);
  double norm2 = 0.0;
  for (size_t s = 0; s < t.layer_mask.size(); ++s)
    for (uint32_t e = 0; e < E; ++e) {
      sig[s * E + e] = static_cast<double>(f[t.layer_mask[s] * E + e]) * t.idf[s * E + e];
      norm2 += sig[s * E + e] * sig[s * E + e];
    }
  std::vector<double> out(t.num_clusters(), 0.0);
  if (norm2 == 0.0) return out;
  for (uint32_t c = 0; c < t.num_clusters(); ++c) {
    const auto cen = t.centroid(c);
    double dot = 0.0;
    for (size_t i = 0; i < dim; ++i) dot += sig[i] * cen[i];
    out[c] = dot / std::sqrt(norm2);
  }
  return out;
}

// The decision exact scores give, with per-worker loads and the lowest slot
// among ties; -1 when a member sits within `margin` of the edge (fp32 and
// double may then disagree, so the case does not test anything).
int32_t reference_pick(const std::vector<double>& score, const std::vector<uint32_t>& load,
                       double tau, uint32_t* band, double margin = 1e-5) {
  const double top = *std::max_element(score.begin(), score.end());
  int32_t pick = -1;
  *band = 0;
  for (size_t j = 0; j < score.size(); ++j) {
    const double d = score[j] - (top - tau);
    if (std::abs(d) < margin && d != 0.0 && score[j] != top) return -1;
    if (score[j] < top - tau && score[j] != top) continue;
    ++*band;
    if (pick < 0 || load[j] < load[static_cast<size_t>(pick)]) pick = static_cast<int32_t>(j);
  }
  return pick;
}

const Case kCases[] = {
    {4, 8, 3, {0, 1, 2, 3}},          // fewer than 8 clusters, one block
    {6, 24, 9, {1, 4, 5}},            // experts not a multiple of 16, 2 blocks
    {3, 100, 17, {0, 2}},             // odd sizes everywhere
    {48, 128, 16, {}},                // the paper's shape, all layers
    {12, 200, 40, {0, 3, 6, 9, 11}},  // cells span the 4096-cell passes
    {40, 128, 5, {}},                 // 5120 cells: two passes of the int16 stage
    {8, 40, 6, {2, 3, 4}},            // consecutive layers from layer 2, a partial last chunk
    {6, 32, 5, {1, 2, 3}},            // consecutive layers read in place, whole chunks
    {10, 32, 7, {0, 1, 4, 6, 7, 9}},  // four runs of layers read in place
};

TEST(router_scoring, decisions_equal_those_of_exact_scores) {
  std::mt19937 rng(7);
  int checked = 0;
  for (Case c : kCases) {
    if (c.mask.empty())
      for (uint32_t l = 0; l < c.layers; ++l) c.mask.push_back(l);
    auto table = std::make_shared<const ClusterTable>(random_table(c, rng));
    ASSERT_TRUE(table->validate().is_ok()) << table->validate().to_string();
    for (float tau : {0.0f, 0.01f, 0.1f, 0.3f, 2.0f}) {
      auto router = Router::create(table, {.policy = Policy::eldr, .tau = tau});
      ASSERT_TRUE(router.is_ok()) << router.status().to_string();
      auto& sut = **router;
      std::vector<float> scores(sut.worker_slots());
      std::vector<uint8_t> in_band(sut.worker_slots());
      for (int i = 0; i < 12; ++i) {
        const auto f = random_footprint(*table, rng);
        std::vector<uint32_t> load(c.workers);
        for (auto& v : load) v = rng() % 4;
        const auto ref = reference_scores(*table, f);
        uint32_t ref_band = 0;
        const int32_t ref_pick = reference_pick(ref, load, tau, &ref_band);
        auto d = sut.route(f, {.loads = load});
        ASSERT_TRUE(d.is_ok()) << d.status().to_string();
        // The score API decides the band from exact scores everywhere.
        auto band = sut.scores(f, scores, in_band);
        ASSERT_TRUE(band.is_ok());
        EXPECT_EQ(d->band_size, *band);
        EXPECT_EQ(d->similarity, scores[d->worker_index]);
        EXPECT_NEAR(d->similarity, ref[d->worker_index], 1e-5);
        if (ref_pick < 0) continue;
        EXPECT_EQ(d->worker_id, ref_pick) << "tau " << tau << " case " << c.experts;
        EXPECT_EQ(d->band_size, ref_band);
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 300);
}

// tau set so that the band's edge lies 1e-5 above or below one worker's
// score: far inside the int16 pass's error bound, so the router must score
// that worker (and the top) exactly to decide.
TEST(router_scoring, a_worker_at_the_band_edge_is_decided_exactly) {
  std::mt19937 rng(11);
  Case c{48, 128, 16, {}};
  for (uint32_t l = 0; l < c.layers; ++l) c.mask.push_back(l);
  auto table = std::make_shared<const ClusterTable>(random_table(c, rng));
  int checked = 0;
  for (int i = 0; i < 40; ++i) {
    const auto f = random_footprint(*table, rng);
    const auto ref = reference_scores(*table, f);
    const double top = *std::max_element(ref.begin(), ref.end());
    // The worker at the edge: the best one below the top.
    size_t edge = ref.size();
    for (size_t j = 0; j < ref.size(); ++j)
      if (ref[j] < top - 1e-3 && (edge == ref.size() || ref[j] > ref[edge])) edge = j;
    if (edge == ref.size()) continue;
    for (double side : {-1e-5, 1e-5}) {
      const float tau = static_cast<float>(top - ref[edge] + side);
      auto router = Router::create(table, {.policy = Policy::eldr, .tau = tau});
      ASSERT_TRUE(router.is_ok());
      // The edge worker is idle and every other one busy: it is picked iff
      // it is in the band.
      std::vector<uint32_t> load(c.workers, 5);
      load[edge] = 0;
      auto d = (*router)->route(f, {.loads = load});
      ASSERT_TRUE(d.is_ok());
      EXPECT_EQ(d->worker_index == edge, side > 0) << "footprint " << i << " side " << side;
      ++checked;
    }
  }
  EXPECT_GT(checked, 40);
}

TEST(router_scoring, int16_kernels_equal_their_portable_reference) {
  std::mt19937 rng(3);
  const uint32_t experts = 40;
  const std::vector<uint32_t> mask = {0, 2, 3};
  std::vector<int16_t> counts(4 * experts);
  for (auto& v : counts) v = static_cast<int16_t>(rng() % 32768);
  // The masked counts, rounded to multiples of 2^shift (ties up) and divided.
  for (uint32_t shift : {0u, 3u}) {
    for (size_t first : {0, 5, 40, 77}) {
      const size_t n = mask.size() * experts - first;
      std::vector<int16_t> sut(n), expected(n);
      kernels::gather_counts(counts.data(), mask.data(), experts, shift, first, n, sut.data());
      for (size_t j = 0; j < n; ++j) {
        const size_t cell = first + j;
        const double v = counts[mask[cell / experts] * experts + cell % experts];
        expected[j] = static_cast<int16_t>(std::floor(v / (1 << shift) + 0.5));
      }
      EXPECT_EQ(sut, expected) << "shift " << shift << " first " << first;
    }
  }
  // Unit vectors at the router's scale: every partial sum stays in int32.
  const size_t chunks = 24;
  std::vector<int16_t> x(chunks * 16), q(chunks * 8 * 16);
  auto unit = [&](auto at, size_t n) {
    std::vector<double> r(n);
    double norm2 = 0.0;
    for (auto& e : r) {
      e = static_cast<double>(rng() % 2001) - 1000.0;
      norm2 += e * e;
    }
    for (size_t i = 0; i < n; ++i) at(i) = static_cast<int16_t>(32000.0 * r[i] / std::sqrt(norm2));
  };
  unit([&](size_t i) -> int16_t& { return x[i]; }, x.size());
  for (size_t c = 0; c < 8; ++c)
    unit([&](size_t i) -> int16_t& { return q[((i / 16) * 8 + c) * 16 + i % 16]; }, x.size());
  int64_t fast[8] = {1, 2, 3, 4, 5, 6, 7, 8}, reference[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  kernels::dot_q16_block(x.data(), q.data(), chunks, fast);
  kernels::reference::dot_q16_block(x.data(), q.data(), chunks, reference);
  for (int c = 0; c < 8; ++c) EXPECT_EQ(fast[c], reference[c]) << "cluster " << c;
}

// The ring's copy must equal memcpy at every length and relative alignment
// (it replaces memcpy for payloads; the tail uses an overlapping move).
TEST(router_scoring, copy_bytes_equals_memcpy) {
  std::vector<uint8_t> source(1200);
  for (size_t i = 0; i < source.size(); ++i) source[i] = static_cast<uint8_t>(i * 37 + 11);
  for (size_t n : {0, 1, 31, 32, 33, 127, 128, 129, 200, 1000}) {
    for (size_t from = 0; from < 8; from += 3) {
      for (size_t to = 0; to < 8; to += 5) {
        std::vector<uint8_t> expected(n + 80, 0x5a), got(n + 80, 0x5a);
        std::memcpy(expected.data() + to, source.data() + from, n);
        kernels::copy_bytes(got.data() + to, source.data() + from, n);
        EXPECT_EQ(got, expected) << "n " << n << " from " << from << " to " << to;
      }
    }
  }
  // Nothing to copy from or to an empty span's null data (UBSan caught it in
  // the ring fuzzer: a record with an empty payload).
  kernels::copy_bytes(nullptr, nullptr, 0);
}

// The record checksum must not depend on the CPU: the AVX2 build of XXH3
// (taken on CPUs that have it) equals the plain one at every length class (short, mid, long
// with a partial stripe) and misalignment.
TEST(router_scoring, dispatched_xxh3_equals_plain_xxh3) {
  std::vector<uint8_t> data(13000);
  std::mt19937 rng(3);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  for (size_t n : {0, 1, 3, 16, 17, 128, 129, 240, 241, 1024, 1025, 12352, 12999}) {
    for (size_t from : {0, 1}) {
      EXPECT_EQ(kernels::xxh3_64(data.data() + from, n), XXH3_64bits(data.data() + from, n))
          << "n " << n << " from " << from;
    }
  }
}

}  // namespace
}  // namespace eldr
