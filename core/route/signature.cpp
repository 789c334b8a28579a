#include "eldr/signature.hpp"

#include <algorithm>
#include <cmath>
#include <string>

namespace eldr {

std::vector<float> fit_idf(const Geometry& geometry, std::span<const int16_t> counts, size_t n) {
  const size_t cells = geometry.cells();
  std::vector<uint64_t> df(cells, 0);
  for (size_t i = 0; i < n; ++i) {
    const int16_t* row = counts.data() + i * cells;
    for (size_t c = 0; c < cells; ++c) df[c] += row[c] > 0 ? 1 : 0;
  }
  std::vector<float> idf(cells);
  const double numerator = static_cast<double>(n) + 1.0;
  for (size_t c = 0; c < cells; ++c)
    idf[c] = static_cast<float>(std::log(numerator / (static_cast<double>(df[c]) + 1.0)));
  return idf;
}

Result<SignatureSpace> SignatureSpace::create(const Geometry& geometry, std::vector<uint32_t> mask,
                                              std::vector<float> idf) {
  ELDR_TRY(geometry.validate());
  if (mask.empty()) return Status{Errc::invalid_argument, "layer mask is empty"};
  for (size_t i = 0; i < mask.size(); ++i) {
    if (mask[i] >= geometry.layers)
      return Status{Errc::out_of_range, "layer mask entry " + std::to_string(mask[i]) +
                                            " >= L = " + std::to_string(geometry.layers)};
    if (i > 0 && mask[i] <= mask[i - 1])
      return Status{Errc::invalid_argument, "layer mask must be sorted and unique"};
  }
  if (idf.size() != mask.size() * geometry.experts)
    return Status{Errc::shape_mismatch, "idf has " + std::to_string(idf.size()) +
                                            " values, expected |mask|*E = " +
                                            std::to_string(mask.size() * geometry.experts)};
  for (float w : idf)
    if (!std::isfinite(w) || w < 0.0f)
      return Status{Errc::out_of_range, "idf values must be finite and >= 0"};
  SignatureSpace space;
  space.m_geometry = geometry;
  space.m_mask = std::move(mask);
  space.m_idf = std::move(idf);
  return space;
}

Status SignatureSpace::signature(std::span<const int16_t> counts, std::span<float> out) const {
  if (counts.size() != m_geometry.cells())
    return {Errc::shape_mismatch, "footprint has " + std::to_string(counts.size()) +
                                      " cells, expected " + std::to_string(m_geometry.cells())};
  if (out.size() != dim())
    return {Errc::shape_mismatch, "signature buffer has " + std::to_string(out.size()) +
                                      " floats, expected " + std::to_string(dim())};
  const uint32_t experts = m_geometry.experts;
  double norm2 = 0.0;
  for (size_t s = 0; s < m_mask.size(); ++s) {
    const int16_t* row = counts.data() + size_t{m_mask[s]} * experts;
    const float* w = m_idf.data() + s * experts;
    float* o = out.data() + s * experts;
    for (uint32_t e = 0; e < experts; ++e) {
      o[e] = static_cast<float>(row[e]) * w[e];
      norm2 += double{o[e]} * o[e];
    }
  }
  // One global L2 norm (not per layer); the zero vector stays zero.
  if (norm2 > 0.0) {
    const float inv = static_cast<float>(1.0 / std::sqrt(norm2));
    for (float& v : out) v *= inv;
  }
  return Status::ok();
}

float dot(std::span<const float> a, std::span<const float> b) noexcept {
  const size_t n = std::min(a.size(), b.size());
  float acc = 0.0f;
  for (size_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

}  // namespace eldr
