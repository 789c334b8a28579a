// Discrete-event simulator of a PD-disaggregated decode pool (issue: eldr sim).
//
// Each decode worker runs continuous batching; one step costs
//   T0 + TSEQ * B + alpha * (distinct experts the batch's tokens use, over all layers)
// (docs/design.md §1). The expected number of distinct experts is kept incrementally per
// worker from each request's per-token inclusion probabilities, so a step costs
// O(1) and a join or leave O(L*E). Routing uses the real core Router.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "eldr/cluster_table.hpp"
#include "eldr/geometry.hpp"
#include "eldr/npy.hpp"
#include "eldr/router.hpp"
#include "eldr/status.hpp"
#include "eldr/step_model.hpp"

namespace eldr {

// A request as the simulator sees it.
struct SimRequest {
  uint32_t domain = 0;   // label index (domain policy, reports)
  uint32_t profile = 0;  // index into SimWorkload::inclusion
  uint32_t output_tokens = 1;
  double arrival_s = 0.0;  // filled by the simulator from the rate
};

// Requests plus their decode expert-usage profiles: inclusion[p][l][e] is the
// probability that one decode token of a request with profile p uses expert e
// of layer l. Prefill footprints are what the router sees.
struct SimWorkload {
  Geometry geometry;
  std::vector<std::string> domain_names;
  std::vector<SimRequest> requests;
  CountsTensor prefill;          // [N][L][E]
  std::vector<float> inclusion;  // [profiles][L][E]
  uint32_t profiles() const noexcept {
    return geometry.cells() ? static_cast<uint32_t>(inclusion.size() / geometry.cells()) : 0;
  }
};

struct SyntheticSimOptions {
  std::string preset = "task";      // task | language
  uint32_t subtopics = 6;           // per domain: requests of one subtopic share a profile
  double domain_affinity = 0.30;    // share of a token's picks from its domain's experts
  double subtopic_affinity = 0.15;  // ... from its subtopic's experts
  double prompt_tokens_median = 160;
  double prompt_tokens_sigma = 0.7;
  double output_tokens_median = 220;
  double output_tokens_sigma = 0.6;
  uint32_t output_tokens_max = 512;  // paper: outputs capped at 512
  uint64_t model_seed = 1;           // the "model": expert preferences
};
// Generates `n` requests; calibration and evaluation sets come from the same
// model_seed with different `seed`s. decode (optional) receives decode counts
// over 127 tokens, for layer selection.
Result<SimWorkload> synthetic_sim_workload(const Geometry& geometry, const SyntheticSimOptions& o,
                                           uint64_t n, uint64_t seed,
                                           CountsTensor* decode = nullptr);

// Captured traces: token_experts [tokens][L][k] (integer .npy) and an index
// [N][3] (start token, prompt tokens, output tokens); a request's tokens are
// rows [start, start + prompt + output). When prompt is 0 (decode-only
// traces) its first `prefill_proxy_tokens` decode tokens stand in for the
// prefill footprint. Optional labels (one per request).
Result<SimWorkload> load_trace_workload(const std::string& token_experts_npy,
                                        const std::string& index_npy, const std::string& labels,
                                        uint32_t prefill_proxy_tokens = 32);

struct SimOptions {
  StepModel model;
  uint32_t workers = 16;
  double rate = 40.0;                    // Poisson arrivals per second
  uint64_t seed = 1;                     // arrivals
  RouterOptions router;                  // policy, tau, ...
  std::function<void(double)> progress;  // fraction of requests finished
};

struct SimResult {
  std::string policy;
  uint64_t requests = 0;
  double tpot_p50_ms = 0, tpot_p99_ms = 0, tpot_mean_ms = 0;
  double experts_per_step = 0;           // distinct experts per layer per step, mean over steps
  double worker_load_max_over_mean = 0;  // decode tokens served
  double makespan_s = 0;
  uint64_t steps = 0;
  std::vector<double> tpot_ms;                  // per request
  std::vector<float> experts_per_step_samples;  // per step (for plots)
};

Result<SimResult> simulate(const SimWorkload& workload, std::shared_ptr<const ClusterTable> table,
                           const SimOptions& options);

}  // namespace eldr
