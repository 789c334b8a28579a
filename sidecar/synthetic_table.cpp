#include "synthetic_table.hpp"

#include <algorithm>

#include "eldr/fit.hpp"
#include "eldr/lab/synthetic.hpp"

namespace eldr::sidecar {

Result<ClusterTable> make_synthetic_table(const SyntheticTableSpec& spec, uint64_t seed) {
  auto options = synthetic_preset("task", spec.geometry, seed);
  if (!options) return options.status();
  // Enough calibration requests for a stable fit, few enough to start in ~1 s.
  const uint64_t n = std::max<uint64_t>(400, uint64_t{spec.workers} * 40);
  auto calibration = generate_synthetic(*options, n);
  if (!calibration) return calibration.status();
  FitOptions fo;
  fo.workers = spec.workers;
  fo.seed = seed;
  fo.model = spec.model;
  fo.rho_pairs = 5000;
  const auto labels = calibration->labels();
  auto table = fit_table({spec.geometry, calibration->prefill.n, calibration->prefill.data,
                          calibration->decode.data, labels},
                         fo);
  if (!table) return table.status();
  table->fit.source = "eldrd synthetic default";
  return table;
}

}  // namespace eldr::sidecar
