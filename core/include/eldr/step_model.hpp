// Decode step-time model (docs/design.md §1): one step of a batch of B
// requests costs
//   T0 + TSEQ * B + alpha * (distinct experts the batch uses, summed over layers)
// with alpha the time to load one expert's weights. The simulator runs it, and
// the eldr_cost policy predicts with it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "eldr/geometry.hpp"
#include "eldr/status.hpp"

namespace eldr {

// The constants of the model for one model on one decode GPU.
struct StepCost {
  double t0_ms = 3.0;      // attention, dense layers, launch overheads
  double tseq_ms = 0.03;   // per sequence in the batch
  double alpha_us = 1.78;  // one expert's weights / HBM bandwidth, per layer it is used in
  uint32_t max_batch = 64;

  // One step of `batch` requests that together use `distinct_experts`
  // (layer, expert) pairs, in milliseconds.
  double step_ms(uint32_t batch, double distinct_experts) const noexcept;
  // Every constant finite and >= 0, max_batch >= 1.
  Status validate() const;
  bool operator==(const StepCost&) const = default;
};

// A named model: its geometry and step constants.
struct StepModel {
  std::string name;
  Geometry geometry;
  StepCost cost;
};
// Presets for the paper's models (step_model.cpp derives each alpha).
std::vector<StepModel> step_model_presets();
Result<StepModel> find_step_model(std::string_view name);
// The preset whose geometry (L, E) matches, if any: the default constants of a
// table fitted for that model.
Result<StepModel> step_model_for(const Geometry& geometry);

}  // namespace eldr
