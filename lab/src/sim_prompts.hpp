// Private to lab/src: the synthetic prompt generator synthetic_sim_workload
// calls (sim_prompts.cpp).
#pragma once

#include <cstdint>
#include <span>

#include "eldr/lab/sim.hpp"

namespace eldr::detail {

// Every request of `w` (domain and subtopic = profile % subtopics set) gets a
// prompt: the shared boilerplate, then lengths[r] tokens (SyntheticSimOptions).
// The vocabulary comes from o.model_seed, the draws from `seed`.
Status synthetic_prompts(const SyntheticSimOptions& o, uint32_t domains, uint64_t seed,
                         std::span<const uint32_t> lengths, SimWorkload& w);

}  // namespace eldr::detail
