#include "eldr/lab/synthetic.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "eldr/random.hpp"

namespace eldr {

std::vector<std::string> SyntheticWorkload::labels() const {
  std::vector<std::string> out;
  out.reserve(domain.size());
  for (uint32_t d : domain) out.push_back(domain_names[d]);
  return out;
}

Result<SyntheticOptions> synthetic_preset(const std::string& name, const Geometry& geometry,
                                          uint64_t seed) {
  SyntheticOptions o;
  o.geometry = geometry;
  o.seed = seed;
  if (name == "task") return o;  // the defaults are the task workload
  if (name == "language") {
    // WildChat first turns: English + Chinese ~75%, then a long tail.
    o.domain_names = {"english", "chinese", "russian",  "french",
                      "spanish", "german",  "japanese", "korean"};
    o.domain_weights = {0.45, 0.30, 0.06, 0.05, 0.045, 0.04, 0.03, 0.025};
    o.domain_affinity = 0.5;
    o.prompt_tokens_median = 96;
    return o;
  }
  return Status{Errc::invalid_argument,
                "unknown synthetic preset '" + name + "' (expected task or language)"};
}

namespace {

// Walker's alias table: O(1) draws from a discrete distribution. Sampling
// dominates generation time (tokens x layers x k draws), so a binary search
// over a CDF per draw is too slow for 100k-request workloads.
class AliasTable {
 public:
  void build(const std::vector<double>& weights) {
    const size_t n = weights.size();
    m_prob.resize(n);
    m_alias.resize(n);
    m_small.clear();
    m_large.clear();
    double sum = 0.0;
    for (double w : weights) sum += w;
    m_scaled.resize(n);
    for (size_t i = 0; i < n; ++i) {
      m_scaled[i] = weights[i] * static_cast<double>(n) / sum;
      (m_scaled[i] < 1.0 ? m_small : m_large).push_back(static_cast<uint32_t>(i));
    }
    while (!m_small.empty() && !m_large.empty()) {
      const uint32_t s = m_small.back(), l = m_large.back();
      m_small.pop_back();
      m_prob[s] = m_scaled[s];
      m_alias[s] = l;
      m_scaled[l] -= 1.0 - m_scaled[s];
      if (m_scaled[l] < 1.0) {
        m_large.pop_back();
        m_small.push_back(l);
      }
    }
    for (uint32_t i : m_large) m_prob[i] = 1.0, m_alias[i] = i;
    for (uint32_t i : m_small) m_prob[i] = 1.0, m_alias[i] = i;  // rounding leftovers
  }
  uint32_t draw(Rng& rng) const {
    const uint64_t r = rng.next();
    const uint32_t i = static_cast<uint32_t>(((r >> 32) * m_prob.size()) >> 32);
    const double u = static_cast<double>(r & 0xffffffffu) * 0x1.0p-32;
    return u < m_prob[i] ? i : m_alias[i];
  }

