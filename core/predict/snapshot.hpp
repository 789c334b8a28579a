// What a prediction reads (docs/design.md §5.6): the prototypes, one
// inverted index per prompt kind and the mean demand. Immutable once built;
// the Predictor swaps in a new one after learning. Private to predict/.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "eldr/predictor.hpp"

namespace eldr {

// One prototype: a request's prompt features (per kind, possibly only one)
// and its demand, p = per-token probability of each [L][E] cell, coded
// q = round(255 sqrt(p)) (fine where p is small, as most cells are).
struct Predictor::Record {
  PromptFeatures features[kPromptKinds];
  std::vector<uint8_t> demand;  // geometry.cells()
  bool has(PromptKind k) const noexcept { return !features[static_cast<int>(k)].keys.empty(); }
};

namespace detail {

// A demand value to and from its one-byte code.
uint8_t encode_demand(float p) noexcept;
float demand_value(uint8_t q) noexcept;

struct KindIndex {
  uint32_t prototypes = 0;      // records with this kind
  float unknown_idf = 0.0f;     // a key no prototype has: ln(n + 1)
  float typical_cosine = 1.0f;  // median best cosine of a prototype to the others
  // Open addressing over keys (power-of-two capacity, kEmpty = free slot).
  std::vector<uint32_t> keys;
  std::vector<float> idf;
  std::vector<uint32_t> begin, count;  // into the postings
  std::vector<uint32_t> post_record;   // index into PredictorSnapshot::records
  std::vector<float> post_weight;      // the record's unit tf-idf weight of the key
  // The slot of key, or -1.
  int64_t find(uint32_t key) const noexcept;
  uint64_t bytes() const noexcept;
};

struct PredictorSnapshot {
  std::vector<std::shared_ptr<const Predictor::Record>> records;
  KindIndex kinds[kPromptKinds];
  std::vector<float> prior;  // mean demand of all records, per cell
};

// Builds the indexes and the prior from records (at least one).
std::shared_ptr<const PredictorSnapshot> build_snapshot(
    const Geometry& geometry, const PredictorOptions& options,
    std::vector<std::shared_ptr<const Predictor::Record>> records);

// The tf part of a key's weight: 1 + ln(count).
float tf_weight(uint32_t count) noexcept;

// The demand of a footprint ([L][E] counts): per layer, count / tokens,
// tokens = the layer's sum / top_k (or its largest count when top_k is 0).
void footprint_demand(const Geometry& g, std::span<const int16_t> counts, float* p) noexcept;

}  // namespace detail
}  // namespace eldr
