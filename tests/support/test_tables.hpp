// Small hand-made tables and footprints shared by the core tests.
#pragma once

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "eldr/cluster_table.hpp"
#include "eldr/predictor.hpp"

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

// Prompts of four domains for axis_table's geometry: a request of domain d
// uses expert d of layer 0 (so its top worker is 100 + d). Domain d's token
// ids are 100 * (d + 1) + 0..9 after a shared boilerplate; its text has words
// of its own after a shared sentence.
inline std::vector<uint32_t> domain_prompt_tokens(uint32_t d, uint32_t variant) {
  std::vector<uint32_t> t{1, 2, 3, 4, 5};
  for (uint32_t i = 0; i < 8; ++i) t.push_back(100 * (d + 1) + (i * 7 + variant) % 10);
  return t;
}
inline std::string domain_prompt_text(uint32_t d, uint32_t variant) {
  static const char* kWords[4][4] = {{"integral", "derivative", "matrix", "theorem"},
                                     {"function", "compile", "pointer", "class"},
                                     {"court", "statute", "contract", "plaintiff"},
                                     {"patient", "dose", "symptom", "diagnosis"}};
  std::string s = "Please answer the question. ";
  for (uint32_t i = 0; i < 6; ++i) s += std::string(kWords[d][(i + variant) % 4]) + " ";
  return s;
}
inline std::vector<int16_t> domain_footprint(uint32_t d) {
  std::vector<int16_t> f(8, 0);
  f[d] = 10;
  return f;
}

// axis_table with a footprint predictor fitted on per_domain prompts of each
// domain, as tokens and as text.
inline ClusterTable axis_table_with_predictor(uint32_t per_domain = 4) {
  ClusterTable t = axis_table();
  std::vector<std::vector<uint32_t>> tokens;
  std::vector<std::string> texts;
  std::vector<Prompt> prompts;
  std::vector<int16_t> footprints;
  for (uint32_t d = 0; d < 4; ++d)
    for (uint32_t v = 0; v < per_domain; ++v) {
      tokens.push_back(domain_prompt_tokens(d, v));
      texts.push_back(domain_prompt_text(d, v));
      for (int k = 0; k < 2; ++k) {
        const auto f = domain_footprint(d);
        footprints.insert(footprints.end(), f.begin(), f.end());
      }
    }
  for (size_t i = 0; i < tokens.size(); ++i) {
    prompts.push_back(Prompt::of_tokens(tokens[i]));
    prompts.push_back(Prompt::of_text(texts[i]));
  }
  auto p = Predictor::fit(t.geometry, prompts, footprints);
  if (p) t.predictor = *p;
  return t;
}

}  // namespace eldr::testing
