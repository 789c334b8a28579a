// Embedded cluster tables through the C API: fit, info, save/load, signature,
// scores, and every bad argument.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "capi_test_support.hpp"
#include "eldr/eldr.h"

namespace {

using namespace eldr::capi_test;

// A scratch directory per test (parallel ctest runs never share files).
class ScratchDir {
 public:
  ScratchDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    m_path = std::filesystem::path(::testing::TempDir()) /
             ("eldr_capi_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(m_path);
    std::filesystem::create_directories(m_path);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(m_path, ec);
  }
  std::string file(const std::string& name) const { return (m_path / name).string(); }

 private:
  std::filesystem::path m_path;
};

TEST(capi_table, fit_reports_its_geometry_and_workers) {
  TablePtr sut = fit_two_domain_table();
  ASSERT_TRUE(sut);
  eldr_table_info_t info = ELDR_TABLE_INFO_INIT;
  ASSERT_EQ(eldr_table_get_info(sut.get(), &info), ELDR_OK);
  EXPECT_EQ(info.version, static_cast<uint32_t>(ELDR_TABLE_INFO_VERSION));
  EXPECT_EQ(info.layers, kLayers);
  EXPECT_EQ(info.experts, kExperts);
  EXPECT_EQ(info.top_k, kTopK);
  EXPECT_EQ(info.num_workers, 2u);
  EXPECT_EQ(info.num_selected_layers, kLayers);  // no decode counts: every layer
  EXPECT_FLOAT_EQ(info.default_tau, 0.1f);
  int32_t ids[2] = {-5, -5};
  ASSERT_EQ(eldr_table_get_worker_ids(sut.get(), ids, 2), ELDR_OK);
  EXPECT_EQ(ids[0], 0);
  EXPECT_EQ(ids[1], 1);
}

TEST(capi_table, fit_separates_the_two_domains) {
  TablePtr sut = fit_two_domain_table();
  float a[2], b[2];
  const auto fa = domain_footprint(0), fb = domain_footprint(1);
  ASSERT_EQ(eldr_table_score(sut.get(), fa.data(), kLayers, kExperts, a, 2), ELDR_OK);
  ASSERT_EQ(eldr_table_score(sut.get(), fb.data(), kLayers, kExperts, b, 2), ELDR_OK);
  const int best_a = a[0] > a[1] ? 0 : 1;
  const int best_b = b[0] > b[1] ? 0 : 1;
  EXPECT_NE(best_a, best_b);
  EXPECT_GT(a[best_a], 0.9f);
  EXPECT_LT(a[1 - best_a], 0.1f);  // disjoint experts: near-orthogonal
}

TEST(capi_table, fit_with_decode_counts_selects_layers) {
  const std::vector<int16_t> prefill = calibration(20);
  eldr_fit_options_t options = ELDR_FIT_OPTIONS_INIT;
  options.num_workers = 2;
  options.threads = 1;
  eldr_table_t* table = nullptr;
  ASSERT_EQ(eldr_table_fit(prefill.data(), prefill.data(), prefill.size() / kCells, kLayers,
                           kExperts, kTopK, &options, &table),
            ELDR_OK)
      << eldr_last_error_message();
  TablePtr sut(table);
  eldr_table_info_t info = ELDR_TABLE_INFO_INIT;
  ASSERT_EQ(eldr_table_get_info(sut.get(), &info), ELDR_OK);
  EXPECT_GE(info.num_selected_layers, 1u);
  EXPECT_LE(info.num_selected_layers, kLayers);
}

TEST(capi_table, fit_rejects_bad_arguments_and_leaves_out_alone) {
  const std::vector<int16_t> prefill = calibration(4);
  const uint64_t n = prefill.size() / kCells;
  eldr_fit_options_t options = ELDR_FIT_OPTIONS_INIT;
  options.num_workers = 2;
  eldr_table_t* sentinel = reinterpret_cast<eldr_table_t*>(uintptr_t{0x1});
  eldr_table_t* out = sentinel;
  auto fit = [&](const int16_t* p, uint64_t rows, uint32_t l, uint32_t e, uint32_t k,
                 const eldr_fit_options_t* o,
                 eldr_table_t** dst) { return eldr_table_fit(p, nullptr, rows, l, e, k, o, dst); };
  EXPECT_EQ(fit(nullptr, n, kLayers, kExperts, kTopK, &options, &out), ELDR_E_INVALID_ARGUMENT);
  EXPECT_TRUE(message_names("eldr_table_fit"));
  EXPECT_EQ(fit(prefill.data(), n, kLayers, kExperts, kTopK, nullptr, &out),
            ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(fit(prefill.data(), n, kLayers, kExperts, kTopK, &options, nullptr),
            ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(fit(prefill.data(), 0, kLayers, kExperts, kTopK, &options, &out),
            ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(fit(prefill.data(), n, 0, kExperts, kTopK, &options, &out), ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(fit(prefill.data(), n, kLayers, 0, kTopK, &options, &out), ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(fit(prefill.data(), n, UINT32_MAX, kExperts, kTopK, &options, &out),
            ELDR_E_INVALID_ARGUMENT);
  // n * layers * experts wraps around: refused before any read.
  EXPECT_EQ(fit(prefill.data(), UINT64_MAX / 4, kLayers, kExperts, kTopK, &options, &out),
            ELDR_E_INVALID_ARGUMENT);
  EXPECT_NE(std::string(eldr_last_error_message()).find("overflow"), std::string::npos);
  EXPECT_EQ(fit(prefill.data(), n, kLayers, kExperts, kExperts + 1, &options, &out),
            ELDR_E_INVALID_ARGUMENT);
  eldr_fit_options_t bad = options;
  bad.num_workers = 0;
  EXPECT_EQ(fit(prefill.data(), n, kLayers, kExperts, kTopK, &bad, &out), ELDR_E_INVALID_ARGUMENT);
  bad = options;
  bad.version = 0;
  EXPECT_EQ(fit(prefill.data(), n, kLayers, kExperts, kTopK, &bad, &out), ELDR_E_INVALID_ARGUMENT);
  bad.version = ELDR_FIT_OPTIONS_VERSION + 1;
  EXPECT_EQ(fit(prefill.data(), n, kLayers, kExperts, kTopK, &bad, &out), ELDR_E_UNSUPPORTED);
  // A negative count in the calibration set.
  std::vector<int16_t> negative = prefill;
  negative[3] = -1;
  EXPECT_EQ(fit(negative.data(), n, kLayers, kExperts, kTopK, &options, &out), ELDR_E_OUT_OF_RANGE);
  EXPECT_EQ(out, sentinel);
}

TEST(capi_table, save_then_load_gives_the_same_table) {
  ScratchDir dir;
  TablePtr original = fit_two_domain_table();
  const std::string path = dir.file("table.eldr");
  ASSERT_EQ(eldr_table_save(original.get(), path.c_str()), ELDR_OK) << eldr_last_error_message();
  eldr_table_t* loaded = nullptr;
  ASSERT_EQ(eldr_table_load(path.c_str(), &loaded), ELDR_OK) << eldr_last_error_message();
  TablePtr sut(loaded);
  const auto counts = domain_footprint(1, 2);
  float before[2], after[2];
  ASSERT_EQ(eldr_table_score(original.get(), counts.data(), kLayers, kExperts, before, 2), ELDR_OK);
  ASSERT_EQ(eldr_table_score(sut.get(), counts.data(), kLayers, kExperts, after, 2), ELDR_OK);
  EXPECT_EQ(before[0], after[0]);
  EXPECT_EQ(before[1], after[1]);
}

TEST(capi_table, load_reports_missing_and_corrupt_files) {
  ScratchDir dir;
  eldr_table_t* out = nullptr;
  EXPECT_EQ(eldr_table_load(dir.file("missing.eldr").c_str(), &out), ELDR_E_IO);
  EXPECT_TRUE(message_names("eldr_table_load"));
  const std::string garbage = dir.file("garbage.eldr");
  std::ofstream(garbage) << "this is not a cluster table, not even close";
  EXPECT_EQ(eldr_table_load(garbage.c_str(), &out), ELDR_E_CORRUPT);
  EXPECT_EQ(eldr_table_load(nullptr, &out), ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_table_load("", &out), ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_table_load(garbage.c_str(), nullptr), ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(out, nullptr);
}

TEST(capi_table, save_reports_bad_arguments_and_io_errors) {
  TablePtr sut = fit_two_domain_table();
  EXPECT_EQ(eldr_table_save(nullptr, "/tmp/x.eldr"), ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_table_save(sut.get(), nullptr), ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_table_save(sut.get(), ""), ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_table_save(sut.get(), "/nonexistent/eldr/h3/dir/table.eldr"), ELDR_E_IO);
  EXPECT_TRUE(message_names("eldr_table_save"));
}

TEST(capi_table, info_checks_its_version_and_arguments) {
  TablePtr sut = fit_two_domain_table();
  eldr_table_info_t info = ELDR_TABLE_INFO_INIT;
  info.version = 0;
  EXPECT_EQ(eldr_table_get_info(sut.get(), &info), ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(info.layers, 0u);
  info.version = ELDR_TABLE_INFO_VERSION + 1;
  EXPECT_EQ(eldr_table_get_info(sut.get(), &info), ELDR_E_UNSUPPORTED);
  EXPECT_EQ(info.layers, 0u);
  EXPECT_EQ(eldr_table_get_info(nullptr, &info), ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_table_get_info(sut.get(), nullptr), ELDR_E_INVALID_ARGUMENT);
}

TEST(capi_table, worker_ids_needs_the_exact_count) {
  TablePtr sut = fit_two_domain_table();
  int32_t ids[3] = {-5, -5, -5};
  EXPECT_EQ(eldr_table_get_worker_ids(sut.get(), ids, 3), ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_table_get_worker_ids(sut.get(), ids, 1), ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_table_get_worker_ids(sut.get(), nullptr, 2), ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_table_get_worker_ids(nullptr, ids, 2), ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(ids[0], -5);
}

TEST(capi_table, signature_is_unit_length_and_scores_are_its_dot_products) {
  TablePtr sut = fit_two_domain_table();
  const auto counts = domain_footprint(0, 1);
  std::vector<float> signature(kLayers * kExperts);
  ASSERT_EQ(eldr_table_compute_signature(sut.get(), counts.data(), kLayers, kExperts,
                                         signature.data(), signature.size()),
            ELDR_OK);
  double norm = 0;
  for (float v : signature) norm += double{v} * v;
  EXPECT_NEAR(norm, 1.0, 1e-5);
  // Experts of the other domain carry no weight.
  for (uint32_t l = 0; l < kLayers; ++l)
    for (uint32_t e = kExperts / 2; e < kExperts; ++e) EXPECT_EQ(signature[l * kExperts + e], 0.0f);
}

TEST(capi_table, signature_and_scores_reject_bad_shapes_and_leave_out_alone) {
  TablePtr sut = fit_two_domain_table();
  const auto counts = domain_footprint(0);
  std::vector<float> out(kCells + 1, 42.0f);
  EXPECT_EQ(eldr_table_compute_signature(sut.get(), counts.data(), kLayers, kExperts, out.data(),
                                         kCells + 1),
            ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(
      eldr_table_compute_signature(sut.get(), counts.data(), kLayers, kExperts, out.data(), 0),
      ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_table_compute_signature(sut.get(), counts.data(), kLayers + 1, kExperts,
                                         out.data(), kCells),
            ELDR_E_SHAPE_MISMATCH);
  EXPECT_EQ(
      eldr_table_compute_signature(sut.get(), counts.data(), kExperts, kLayers, out.data(), kCells),
      ELDR_E_SHAPE_MISMATCH);
  EXPECT_EQ(eldr_table_compute_signature(sut.get(), counts.data(), 0, kExperts, out.data(), kCells),
            ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_table_compute_signature(sut.get(), nullptr, kLayers, kExperts, out.data(), kCells),
            ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(
      eldr_table_compute_signature(sut.get(), counts.data(), kLayers, kExperts, nullptr, kCells),
      ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(
      eldr_table_compute_signature(nullptr, counts.data(), kLayers, kExperts, out.data(), kCells),
      ELDR_E_INVALID_ARGUMENT);
  std::vector<int16_t> negative = counts;
  negative[0] = -3;
  EXPECT_EQ(eldr_table_compute_signature(sut.get(), negative.data(), kLayers, kExperts, out.data(),
                                         kCells),
            ELDR_E_OUT_OF_RANGE);
  EXPECT_EQ(eldr_table_score(sut.get(), negative.data(), kLayers, kExperts, out.data(), 2),
            ELDR_E_OUT_OF_RANGE);
  EXPECT_EQ(eldr_table_score(sut.get(), counts.data(), kLayers, kExperts, out.data(), 3),
            ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_table_score(sut.get(), counts.data(), kLayers, 3, out.data(), 2),
            ELDR_E_SHAPE_MISMATCH);
  EXPECT_EQ(eldr_table_score(sut.get(), counts.data(), kLayers, kExperts, nullptr, 2),
            ELDR_E_INVALID_ARGUMENT);
  for (float v : out) EXPECT_EQ(v, 42.0f);
}

TEST(capi_table, a_zero_footprint_scores_zero) {
  TablePtr sut = fit_two_domain_table();
  const std::vector<int16_t> zero(kCells, 0);
  float scores[2] = {5.0f, 5.0f};
  ASSERT_EQ(eldr_table_score(sut.get(), zero.data(), kLayers, kExperts, scores, 2), ELDR_OK);
  EXPECT_EQ(scores[0], 0.0f);
  EXPECT_EQ(scores[1], 0.0f);
}

}  // namespace
