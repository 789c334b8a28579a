// A cluster table fitted on the core's synthetic workload, so eldrd (and
// `make demo`) can run with no table file: the same route `eldr demo` takes.
#pragma once

#include <cstdint>

#include "config.hpp"
#include "eldr/cluster_table.hpp"

namespace eldr::sidecar {

// Deterministic for a given spec and seed. Worker ids 0..K-1.
Result<ClusterTable> make_synthetic_table(const SyntheticTableSpec& spec, uint64_t seed = 1);

}  // namespace eldr::sidecar
