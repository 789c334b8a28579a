#include "scoring.hpp"

namespace eldr::detail {

std::shared_ptr<const RouterScoring> RouterScoring::build(std::shared_ptr<const ClusterTable> t,
                                                          uint64_t epoch) {
  auto s = std::make_shared<RouterScoring>();
  s->clusters = t->num_clusters();
  s->blocks = (s->clusters + 7) / 8;
  s->dim = t->dim();
  s->chunks = (s->dim + kChunk - 1) / kChunk;
  const uint32_t experts = t->geometry.experts;
  const auto& mask = t->layer_mask;
  for (size_t i = 0; experts % kChunk == 0 && i < mask.size(); ++i) {
    if (i > 0 && mask[i] == mask[i - 1] + 1) {
      s->runs.back().chunks += experts / kChunk;
      continue;
    }
    s->runs.push_back({size_t{mask[i]} * experts, i * experts / kChunk, experts / kChunk});
  }
  s->weights.resize(size_t{s->clusters} * s->dim);
  s->quantized.assign(size_t{s->blocks} * s->chunks * 8 * kChunk, 0);
  s->inv_lambda.assign(s->clusters, 0.0);
  s->q_error.assign(s->clusters, 0.0);
  s->v_norm.assign(s->clusters, 0.0);
  // The fp32 exact score's summation error, gamma_dim = dim * u / (1 - dim *
  // u), for terms whose magnitudes add up to at most |count * idf| |c| <=
  // 1.001 |count * idf| (the table's unit tolerance), plus 1e-6 for the
  // roundings of the scale and of the float results.
  const double u = std::ldexp(1.0, -24);
  s->fp32_error = 1.001 * (s->dim * u / (1.0 - s->dim * u)) + 1e-6;
  for (uint32_t c = 0; c < s->clusters; ++c) {
    const auto cen = t->centroid(c);
    float* w = &s->weights[size_t{c} * s->dim];
    double v2 = 0.0;
    for (size_t i = 0; i < s->dim; ++i) {
      w[i] = t->idf[i] * cen[i];
      v2 += double{w[i]} * w[i];
    }
    if (v2 == 0.0) continue;  // scores 0 on both paths
    const double lambda = kScale / std::sqrt(v2);
    double e2 = 0.0;
    for (size_t i = 0; i < s->dim; ++i) {
      const double scaled = w[i] * lambda;
      const double q = std::nearbyint(scaled);
      e2 += (scaled - q) * (scaled - q);
      s->quantized[((c / 8) * s->chunks + i / kChunk) * 8 * kChunk + (c % 8) * kChunk +
                   i % kChunk] = static_cast<int16_t>(q);
    }
    s->inv_lambda[c] = 1.0 / lambda;
    s->q_error[c] = std::sqrt(e2) / lambda;
    s->v_norm[c] = std::sqrt(v2);
  }
  s->table = std::move(t);
  s->epoch = epoch;
  return s;
}

void ClusterScores::approximate_all(double counts2) {
  const ClusterTable& t = *m_s.table;
  // An upper bound on |count|: fp32 sums of at most experts + 16 terms per
  // layer are off by less than (experts + 16) u relative.
  const double count_norm =
      std::sqrt(counts2 * (1.0 + (t.geometry.experts + 16) * std::ldexp(1.0, -23)));
  // x = count / 2^shift, rounded: the counts as they are (shift 0) unless
  // the prompt is so long that |x| could pass kMaxCountNorm.
  const size_t padded = m_s.chunks * RouterScoring::kChunk;
  const double half_ulp = 0.5 * std::sqrt(static_cast<double>(padded));
  uint32_t shift = 0;
  while (count_norm > RouterScoring::kMaxCountNorm &&
         std::ldexp(count_norm, -static_cast<int>(shift)) + half_ulp > RouterScoring::kMaxCountNorm)
    ++shift;
  int64_t totals[kMaxClusters + 8];
  std::fill_n(totals, size_t{m_s.blocks} * 8, int64_t{0});
  const auto score_chunks = [&](const int16_t* x, size_t chunk, size_t chunks) {
    for (uint32_t b = 0; b < m_s.blocks; ++b)
      kernels::dot_q16_block(x,
                             &m_s.quantized[(b * m_s.chunks + chunk) * 8 * RouterScoring::kChunk],
                             chunks, totals + 8 * b);
  };
  if (shift == 0 && !m_s.runs.empty()) {  // the counts in place
    for (const RouterScoring::Run& r : m_s.runs) score_chunks(m_counts + r.cell, r.chunk, r.chunks);
  } else {  // gathered (and shifted) into a buffer, a pass at a time
    constexpr size_t kCells = 4096;
    static_assert(kCells % RouterScoring::kChunk == 0);
    alignas(32) int16_t x[kCells];
    for (size_t first = 0; first < padded; first += kCells) {
      const size_t n = std::min(kCells, padded - first);
      const size_t real = std::min(n, m_s.dim - first);
      kernels::gather_counts(m_counts, t.layer_mask.data(), t.geometry.experts, shift, first, real,
                             x);
      std::fill(x + real, x + n, int16_t{0});
      score_chunks(x, first / RouterScoring::kChunk, n / RouterScoring::kChunk);
    }
  }
  // count = 2^shift x + r with |r| <= 2^(shift-1) sqrt(cells), and
  // q_c = lambda_c v_c + e_c, so
  //   count . v_c = 2^shift (x . q_c) / lambda_c - 2^shift (x . e_c) / lambda_c + r . v_c
  // and the int16 score is off the exact one by at most
  //   (|count| + |r|) |e_c| / lambda_c + |r| |v_c|, over |count * idf|.
  const double remainder = shift == 0 ? 0.0 : std::ldexp(half_ulp, static_cast<int>(shift));
  const double inv_norm = m_inv_norm;
  for (uint32_t c = 0; c < m_s.clusters; ++c) {
    m_approx[c] =
        static_cast<float>(std::ldexp(static_cast<double>(totals[c]), static_cast<int>(shift)) *
                           m_s.inv_lambda[c] * inv_norm);
    m_bound[c] = static_cast<float>(
        inv_norm * ((count_norm + remainder) * m_s.q_error[c] + remainder * m_s.v_norm[c]) +
        m_s.fp32_error);
  }
}

}  // namespace eldr::detail
