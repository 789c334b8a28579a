#include "eldr/lab/sim.hpp"

#include <algorithm>
#include <cmath>
#include <deque>
#include <numeric>
#include <queue>

#include "eldr/footprint.hpp"
#include "eldr/lab/synthetic.hpp"
#include "eldr/peer_twins.hpp"
#include "eldr/random.hpp"
#include "sim_prompts.hpp"

namespace eldr {

namespace {

// A draw from Binomial(trials, p), exact by inversion for small means and a
// rounded normal approximation above (a workload model, not a statistics lib).
uint32_t binomial(Rng& rng, uint32_t trials, double p) {
  const double mean = trials * p;
  if (mean <= 0.0) return 0;
  if (mean < 12.0) {
    // Poisson(mean) by inversion approximates the binomial well here.
    double u = rng.uniform(), term = std::exp(-mean), cdf = term;
    uint32_t k = 0;
    while (u > cdf && k < trials) {
      ++k;
      term *= mean / k;
      cdf += term;
    }
    return k;
  }
  const double v = mean + std::sqrt(mean * (1.0 - p)) * rng.normal();
  return static_cast<uint32_t>(std::clamp(std::lround(v), 0L, static_cast<long>(trials)));
}

uint32_t lognormal_tokens(Rng& rng, double median, double sigma, uint32_t max) {
  const double v = median * std::exp(sigma * rng.normal());
  return std::clamp<uint32_t>(static_cast<uint32_t>(std::lround(v)), 1, max);
}

}  // namespace

Result<SimWorkload> synthetic_sim_workload(const Geometry& g, const SyntheticSimOptions& o,
                                           uint64_t n, uint64_t seed, CountsTensor* decode) {
  ELDR_TRY(g.validate());
  if (g.top_k == 0) return Status{Errc::invalid_argument, "the workload model needs top_k > 0"};
  if (o.subtopics == 0) return Status{Errc::invalid_argument, "subtopics must be >= 1"};
  if (!(o.domain_affinity >= 0 && o.subtopic_affinity >= 0 &&
        o.domain_affinity + o.subtopic_affinity < 1.0))
    return Status{Errc::invalid_argument, "affinities must be >= 0 and sum below 1"};
  auto mix = synthetic_preset(o.preset, g, seed);
  if (!mix) return mix.status();
  const uint32_t L = g.layers, E = g.experts, D = static_cast<uint32_t>(mix->domain_names.size());
  const uint32_t S = o.subtopics, P = D * S;
  const size_t cells = g.cells();

  SimWorkload w;
  w.geometry = g;
  w.domain_names = mix->domain_names;
  w.inclusion.assign(size_t{P} * cells, 0.0f);
  // Profiles: generalist + domain experts + subtopic experts, per layer.
  Rng model(o.model_seed);
  std::vector<uint32_t> perm(E);
  auto preferred = [&](uint32_t count, std::vector<double>& out) {
    std::fill(out.begin(), out.end(), 0.0);
    std::iota(perm.begin(), perm.end(), 0u);
    double sum = 0.0;
    for (uint32_t i = 0; i < count; ++i) {
      std::swap(perm[i], perm[i + model.below(E - i)]);
      sum += out[perm[i]] = std::exp(0.5 * model.normal());
    }
    for (auto& v : out) v /= sum;
  };
  std::vector<double> gen(E), dom(E), sub(E);
  for (uint32_t l = 0; l < L; ++l) {
    double gsum = 0.0;
    for (auto& v : gen) gsum += v = std::exp(0.8 * model.normal());
    for (auto& v : gen) v /= gsum;
    for (uint32_t d = 0; d < D; ++d) {
      preferred(std::max(1u, E / 8), dom);
      for (uint32_t s = 0; s < S; ++s) {
        preferred(std::max(1u, E / 16), sub);
        float* inc = &w.inclusion[(size_t{d} * S + s) * cells + size_t{l} * E];
        for (uint32_t e = 0; e < E; ++e) {
          const double q = (1.0 - o.domain_affinity - o.subtopic_affinity) * gen[e] +
                           o.domain_affinity * dom[e] + o.subtopic_affinity * sub[e];
          // P(one token's top-k includes e), approximating k draws without replacement.
          inc[e] = static_cast<float>(std::min(0.999, 1.0 - std::pow(1.0 - q, g.top_k)));
        }
      }
    }
  }

  Rng rng(seed ^ 0x6a09e667f3bcc909ULL);
  std::vector<double> weights = mix->domain_weights;
  if (!o.only_domains.empty()) {
    for (uint32_t d = 0; d < D; ++d)
      if (std::find(o.only_domains.begin(), o.only_domains.end(), mix->domain_names[d]) ==
          o.only_domains.end())
        weights[d] = 0.0;
    if (std::all_of(weights.begin(), weights.end(), [](double v) { return v <= 0.0; }))
      return Status{Errc::invalid_argument, "only_domains names no domain of the workload"};
  }
  std::vector<double> cum(D);
  std::partial_sum(weights.begin(), weights.end(), cum.begin());
  w.requests.resize(n);
  w.prefill = {n, L, E, std::vector<int16_t>(n * cells)};
  if (decode) *decode = {n, L, E, std::vector<int16_t>(n * cells)};
  std::vector<uint32_t> prompt_lengths(n);
  for (uint64_t r = 0; r < n; ++r) {
    SimRequest& req = w.requests[r];
    const double u = rng.uniform() * cum.back();
    req.domain = std::min<uint32_t>(
        D - 1, static_cast<uint32_t>(std::upper_bound(cum.begin(), cum.end(), u) - cum.begin()));
    req.profile = req.domain * S + static_cast<uint32_t>(rng.below(S));
    req.output_tokens =
        lognormal_tokens(rng, o.output_tokens_median, o.output_tokens_sigma, o.output_tokens_max);
    const uint32_t prompt =
        lognormal_tokens(rng, o.prompt_tokens_median, o.prompt_tokens_sigma, 8192);
    prompt_lengths[r] = prompt;
    const float* inc = &w.inclusion[size_t{req.profile} * cells];
    int16_t* pre = &w.prefill.data[r * cells];
    for (size_t c = 0; c < cells; ++c) pre[c] = static_cast<int16_t>(binomial(rng, prompt, inc[c]));
    if (decode) {
      int16_t* dec = &decode->data[r * cells];
      for (size_t c = 0; c < cells; ++c) dec[c] = static_cast<int16_t>(binomial(rng, 127, inc[c]));
    }
  }
  if (o.prompts) ELDR_TRY(detail::synthetic_prompts(o, D, seed, prompt_lengths, w));
  return w;
}

Result<SimWorkload> load_trace_workload(const std::string& token_experts_npy,
                                        const std::string& index_npy,
                                        const std::string& labels_path,
                                        uint32_t prefill_proxy_tokens) {
  auto tokens_arr = read_npy(token_experts_npy);
  if (!tokens_arr) return tokens_arr.status();
  if (tokens_arr->shape.size() != 3)
    return Status{Errc::shape_mismatch, token_experts_npy + ": expected [tokens, L, k]"};
  auto ids = npy_to_int32(*tokens_arr);
  if (!ids) return ids.status();
  auto index_arr = read_npy(index_npy);
  if (!index_arr) return index_arr.status();
  if (index_arr->shape.size() != 2 || index_arr->shape[1] != 3)
    return Status{Errc::shape_mismatch, index_npy + ": expected [N, 3] (start, prompt, output)"};
  auto index = npy_to_int64(*index_arr);
  if (!index) return index.status();
  const uint64_t T = tokens_arr->shape[0];
  if (tokens_arr->shape[1] > kMaxLayers || tokens_arr->shape[2] > kMaxTopK ||
      tokens_arr->shape[2] == 0)
    return Status{Errc::out_of_range, token_experts_npy + ": L or k out of range"};
  const uint32_t L = static_cast<uint32_t>(tokens_arr->shape[1]);
  const uint32_t k = static_cast<uint32_t>(tokens_arr->shape[2]);
  int32_t max_id = -1;
  for (int32_t v : *ids) {
    if (v < 0) return Status{Errc::out_of_range, token_experts_npy + ": negative expert id"};
    max_id = std::max(max_id, v);
  }
  // E: the next power of two above the largest id seen (traces rarely use every expert).
  uint32_t E = 1;
  while (E <= static_cast<uint32_t>(max_id)) E *= 2;
  Geometry g{L, E, std::min(k, E)};
  ELDR_TRY(g.validate());
  const uint64_t n = index_arr->shape[0];
  const size_t cells = g.cells();
  SimWorkload w;
  w.geometry = g;
  w.requests.resize(n);
  w.prefill = {n, L, E, std::vector<int16_t>(n * cells, 0)};
  w.inclusion.assign(n * cells, 0.0f);
  std::vector<std::string> labels;
  if (!labels_path.empty()) {
    auto l = load_labels(labels_path);
    if (!l) return l.status();
    if (l->size() != n) return Status{Errc::shape_mismatch, "one label per trace request expected"};
    labels = std::move(*l);
  }
  // Ids are known to be in [0, E) here: E was derived from the largest id.
  auto count_tokens = [&](uint64_t first, uint64_t count, std::vector<int32_t>& into) {
    for (uint64_t t = first; t < first + count; ++t)
      for (uint32_t l = 0; l < L; ++l)
        for (uint32_t j = 0; j < k; ++j) {
          const int32_t e = (*ids)[(t * L + l) * k + j];
          into[size_t{l} * E + static_cast<uint32_t>(e)] += 1;
        }
  };
  std::vector<int32_t> acc(cells);
  for (uint64_t r = 0; r < n; ++r) {
    const int64_t start = (*index)[r * 3], prompt = (*index)[r * 3 + 1],
                  output = (*index)[r * 3 + 2];
    // Each bounded by T first, so the sum cannot overflow on a hostile index.
    const int64_t limit = static_cast<int64_t>(T);
    if (start < 0 || prompt < 0 || output <= 0 || start > limit || prompt > limit ||
        output > limit || start + prompt + output > limit)
      return Status{Errc::out_of_range, index_npy + ": request " + std::to_string(r) +
                                            " points outside the token array"};
    SimRequest& req = w.requests[r];
    req.profile = static_cast<uint32_t>(r);
    req.output_tokens = static_cast<uint32_t>(std::min<int64_t>(output, 1 << 20));
    if (!labels.empty()) {
      auto it = std::find(w.domain_names.begin(), w.domain_names.end(), labels[r]);
      if (it == w.domain_names.end()) it = w.domain_names.insert(w.domain_names.end(), labels[r]);
      req.domain = static_cast<uint32_t>(it - w.domain_names.begin());
    }
    // Prefill footprint: the prompt tokens, or the first decode tokens.
    std::fill(acc.begin(), acc.end(), 0);
    const uint64_t pre_first = static_cast<uint64_t>(start);
    const uint64_t pre_count = prompt > 0 ? static_cast<uint64_t>(prompt)
                                          : std::min<uint64_t>(prefill_proxy_tokens, output);
    count_tokens(pre_first, pre_count, acc);
    ELDR_TRY(narrow_footprint(acc, std::span<int16_t>(&w.prefill.data[r * cells], cells)));
    // Decode profile: share of the request's decode tokens that use each expert.
    std::fill(acc.begin(), acc.end(), 0);
    count_tokens(static_cast<uint64_t>(start + prompt), static_cast<uint64_t>(output), acc);
    for (size_t c = 0; c < cells; ++c)
      w.inclusion[r * cells + c] =
          std::min(0.999f, static_cast<float>(acc[c]) / static_cast<float>(output));
  }
  if (w.domain_names.empty()) w.domain_names = {"all"};
  return w;
}

double random_batch_distinct(const SimWorkload& w, uint32_t batch, uint64_t seed, uint32_t trials) {
  const size_t cells = w.geometry.cells();
  if (w.requests.empty() || batch == 0 || trials == 0 || cells == 0) return 0.0;
  Rng rng(seed ^ 0x510e527fade682d1ULL);
  std::vector<double> keep(cells);
  double total = 0.0;
  for (uint32_t t = 0; t < trials; ++t) {
    std::fill(keep.begin(), keep.end(), 1.0);
    for (uint32_t b = 0; b < batch; ++b) {
      const SimRequest& r = w.requests[rng.below(w.requests.size())];
      const float* inc = &w.inclusion[size_t{r.profile} * cells];
      for (size_t c = 0; c < cells; ++c) keep[c] *= 1.0 - inc[c];
    }
    for (double k : keep) total += 1.0 - k;
  }
  return total / trials;
}

double mean_output_tokens(const SimWorkload& w) {
  if (w.requests.empty()) return 0.0;
  double sum = 0.0;
  for (const auto& r : w.requests) sum += r.output_tokens;
  return sum / static_cast<double>(w.requests.size());
}

FleetCapacity fleet_capacity(const StepCost& cost, uint32_t workers, double distinct_random,
                             double mean_output) {
  FleetCapacity c;
  c.distinct_random = distinct_random;
  c.full_step_ms = cost.step_ms(cost.max_batch, distinct_random);
  c.mean_output_tokens = mean_output;
  if (c.full_step_ms > 0.0 && mean_output > 0.0)
    c.requests_per_s =
        static_cast<double>(workers) * cost.max_batch / (mean_output * c.full_step_ms / 1000.0);
  return c;
}

Result<double> alpha_for_expert_share(const StepCost& cost, double distinct, double share) {
  if (!(share > 0.0 && share < 1.0))
    return Status{Errc::invalid_argument, "the expert share must be in (0, 1)"};
  if (!(distinct > 0.0)) return Status{Errc::invalid_argument, "no distinct experts to load"};
  const double rest_ms = cost.t0_ms + cost.tseq_ms * cost.max_batch;
  if (!(rest_ms > 0.0))
    return Status{Errc::invalid_argument, "an expert share needs T0 + TSEQ * max_batch > 0"};
  return 1000.0 * share * rest_ms / ((1.0 - share) * distinct);
}

SimWorkload select_requests(const SimWorkload& w, std::span<const uint64_t> rows) {
  const size_t cells = w.geometry.cells();
  SimWorkload s;
  s.geometry = w.geometry;
  s.domain_names = w.domain_names;
  s.inclusion = w.inclusion;
  s.prompt_tokens = w.prompt_tokens;
  s.prompt_texts = w.prompt_texts;
  s.requests.reserve(rows.size());
  s.prefill = {rows.size(), w.geometry.layers, w.geometry.experts,
               std::vector<int16_t>(rows.size() * cells)};
  for (size_t i = 0; i < rows.size(); ++i) {
    s.requests.push_back(w.requests[rows[i]]);
    std::copy_n(w.prefill.data.begin() + rows[i] * cells, cells,
                s.prefill.data.begin() + i * cells);
  }
  return s;
}

SimWorkload resample_requests(const SimWorkload& w, uint64_t n, uint64_t seed) {
  std::vector<uint64_t> rows(w.requests.empty() ? 0 : n);
  Rng rng(seed ^ 0x9b05688c2b3e6c1fULL);
  for (auto& r : rows) r = rng.below(w.requests.size());
  return select_requests(w, rows);
}

std::string label_group(const std::string& label) { return label.substr(0, label.find('/')); }

bool DriftGroups::calibrates(const std::string& label) const {
  return std::binary_search(calibration.begin(), calibration.end(), label_group(label));
}

Result<DriftGroups> drift_groups(const std::vector<std::string>& labels) {
  std::vector<std::string> groups;
  for (const auto& l : labels) groups.push_back(label_group(l));
  std::sort(groups.begin(), groups.end());
  groups.erase(std::unique(groups.begin(), groups.end()), groups.end());
  if (groups.size() < 2)
    return Status{Errc::invalid_argument,
                  "drift mode needs labels of at least two groups (label text before '/')"};
  DriftGroups d;
  const size_t half = groups.size() / 2;
  d.calibration.assign(groups.begin(), groups.begin() + half);
  d.evaluation.assign(groups.begin() + half, groups.end());
  return d;
}

}  // namespace eldr
