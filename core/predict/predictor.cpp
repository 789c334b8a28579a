// The predictor's life cycle (docs/design.md §5.6): create, fit, learn,
// rebuild. The prediction itself is in predict.cpp, the file form in
// predictor_file.cpp.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_map>

#include "eldr/footprint.hpp"
#include "snapshot.hpp"

namespace eldr {

namespace {

// Keeps the `max` keys of highest tf * idf (ties: the smaller key).
template <class Idf>
void keep_top(PromptFeatures& f, uint32_t max, Idf idf) {
  if (f.keys.size() <= max) return;
  std::vector<float> w(f.keys.size());
  for (size_t j = 0; j < w.size(); ++j) w[j] = detail::tf_weight(f.counts[j]) * idf(f.keys[j]);
  std::vector<uint32_t> order;
  PromptFeatures kept;
  detail::keep_heaviest(f, w, max, order, kept);
  f = std::move(kept);
}

}  // namespace

Status PredictorOptions::validate() const {
  if (capacity < 1 || capacity > (1u << 20))
    return {Errc::invalid_argument, "predictor capacity must be in [1, 1048576]"};
  if (neighbours < 1 || neighbours > 256)
    return {Errc::invalid_argument, "predictor neighbours must be in [1, 256]"};
  if (!(bandwidth > 0.0f) || !(bandwidth <= 10.0f))
    return {Errc::invalid_argument, "predictor bandwidth must be in (0, 10]"};
  if (max_features < 1 || max_features > 65535)
    return {Errc::invalid_argument, "predictor max_features must be in [1, 65535]"};
  return {};
}

Predictor::Predictor(const Geometry& geometry, const PredictorOptions& options)
    : m_geometry(geometry), m_options(options) {}

Predictor::~Predictor() = default;

Result<std::shared_ptr<Predictor>> Predictor::create(const Geometry& geometry,
                                                     const PredictorOptions& options) {
  ELDR_TRY(geometry.validate());
  ELDR_TRY(options.validate());
  return std::shared_ptr<Predictor>(new Predictor(geometry, options));
}

Result<std::shared_ptr<Predictor>> Predictor::fit(const Geometry& geometry,
                                                  std::span<const Prompt> prompts,
                                                  std::span<const int16_t> footprints,
                                                  const PredictorOptions& options,
                                                  uint64_t* skipped) {
  auto made = create(geometry, options);
  if (!made) return made.status();
  std::shared_ptr<Predictor> p = std::move(*made);
  const size_t cells = geometry.cells();
  if (footprints.size() != prompts.size() * cells)
    return Status{Errc::shape_mismatch, "footprints hold " + std::to_string(footprints.size()) +
                                            " counts, not prompts (" +
                                            std::to_string(prompts.size()) + ") x L x E"};
  // Two passes: document frequencies over every usable record first, so
  // each record keeps the keys that distinguish it in the whole set.
  std::vector<PromptFeatures> features(prompts.size());
  std::vector<bool> usable(prompts.size(), false);
  std::unordered_map<uint32_t, uint32_t> df[kPromptKinds];
  uint32_t n[kPromptKinds] = {};
  uint64_t bad = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto fp = footprints.subspan(i * cells, cells);
    if (!extract_features(prompts[i], features[i]) || !validate_footprint(geometry, fp)) {
      ++bad;
      continue;
    }
    usable[i] = true;
    const int k = static_cast<int>(prompts[i].kind);
    ++n[k];
    for (const uint32_t key : features[i].keys) ++df[k][key];
  }
  if (skipped) *skipped = bad;
  std::lock_guard lock(p->m_mutex);
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (!usable[i]) continue;
    const int k = static_cast<int>(features[i].kind);
    keep_top(features[i], options.max_features, [&](uint32_t key) {
      const auto it = df[k].find(key);
      return std::log((n[k] + 1.0f) / ((it == df[k].end() ? 0.0f : it->second) + 1.0f));
    });
    ELDR_TRY(p->add_locked(features[i], footprints.subspan(i * cells, cells)));
  }
  if (p->m_records.empty())
    return Status{Errc::invalid_argument,
                  "no usable calibration record (every prompt or "
                  "footprint was invalid)"};
  p->rebuild_locked();
  return p;
}

Status Predictor::add_locked(const PromptFeatures& f, std::span<const int16_t> counts) {
  std::vector<float> p(m_geometry.cells());
  detail::footprint_demand(m_geometry, counts, p.data());
  std::vector<uint8_t> demand(p.size());
  for (size_t c = 0; c < p.size(); ++c) demand[c] = detail::encode_demand(p[c]);
  return add_demand_locked(f, std::move(demand));
}

Status Predictor::add_demand_locked(const PromptFeatures& f, std::vector<uint8_t> demand) {
  if (f.keys.empty() || f.keys.size() != f.counts.size())
    return {Errc::invalid_argument, "a prototype needs prompt features"};
  auto r = std::make_shared<Record>();
  r->features[static_cast<int>(f.kind)] = f;
  r->demand = std::move(demand);
  if (m_records.size() < m_options.capacity) {
    m_records.push_back(std::move(r));
  } else {
    m_records[m_next] = std::move(r);
    m_next = (m_next + 1) % m_options.capacity;
  }
  ++m_pending;
  ++m_learned;
  return {};
}

Status Predictor::learn(const PromptFeatures& features, std::span<const int16_t> counts) {
  ELDR_TRY(validate_footprint(m_geometry, counts));
  if (features.keys.empty()) return {Errc::invalid_argument, "the prompt has no features"};
  PromptFeatures f = features;
  compact(f);
  std::lock_guard lock(m_mutex);
  ELDR_TRY(add_locked(f, counts));
  // Rebuild once the pending records are a sixteenth of the set (at least
  // 8): the index costs O(prototypes x features) to build, so its cost per
  // learned record stays constant.
  if (m_pending >= std::max<uint32_t>(8, static_cast<uint32_t>(m_records.size() / 16)))
    rebuild_locked();
  return {};
}

void Predictor::compact(PromptFeatures& f) const {
  const auto snap = m_snapshot.load(std::memory_order_acquire);
  const detail::KindIndex* ix = snap ? &snap->kinds[static_cast<int>(f.kind)] : nullptr;
  keep_top(f, m_options.max_features, [&](uint32_t key) {
    if (!ix || ix->prototypes == 0) return 1.0f;
    return ix->idf(ix->find(key));
  });
}

void Predictor::flush() {
  std::lock_guard lock(m_mutex);
  if (m_pending) rebuild_locked();
}

void Predictor::rebuild_locked() {
  m_snapshot.store(detail::build_snapshot(m_geometry, m_options, m_records),
                   std::memory_order_release);
  m_pending = 0;
  ++m_rebuilds;
}

PredictorInfo Predictor::info() const {
  PredictorInfo info;
  std::lock_guard lock(m_mutex);
  info.prototypes = static_cast<uint32_t>(m_records.size());
  info.learned = m_learned;
  info.rebuilds = m_rebuilds;
  for (const auto& r : m_records) {
    info.demand_bytes += r->demand.size();
    for (uint32_t k = 0; k < kPromptKinds; ++k) {
      info.feature_bytes += r->features[k].keys.size() * (sizeof(uint32_t) + sizeof(uint16_t));
      if (r->has(static_cast<PromptKind>(k))) info.kinds |= 1u << k;
    }
  }
  if (const auto snap = m_snapshot.load(std::memory_order_acquire))
    for (const auto& ix : snap->kinds) info.index_bytes += ix.bytes();
  return info;
}

}  // namespace eldr
