#include "eldr/signature.hpp"

#include <gtest/gtest.h>

#include <cmath>

namespace eldr {
namespace {

TEST(idf, matches_the_formula_by_hand) {
  const Geometry g{1, 3, 1};
  // N = 3. Expert 0 used by nobody, expert 1 by everyone, expert 2 by one request.
  const std::vector<int16_t> counts{0, 2, 0, 0, 1, 5, 0, 1, 0};
  const auto sut = fit_idf(g, counts, 3);
  EXPECT_FLOAT_EQ(sut[0], std::log(4.0f / 1.0f));
  EXPECT_FLOAT_EQ(sut[1], 0.0f);  // generalist: ln(4/4)
  EXPECT_FLOAT_EQ(sut[2], std::log(4.0f / 2.0f));
}

TEST(signature, is_count_times_idf_over_the_mask_with_one_global_norm) {
  const Geometry g{3, 2, 1};
  auto sut = SignatureSpace::create(g, {0, 2}, {1.0f, 2.0f, 1.0f, 1.0f});
  ASSERT_TRUE(sut.is_ok());
  ASSERT_EQ(sut->dim(), 4u);
  // Layer 1 is outside the mask and must not count.
  const std::vector<int16_t> counts{3, 2, 100, 100, 0, 5};
  std::vector<float> s(4);
  ASSERT_TRUE(sut->signature(counts, s).is_ok());
  // Weighted: [3, 4, 0, 5]; global norm sqrt(50) (per-layer norms would give 5 and 5).
  const float n = std::sqrt(50.0f);
  EXPECT_FLOAT_EQ(s[0], 3.0f / n);
  EXPECT_FLOAT_EQ(s[1], 4.0f / n);
  EXPECT_FLOAT_EQ(s[2], 0.0f);
  EXPECT_FLOAT_EQ(s[3], 5.0f / n);
  EXPECT_NEAR(dot(s, s), 1.0f, 1e-6f);
}

TEST(signature, zero_footprint_stays_zero) {
  auto sut = SignatureSpace::create({2, 2, 1}, {0, 1}, std::vector<float>(4, 1.0f));
  ASSERT_TRUE(sut.is_ok());
  std::vector<float> s(4, 9.0f);
  ASSERT_TRUE(sut->signature(std::vector<int16_t>(4, 0), s).is_ok());
  EXPECT_EQ(s, std::vector<float>(4, 0.0f));
}

TEST(signature, create_rejects_bad_masks_and_idf) {
  const Geometry g{3, 2, 1};
  EXPECT_EQ(SignatureSpace::create(g, {}, {}).status().code(), Errc::invalid_argument);
  EXPECT_EQ(SignatureSpace::create(g, {3}, {1, 1}).status().code(), Errc::out_of_range);
  EXPECT_EQ(SignatureSpace::create(g, {1, 0}, {1, 1, 1, 1}).status().code(),
            Errc::invalid_argument);
  EXPECT_EQ(SignatureSpace::create(g, {1, 1}, {1, 1, 1, 1}).status().code(),
            Errc::invalid_argument);
  EXPECT_EQ(SignatureSpace::create(g, {0}, {1}).status().code(), Errc::shape_mismatch);
  EXPECT_EQ(SignatureSpace::create(g, {0}, {1, -1}).status().code(), Errc::out_of_range);
  EXPECT_EQ(SignatureSpace::create(g, {0}, {1, NAN}).status().code(), Errc::out_of_range);
}

TEST(signature, rejects_wrong_buffer_sizes) {
  auto sut = SignatureSpace::create({2, 2, 1}, {0}, {1, 1});
  ASSERT_TRUE(sut.is_ok());
  std::vector<float> s(2);
  EXPECT_EQ(sut->signature(std::vector<int16_t>(3), s).code(), Errc::shape_mismatch);
  std::vector<float> wrong(3);
  EXPECT_EQ(sut->signature(std::vector<int16_t>(4), wrong).code(), Errc::shape_mismatch);
}

}  // namespace
}  // namespace eldr
