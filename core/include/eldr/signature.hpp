// Signature transform (docs/design.md §3): count * IDF over the layer mask, one global
// L2 normalisation. Similarity between requests / centroids = dot product.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "eldr/geometry.hpp"
#include "eldr/status.hpp"

namespace eldr {

// IDF per (layer, expert) over a calibration set of N footprints
// (int16 [N][L][E]): w = ln((N + 1) / (df + 1)), df = #requests with c > 0.
std::vector<float> fit_idf(const Geometry& geometry, std::span<const int16_t> counts, size_t n);

class SignatureSpace {
 public:
  SignatureSpace() = default;
  // mask: sorted unique layer ids < L; idf: |mask| * E finite values >= 0.
  static Result<SignatureSpace> create(const Geometry& geometry, std::vector<uint32_t> mask,
                                       std::vector<float> idf);

  const Geometry& geometry() const noexcept { return m_geometry; }
  const std::vector<uint32_t>& mask() const noexcept { return m_mask; }
  const std::vector<float>& idf() const noexcept { return m_idf; }
  size_t dim() const noexcept { return m_mask.size() * m_geometry.experts; }

  // Unit signature of one footprint into out (size dim()). A footprint with no
  // weight on the mask gives the zero vector. Allocation-free. The footprint
  // is assumed validated (validate_footprint); only its size is checked.
  Status signature(std::span<const int16_t> counts, std::span<float> out) const;

 private:
  Geometry m_geometry;
  std::vector<uint32_t> m_mask;
  std::vector<float> m_idf;
};

// Dot product; cosine similarity of two unit signatures.
float dot(std::span<const float> a, std::span<const float> b) noexcept;

}  // namespace eldr
