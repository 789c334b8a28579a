// Footprint predictor (docs/design.md §5.6): a request's expert footprint
// predicted from its prompt, for gateways that pick the decode worker before
// prefill runs (llm-d, SGLang's PD router) and so have no footprint yet.
//
// Model: kernel regression over stored prototypes. Each prototype is one
// calibration (or online) request: its prompt's hashed features (unigrams
// and bigrams of token ids or of words, tf-idf weighted, unit length) and
// its demand, the per-token probability of each (layer, expert) cell. A
// prompt is compared with every prototype by cosine through an inverted
// index; its `neighbours` most similar prototypes are averaged with softmax
// weights exp(cos / bandwidth). How sure it is (Prediction::confidence) is
// the best cosine against what calibration prompts typically reach; an
// unsure prediction is shrunk towards the mean demand of all prototypes, so
// it pulls towards no worker in particular.
//
// Two inputs, each a feature space of its own: token ids (any vocabulary up
// to 2^20) and UTF-8 text (tokenizer-free: ASCII words lower-cased, every
// other code point a word of its own). A predictor answers for the kinds it
// was fitted with.
//
// Learning never stops a prediction: predictions read an immutable snapshot
// (an atomic shared_ptr); learn() appends to a pending list under a mutex
// and rebuilds the snapshot every so many records, on the learning thread.
// Memory is bounded by `capacity` prototypes (oldest replaced first).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string_view>
#include <vector>

#include "eldr/geometry.hpp"
#include "eldr/status.hpp"

namespace eldr {

enum class PromptKind : uint8_t { tokens = 0, text = 1 };
inline constexpr uint32_t kPromptKinds = 2;
const char* prompt_kind_name(PromptKind kind) noexcept;

inline constexpr uint32_t kMaxVocabulary = 1u << 20;     // token ids are < 2^20
inline constexpr uint32_t kMaxPromptTokens = 131072;     // a longer prompt is refused
inline constexpr uint32_t kMaxPromptBytes = 512u << 10;  // text: 512 KiB
inline constexpr uint32_t kPredictorVersion = 1;

// One prompt: token ids or text (never both).
struct Prompt {
  PromptKind kind = PromptKind::tokens;
  std::span<const uint32_t> tokens;
  std::string_view text;
  static Prompt of_tokens(std::span<const uint32_t> t) { return {PromptKind::tokens, t, {}}; }
  static Prompt of_text(std::string_view s) { return {PromptKind::text, {}, s}; }
};

// A prompt's features: sorted unique 32-bit keys with their counts in the
// prompt. Long prompts are read at their head and tail (kFeatureHead and
// kFeatureTail positions): the system prompt and the task on one side, the
// question on the other, at a cost that does not grow with the prompt.
inline constexpr uint32_t kFeatureHead = 256, kFeatureTail = 128;
struct PromptFeatures {
  PromptKind kind = PromptKind::tokens;
  std::vector<uint32_t> keys;
  std::vector<uint16_t> counts;
};
// Validates (empty, too long, an id >= 2^20, invalid UTF-8: invalid_argument)
// and extracts. `out` is reused.
Status extract_features(const Prompt& prompt, PromptFeatures& out);

struct PredictorOptions {
  uint32_t capacity = 4096;     // prototypes kept (oldest replaced first)
  uint32_t neighbours = 16;     // prototypes averaged per prediction
  float bandwidth = 0.05f;      // softmax temperature over cosines
  uint32_t max_features = 256;  // per prototype and kind, the highest tf-idf
  Status validate() const;
};

struct Prediction {
  // In [0, 1]: the best cosine over the typical nearest-neighbour cosine of
  // the calibration prompts (capped at 1); 0 with no prototype of the kind.
  float confidence = 0.0f;
  float similarity = 0.0f;  // the best cosine
  uint32_t neighbours = 0;  // prototypes averaged
};

struct PredictorInfo {
  uint32_t prototypes = 0;
  uint32_t kinds = 0;    // bit k: fitted for PromptKind k
  uint64_t learned = 0;  // records learned since creation (calibration included)
  uint64_t rebuilds = 0;
  // Memory in bytes, per component (the snapshot in use).
  uint64_t demand_bytes = 0;   // prototypes' demand, 1 byte per cell
  uint64_t feature_bytes = 0;  // prototypes' features
  uint64_t index_bytes = 0;    // inverted index
  uint64_t total_bytes() const noexcept { return demand_bytes + feature_bytes + index_bytes; }
};

namespace detail {
struct PredictorSnapshot;  // predict/snapshot.hpp
}

class Predictor {
 public:
  static Result<std::shared_ptr<Predictor>> create(const Geometry& geometry,
                                                   const PredictorOptions& options = {});
  ~Predictor();
  Predictor(const Predictor&) = delete;
  Predictor& operator=(const Predictor&) = delete;

