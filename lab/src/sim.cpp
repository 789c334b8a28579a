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
    const float* inc = &w.inclusion[size_t{req.profile} * cells];
    int16_t* pre = &w.prefill.data[r * cells];
    for (size_t c = 0; c < cells; ++c) pre[c] = static_cast<int16_t>(binomial(rng, prompt, inc[c]));
    if (decode) {
      int16_t* dec = &decode->data[r * cells];
      for (size_t c = 0; c < cells; ++c) dec[c] = static_cast<int16_t>(binomial(rng, 127, inc[c]));
    }
  }
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

PoolCapacity pool_capacity(const StepCost& cost, uint32_t workers, double distinct_random,
                           double mean_output) {
  PoolCapacity c;
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

namespace {

struct Worker {
  std::vector<float> keep_product;  // per cell: P(no batch token uses it) = prod (1 - p)
  double distinct = 0.0;            // expected distinct experts, all layers
  std::vector<uint32_t> batch;      // request ids
  std::deque<uint32_t> queue;
  bool busy = false;
  uint64_t tokens = 0;
};

// Multiplies (join) or divides (leave) the batch's keep-products by a
// request's (1 - p) and refreshes the expected distinct-expert count.
void update_union(Worker& w, const float* inclusion, size_t cells, bool join) {
  float* prod = w.keep_product.data();
  float sum = 0.0f;
  if (join)
    for (size_t c = 0; c < cells; ++c) sum += prod[c] *= 1.0f - inclusion[c];
  else
    for (size_t c = 0; c < cells; ++c)
      sum += prod[c] = std::min(1.0f, prod[c] / (1.0f - inclusion[c]));
  w.distinct = static_cast<double>(cells) - sum;
}

struct Event {
  double time;
  uint32_t kind;  // 0 = arrival, 1 = step end, 2 = a booking reaches another router
  uint32_t id;    // request, worker or booking
  bool operator>(const Event& o) const {
    return time != o.time ? time > o.time : (kind != o.kind ? kind > o.kind : id > o.id);
  }
};

double percentile_sorted(const std::vector<double>& v, double p) {
  if (v.empty()) return 0.0;
  const size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * v.size()));
  return v[std::min(v.size() - 1, rank == 0 ? 0 : rank - 1)];
}

}  // namespace

