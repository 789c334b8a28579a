// A table with every optional part filled, and a field-by-field comparison:
// the table tests' round trips (core/route, core/io).
#pragma once

#include <gtest/gtest.h>

#include "eldr/cluster_table.hpp"

namespace eldr {

// L=4, E=3, mask {1, 3}: dim 6, three centroids (one all-zero), every optional
// part filled so a round trip exercises every field.
inline ClusterTable make_table() {
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

inline void expect_tables_equal(const ClusterTable& a, const ClusterTable& b) {
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

}  // namespace eldr
