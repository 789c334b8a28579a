#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "eldr/cluster_table.hpp"
#include "table_fixture.hpp"
#include "temp_dir.hpp"

namespace eldr {
namespace {

namespace fs = std::filesystem;

using testing::TempDir;

using testing::write_text;

// ---- prototype JSON -----------------------------------------------------------------

// The prototype's JSON as ordered raw fields, so a test can drop or retype one.
class ProtoJson {
 public:
  ProtoJson() {
    m_fields = {
        {"model", "\"tiny-moe\""},
        {"algo", "\"kmbal\""},
        {"k", "2"},
        {"m", "2"},
        {"L", "4"},
        {"e", "3"},
        {"n_fit", "1000"},
        {"variant", "\"count_idf\""},
        {"layer_select", "\"forward_greedy\""},
        {"layer_mask", "[1, 3]"},
        {"fit_peak_rho", "0.42"},
        {"seed", "1"},
        {"sig_dtype", "\"<i2\""},
        {"centroids", "[[2, 0, 0, 0, 0, 0], [0.3, 0.4, 0, 0, 0, 0]]"},
        {"training_sha256", "\"deadbeef\""},
        {"calibration_format", "\"eldr-calibration-v1\""},
        {"sig_idf", "[0.5, 1, 0, 2, 0.25, 3]"},
    };
  }
  ProtoJson& set(const std::string& key, const std::string& raw) {
    for (auto& [k, v] : m_fields)
      if (k == key) {
        v = raw;
        return *this;
      }
    m_fields.emplace_back(key, raw);
    return *this;
  }
  ProtoJson& erase(const std::string& key) {
    std::erase_if(m_fields, [&](const auto& f) { return f.first == key; });
    return *this;
  }
  std::string text() const {
    std::string out = "{";
    for (size_t i = 0; i < m_fields.size(); ++i)
      out += (i ? ", \"" : "\"") + m_fields[i].first + "\": " + m_fields[i].second;
    return out + "}";
  }

 private:
  std::vector<std::pair<std::string, std::string>> m_fields;
};

TEST(cluster_table_json, happy_path_maps_every_field) {
  JsonImportOptions options;
  options.default_tau = 0.25f;
  auto sut = import_prototype_json(ProtoJson().text(), options);
  ASSERT_TRUE(sut.is_ok()) << sut.status().to_string();
  EXPECT_EQ(sut->model, "tiny-moe");
  EXPECT_EQ(sut->geometry, (Geometry{4, 3, 0}));  // no preset, no option: k unknown
  EXPECT_EQ(sut->layer_mask, (std::vector<uint32_t>{1, 3}));
  EXPECT_EQ(sut->idf, (std::vector<float>{0.5f, 1.0f, 0.0f, 2.0f, 0.25f, 3.0f}));
  ASSERT_EQ(sut->num_clusters(), 2u);
  EXPECT_EQ(sut->worker_ids, (std::vector<int32_t>{0, 1}));
  // Rows are renormalised to unit length.
  EXPECT_FLOAT_EQ(sut->centroid(0)[0], 1.0f);
  EXPECT_FLOAT_EQ(sut->centroid(1)[0], 0.6f);
  EXPECT_FLOAT_EQ(sut->centroid(1)[1], 0.8f);
  EXPECT_EQ(sut->default_tau, 0.25f);
  EXPECT_EQ(sut->fit.source, "prototype-json");
  EXPECT_EQ(sut->fit.calibration_hash, "deadbeef");
  EXPECT_EQ(sut->fit.n_requests, 1000u);
  EXPECT_EQ(sut->fit.seed, 1u);
  EXPECT_FLOAT_EQ(sut->fit.peak_rho, 0.42f);
  EXPECT_TRUE(sut->domains.empty());
  EXPECT_TRUE(sut->validate().is_ok());

  auto decoded = decode_table(encode_table(*sut));
  ASSERT_TRUE(decoded.is_ok()) << decoded.status().to_string();
  expect_tables_equal(*decoded, *sut);
}

TEST(cluster_table_json, zero_centroid_stays_zero) {
  auto sut = import_prototype_json(
      ProtoJson().set("centroids", "[[0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 5]]").text());
  ASSERT_TRUE(sut.is_ok()) << sut.status().to_string();
  for (float x : sut->centroid(0)) EXPECT_EQ(x, 0.0f);
  EXPECT_FLOAT_EQ(sut->centroid(1)[5], 1.0f);
}

TEST(cluster_table_json, top_k_comes_from_options_then_a_matching_preset) {
  std::string row0 = "[1", row1 = "[0", idf = "[1";
  for (int i = 1; i < 128; ++i) {
    row0 += ", 0";
    row1 += i == 1 ? ", 1" : ", 0";
    idf += ", 1";
  }
  ProtoJson qwen;
  qwen.set("model", "\"Qwen/Qwen3-30B-A3B\"")
      .set("L", "48")
      .set("e", "128")
      .set("layer_mask", "[0]")
      .set("centroids", "[" + row0 + "], " + row1 + "]]")
      .set("sig_idf", idf + "]");
  auto from_preset = import_prototype_json(qwen.text());
  ASSERT_TRUE(from_preset.is_ok()) << from_preset.status().to_string();
  EXPECT_EQ(from_preset->geometry, (Geometry{48, 128, 8}));

  JsonImportOptions options;
  options.top_k = 4;
  auto from_options = import_prototype_json(qwen.text(), options);
  ASSERT_TRUE(from_options.is_ok()) << from_options.status().to_string();
  EXPECT_EQ(from_options->geometry.top_k, 4u);

  // A preset name whose L/E disagree with the file: k is not guessed.
  auto mismatched = import_prototype_json(ProtoJson().set("model", "\"qwen3-30b-a3b\"").text());
  ASSERT_TRUE(mismatched.is_ok()) << mismatched.status().to_string();
  EXPECT_EQ(mismatched->geometry.top_k, 0u);
}

TEST(cluster_table_json, informational_fields_may_be_missing) {
  for (const char* field : {"m", "layer_select", "calibration_format"}) {
    auto sut = import_prototype_json(ProtoJson().erase(field).text());
    EXPECT_TRUE(sut.is_ok()) << field << ": " << sut.status().to_string();
  }
}

TEST(cluster_table_json, each_missing_required_field_is_named) {
  for (const char* field :
       {"model", "algo", "k", "L", "e", "n_fit", "variant", "layer_mask", "fit_peak_rho", "seed",
        "sig_dtype", "centroids", "sig_idf", "training_sha256"}) {
    auto sut = import_prototype_json(ProtoJson().erase(field).text());
    ASSERT_FALSE(sut.is_ok()) << field;
    EXPECT_EQ(sut.status().code(), Errc::corrupt) << field;
    EXPECT_NE(sut.status().message().find(std::string("'") + field), std::string::npos)
        << field << ": " << sut.status().message();
  }
}

TEST(cluster_table_json, each_mistyped_field_is_named) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"model", "5"},
      {"algo", "1"},
      {"k", "\"2\""},
      {"k", "-2"},
      {"k", "2.5"},
      {"k", "2147483648"},
      {"m", "\"two\""},
      {"L", "\"4\""},
      {"L", "5000"},
      {"e", "null"},
      {"n_fit", "-1"},
      {"variant", "[]"},
      {"layer_select", "7"},
      {"layer_mask", "\"1,3\""},
      {"layer_mask", "[1, \"3\"]"},
      {"layer_mask", "[1, -3]"},
      {"fit_peak_rho", "\"high\""},
      {"seed", "1.5"},
      {"sig_dtype", "{}"},
      {"centroids", "{}"},
      {"centroids", "[[1, 0, 0, 0, 0, 0], \"row\"]"},
      {"centroids", "[[1, 0, 0, 0, 0, 0], [1, 0, 0, 0, 0, true]]"},
      {"sig_idf", "\"0.5\""},
      {"sig_idf", "[0.5, 1, null, 2, 0.25, 3]"},
      {"training_sha256", "42"},
  };
  for (const auto& [field, raw] : cases) {
    auto sut = import_prototype_json(ProtoJson().set(field, raw).text());
    ASSERT_FALSE(sut.is_ok()) << field << " = " << raw;
    EXPECT_EQ(sut.status().code(), Errc::corrupt) << field << " = " << raw;
    EXPECT_NE(sut.status().message().find("'" + field), std::string::npos)
        << field << " = " << raw << ": " << sut.status().message();
  }
}

