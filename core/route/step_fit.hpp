// Online fit of the step constants (docs/design.md §5.3) from what engines
// report: (batch size, expected distinct experts of that batch as the router
// sees it, measured step time). Ridge regression towards the configured
// constants with exponential forgetting, so a few samples nudge them and a
// steady stream replaces them. Private to route/; not thread-safe (the
// Router holds its live mutex).
#pragma once

#include <cstdint>

#include "eldr/step_model.hpp"

namespace eldr::detail {

class StepFit {
 public:
  explicit StepFit(const StepCost& prior) : m_prior(prior), m_current(prior) {}

  // One report: `batch` requests whose batch uses `distinct` experts (all
  // layers, as the router estimates them) took `step_ms`. Implausible
  // samples (not finite, negative, above 10 s) are ignored: returns false.
  bool add(uint32_t batch, double distinct, double step_ms) noexcept;
  const StepCost& current() const noexcept { return m_current; }
  const StepCost& prior() const noexcept { return m_prior; }
  uint64_t samples() const noexcept { return m_samples; }

 private:
  void solve() noexcept;

  StepCost m_prior, m_current;
  // Decayed sums over samples x = (1, batch, distinct), y = step_ms.
  double m_xx[3][3] = {};
  double m_xy[3] = {};
  double m_weight = 0.0;
  uint64_t m_samples = 0;
};

}  // namespace eldr::detail
