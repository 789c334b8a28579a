#include "step_fit.hpp"

#include <algorithm>
#include <cmath>

namespace eldr::detail {

namespace {
// Each sample's weight decays by this per later sample: the fit follows the
// last few thousand steps.
constexpr double kForget = 1.0 - 1.0 / 2048.0;
// The prior counts as this many samples.
constexpr double kPriorWeight = 1.0;
constexpr uint64_t kMinSamples = 32;
}  // namespace

bool StepFit::add(uint32_t batch, double distinct, double step_ms) noexcept {
  if (!std::isfinite(distinct) || !std::isfinite(step_ms) || distinct < 0.0 || step_ms <= 0.0 ||
      step_ms > 10000.0 || batch == 0)
    return false;
  const double x[3] = {1.0, static_cast<double>(batch), distinct};
  for (int i = 0; i < 3; ++i) {
    m_xy[i] = m_xy[i] * kForget + x[i] * step_ms;
    for (int j = 0; j < 3; ++j) m_xx[i][j] = m_xx[i][j] * kForget + x[i] * x[j];
  }
  m_weight = m_weight * kForget + 1.0;
  if (++m_samples >= kMinSamples) solve();
  return true;
}

void StepFit::solve() noexcept {
  // Ridge towards the prior, each coefficient scaled by its feature's mean
  // square so the penalty has no units: (X'X + w D) b = X'y + w D b0.
  const double prior[3] = {m_prior.t0_ms, m_prior.tseq_ms, m_prior.alpha_us / 1000.0};
  double a[3][4];
  for (int i = 0; i < 3; ++i) {
    const double d = kPriorWeight * std::max(m_xx[i][i] / m_weight, 1e-12);
    for (int j = 0; j < 3; ++j) a[i][j] = m_xx[i][j] + (i == j ? d : 0.0);
    a[i][3] = m_xy[i] + d * prior[i];
  }
  // Gaussian elimination with partial pivoting (the matrix is positive definite).
  for (int c = 0; c < 3; ++c) {
    int pivot = c;
    for (int r = c + 1; r < 3; ++r)
      if (std::fabs(a[r][c]) > std::fabs(a[pivot][c])) pivot = r;
    if (std::fabs(a[pivot][c]) < 1e-300) return;
    for (int j = 0; j < 4; ++j) std::swap(a[c][j], a[pivot][j]);
    for (int r = 0; r < 3; ++r) {
      if (r == c) continue;
      const double f = a[r][c] / a[c][c];
      for (int j = c; j < 4; ++j) a[r][j] -= f * a[c][j];
    }
  }
  const double t0 = a[0][3] / a[0][0], tseq = a[1][3] / a[1][1], alpha = a[2][3] / a[2][2];
  if (!std::isfinite(t0) || !std::isfinite(tseq) || !std::isfinite(alpha)) return;
  // A fit that says loading experts is free or negative is noise, not physics:
  // keep a floor of a tenth of the prior.
  m_current.t0_ms = std::max(0.0, t0);
  m_current.tseq_ms = std::max(0.1 * m_prior.tseq_ms, tseq);
  m_current.alpha_us = std::max(0.1 * m_prior.alpha_us, alpha * 1000.0);
}

}  // namespace eldr::detail
