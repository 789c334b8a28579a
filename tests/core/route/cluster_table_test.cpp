#include "eldr/cluster_table.hpp"

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

#include "temp_dir.hpp"

namespace eldr {
namespace {

namespace fs = std::filesystem;

using testing::TempDir;

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// L=4, E=3, mask {1, 3}: dim 6, three centroids (one all-zero), every optional
// part filled so a round trip exercises every field.
ClusterTable make_table() {
  ClusterTable t;
  t.model = "tiny-moe";
  t.geometry = {4, 3, 2};
  t.layer_mask = {1, 3};
  t.idf = {0.5f, 1.0f, 0.0f, 2.0f, 0.25f, 3.0f};
  t.centroids = {1.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f,  //
                 0.6f, 0.8f, 0.0f, 0.0f, 0.0f, 0.0f,  //
                 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  t.worker_ids = {7, 2, 5};
  t.default_tau = 0.15f;
  t.fit.n_requests = 1000;
  t.fit.seed = 0x123456789abcdefull;
  t.fit.peak_rho = 0.42f;
  t.fit.rho_curve = {0.1f, 0.3f, 0.42f};
  t.fit.calibration_hash = "abc123";
  t.fit.created_unix = -5;
  t.fit.iterations = 12;
  t.fit.cluster_sizes = {400, 300, 300};
  t.fit.source = "eldr fit";
  t.domains.names = {"code", "math"};
  t.domains.counts = {600, 400};
  t.domains.worker_domain = {0, 1, -1};
  return t;
}

void expect_tables_equal(const ClusterTable& a, const ClusterTable& b) {
  EXPECT_EQ(a.schema_version, b.schema_version);
  EXPECT_EQ(a.model, b.model);
  EXPECT_EQ(a.geometry, b.geometry);
  EXPECT_EQ(a.layer_mask, b.layer_mask);
  EXPECT_EQ(a.idf, b.idf);
  EXPECT_EQ(a.centroids, b.centroids);
  EXPECT_EQ(a.worker_ids, b.worker_ids);
  EXPECT_EQ(a.default_tau, b.default_tau);
  EXPECT_EQ(a.fit.n_requests, b.fit.n_requests);
  EXPECT_EQ(a.fit.seed, b.fit.seed);
  EXPECT_EQ(a.fit.peak_rho, b.fit.peak_rho);
  EXPECT_EQ(a.fit.rho_curve, b.fit.rho_curve);
  EXPECT_EQ(a.fit.calibration_hash, b.fit.calibration_hash);
  EXPECT_EQ(a.fit.created_unix, b.fit.created_unix);
  EXPECT_EQ(a.fit.iterations, b.fit.iterations);
  EXPECT_EQ(a.fit.cluster_sizes, b.fit.cluster_sizes);
  EXPECT_EQ(a.fit.source, b.fit.source);
  EXPECT_EQ(a.domains.names, b.domains.names);
  EXPECT_EQ(a.domains.counts, b.domains.counts);
  EXPECT_EQ(a.domains.worker_domain, b.domains.worker_domain);
}

// ---- encode / decode --------------------------------------------------------------

TEST(cluster_table_codec, encode_then_decode_preserves_every_field) {
  const ClusterTable sut = make_table();
  ASSERT_TRUE(sut.validate().is_ok()) << sut.validate().to_string();
  const auto bytes = encode_table(sut);
  ASSERT_FALSE(bytes.empty());
  EXPECT_EQ(std::memcmp(bytes.data() + 4, "ELDR", 4), 0);
  auto decoded = decode_table(bytes);
  ASSERT_TRUE(decoded.is_ok()) << decoded.status().to_string();
  expect_tables_equal(*decoded, sut);
}

TEST(cluster_table_codec, minimal_table_without_fit_or_domains_round_trips) {
  ClusterTable sut;
  sut.geometry = {1, 1, 0};
  sut.layer_mask = {0};
  sut.idf = {0.0f};
  sut.centroids = {1.0f};
  sut.worker_ids = {0};
  sut.default_tau = 0.0f;
  auto decoded = decode_table(encode_table(sut));
  ASSERT_TRUE(decoded.is_ok()) << decoded.status().to_string();
  expect_tables_equal(*decoded, sut);
}

TEST(cluster_table_codec, decodes_from_a_misaligned_buffer) {
  const auto bytes = encode_table(make_table());
  std::vector<uint8_t> shifted(bytes.size() + 1);
  std::memcpy(shifted.data() + 1, bytes.data(), bytes.size());
  auto sut = decode_table(std::span<const uint8_t>(shifted.data() + 1, bytes.size()));
  ASSERT_TRUE(sut.is_ok()) << sut.status().to_string();
  expect_tables_equal(*sut, make_table());
}

TEST(cluster_table_codec, every_single_byte_corruption_is_an_error_or_a_valid_table) {
  const auto good = encode_table(make_table());
  size_t rejected = 0;
  for (size_t i = 0; i < good.size(); ++i) {
    for (uint8_t flip : {uint8_t{0xff}, uint8_t{0x01}, uint8_t{0x80}}) {
      auto bytes = good;
      bytes[i] ^= flip;
      auto sut = decode_table(bytes);
      if (sut.is_ok()) {
        EXPECT_TRUE(sut->validate().is_ok()) << "byte " << i;
      } else {
        ++rejected;
      }
    }
  }
  // Most flips hit offsets, lengths or values that the checks must catch.
  EXPECT_GT(rejected, good.size());
}

TEST(cluster_table_codec, every_truncation_is_an_error_or_loses_only_padding) {
  // A FlatBuffer records no total size, so cutting the alignment padding after
  // the last-written object leaves a buffer that still holds every field.
  const auto good = encode_table(make_table());
  for (size_t len = 0; len < good.size(); ++len) {
    auto sut = decode_table(std::span<const uint8_t>(good.data(), len));
    if (sut.is_ok()) {
      EXPECT_GE(len + 8, good.size()) << "prefix of " << len << " bytes decoded";
      expect_tables_equal(*sut, make_table());
    }
  }
}

TEST(cluster_table_codec, wrong_identifier_is_corrupt) {
  auto bytes = encode_table(make_table());
  bytes[4] = 'X';
  auto sut = decode_table(bytes);
  ASSERT_FALSE(sut.is_ok());
  EXPECT_EQ(sut.status().code(), Errc::corrupt);
  EXPECT_NE(sut.status().message().find("identifier"), std::string::npos);
}

TEST(cluster_table_codec, other_schema_version_is_unsupported) {
  ClusterTable table = make_table();
  table.schema_version = kTableSchemaVersion + 1;
  auto sut = decode_table(encode_table(table));
  ASSERT_FALSE(sut.is_ok());
  EXPECT_EQ(sut.status().code(), Errc::unsupported);
}

TEST(cluster_table_codec, semantically_invalid_table_is_corrupt_on_decode) {
  ClusterTable table = make_table();
  table.worker_ids = {1, 1, 2};
  auto sut = decode_table(encode_table(table));
  ASSERT_FALSE(sut.is_ok());
  EXPECT_EQ(sut.status().code(), Errc::corrupt);
  EXPECT_NE(sut.status().message().find("worker id"), std::string::npos);
}

TEST(cluster_table_codec, garbage_and_tiny_inputs_are_corrupt) {
  EXPECT_EQ(decode_table({}).status().code(), Errc::corrupt);
  std::vector<uint8_t> garbage(256);
  for (size_t i = 0; i < garbage.size(); ++i) garbage[i] = static_cast<uint8_t>(i * 131 + 7);
  std::memcpy(garbage.data() + 4, "ELDR", 4);
  EXPECT_EQ(decode_table(garbage).status().code(), Errc::corrupt);
}

// ---- save / load -------------------------------------------------------------------

TEST(cluster_table_file, save_then_load_round_trips_and_leaves_no_temporary) {
  TempDir dir;
  const ClusterTable sut = make_table();
  ASSERT_TRUE(save_table(sut, dir.file("t.eldr")).is_ok());
  ClusterTable second = make_table();
  second.default_tau = 0.5f;
  ASSERT_TRUE(save_table(second, dir.file("t.eldr")).is_ok());  // replaces the first
  auto loaded = load_table(dir.file("t.eldr"));
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().to_string();
  expect_tables_equal(*loaded, second);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"t.eldr"});
}

TEST(cluster_table_file, save_refuses_an_invalid_table) {
  TempDir dir;
  ClusterTable sut = make_table();
  sut.default_tau = -1.0f;
  EXPECT_FALSE(save_table(sut, dir.file("t.eldr")).is_ok());
  EXPECT_TRUE(dir.entries().empty());
}

TEST(cluster_table_file, io_errors_name_the_path) {
  Status saved = save_table(make_table(), "/nonexistent-dir/t.eldr");
  EXPECT_EQ(saved.code(), Errc::io);
  EXPECT_NE(saved.message().find("/nonexistent-dir/t.eldr"), std::string::npos);

  auto loaded = load_table("/nonexistent-dir/t.eldr");
  EXPECT_EQ(loaded.status().code(), Errc::io);
  EXPECT_NE(loaded.status().message().find("/nonexistent-dir/t.eldr"), std::string::npos);
}

TEST(cluster_table_file, truncated_file_is_corrupt_and_names_the_path) {
  TempDir dir;
  auto bytes = encode_table(make_table());
  write_text(dir.file("t.eldr"), std::string(bytes.begin(), bytes.begin() + 40));
  auto sut = load_table(dir.file("t.eldr"));
  ASSERT_FALSE(sut.is_ok());
  EXPECT_EQ(sut.status().code(), Errc::corrupt);
  EXPECT_NE(sut.status().message().find(dir.file("t.eldr")), std::string::npos);
}

// ---- validate -----------------------------------------------------------------------

TEST(cluster_table_validate, accepts_the_edges_of_each_rule) {
  ClusterTable sut = make_table();
  sut.default_tau = 0.0f;
  EXPECT_TRUE(sut.validate().is_ok());
  sut.default_tau = 2.0f;
  EXPECT_TRUE(sut.validate().is_ok());
  sut.centroids[0] = 1.0009f;  // within the 1e-3 tolerance
  EXPECT_TRUE(sut.validate().is_ok()) << sut.validate().to_string();
  sut.domains = {};
  sut.fit.cluster_sizes.clear();
  EXPECT_TRUE(sut.validate().is_ok());
  sut.domains.names = {"only"};
  sut.domains.counts = {3};
  sut.domains.worker_domain = {-1, 0, 0};
  EXPECT_TRUE(sut.validate().is_ok());
}

TEST(cluster_table_validate, each_rule_violation_is_reported) {
  const std::vector<std::pair<const char*, std::function<void(ClusterTable&)>>> cases = {
      {"schema version", [](ClusterTable& t) { t.schema_version = 0; }},
      {"zero layers", [](ClusterTable& t) { t.geometry.layers = 0; }},
      {"zero experts", [](ClusterTable& t) { t.geometry.experts = 0; }},
      {"top_k above experts", [](ClusterTable& t) { t.geometry.top_k = 4; }},
      {"empty mask", [](ClusterTable& t) { t.layer_mask.clear(); }},
      {"unsorted mask",
       [](ClusterTable& t) {
         t.layer_mask = {3, 1};
       }},
      {"duplicate mask",
       [](ClusterTable& t) {
         t.layer_mask = {1, 1};
       }},
      {"mask past L",
       [](ClusterTable& t) {
         t.layer_mask = {1, 4};
       }},
      {"idf too short", [](ClusterTable& t) { t.idf.pop_back(); }},
      {"idf negative", [](ClusterTable& t) { t.idf[2] = -0.5f; }},
      {"idf nan", [](ClusterTable& t) { t.idf[2] = std::nanf(""); }},
      {"idf inf", [](ClusterTable& t) { t.idf[2] = std::numeric_limits<float>::infinity(); }},
      {"no centroids",
       [](ClusterTable& t) {
         t.centroids.clear();
         t.worker_ids.clear();
         t.fit.cluster_sizes.clear();
         t.domains = {};
       }},
      {"centroids too short", [](ClusterTable& t) { t.centroids.pop_back(); }},
      {"centroids too long", [](ClusterTable& t) { t.centroids.push_back(0.0f); }},
      {"centroid nan", [](ClusterTable& t) { t.centroids[7] = std::nanf(""); }},
      {"centroid inf",
       [](ClusterTable& t) { t.centroids[7] = -std::numeric_limits<float>::infinity(); }},
      {"centroid too short", [](ClusterTable& t) { t.centroids[0] = 0.5f; }},
      {"centroid too long", [](ClusterTable& t) { t.centroids[0] = 1.01f; }},
      {"centroid almost zero", [](ClusterTable& t) { t.centroids[12] = 1e-20f; }},
      {"duplicate worker",
       [](ClusterTable& t) {
         t.worker_ids = {7, 2, 7};
       }},
      {"negative worker",
       [](ClusterTable& t) {
         t.worker_ids = {7, -2, 5};
       }},
      {"negative tau", [](ClusterTable& t) { t.default_tau = -0.01f; }},
      {"tau above 2", [](ClusterTable& t) { t.default_tau = 2.01f; }},
      {"tau nan", [](ClusterTable& t) { t.default_tau = std::nanf(""); }},
      {"cluster sizes length",
       [](ClusterTable& t) {
         t.fit.cluster_sizes = {1, 2};
       }},
      {"domain counts length", [](ClusterTable& t) { t.domains.counts = {1}; }},
      {"worker_domain length",
       [](ClusterTable& t) {
         t.domains.worker_domain = {0, 1};
       }},
      {"worker_domain past names",
       [](ClusterTable& t) {
         t.domains.worker_domain = {0, 2, -1};
       }},
      {"worker_domain below -1",
       [](ClusterTable& t) {
         t.domains.worker_domain = {0, -2, 1};
       }},
      {"domain data without names", [](ClusterTable& t) { t.domains.names.clear(); }},
  };
  for (const auto& [name, mutate] : cases) {
    ClusterTable sut = make_table();
    mutate(sut);
    Status st = sut.validate();
    EXPECT_FALSE(st.is_ok()) << name;
    EXPECT_FALSE(st.message().empty()) << name;
    // Whatever the file holds, decoding re-runs the same checks.
    EXPECT_FALSE(decode_table(encode_table(sut)).is_ok()) << name;
  }
}

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
