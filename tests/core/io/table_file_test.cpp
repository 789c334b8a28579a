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

}  // namespace
}  // namespace eldr