TEST(cluster_table_json, other_algorithms_variants_and_dtypes_are_unsupported) {
  for (const auto& [field, raw] : std::vector<std::pair<std::string, std::string>>{
           {"algo", "\"kmeans\""}, {"variant", "\"gate_prob_all\""}, {"sig_dtype", "\"<f4\""}}) {
    auto sut = import_prototype_json(ProtoJson().set(field, raw).text());
    ASSERT_FALSE(sut.is_ok()) << field;
    EXPECT_EQ(sut.status().code(), Errc::unsupported) << field;
  }
}

TEST(cluster_table_json, inconsistent_sizes_are_corrupt) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"k", "3"},
      {"centroids", "[[1, 0, 0, 0, 0, 0], [1, 0, 0, 0, 0]]"},
      {"sig_idf", "[0.5, 1, 0, 2, 0.25]"},
      {"layer_mask", "[3, 1]"},
      {"layer_mask", "[1, 4]"},
      {"L", "0"},
      {"sig_idf", "[0.5, 1, 0, 2, 0.25, -3]"},
  };
  for (const auto& [field, raw] : cases) {
    auto sut = import_prototype_json(ProtoJson().set(field, raw).text());
    ASSERT_FALSE(sut.is_ok()) << field << " = " << raw;
    EXPECT_EQ(sut.status().code(), Errc::corrupt) << field << " = " << raw;
  }
}

TEST(cluster_table_json, bad_options_are_invalid_arguments) {
  JsonImportOptions options;
  options.top_k = 4;  // e = 3
  EXPECT_EQ(import_prototype_json(ProtoJson().text(), options).status().code(),
            Errc::invalid_argument);
  options = {};
  options.default_tau = -0.5f;
  EXPECT_EQ(import_prototype_json(ProtoJson().text(), options).status().code(),
            Errc::invalid_argument);
}

TEST(cluster_table_json, unparsable_text_is_corrupt) {
  for (const char* text : {"", "{", "[]", "42", "{\"model\": NaN}", "{\"a\": 1,}"}) {
    auto sut = import_prototype_json(text);
    ASSERT_FALSE(sut.is_ok()) << text;
    EXPECT_EQ(sut.status().code(), Errc::corrupt) << text;
  }
}

TEST(cluster_table_json, file_import_reads_the_file_and_names_it_in_errors) {
  TempDir dir;
  write_text(dir.file("c.json"), ProtoJson().text());
  auto sut = import_prototype_json_file(dir.file("c.json"));
  ASSERT_TRUE(sut.is_ok()) << sut.status().to_string();
  EXPECT_EQ(sut->num_clusters(), 2u);

  write_text(dir.file("bad.json"), ProtoJson().erase("centroids").text());
  auto bad = import_prototype_json_file(dir.file("bad.json"));
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find(dir.file("bad.json")), std::string::npos);

  auto missing = import_prototype_json_file(dir.file("missing.json"));
  EXPECT_EQ(missing.status().code(), Errc::io);
}

}  // namespace
}  // namespace eldr