  // Offline fit: one prototype per record, then one rebuild. prompts[i]
  // produced footprints[i] ([L][E] counts of the geometry). Records whose
  // prompt or footprint is invalid are skipped and counted in *skipped (when
  // given); invalid_argument when none is usable.
  static Result<std::shared_ptr<Predictor>> fit(const Geometry& geometry,
                                                std::span<const Prompt> prompts,
                                                std::span<const int16_t> footprints,
                                                const PredictorOptions& options = {},
                                                uint64_t* skipped = nullptr);

  // The predicted footprint: int16 [L][E] counts, each layer summing to
  // about top_k * kPredictedTokens. Allocation-free after the first call on
  // a thread. unsupported: not fitted for the prompt's kind.
  Result<Prediction> predict(const Prompt& prompt, std::span<int16_t> counts) const;
  // With `kept`: also the features compact() would keep, from the lookups
  // the prediction made anyway (for a router that keeps the prompt).
  Result<Prediction> predict(const PromptFeatures& features, std::span<int16_t> counts,
                             PromptFeatures* kept = nullptr) const;

  // Keeps the options' max_features keys of highest tf-idf (what a
  // prototype stores; learn() does it too): for holding a request's prompt
  // until its real footprint arrives.
  void compact(PromptFeatures& features) const;

  // Online: a real footprint for a prompt (features from extract_features).
  // Rebuilds the snapshot when enough records are pending.
  Status learn(const PromptFeatures& features, std::span<const int16_t> counts);
  // Builds a snapshot from everything learned so far, now.
  void flush();

  const Geometry& geometry() const noexcept { return m_geometry; }
  const PredictorOptions& options() const noexcept { return m_options; }
  PredictorInfo info() const;

  // Serialised form (the table file's `predictor` field; docs/design.md §5.6):
  // everything learned, pending records included. decode checks every size
  // against the geometry (shape_mismatch for another geometry's predictor)
  // and every value (corrupt).
  std::vector<uint8_t> encode() const;
  static Result<std::shared_ptr<Predictor>> decode(const Geometry& geometry,
                                                   std::span<const uint8_t> bytes);

  // The number of virtual tokens a predicted footprint stands for.
  static constexpr uint32_t kPredictedTokens = 1024;

  struct Record;  // one prototype (predict/snapshot.hpp)

 private:
  Predictor(const Geometry& geometry, const PredictorOptions& options);
  Status add_locked(const PromptFeatures& f, std::span<const int16_t> counts);
  Status add_demand_locked(const PromptFeatures& f, std::vector<uint8_t> demand);
  void rebuild_locked();

  Geometry m_geometry;
  PredictorOptions m_options;
  std::atomic<std::shared_ptr<const detail::PredictorSnapshot>> m_snapshot;
  mutable std::mutex m_mutex;                            // learning: records, ring cursor
  std::vector<std::shared_ptr<const Record>> m_records;  // ring of at most capacity
  uint32_t m_next = 0;                                   // ring cursor once full
  uint32_t m_pending = 0;                                // records since the last rebuild
  uint64_t m_learned = 0;
  uint64_t m_rebuilds = 0;
};

}  // namespace eldr