 private:
  std::vector<double> m_prob, m_scaled;
  std::vector<uint32_t> m_alias, m_small, m_large;
};

// Draws `k` distinct experts (rejection on repeats; the weights are never
// concentrated enough for that to loop long, and a fallback bounds it).
void draw_distinct(Rng& rng, const AliasTable& table, uint32_t k, std::vector<uint32_t>& stamp,
                   uint32_t& epoch, uint32_t* picks) {
  if (++epoch == 0) {  // wrapped: old stamps could alias the new epoch
    std::fill(stamp.begin(), stamp.end(), 0u);
    epoch = 1;
  }
  uint32_t got = 0;
  uint32_t attempts = 0;
  while (got < k) {
    uint32_t e;
    if (++attempts <= 64 * k) {
      e = table.draw(rng);
    } else {
      e = 0;  // pathological weights: take the lowest free expert id
      while (stamp[e] == epoch) ++e;
    }
    if (stamp[e] == epoch) continue;
    stamp[e] = epoch;
    picks[got++] = e;
  }
}

}  // namespace

Result<SyntheticWorkload> generate_synthetic(const SyntheticOptions& o, uint64_t n) {
  ELDR_TRY(o.geometry.validate());
  const Geometry& g = o.geometry;
  if (g.top_k == 0) return Status{Errc::invalid_argument, "synthetic workloads need top_k > 0"};
  if (o.domain_names.empty() || o.domain_names.size() != o.domain_weights.size())
    return Status{Errc::invalid_argument,
                  "domain_names and domain_weights must be non-empty and "
                  "of equal length"};
  for (double w : o.domain_weights)
    if (!(w >= 0.0) || !std::isfinite(w))
      return Status{Errc::invalid_argument, "domain weights must be finite and >= 0"};
  const double total_weight =
      std::accumulate(o.domain_weights.begin(), o.domain_weights.end(), 0.0);
  if (total_weight <= 0.0) return Status{Errc::invalid_argument, "domain weights sum to zero"};
  if (!(o.domain_affinity >= 0.0 && o.domain_affinity < 1.0))
    return Status{Errc::invalid_argument, "domain_affinity must be in [0, 1)"};
  if (o.prompt_tokens_max == 0 || o.prompt_tokens_max > 32767)
    return Status{Errc::invalid_argument, "prompt_tokens_max must be in [1, 32767]"};
  if (o.decode_tokens > 32767) return Status{Errc::invalid_argument, "decode_tokens > 32767"};

  const uint32_t L = g.layers, E = g.experts, D = static_cast<uint32_t>(o.domain_names.size());
  const uint32_t preferred =
      std::clamp<uint32_t>(o.preferred_experts ? o.preferred_experts : E / 8, 1, E);
  // The model's structure comes from model_seed, so that calibration and
  // evaluation sets drawn with different seeds share the same domains.
  Rng rng(o.model_seed);

  // Per layer: a generalist weight for every expert. Per domain and layer: a
  // set of preferred experts. base[d][l][e] mixes both (each part sums to 1).
  std::vector<double> base(size_t{D} * L * E);
  std::vector<uint32_t> perm(E);
  for (uint32_t l = 0; l < L; ++l) {
    std::vector<double> generalist(E);
    for (auto& w : generalist) w = std::exp(0.8 * rng.normal());
    const double gsum = std::accumulate(generalist.begin(), generalist.end(), 0.0);
    for (uint32_t d = 0; d < D; ++d) {
      std::iota(perm.begin(), perm.end(), 0u);
      for (uint32_t i = 0; i < preferred; ++i) std::swap(perm[i], perm[i + rng.below(E - i)]);
      std::vector<double> own(E, 0.0);
      double osum = 0.0;
      for (uint32_t i = 0; i < preferred; ++i) osum += own[perm[i]] = std::exp(0.5 * rng.normal());
      double* b = base.data() + (size_t{d} * L + l) * E;
      for (uint32_t e = 0; e < E; ++e)
        b[e] = (1.0 - o.domain_affinity) * generalist[e] / gsum + o.domain_affinity * own[e] / osum;
    }
  }

  rng = Rng(o.seed ^ 0x5851f42d4c957f2dULL);
  SyntheticWorkload w;
  w.domain_names = o.domain_names;
  w.domain.resize(n);
  w.prompt_tokens.resize(n);
  for (CountsTensor* t : {&w.prefill, &w.decode}) {
    t->n = n;
    t->layers = L;
    t->experts = E;
    t->data.assign(n * g.cells(), 0);
  }
  std::vector<double> cum_weights(D);
  std::partial_sum(o.domain_weights.begin(), o.domain_weights.end(), cum_weights.begin());

  std::vector<double> q(E), q_decode(E);
  AliasTable prefill_table, decode_table;
  std::vector<uint32_t> stamp(E, 0);
  uint32_t epoch = 0;
  std::vector<uint32_t> picks(g.top_k);
  for (uint64_t r = 0; r < n; ++r) {
    const double u = rng.uniform() * total_weight;
    uint32_t d = static_cast<uint32_t>(std::upper_bound(cum_weights.begin(), cum_weights.end(), u) -
                                       cum_weights.begin());
    d = std::min(d, D - 1);
    const double len = o.prompt_tokens_median * std::exp(o.prompt_tokens_sigma * rng.normal());
    const uint32_t tokens =
        std::clamp<uint32_t>(static_cast<uint32_t>(std::lround(len)), 1, o.prompt_tokens_max);
    w.domain[r] = d;
    w.prompt_tokens[r] = tokens;
    int16_t* pre = w.prefill.data.data() + r * g.cells();
    int16_t* dec = w.decode.data.data() + r * g.cells();
    for (uint32_t l = 0; l < L; ++l) {
      const double* b = base.data() + (size_t{d} * L + l) * E;
      for (uint32_t e = 0; e < E; ++e) {
        q[e] = b[e] * std::exp(o.request_noise * rng.normal());
        q_decode[e] = q[e] * std::exp(o.decode_drift * rng.normal());
      }
      prefill_table.build(q);
      decode_table.build(q_decode);
      for (uint32_t t = 0; t < tokens; ++t) {
        draw_distinct(rng, prefill_table, g.top_k, stamp, epoch, picks.data());
        for (uint32_t e : picks) ++pre[size_t{l} * E + e];
      }
      for (uint32_t t = 0; t < o.decode_tokens; ++t) {
        draw_distinct(rng, decode_table, g.top_k, stamp, epoch, picks.data());
        for (uint32_t e : picks) ++dec[size_t{l} * E + e];
      }
    }
  }
  return w;
}

}  // namespace eldr
