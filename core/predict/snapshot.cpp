#include "snapshot.hpp"

#include <algorithm>
#include <cmath>
#include <unordered_map>

namespace eldr::detail {

namespace {
uint32_t slot_key(uint32_t key) noexcept { return key ? key : 1; }

struct DecodeTable {
  float v[256];
  DecodeTable() {
    for (int q = 0; q < 256; ++q) v[q] = (q / 255.0f) * (q / 255.0f);
  }
};
const DecodeTable kDecode;
}  // namespace

uint8_t encode_demand(float p) noexcept {
  if (!(p > 0.0f)) return 0;
  return static_cast<uint8_t>(std::lround(255.0f * std::sqrt(std::min(p, 1.0f))));
}

// The `max` keys of f with the highest weight (ties: the smaller key), in
// f's order, into out.
void keep_heaviest(const PromptFeatures& f, const std::vector<float>& weight, uint32_t max,
                   std::vector<uint32_t>& order, PromptFeatures& out) {
  out.kind = f.kind;
  out.keys.clear();
  out.counts.clear();
  order.resize(f.keys.size());
  for (uint32_t j = 0; j < order.size(); ++j) order[j] = j;
  if (order.size() > max) {
    std::nth_element(order.begin(), order.begin() + max, order.end(), [&](uint32_t a, uint32_t b) {
      return weight[a] != weight[b] ? weight[a] > weight[b] : f.keys[a] < f.keys[b];
    });
    order.resize(max);
    std::sort(order.begin(), order.end());
  }
  for (const uint32_t j : order) {
    out.keys.push_back(f.keys[j]);
    out.counts.push_back(f.counts[j]);
  }
}

float tf_weight(uint32_t count) noexcept { return 1.0f + std::log(static_cast<float>(count)); }

void footprint_demand(const Geometry& g, std::span<const int16_t> counts, float* p) noexcept {
  for (uint32_t l = 0; l < g.layers; ++l) {
    const int16_t* row = counts.data() + size_t{l} * g.experts;
    double sum = 0.0, top = 0.0;
    for (uint32_t e = 0; e < g.experts; ++e) {
      sum += std::max<int16_t>(row[e], 0);
      top = std::max<double>(top, row[e]);
    }
    const double tokens = g.top_k ? sum / g.top_k : top;
    for (uint32_t e = 0; e < g.experts; ++e)
      p[size_t{l} * g.experts + e] =
          tokens > 0 ? static_cast<float>(std::min(1.0, std::max<int16_t>(row[e], 0) / tokens))
                     : 0.0f;
  }
}

size_t KindIndex::home(uint32_t key) const noexcept {
  // Multiply-shift onto [0, slots): no power-of-two capacity to round up to.
  return static_cast<size_t>((uint64_t{slot_key(key) * 0x9e3779b1u} * slots.size()) >> 32);
}

uint8_t KindIndex::tag_of(uint32_t key) noexcept {
  return static_cast<uint8_t>(0x80u | ((key * 0x85ebca6bu) >> 25));
}

int64_t KindIndex::find_from(size_t i, uint32_t key) const noexcept {
  if (slots.empty()) return -1;
  key = slot_key(key);
  const uint8_t tag = tag_of(key);
  for (;;) {
    if (tags[i] == tag && slots[i].key == key) return static_cast<int64_t>(i);
    if (tags[i] == 0) return -1;
    if (++i == slots.size()) i = 0;
  }
}

uint64_t KindIndex::bytes() const noexcept {
  return slots.size() * (sizeof(Slot) + 1) + idf_of_df.size() * sizeof(float) +
         post_record.size() * (sizeof(uint32_t) + sizeof(uint16_t));
}

namespace {

// The best cosine of record `self` to another record of the kind (not a copy
// of it), through the index.
float best_other(const KindIndex& ix, const PromptFeatures& f, uint32_t self,
                 std::vector<float>& scores) {
  std::fill(scores.begin(), scores.end(), 0.0f);
  double norm2 = 0.0;
  for (size_t j = 0; j < f.keys.size(); ++j) {
    const int64_t s = ix.find(f.keys[j]);
    const float qw = tf_weight(f.counts[j]) * ix.idf(s);
    norm2 += double{qw} * qw;
    if (s < 0) continue;
    const uint32_t b = ix.slots[static_cast<size_t>(s)].begin, n = ix.postings(s);
    for (uint32_t p = b; p < b + n; ++p)
      scores[ix.post_record[p]] += qw * ix.post_weight[p] * KindIndex::kWeightScale;
  }
  if (norm2 <= 0.0) return 0.0f;
  // A copy of the same prompt (a repeated request) is no neighbour: counted,
  // many copies would raise the typical cosine and so lower every other
  // prompt's confidence.
  const float inv = static_cast<float>(1.0 / std::sqrt(norm2));
  float best = 0.0f;
  for (uint32_t r = 0; r < scores.size(); ++r) {
    const float c = scores[r] * inv;
    if (r != self && c < 0.999f) best = std::max(best, c);
  }
  return best;
}

void build_kind(KindIndex& ix, PromptKind kind,
                const std::vector<std::shared_ptr<const Predictor::Record>>& records) {
  const int k = static_cast<int>(kind);
  std::unordered_map<uint32_t, uint32_t> df;
  uint32_t n = 0;
  for (const auto& r : records) {
    if (!r->has(kind)) continue;
    ++n;
    for (const uint32_t key : r->features[k].keys) ++df[slot_key(key)];
  }
  ix.prototypes = n;
  if (n == 0) return;
  ix.idf_of_df.resize(n + 1);
  for (uint32_t d = 0; d <= n; ++d)
    ix.idf_of_df[d] = std::log((static_cast<float>(n) + 1.0f) / (static_cast<float>(d) + 1.0f));
  // A key in more than half the prompts (boilerplate, a shared system
  // prompt) keeps its idf for the query's norm but carries no postings: it
  // says little and would make every query touch every prototype.
  ix.max_df = n >= 8 ? n / 2 : n;
  ix.slots.assign(std::max<size_t>(16, df.size() + df.size() / 3 + 1), KindIndex::Slot{});
  ix.tags.assign(ix.slots.size(), 0);
  uint32_t total = 0;
  for (const auto& [key, d] : df) {
    size_t i = ix.home(key);
    while (ix.tags[i] != 0)
      if (++i == ix.slots.size()) i = 0;
    ix.slots[i] = {key, total, d};
    ix.tags[i] = KindIndex::tag_of(key);
    total += d <= ix.max_df ? d : 0;
  }
  ix.post_record.assign(total, 0);
  ix.post_weight.assign(total, 0);
  std::vector<uint32_t> fill(ix.slots.size());
  for (size_t i = 0; i < ix.slots.size(); ++i) fill[i] = ix.slots[i].begin;
  for (uint32_t r = 0; r < records.size(); ++r) {
    if (!records[r]->has(kind)) continue;
    const PromptFeatures& f = records[r]->features[k];
    double norm2 = 0.0;
    for (size_t j = 0; j < f.keys.size(); ++j) {
      const float w = tf_weight(f.counts[j]) * ix.idf(ix.find(f.keys[j]));
      norm2 += double{w} * w;
    }
    if (norm2 <= 0.0) continue;
    const float inv = static_cast<float>(1.0 / std::sqrt(norm2));
    for (size_t j = 0; j < f.keys.size(); ++j) {
      const auto s = ix.find(f.keys[j]);
      if (ix.postings(s) == 0) continue;
      const float w = tf_weight(f.counts[j]) * ix.idf(s) * inv;
      const auto i = static_cast<size_t>(s);
      ix.post_record[fill[i]] = r;
      ix.post_weight[fill[i]++] =
          static_cast<uint16_t>(std::lround(std::clamp(w, 0.0f, 1.0f) * 65535.0f));
    }
  }
  // The typical nearest-neighbour cosine, from up to 64 prototypes spread
  // over the set: what a prompt of a known kind of request reaches.
  std::vector<float> scores(records.size()), best;
  std::vector<uint32_t> mine;
  for (uint32_t r = 0; r < records.size(); ++r)
    if (records[r]->has(kind)) mine.push_back(r);
  const size_t step = std::max<size_t>(1, mine.size() / 64);
  for (size_t i = 0; i < mine.size() && n >= 2; i += step)
    best.push_back(best_other(ix, records[mine[i]]->features[k], mine[i], scores));
  if (!best.empty()) {
    std::nth_element(best.begin(), best.begin() + best.size() / 2, best.end());
    ix.typical_cosine = std::max(best[best.size() / 2], 0.05f);
  }
}

}  // namespace

std::shared_ptr<const PredictorSnapshot> build_snapshot(
    const Geometry& geometry, const PredictorOptions&,
    std::vector<std::shared_ptr<const Predictor::Record>> records) {
  auto snap = std::make_shared<PredictorSnapshot>();
  const size_t cells = geometry.cells();
  snap->prior.assign(cells, 0.0f);
  for (const auto& r : records)
    for (size_t c = 0; c < cells; ++c) snap->prior[c] += kDecode.v[r->demand[c]];
  if (!records.empty())
    for (float& v : snap->prior) v /= static_cast<float>(records.size());
  for (uint32_t k = 0; k < kPromptKinds; ++k)
    build_kind(snap->kinds[k], static_cast<PromptKind>(k), records);
  snap->records = std::move(records);
  return snap;
}

float demand_value(uint8_t q) noexcept { return kDecode.v[q]; }

}  // namespace eldr::detail
