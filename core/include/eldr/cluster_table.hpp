// Cluster table (docs/design.md §4.4): everything the online router needs, produced by
// the offline fit. Stored as a FlatBuffers file (schema core/schema/
// cluster_table.fbs, identifier "ELDR"), verified and semantically checked on
// every load. The research prototype's JSON centroid file can be imported.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "eldr/geometry.hpp"
#include "eldr/predictor.hpp"
#include "eldr/status.hpp"
#include "eldr/step_model.hpp"

namespace eldr {

inline constexpr uint32_t kTableSchemaVersion = 1;
inline constexpr float kDefaultTau = 0.1f;

struct FitInfo {
  uint64_t n_requests = 0;  // N calibration requests
  uint64_t seed = 0;
  float peak_rho = 0.0f;                // signature quality at the chosen mask
  std::vector<float> rho_curve;         // rho after each greedy step (may be empty)
  std::string calibration_hash;         // hex digest of the calibration arrays
  int64_t created_unix = 0;             // seconds since the epoch
  uint32_t iterations = 0;              // k-means iterations run
  std::vector<uint32_t> cluster_sizes;  // calibration points per centroid
  std::string source;                   // "eldr fit", "prototype-json", ...
};

// Oracle "domain" baseline (docs/design.md §5): workers split among labelled domains.
struct DomainPools {
  std::vector<std::string> names;      // domain labels seen in calibration
  std::vector<uint64_t> counts;        // calibration requests per domain
  std::vector<int32_t> worker_domain;  // per centroid: index into names, -1 = misc pool
  bool empty() const noexcept { return names.empty(); }
};

struct ClusterTable {
  uint32_t schema_version = kTableSchemaVersion;
  std::string model;  // free text, e.g. "Qwen/Qwen3-30B-A3B"
  Geometry geometry;
  std::vector<uint32_t> layer_mask;  // sorted, unique, each < L
  std::vector<float> idf;            // |mask| * E, finite, >= 0
  std::vector<float> centroids;      // K rows of dim(), each unit length
  std::vector<int32_t> worker_ids;   // K, unique, >= 0: centroid c belongs to worker_ids[c]
  float default_tau = kDefaultTau;
  FitInfo fit;
  DomainPools domains;  // empty when fitted without labels
  // Step constants measured for this model and hardware (eldr_cost); unset:
  // the preset of the geometry.
  std::optional<StepCost> step_cost;
  // The footprint predictor, for routing from the prompt (docs/design.md §5.6);
  // null: footprints only. Shared by every copy of the table and by the
  // routers that route with it: what one learns online, all predict with,
  // and save_table writes it.
  std::shared_ptr<Predictor> predictor;

  size_t dim() const noexcept { return layer_mask.size() * geometry.experts; }
  uint32_t num_clusters() const noexcept { return static_cast<uint32_t>(worker_ids.size()); }
  std::span<const float> centroid(uint32_t c) const noexcept {
    return {centroids.data() + size_t{c} * dim(), dim()};
  }
  // Semantic checks beyond the FlatBuffers verifier: sizes agree, values finite,
  // centroids unit length (or zero), ids unique.
  Status validate() const;
};

// FlatBuffers encoding. Decoding runs the verifier, then validate().
std::vector<uint8_t> encode_table(const ClusterTable& table);
Result<ClusterTable> decode_table(std::span<const uint8_t> bytes);
Status save_table(const ClusterTable& table, const std::string& path);  // atomic: tmp + rename
Result<ClusterTable> load_table(const std::string& path);

struct JsonImportOptions {
  uint32_t top_k = 0;  // 0: take it from the model preset when the name matches one
  float default_tau = kDefaultTau;
};
// The research prototype's centroid file (docs/design.md §4.4 field list).
Result<ClusterTable> import_prototype_json(std::string_view json_text,
                                           const JsonImportOptions& options = {});
Result<ClusterTable> import_prototype_json_file(const std::string& path,
                                                const JsonImportOptions& options = {});

}  // namespace eldr
