// Synthetic MoE workloads with labelled domains, for the demo, tests and the
// simulator when no captured trace is at hand. Each domain over-uses its own
// experts in every layer (docs/design.md §1); a request's decode usage follows its
// prefill usage up to a tunable amount of noise.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "eldr/geometry.hpp"
#include "eldr/npy.hpp"
#include "eldr/status.hpp"

namespace eldr {

struct SyntheticOptions {
  Geometry geometry{48, 128, 8};
  std::vector<std::string> domain_names{"legal", "code", "math", "medical"};
  std::vector<double> domain_weights{3600, 2779, 2744,
                                     2545};  // task workload mix (docs/design.md §7)
  uint32_t preferred_experts = 0;            // per domain and layer; 0 = E / 8
  double domain_affinity = 0.6;       // share of a token's picks drawn from its domain's experts
  double request_noise = 0.35;        // log-normal jitter of a request's own expert weights
  double decode_drift = 0.25;         // extra jitter between a request's prefill and decode
  double prompt_tokens_median = 128;  // log-normal prompt length
  double prompt_tokens_sigma = 0.6;
  uint32_t prompt_tokens_max = 2048;
  uint32_t decode_tokens = 127;  // tokens summed into the decode footprint (paper: 127)
  uint64_t model_seed = 1;       // the "model": generalist and domain expert preferences
  uint64_t seed = 1;             // the requests drawn from it (calibration vs evaluation)
};

struct SyntheticWorkload {
  std::vector<std::string> domain_names;
  std::vector<uint32_t> domain;         // per request
  std::vector<uint32_t> prompt_tokens;  // per request
  CountsTensor prefill;                 // [N][L][E]
  CountsTensor decode;                  // [N][L][E], decode_tokens picks per layer
  std::vector<std::string> labels() const;
};

// Options preset: "task" (four domains, 3600/2779/2744/2545) or "language"
// (two dominant groups ~75% of traffic plus a long tail).
Result<SyntheticOptions> synthetic_preset(const std::string& name, const Geometry& geometry,
                                          uint64_t seed);

Result<SyntheticWorkload> generate_synthetic(const SyntheticOptions& options, uint64_t n);

}  // namespace eldr
