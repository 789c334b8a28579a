// One prediction (docs/design.md §5.6): features -> cosines against the
// prototypes through the inverted index -> the best `neighbours`, softmax
// weighted -> their mean demand, shrunk towards the prior by confidence ->
// int16 counts. Reads one immutable snapshot; thread-local scratch only.
#include <algorithm>
#include <cmath>

#include "snapshot.hpp"

namespace eldr {

namespace {

struct Scratch {
  PromptFeatures features;
  std::vector<float> scores;
  std::vector<uint32_t> touched;
  std::vector<int64_t> slot;  // per query key: its index slot, or -1
  std::vector<float> weight;  // per query key: tf-idf
  std::vector<uint32_t> order;
  std::vector<float> p;
};
thread_local Scratch t_scratch;

// acc[c] += w * v(q[c]), v(q) = (q / 255)^2: the prediction's largest loop,
// built twice, for AVX2 and for the baseline, and chosen once by the CPU
// (a plain function attribute: no ifunc resolver, which sanitizers and
// static initialisation order do not always survive).
#define ELDR_ADD_DEMAND_LOOP                  \
  const float s = w / (255.0f * 255.0f);      \
  for (size_t c = 0; c < n; ++c) {            \
    const float v = static_cast<float>(q[c]); \
    acc[c] += s * v * v;                      \
  }
__attribute__((target("avx2"), noinline)) void add_demand_avx2(float* acc, const uint8_t* q,
                                                               size_t n, float w) noexcept {
  ELDR_ADD_DEMAND_LOOP
}
void add_demand_baseline(float* acc, const uint8_t* q, size_t n, float w) noexcept {
  ELDR_ADD_DEMAND_LOOP
}
#undef ELDR_ADD_DEMAND_LOOP
void add_demand(float* acc, const uint8_t* q, size_t n, float w) noexcept {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2)
    add_demand_avx2(acc, q, n, w);
  else
    add_demand_baseline(acc, q, n, w);
}

}  // namespace

Result<Prediction> Predictor::predict(const Prompt& prompt, std::span<int16_t> counts) const {
  Scratch& t = t_scratch;
  ELDR_TRY(extract_features(prompt, t.features));
  return predict(t.features, counts);
}

Result<Prediction> Predictor::predict(const PromptFeatures& f, std::span<int16_t> counts,
                                      PromptFeatures* kept) const {
  const size_t cells = m_geometry.cells();
  if (counts.size() != cells)
    return Status{Errc::shape_mismatch, "the output holds " + std::to_string(counts.size()) +
                                            " counts, not L x E = " + std::to_string(cells)};
  const auto snap = m_snapshot.load(std::memory_order_acquire);
  const int k = static_cast<int>(f.kind);
  if (!snap || snap->kinds[k].prototypes == 0)
    return Status{Errc::unsupported,
                  std::string("the predictor has no ") + prompt_kind_name(f.kind) + " prototypes"};
  const detail::KindIndex& ix = snap->kinds[k];
  Scratch& t = t_scratch;
  t.scores.resize(snap->records.size(), 0.0f);
  t.touched.clear();
  // Lookups in three passes so that their cache misses overlap: where each
  // key's probe starts (prefetched), its slot (its postings prefetched),
  // then the scores.
  const size_t nk = f.keys.size();
  t.slot.resize(nk);
  for (size_t j = 0; j < nk; ++j) {
    t.slot[j] = static_cast<int64_t>(ix.home(f.keys[j]));
    __builtin_prefetch(&ix.tags[static_cast<size_t>(t.slot[j])]);
  }
  for (size_t j = 0; j < nk; ++j) {
    t.slot[j] = ix.find_from(static_cast<size_t>(t.slot[j]), f.keys[j]);
    if (t.slot[j] >= 0 && ix.postings(t.slot[j]) > 0) {
      const uint32_t b = ix.slots[static_cast<size_t>(t.slot[j])].begin;
      __builtin_prefetch(&ix.post_record[b]);
      __builtin_prefetch(&ix.post_weight[b]);
    }
  }
  double norm2 = 0.0;
  t.weight.resize(nk);
  for (size_t j = 0; j < nk; ++j) {
    const int64_t s = t.slot[j];
    const float qw = detail::tf_weight(f.counts[j]) * ix.idf(s);
    t.weight[j] = qw;
    norm2 += double{qw} * qw;
    if (s < 0) continue;
    const uint32_t b = ix.slots[static_cast<size_t>(s)].begin, n = ix.postings(s);
    const float scaled = qw * detail::KindIndex::kWeightScale;
    for (uint32_t p = b; p < b + n; ++p) {
      float& score = t.scores[ix.post_record[p]];
      if (score == 0.0f) t.touched.push_back(ix.post_record[p]);
      score += scaled * ix.post_weight[p];
    }
  }
  if (kept) detail::keep_heaviest(f, t.weight, m_options.max_features, t.order, *kept);
  // The best `neighbours` by cosine (ties: the lower record index).
  const uint32_t want = std::min<uint32_t>(m_options.neighbours, t.touched.size());
  const float inv_norm = norm2 > 0.0 ? static_cast<float>(1.0 / std::sqrt(norm2)) : 0.0f;
  auto better = [&](uint32_t a, uint32_t b) {
    return t.scores[a] != t.scores[b] ? t.scores[a] > t.scores[b] : a < b;
  };
  if (want < t.touched.size())
    std::nth_element(t.touched.begin(), t.touched.begin() + want, t.touched.end(), better);
  std::sort(t.touched.begin(), t.touched.begin() + want, better);
  Prediction out;
  out.neighbours = want;
  t.p.assign(cells, 0.0f);
  if (want > 0) {
    const float best = t.scores[t.touched[0]] * inv_norm;
    out.similarity = best;
    out.confidence = std::clamp(best / ix.typical_cosine, 0.0f, 1.0f);
    double total = 0.0;
    float w[256];
    for (uint32_t j = 0; j < want; ++j) {
      w[j] = std::exp((t.scores[t.touched[j]] * inv_norm - best) / m_options.bandwidth);
      total += w[j];
    }
    // A neighbour under 1 % of the weight changes nothing worth its pass.
    double kept = 0.0;
    for (uint32_t j = 0; j < want; ++j)
      if (w[j] >= 0.01 * total) kept += w[j];
    for (uint32_t j = 0; j < want; ++j)
      if (w[j] >= 0.01 * total)
        add_demand(t.p.data(), snap->records[t.touched[j]]->demand.data(), cells,
                   static_cast<float>(w[j] / kept));
  }
  for (const uint32_t r : t.touched) t.scores[r] = 0.0f;
  // Shrink towards the prior by confidence: an unsure prediction is the
  // average request, which pulls towards no worker in particular.
  const float c = out.confidence, scale = static_cast<float>(kPredictedTokens);
  for (size_t i = 0; i < cells; ++i) {
    const float v = snap->prior[i] + c * (t.p[i] - snap->prior[i]);
    counts[i] = static_cast<int16_t>(std::clamp(v, 0.0f, 1.0f) * scale + 0.5f);
  }
  return out;
}

}  // namespace eldr