Result<SimResult> simulate(const SimWorkload& wl, std::shared_ptr<const ClusterTable> table,
                           const SimOptions& o) {
  if (!table) return Status{Errc::invalid_argument, "simulate needs a cluster table"};
  const Geometry& g = wl.geometry;
  if (table->geometry.layers != g.layers || table->geometry.experts != g.experts)
    return Status{Errc::shape_mismatch, "table geometry " + table->geometry.to_string() +
                                            " differs from the workload's " + g.to_string()};
  if (!(o.rate > 0.0) || !std::isfinite(o.rate))
    return Status{Errc::invalid_argument, "rate must be > 0"};
  if (o.model.cost.max_batch == 0) return Status{Errc::invalid_argument, "max_batch must be >= 1"};
  if (o.routers == 0 || o.routers > 64)
    return Status{Errc::invalid_argument, "routers must be in [1, 64]"};
  if (!(o.view_delay_ms >= 0.0) || !std::isfinite(o.view_delay_ms))
    return Status{Errc::invalid_argument, "view_delay_ms must be finite and >= 0"};
  if (o.routers > 1 && o.report_steps)
    return Status{Errc::unsupported,
                  "step reports with several routers are not modelled (a report carries the "
                  "engine's whole batch, which would overwrite each router's delayed view)"};
  const uint32_t K = table->num_clusters();
  const size_t cells = g.cells();
  const uint64_t n = wl.requests.size();
  RouterOptions ro = o.router;
  ro.max_workers = std::max(ro.max_workers, K);
  // A record for every request in flight (up to 2^20 at once: 2 KiB of
  // address space each, touched only while used), so each completes by its
  // id and its own footprint leaves its worker's batch.
  ro.max_inflight = std::max<uint32_t>(
      ro.max_inflight, static_cast<uint32_t>(std::min<uint64_t>(n, uint64_t{1} << 20)));
  // One Router per router process, each with its own draws.
  std::vector<std::unique_ptr<Router>> routers;
  for (uint32_t i = 0; i < o.routers; ++i) {
    RouterOptions ri = ro;
    ri.seed = ro.seed + i;
    auto created = Router::create(table, ri);
    if (!created) return created.status();
    routers.push_back(std::move(*created));
  }
  Router& router = *routers[0];
  // Each router's view of the others' in-flight requests per worker, and its
  // own; the Router holds their sum (set_load after every delivered booking).
  std::vector<std::vector<int64_t>> own(o.routers, std::vector<int64_t>(K, 0));
  std::vector<std::vector<int64_t>> seen(o.routers, std::vector<int64_t>(K, 0));
  struct Booking {
    uint32_t router, worker;
    int32_t delta;
    uint32_t request;
  };
  // Each router's anticipated twins of its own picks (no anticipation with
  // count-only bookings: a twin is a footprint).
  const bool anticipate = o.anticipate_peers && o.bookings_carry_footprints && o.routers > 1;
  std::vector<PeerTwins> twins(o.routers,
                               PeerTwins(anticipate ? o.routers - 1 : 0, o.view_delay_ms));
  std::vector<Booking> bookings;
  std::vector<uint32_t> owner(o.routers > 1 ? n : 0);
  std::vector<uint32_t> placed(o.routers > 1 ? n : 0);
  Rng pick_router(o.seed ^ 0x5bd1e995u);

  std::vector<Worker> workers(K);
  for (auto& w : workers) w.keep_product.assign(cells, 1.0f);
  std::vector<uint32_t> remaining(n);
  std::vector<double> join_time(n, 0.0);
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events;
  Rng arrivals(o.seed);
  double t = 0.0;
  for (uint64_t i = 0; i < n; ++i) {
    t += -std::log(1.0 - arrivals.uniform()) / o.rate;
    events.push({t, 0, static_cast<uint32_t>(i)});
  }

  SimResult res;
  res.policy = policy_name(ro.policy);
  res.requests = n;
  res.tpot_ms.reserve(n);
  uint64_t finished = 0, next_report = n / 100 + 1;

  auto start_step = [&](uint32_t wi, double now) {
    Worker& w = workers[wi];
    while (w.batch.size() < o.model.cost.max_batch && !w.queue.empty()) {
      const uint32_t r = w.queue.front();
      w.queue.pop_front();
      update_union(w, &wl.inclusion[size_t{wl.requests[r].profile} * cells], cells, true);
      join_time[r] = now;
      w.batch.push_back(r);
    }
    if (w.batch.empty()) {
      w.busy = false;
      return;
    }
    w.busy = true;
    const double step_ms = o.model.cost.step_ms(static_cast<uint32_t>(w.batch.size()), w.distinct);
    if (o.report_steps) {
      WorkerReport rep;
      rep.batch = static_cast<uint32_t>(w.batch.size() + w.queue.size());
      rep.step_ms = step_ms;
      (void)router.report(table->worker_ids[wi], rep);
    }
    res.experts_per_step_samples.push_back(static_cast<float>(w.distinct / g.layers));
    ++res.steps;
    events.push({now + step_ms / 1000.0, 1, wi});
  };

  // A router's route (+1) or finish (-1) on a worker reaches every other
  // router view_delay_ms later.
  auto publish_booking = [&](uint32_t from, uint32_t worker, int32_t delta, uint32_t request,
                             double now) {
    own[from][worker] += delta;
    for (uint32_t j = 0; j < o.routers; ++j) {
      if (j == from) continue;
      bookings.push_back({j, worker, delta, request});
      events.push({now + o.view_delay_ms / 1000.0, 2, static_cast<uint32_t>(bookings.size() - 1)});
    }
  };

  while (!events.empty()) {
    const Event ev = events.top();
    events.pop();
    if (ev.kind == 2) {
      const Booking& b = bookings[ev.id];
      Router& to = *routers[b.router];
      if (o.bookings_carry_footprints) {
        if (b.delta > 0)
          (void)to.book(table->worker_ids[b.worker], wl.prefill.row(b.request), b.request);
        else
          (void)to.complete_request(b.request);
      } else {
        seen[b.router][b.worker] += b.delta;
        const int64_t view =
            std::max<int64_t>(0, own[b.router][b.worker] + seen[b.router][b.worker]);
        (void)to.set_load(table->worker_ids[b.worker], static_cast<uint32_t>(view));
      }
      continue;
    }
    if (ev.kind == 0) {
      const uint32_t r = ev.id;
      RouteHints hints;
      if (wl.requests[r].domain < wl.domain_names.size())
        hints.label = wl.domain_names[wl.requests[r].domain];
      hints.request_id = r;
      const uint32_t by = o.routers > 1 ? static_cast<uint32_t>(pick_router.next() % o.routers) : 0;
      twins[by].release_due(*routers[by], ev.time * 1000.0);
      auto d = routers[by]->route(wl.prefill.row(r), hints);
      if (!d) return d.status();
      if (d->worker_index >= K)
        return Status{Errc::internal, "router returned a worker outside the table"};
      if (o.routers > 1) {
        owner[r] = by;
        placed[r] = d->worker_index;
        publish_booking(by, d->worker_index, +1, r, ev.time);
        ELDR_TRY(twins[by].after_route(*routers[by], table->worker_ids[d->worker_index],
                                       wl.prefill.row(r), ev.time * 1000.0));
      }
      remaining[r] = wl.requests[r].output_tokens;
      workers[d->worker_index].queue.push_back(r);
      if (!workers[d->worker_index].busy) start_step(d->worker_index, ev.time);
      continue;
    }
    Worker& w = workers[ev.id];
    w.tokens += w.batch.size();
    size_t keep = 0;
    for (uint32_t r : w.batch) {
      if (--remaining[r] > 0) {
        w.batch[keep++] = r;
        continue;
      }
      res.tpot_ms.push_back((ev.time - join_time[r]) * 1000.0 / wl.requests[r].output_tokens);
      update_union(w, &wl.inclusion[size_t{wl.requests[r].profile} * cells], cells, false);
      // By id, so eldr_cost's batch footprint loses this request's.
      if (o.routers > 1) {
        (void)routers[owner[r]]->complete_request(r);
        publish_booking(owner[r], placed[r], -1, r, ev.time);
      } else {
        (void)router.complete_request(r);
      }
      ++finished;
    }
    w.batch.resize(keep);
    if (w.batch.empty()) {  // drop accumulated rounding
      std::fill(w.keep_product.begin(), w.keep_product.end(), 1.0f);
      w.distinct = 0.0;
    }
    res.makespan_s = ev.time;
    if (o.progress && finished >= next_report) {
      o.progress(static_cast<double>(finished) / n);
      next_report = finished + n / 100 + 1;
    }
    start_step(ev.id, ev.time);
  }

  std::vector<double> sorted = res.tpot_ms;
  std::sort(sorted.begin(), sorted.end());
  res.tpot_p50_ms = percentile_sorted(sorted, 50);
  res.tpot_p99_ms = percentile_sorted(sorted, 99);
  res.tpot_mean_ms =
      sorted.empty() ? 0.0 : std::accumulate(sorted.begin(), sorted.end(), 0.0) / sorted.size();
  double eps = 0.0;
  for (float v : res.experts_per_step_samples) eps += v;
  res.experts_per_step = res.steps ? eps / static_cast<double>(res.steps) : 0.0;
  uint64_t max_tokens = 0, sum_tokens = 0;
  for (const auto& w : workers) {
    max_tokens = std::max(max_tokens, w.tokens);
    sum_tokens += w.tokens;
  }
  res.worker_load_max_over_mean =
      sum_tokens ? static_cast<double>(max_tokens) * K / static_cast<double>(sum_tokens) : 0.0;
  res.router_step_cost = router.step_cost();
  res.router_step_samples = router.stats().step_samples;
  if (o.progress) o.progress(1.0);
  return res;
}

}  // namespace eldr
