// Demand codes (demand_code.hpp): the levels, the nearest-level rounding, the
// cost-cell layout of the model shapes a pool books for, and that a compact
// booking puts a request in another router's batch exactly as its own
// router's route() put it in its own.
#include "eldr/demand_code.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "eldr/router.hpp"

namespace eldr {
namespace {

TEST(demand_code, levels_rise_from_nothing_to_the_largest_demand) {
  const auto levels = demand_code_levels();
  EXPECT_EQ(levels[0], 0);
  EXPECT_EQ(levels[kDemandCodes - 1], 40822);  // p = 0.999
  static_assert(kDemandCodes == 256, "a code is a byte");
  for (uint32_t k = 1; k < kDemandCodes; ++k) {
    EXPECT_GT(levels[k], levels[k - 1]);
    EXPECT_EQ(demand_code_of(levels[k]), k);
  }
}

TEST(demand_code, every_q_goes_to_its_nearest_level_within_three_percent) {
  const auto levels = demand_code_levels();
  std::vector<uint16_t> all(40823);
  for (uint32_t q = 0; q < all.size(); ++q) all[q] = static_cast<uint16_t>(q);
  std::vector<uint8_t> codes(all.size());
  encode_demand(all.data(), all.size(), codes.data());
  for (uint32_t q = 0; q < all.size(); ++q) {
    const uint8_t c = codes[q];
    ASSERT_EQ(c, demand_code_of(static_cast<uint16_t>(q)));
    const int err = std::abs(int{levels[c]} - static_cast<int>(q));
    if (c > 0) {
      ASSERT_LE(err, std::abs(int{levels[c - 1]} - static_cast<int>(q))) << q;
    }
    if (uint32_t{c} + 1 < kDemandCodes) {
      ASSERT_LE(err, std::abs(int{levels[c + 1]} - static_cast<int>(q))) << q;
    }
    ASSERT_LE(err, q * 0.025 + 0.5) << q;
  }
  EXPECT_EQ(demand_code_of(65535), kDemandCodes - 1);  // out of range: the top
}

TEST(demand_code, cost_cells_of_the_shapes_a_pool_books) {
  // 48 x 128 (Qwen3-30B-A3B): every 6th layer, 8 of them.
  EXPECT_EQ(cost_cells_of({48, 128, 8}, 1024), (CostCells{6, 8, 128}));
  // 61 x 384 (the largest MoE models): every 23rd, 3 layers.
  EXPECT_EQ(cost_cells_of({61, 384, 8}, 1024), (CostCells{23, 3, 384}));
  EXPECT_EQ(cost_cells_of({61, 384, 8}, 1024).count(), 1152u);
  // GPT-OSS-20B: all 24 x 32.
  EXPECT_EQ(cost_cells_of({24, 32, 4}, 1024), (CostCells{1, 24, 32}));
  EXPECT_EQ(cost_cells_of({4, 8, 2}, 1), (CostCells{4, 1, 8}));  // at least one layer
}

// 48 x 128, k = 8, one cluster per worker (random centroids on layer 0).
std::shared_ptr<const ClusterTable> wide_table(uint32_t workers) {
  ClusterTable t;
  t.model = "wide-test";
  t.geometry = {48, 128, 8};
  t.layer_mask = {0};
  t.idf.assign(128, 1.0f);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (uint32_t w = 0; w < workers; ++w) {
    float norm = 0.0f;
    std::vector<float> c(128);
    for (float& x : c) {
      x = u(rng);
      norm += x * x;
    }
    for (float& x : c) t.centroids.push_back(x / std::sqrt(norm));
    t.worker_ids.push_back(static_cast<int32_t>(10 + w));
  }
  t.fit.source = "test";
  return std::make_shared<const ClusterTable>(std::move(t));
}

// A prefill of `tokens` tokens, each picking 8 of 128 experts per layer,
// skewed towards a few.
std::vector<int16_t> footprint(std::mt19937& rng, uint32_t tokens) {
  std::vector<int16_t> f(48 * 128, 0);
  std::vector<double> weight(128);
  for (int e = 0; e < 128; ++e) weight[e] = 1.0 / (1 + e % 17);
  std::discrete_distribution<int> pick(weight.begin(), weight.end());
  for (uint32_t l = 0; l < 48; ++l)
    for (uint32_t t = 0; t < tokens; ++t)
      for (int j = 0; j < 8; ++j) ++f[l * 128 + pick(rng)];  // repeats: still 8 per token
  return f;
}

std::vector<double> batches(const Router& r) {
  std::vector<double> out;
  for (const WorkerInfo& w : r.workers()) out.push_back(w.batch_experts);
  return out;
}

TEST(demand_code, a_compact_booking_builds_the_batch_the_footprint_built) {
  const auto table = wide_table(4);
  auto placed = Router::create(table).value();   // routes the requests
  auto booked = Router::create(table).value();   // books them with codes
  auto counted = Router::create(table).value();  // books them with footprints
  const CostCells cells = placed->cost_cells();
  EXPECT_EQ(cells, (CostCells{6, 8, 128}));
  std::mt19937 rng(3);
  std::vector<uint8_t> codes(cells.count());
  for (uint64_t id = 1; id <= 40; ++id) {
    const auto f = footprint(rng, 20 + static_cast<uint32_t>(id * 7 % 300));
    auto d = placed->route(f, {.request_id = id});
    ASSERT_TRUE(d.is_ok()) << d.status().to_string();
    ASSERT_TRUE(placed->demand_codes(f, codes).is_ok());
    ASSERT_TRUE(booked->book_demand(d->worker_id, codes, id).is_ok());
    ASSERT_TRUE(counted->book(d->worker_id, f, id).is_ok());
    // Exactly: the batch is a function of its requests' codes.
    ASSERT_EQ(batches(*booked), batches(*placed)) << id;
    ASSERT_EQ(batches(*counted), batches(*placed)) << id;
  }
  for (uint64_t id = 1; id <= 40; id += 3) {
    ASSERT_TRUE(placed->complete_request(id).is_ok());
    ASSERT_TRUE(booked->complete_request(id).is_ok());
    ASSERT_EQ(batches(*booked), batches(*placed)) << id;
  }
  // Both route the next request alike.
  for (uint64_t id = 100; id < 120; ++id) {
    const auto f = footprint(rng, 50);
    auto a = placed->route(f, {.request_id = id});
    auto b = booked->route(f, {.request_id = id});
    ASSERT_TRUE(a.is_ok() && b.is_ok());
    EXPECT_EQ(a->worker_id, b->worker_id);
  }
}

TEST(demand_code, a_bad_compact_booking_is_refused_and_changes_nothing) {
  const auto table = wide_table(2);
  auto r = Router::create(table).value();
  std::vector<uint8_t> codes(r->cost_cells().count(), 5);
  EXPECT_EQ(r->book_demand(10, std::span(codes).first(codes.size() - 1), 1).code(),
            Errc::invalid_argument);
  codes[17] = kDemandCodes - 1;  // every byte is a code: the top level is p = 0.999
  EXPECT_EQ(r->book_demand(99, codes, 1).code(), Errc::not_found);
  ASSERT_TRUE(r->book_demand(10, codes, 1).is_ok());
  EXPECT_EQ(r->book_demand(11, codes, 1).code(), Errc::state);  // the id is in flight
  std::vector<uint8_t> wrong(3);
  std::vector<int16_t> f(48 * 128, 1);
  EXPECT_EQ(r->demand_codes(f, wrong).code(), Errc::invalid_argument);
  EXPECT_EQ(r->workers()[0].inflight, 1);
  EXPECT_EQ(r->workers()[1].inflight, 0);
  ASSERT_TRUE(r->complete_request(1).is_ok());
  EXPECT_EQ(r->workers()[0].batch_experts, 0.0);
}

TEST(demand_code, a_router_without_batches_books_codes_as_counts) {
  const auto table = wide_table(2);
  auto r = Router::create(table, {.policy = Policy::jsq}).value();
  std::vector<uint8_t> codes(r->cost_cells().count(), 9);
  ASSERT_TRUE(r->book_demand(11, codes, 1).is_ok());
  EXPECT_EQ(r->workers()[1].inflight, 1);
  EXPECT_EQ(r->workers()[1].batch_experts, 0.0);
}

}  // namespace
}  // namespace eldr
