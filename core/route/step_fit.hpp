// Online fit of the step constants (docs/design.md §5.3) from what engines
// report: (running batch size, expected distinct experts of that batch as the
// router sees it, measured step time). Ridge regression of the step time less
// TSEQ x batch on (1, distinct) towards the configured T0 and alpha, with
// exponential forgetting, so a few samples nudge them and a steady stream
// replaces them. TSEQ stays the configured value: the router's distinct count
// comes from prefill footprints and errs by more the larger the batch, so a
// free per-request coefficient soaks that error up (on the GPT-OSS-20B trace
// 1.5 to 6x the true TSEQ), which tilts eldr_cost towards spreading. Private
// to route/; not thread-safe (the Router holds its live mutex).
#pragma once

#include <cstdint>

#include "eldr/step_model.hpp"

namespace eldr::detail {

class StepFit {
 public:
  explicit StepFit(const StepCost& prior) : m_prior(prior), m_current(prior) {}

  // One report: a step of `running` requests (the batch the step ran, not
  // the queue behind it) whose batch uses `distinct` experts (all layers, as
  // the router estimates them) took `step_ms`. Implausible samples (not
  // finite, negative, above 10 s, no request) are ignored: returns false.
  bool add(uint32_t running, double distinct, double step_ms) noexcept;
  const StepCost& current() const noexcept { return m_current; }
  const StepCost& prior() const noexcept { return m_prior; }
  uint64_t samples() const noexcept { return m_samples; }

 private:
  void solve() noexcept;

  StepCost m_prior, m_current;
  // Decayed sums over samples x = (1, distinct), y = step_ms - TSEQ x running.
  double m_xx[2][2] = {};
  double m_xy[2] = {};
  double m_weight = 0.0;
  uint64_t m_samples = 0;
};

}  // namespace eldr::detail
