#include "eldr/footprint.hpp"

#include <gtest/gtest.h>

#include "eldr/geometry.hpp"

namespace eldr {
namespace {

TEST(geometry, presets_match_the_papers_models) {
  EXPECT_EQ(find_preset("qwen3-30b-a3b"), (Geometry{48, 128, 8}));
  EXPECT_EQ(find_preset("Qwen/Qwen3-30B-A3B"), (Geometry{48, 128, 8}));
  EXPECT_EQ(find_preset("gpt-oss-120b"), (Geometry{36, 128, 4}));
  EXPECT_EQ(find_preset("gemma-4-26b-a4b"), (Geometry{30, 128, 8}));
  EXPECT_EQ(find_preset("gpt-oss-20b"), (Geometry{24, 32, 4}));
  EXPECT_FALSE(find_preset("llama"));
  EXPECT_EQ(Geometry({48, 128, 8}).cells(), 6144u);
}

TEST(geometry, validate_rejects_degenerate_shapes) {
  EXPECT_EQ(Geometry({0, 128, 8}).validate().code(), Errc::invalid_argument);
  EXPECT_EQ(Geometry({48, 0, 8}).validate().code(), Errc::invalid_argument);
  EXPECT_EQ(Geometry({48, 4, 8}).validate().code(), Errc::invalid_argument);  // k > E
  EXPECT_EQ(Geometry({kMaxLayers + 1, 128, 8}).validate().code(), Errc::invalid_argument);
  EXPECT_TRUE(Geometry({48, 128, 0}).validate().is_ok());  // k unknown is allowed
}

TEST(footprint, validate_accepts_a_conserving_footprint) {
  const Geometry g{2, 4, 2};
  // 3 tokens, k = 2: each layer sums to 6, no cell above 3.
  const std::vector<int16_t> sut{3, 3, 0, 0, 1, 2, 2, 1};
  EXPECT_TRUE(validate_footprint(g, sut).is_ok());
  EXPECT_TRUE(validate_footprint(g, sut, 3u).is_ok());
}

TEST(footprint, validate_rejects_wrong_shape_negative_and_non_conserving) {
  const Geometry g{2, 4, 2};
  EXPECT_EQ(validate_footprint(g, std::vector<int16_t>(7, 0)).code(), Errc::shape_mismatch);
  EXPECT_EQ(validate_footprint(g, std::vector<int16_t>{0, -1, 0, 0, 0, 0, 0, 0}).code(),
            Errc::out_of_range);
  // Layer 1 sums to 5, not k * tokens = 6.
  EXPECT_EQ(validate_footprint(g, std::vector<int16_t>{3, 3, 0, 0, 1, 2, 1, 1}, 3u).code(),
            Errc::out_of_range);
  // A cell above the token count: a token picked the same expert twice.
  EXPECT_EQ(validate_footprint(g, std::vector<int16_t>{4, 2, 0, 0, 1, 2, 2, 1}, 3u).code(),
            Errc::out_of_range);
}

TEST(footprint, accumulate_topk_counts_every_pick_once) {
  const Geometry g{2, 4, 2};
  // token 0: layer 0 {0,1}, layer 1 {2,3}; token 1: layer 0 {1,2}, layer 1 {3,0}
  const std::vector<int32_t> ids{0, 1, 2, 3, 1, 2, 3, 0};
  std::vector<int32_t> sut(8, 0);
  ASSERT_TRUE(accumulate_topk(g, ids, 2, sut).is_ok());
  EXPECT_EQ(sut, (std::vector<int32_t>{1, 2, 1, 0, 1, 0, 1, 2}));
  std::vector<int16_t> narrow(8);
  ASSERT_TRUE(narrow_footprint(sut, narrow).is_ok());
  EXPECT_TRUE(validate_footprint(g, narrow, 2u).is_ok());
}

TEST(footprint, accumulate_topk_rejects_bad_ids_and_leaves_counts_unchanged) {
  const Geometry g{2, 4, 2};
  std::vector<int32_t> sut(8, 7);
  const auto before = sut;
  EXPECT_EQ(accumulate_topk(g, std::vector<int32_t>{0, 4, 0, 1}, 1, sut).code(),
            Errc::out_of_range);
  EXPECT_EQ(accumulate_topk(g, std::vector<int32_t>{0, -1, 0, 1}, 1, sut).code(),
            Errc::out_of_range);
  EXPECT_EQ(accumulate_topk(g, std::vector<int32_t>{0, 1, 2, 2}, 1, sut).code(),
            Errc::invalid_argument);
  EXPECT_EQ(accumulate_topk(g, std::vector<int32_t>{0, 1, 2}, 1, sut).code(), Errc::shape_mismatch);
  EXPECT_EQ(sut, before);
}

TEST(footprint, narrow_reports_overflow_instead_of_wrapping) {
  std::vector<int16_t> out(2, 5);
  EXPECT_EQ(narrow_footprint(std::vector<int32_t>{1, 32768}, out).code(), Errc::out_of_range);
  EXPECT_EQ(out, (std::vector<int16_t>{5, 5}));
  EXPECT_TRUE(narrow_footprint(std::vector<int32_t>{1, 32767}, out).is_ok());
  EXPECT_EQ(out[1], 32767);
}

}  // namespace
}  // namespace eldr
