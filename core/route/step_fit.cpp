#include "step_fit.hpp"

#include <algorithm>
#include <cmath>

namespace eldr::detail {

namespace {
// Each sample's weight decays by this per later sample: the fit follows the
// last ~16k steps of the whole pool (every worker's reports feed one fit).
// A shorter memory (2048: some 128 steps per worker of 16) let the
// constants follow each moment's batch mix, and eldr_cost's P99 with them.
constexpr double kForget = 1.0 - 1.0 / 16384.0;
// The prior counts as this many samples.
constexpr double kPriorWeight = 1.0;
constexpr uint64_t kMinSamples = 32;
}  // namespace

bool StepFit::add(uint32_t running, double distinct, double step_ms) noexcept {
  if (!std::isfinite(distinct) || !std::isfinite(step_ms) || distinct < 0.0 || step_ms <= 0.0 ||
      step_ms > 10000.0 || running == 0)
    return false;
  const double x[2] = {1.0, distinct};
  const double y = step_ms - m_prior.tseq_ms * static_cast<double>(running);
  for (int i = 0; i < 2; ++i) {
    m_xy[i] = m_xy[i] * kForget + x[i] * y;
    for (int j = 0; j < 2; ++j) m_xx[i][j] = m_xx[i][j] * kForget + x[i] * x[j];
  }
  m_weight = m_weight * kForget + 1.0;
  if (++m_samples >= kMinSamples) solve();
  return true;
}

void StepFit::solve() noexcept {
  // Ridge towards the prior, each coefficient scaled by its feature's mean
  // square so the penalty has no units: (X'X + w D) b = X'y + w D b0.
  const double prior[2] = {m_prior.t0_ms, m_prior.alpha_us / 1000.0};
  double a[2][2], r[2];
  for (int i = 0; i < 2; ++i) {
    const double d = kPriorWeight * std::max(m_xx[i][i] / m_weight, 1e-12);
    for (int j = 0; j < 2; ++j) a[i][j] = m_xx[i][j] + (i == j ? d : 0.0);
    r[i] = m_xy[i] + d * prior[i];
  }
  // 2 x 2, positive definite: Cramer's rule.
  const double det = a[0][0] * a[1][1] - a[0][1] * a[1][0];
  if (!(std::fabs(det) > 1e-300)) return;
  const double t0 = (r[0] * a[1][1] - a[0][1] * r[1]) / det;
  const double alpha = (a[0][0] * r[1] - a[1][0] * r[0]) / det;
  if (!std::isfinite(t0) || !std::isfinite(alpha)) return;
  // A fit that says loading experts is free or negative is noise, not physics:
  // keep a floor of a tenth of the prior.
  m_current.t0_ms = std::max(0.0, t0);
  m_current.alpha_us = std::max(0.1 * m_prior.alpha_us, alpha * 1000.0);
}

}  // namespace eldr::detail
