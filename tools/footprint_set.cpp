#include "footprint_set.hpp"

#include <cstdio>
#include <optional>

#include "eldr/geometry.hpp"

namespace eldr::cli {

Result<SyntheticWorkload> footprint_set(const std::string& model, uint32_t n, uint64_t seed) {
  std::optional<Geometry> g = find_preset(model);
  if (!g) {
    Geometry explicit_geometry;
    char tail = 0;
    if (std::sscanf(model.c_str(), "%ux%ux%u%c", &explicit_geometry.layers,
                    &explicit_geometry.experts, &explicit_geometry.top_k, &tail) == 3 &&
        explicit_geometry.validate() && explicit_geometry.top_k >= 1 &&
        explicit_geometry.top_k <= explicit_geometry.experts)
      g = explicit_geometry;
  }
  if (!g)
    return Status{Errc::invalid_argument,
                  "unknown model '" + model + "' (a preset such as qwen3-30b-a3b, or LxExk)"};
  auto opts = synthetic_preset("task", *g, seed);
  if (!opts) return opts.status();
  return generate_synthetic(*opts, n);
}

shm::FootprintOut footprint_of(const SyntheticWorkload& set, uint64_t i, const std::string& id) {
  shm::FootprintOut f;
  f.request_id = id;
  f.layers = set.prefill.layers;
  f.experts = set.prefill.experts;
  f.counts = set.prefill.row(i % set.prefill.n);
  return f;
}

}  // namespace eldr::cli
