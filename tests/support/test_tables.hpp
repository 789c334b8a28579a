// Small hand-made tables and footprints shared by the core tests.
#pragma once

#include <cmath>
#include <memory>
#include <vector>

#include "eldr/cluster_table.hpp"

namespace eldr::testing {

// L=2, E=4, k=1, both layers masked, idf 1. Centroid c is the unit vector on
// cell c (layer 0, expert c) for c < 4, so a footprint's score against
// worker c is its normalised count in that cell.
inline ClusterTable axis_table(uint32_t workers = 4) {
  ClusterTable t;
  t.model = "axis-test";
  t.geometry = {2, 4, 1};
  t.layer_mask = {0, 1};
  t.idf.assign(8, 1.0f);
  t.centroids.assign(size_t{workers} * 8, 0.0f);
  for (uint32_t c = 0; c < workers; ++c) t.centroids[c * 8 + (c % 8)] = 1.0f;
  for (uint32_t c = 0; c < workers; ++c) t.worker_ids.push_back(static_cast<int32_t>(100 + c));
  t.fit.n_requests = 0;
  t.fit.source = "test";
  return t;
}

// A footprint [2][4] with the given layer-0 counts and zeros in layer 1.
inline std::vector<int16_t> layer0(std::initializer_list<int16_t> counts) {
  std::vector<int16_t> f(8, 0);
  size_t i = 0;
  for (int16_t c : counts) f[i++] = c;
  return f;
}

}  // namespace eldr::testing
