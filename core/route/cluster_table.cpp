#include "eldr/cluster_table.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "eldr/internal/checked_math.hpp"

// The table's invariants. Its file codec is core/io/table_file.cpp, the
// prototype JSON import core/io/table_json.cpp.

namespace eldr {

namespace {

constexpr double kUnitTolerance = 1e-3;
// Scores are cosines of non-negative vectors, so τ >= 1 already admits every
// worker; 2 leaves room for callers that think in the full [-1, 1] range.
constexpr float kMaxTau = 2.0f;

Status invalid(const std::string& what) { return {Errc::invalid_argument, what}; }
Status mismatch(const std::string& what) { return {Errc::shape_mismatch, what}; }

}  // namespace

Status ClusterTable::validate() const {
  try {
    return [&]() -> Status {
      if (schema_version != kTableSchemaVersion)
        return invalid("schema_version is " + std::to_string(schema_version) + ", expected " +
                       std::to_string(kTableSchemaVersion));
      ELDR_TRY(geometry.validate());
      if (predictor && !(predictor->geometry() == geometry))
        return invalid("the predictor's geometry is not the table's");

      if (layer_mask.empty()) return invalid("layer_mask is empty");
      for (size_t i = 0; i < layer_mask.size(); ++i) {
        if (layer_mask[i] >= geometry.layers)
          return invalid("layer_mask[" + std::to_string(i) +
                         "] = " + std::to_string(layer_mask[i]) +
                         " is not below L = " + std::to_string(geometry.layers));
        if (i > 0 && layer_mask[i] <= layer_mask[i - 1])
          return invalid("layer_mask must be sorted and unique (layer " +
                         std::to_string(layer_mask[i]) + " at position " + std::to_string(i) + ")");
      }
      const size_t d = dim();

      if (idf.size() != d)
        return mismatch("idf has " + std::to_string(idf.size()) +
                        " values, expected |mask| * E = " + std::to_string(d));
      for (size_t i = 0; i < idf.size(); ++i)
        if (!std::isfinite(idf[i]) || idf[i] < 0.0f)
          return invalid("idf[" + std::to_string(i) + "] = " + std::to_string(idf[i]) +
                         " is not a finite value >= 0");

      const size_t k = worker_ids.size();
      if (k == 0) return invalid("cluster table has no centroids (K = 0)");
      if (k > UINT32_MAX) return invalid("too many centroids");
      uint64_t need = 0;
      if (!checked_mul(k, d, &need) || centroids.size() != need)
        return mismatch("centroids has " + std::to_string(centroids.size()) +
                        " values, expected K * dim = " + std::to_string(k) + " * " +
                        std::to_string(d));
      for (size_t c = 0; c < k; ++c) {
        double sq = 0.0;
        for (size_t i = 0; i < d; ++i) {
          const float x = centroids[c * d + i];
          if (!std::isfinite(x))
            return invalid("centroid " + std::to_string(c) + " has a non-finite value at " +
                           std::to_string(i));
          sq += static_cast<double>(x) * x;
        }
        // sq == 0 only when every element is exactly zero (squares of float
        // denormals are still positive doubles).
        const double norm = std::sqrt(sq);
        if (sq != 0.0 && std::fabs(norm - 1.0) > kUnitTolerance)
          return invalid("centroid " + std::to_string(c) + " has L2 norm " + std::to_string(norm) +
                         " (must be 1 or 0)");
      }

      std::vector<int32_t> ids(worker_ids);
      std::sort(ids.begin(), ids.end());
      if (ids.front() < 0)
        return invalid("worker id " + std::to_string(ids.front()) + " is negative");
      if (auto dup = std::adjacent_find(ids.begin(), ids.end()); dup != ids.end())
        return invalid("worker id " + std::to_string(*dup) + " appears more than once");

      if (!std::isfinite(default_tau) || default_tau < 0.0f || default_tau > kMaxTau)
        return invalid("default_tau " + std::to_string(default_tau) + " is not in [0, 2]");
      if (step_cost)
        if (Status s = step_cost->validate(); !s) return invalid("step_cost: " + s.message());

      if (!fit.cluster_sizes.empty() && fit.cluster_sizes.size() != k)
        return mismatch("fit.cluster_sizes has " + std::to_string(fit.cluster_sizes.size()) +
                        " entries, expected K = " + std::to_string(k));

      if (domains.names.empty()) {
        if (!domains.counts.empty() || !domains.worker_domain.empty())
          return mismatch("domains has counts or worker_domain but no names");
      } else {
        if (domains.counts.size() != domains.names.size())
          return mismatch("domains.counts has " + std::to_string(domains.counts.size()) +
                          " entries for " + std::to_string(domains.names.size()) + " names");
        if (domains.worker_domain.size() != k)
          return mismatch("domains.worker_domain has " +
                          std::to_string(domains.worker_domain.size()) +
                          " entries, expected K = " + std::to_string(k));
        const auto n_names = static_cast<int64_t>(domains.names.size());
        for (size_t c = 0; c < k; ++c) {
          const int32_t v = domains.worker_domain[c];
          if (v < -1 || v >= n_names)
            return invalid("domains.worker_domain[" + std::to_string(c) + "] = " +
                           std::to_string(v) + " is not in [-1, " + std::to_string(n_names) + ")");
        }
      }
      return Status::ok();
    }();
  } catch (const std::exception& e) {
    return Status{Errc::internal, std::string("validate: ") + e.what()};
  }
}

}  // namespace eldr
