// A footprint set: synthetic footprints for the commands that feed a running
// eldrd (loadgen, bench ring, bench ring-throughput, bench cluster), cycled.
#pragma once

#include <cstdint>
#include <string>

#include "eldr/lab/synthetic.hpp"
#include "eldr/shm.hpp"
#include "eldr/status.hpp"

namespace eldr::cli {

// n synthetic "task" footprints of `model`: a preset name, or an explicit
// geometry "LxExk" (as eldrd --synthetic-table LxExk:K takes it).
Result<SyntheticWorkload> footprint_set(const std::string& model, uint32_t n, uint64_t seed);

// Footprint i of the set (cycled) under request id `id` (which must outlive the result).
shm::FootprintOut footprint_of(const SyntheticWorkload& set, uint64_t i, const std::string& id);

}  // namespace eldr::cli
