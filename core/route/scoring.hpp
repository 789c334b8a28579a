// Cluster scores of one footprint (docs/design.md §5), the first step of a
// decision after the footprint is checked: RouterScoring is precomputed once
// per table, ClusterScores bounds every cluster's score with one int16 pass
// and scores exactly only where a decision needs it. Private to route/.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "eldr/cluster_table.hpp"
#include "eldr/internal/vector_kernels.hpp"
#include "eldr/router.hpp"

namespace eldr::detail {

// Bounds the stack arrays of a decision (active slots and their data).
inline constexpr uint32_t kMaxSlots = 4096;

// Everything a decision needs from one table, precomputed once.
//
// Scores are exact fp32 cosines: s(c) = (count . v_c) / |count * idf| over the
// masked cells, with v_c = idf * centroid_c (`weights`, one masked dot per
// cluster). A decision rarely needs all of them exactly: the locality band
// only asks which scores lie above top - tau. So a first pass scores every
// cluster in integers, the footprint's own int16 counts against int16 copies
// of v_c (`quantized`, one vpmaddwd per 16 cells), with a proven bound on its
// distance to the exact score; a cluster is scored exactly only where a
// decision depends on where inside that interval its score lies (see
// ClusterScores). Using the counts as they are leaves no signature to build.
struct RouterScoring {
  // q_c = round(lambda_c v_c) with lambda_c = kScale / |v_c|: every |q| <=
  // kScale + 0.5 and |q_c| <= kScale + 0.5 sqrt(cells) < 33,100 for any
  // geometry (cells <= 2^22). The counts enter as they are while |count| <=
  // kMaxCountNorm (else shifted right, see ClusterScores), so x . q_c and all
  // its partial sums stay below 64,000 * 33,100 < 2^31 (Cauchy-Schwarz) and
  // the int32 lanes of the integer pass never wrap.
  static constexpr double kScale = 32000.0;
  static constexpr double kMaxCountNorm = 64000.0;
  static constexpr size_t kChunk = 16;  // cells per vpmaddwd

  std::shared_ptr<const ClusterTable> table;
  uint32_t clusters = 0;
  uint32_t blocks = 0;  // groups of 8 clusters
  size_t dim = 0;       // masked cells
  size_t chunks = 0;    // dim rounded up to kChunk, in chunks
  // Masked layers that follow each other, as whole chunks of the footprint
  // the int16 pass reads in place (empty when experts % kChunk != 0).
  struct Run {
    size_t cell = 0;    // first cell in the footprint
    size_t chunk = 0;   // first chunk in the masked cells
    size_t chunks = 0;  // length
  };
  std::vector<Run> runs;
  std::vector<float> weights;      // [clusters][dim]: v_c = idf * centroid
  std::vector<int16_t> quantized;  // [blocks][chunks][8][kChunk]: q_c = round(lambda_c v_c)
  std::vector<double> inv_lambda;  // [clusters]: 1 / lambda_c (0 for a zero v_c)
  std::vector<double> q_error;     // [clusters]: |q_c / lambda_c - v_c|
  std::vector<double> v_norm;      // [clusters]: |v_c|
  double fp32_error = 0.0;         // the exact score's own fp32 error bound, plus slack
  uint64_t epoch = 0;

  static std::shared_ptr<const RouterScoring> build(std::shared_ptr<const ClusterTable> t,
                                                    uint64_t epoch);
};

// One footprint's cluster scores as intervals that tighten on demand:
// lower(c) <= exact(c) <= upper(c), where exact(c) is the fp32 cosine (the
// same value whichever path asks for it). With `approximate`, one int16 pass
// bounds every cluster; exact(c) costs one fp32 dot and is cached.
// Allocation-free: the buffers live in the object (on the caller's stack).
class ClusterScores {
 public:
  ClusterScores(const RouterScoring& s, std::span<const int16_t> counts, bool approximate)
      : m_s(s), m_counts(counts.data()) {
    const ClusterTable& t = *s.table;
    const kernels::MaskedNorms norms = kernels::masked_norms(
        m_counts, t.layer_mask.data(), t.layer_mask.size(), t.geometry.experts, t.idf.data());
    m_inv_norm =
        norms.weighted2 > 0.0 ? static_cast<float>(1.0 / std::sqrt(norms.weighted2)) : 0.0f;
    std::fill_n(m_known, s.clusters, false);
    m_approximate = approximate && norms.weighted2 > 0.0;
    if (m_approximate) approximate_all(norms.counts2);
  }

  // c = kNoCluster (a worker the table does not know) scores 0.
  float exact(uint32_t c) {
    if (c == kNoCluster) return 0.0f;
    if (!m_known[c]) {
      const ClusterTable& t = *m_s.table;
      m_exact[c] = kernels::masked_dot(m_counts, t.layer_mask.data(), t.layer_mask.size(),
                                       t.geometry.experts, &m_s.weights[size_t{c} * m_s.dim]) *
                   m_inv_norm;
      m_known[c] = true;
    }
    return m_exact[c];
  }
  float lower(uint32_t c) { return settled(c) ? exact(c) : m_approx[c] - m_bound[c]; }
  float upper(uint32_t c) { return settled(c) ? exact(c) : m_approx[c] + m_bound[c]; }

 private:
  // Whether c's interval is a point: its exact score is known or free.
  bool settled(uint32_t c) const { return c == kNoCluster || m_known[c] || !m_approximate; }

  // counts2: |count|^2 over the masked cells, as masked_norms summed it.
  void approximate_all(double counts2);

  const RouterScoring& m_s;
  const int16_t* m_counts;
  float m_inv_norm = 0.0f;
  bool m_approximate = false;
  float m_approx[kMaxClusters];
  float m_bound[kMaxClusters];
  float m_exact[kMaxClusters];
  bool m_known[kMaxClusters];
};

}  // namespace eldr::detail
