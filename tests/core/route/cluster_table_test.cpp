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

#include "table_fixture.hpp"
#include "temp_dir.hpp"

namespace eldr {
namespace {

namespace fs = std::filesystem;

using testing::TempDir;

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
}  // namespace
}  // namespace eldr
