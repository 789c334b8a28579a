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
  uint32_t max_df = 0;          // a key in more prototypes has no postings
  float typical_cosine = 1.0f;  // median best cosine of a prototype to the others
  // One slot per key (open addressing, linear probing, about 3/4 full):
  // its postings start at `begin`, and df prototypes have it (postings:
  // df, or none past max_df). One cache line per lookup.
  struct Slot {
    uint32_t key = 0;  // 0 = free (key 0 is folded onto 1)
    uint32_t begin = 0;
    uint32_t df = 0;
  };
  std::vector<Slot> slots;
  // Per slot a tag byte (0: free, else 0x80 | 7 bits of the key's hash):
  // a probe for an unknown key, most of a query's bigrams, reads these
  // dense bytes and rarely a Slot.
  std::vector<uint8_t> tags;
  std::vector<float> idf_of_df;       // [0, prototypes]: ln((n + 1) / (df + 1))
  std::vector<uint32_t> post_record;  // index into PredictorSnapshot::records
  std::vector<uint16_t> post_weight;  // the record's unit tf-idf weight of the key, x 65535
  static constexpr float kWeightScale = 1.0f / 65535.0f;

  // Where key's probe starts, and its slot (or -1) from there.
  size_t home(uint32_t key) const noexcept;
  int64_t find_from(size_t home, uint32_t key) const noexcept;
  int64_t find(uint32_t key) const noexcept { return find_from(home(key), key); }
  float idf(int64_t slot) const noexcept {
    return idf_of_df[slot >= 0 ? slots[static_cast<size_t>(slot)].df : 0];
  }
  uint32_t postings(int64_t slot) const noexcept {
    const uint32_t df = slots[static_cast<size_t>(slot)].df;
    return df <= max_df ? df : 0;
  }
  static uint8_t tag_of(uint32_t key) noexcept;
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

// The `max` keys of f with the highest weight (ties: the smaller key), in
// f's order, into out (a prototype's features; order is scratch).
void keep_heaviest(const PromptFeatures& f, const std::vector<float>& weight, uint32_t max,
                   std::vector<uint32_t>& order, PromptFeatures& out);

// The tf part of a key's weight: 1 + ln(count).
float tf_weight(uint32_t count) noexcept;

// The demand of a footprint ([L][E] counts): per layer, count / tokens,
// tokens = the layer's sum / top_k (or its largest count when top_k is 0).
void footprint_demand(const Geometry& g, std::span<const int16_t> counts, float* p) noexcept;

}  // namespace detail
}  // namespace eldr
