#include "eldr/router.hpp"

#include <algorithm>
#include <cmath>

#include "eldr/footprint.hpp"
#include "eldr/random.hpp"
#include "kernels.hpp"

namespace eldr {

using detail::RouterScoring;

namespace {
constexpr uint32_t kMaxSlots = 4096;  // bounds the hot path's stack arrays
}

const char* policy_name(Policy policy) noexcept {
  switch (policy) {
    case Policy::eldr:
      return "eldr";
    case Policy::round_robin:
      return "round_robin";
    case Policy::random:
      return "random";
    case Policy::jsq:
      return "jsq";
    case Policy::p2c:
      return "p2c";
    case Policy::domain:
      return "domain";
    case Policy::eldr_guard:
      return "eldr_guard";
  }
  return "unknown";
}

std::optional<Policy> parse_policy(std::string_view name) noexcept {
  if (name == "rr") return Policy::round_robin;
  for (Policy p : kAllPolicies)
    if (name == policy_name(p)) return p;
  return std::nullopt;
}

const char* worker_state_name(WorkerState state) noexcept {
  switch (state) {
    case WorkerState::active:
      return "active";
    case WorkerState::draining:
      return "draining";
    case WorkerState::removed:
      return "removed";
  }
  return "unknown";
}

// Everything a decision needs from one table, precomputed once.
//
// Scores are exact fp32 cosines: s(c) = (count . v_c) / |count * idf| over the
// masked cells, with v_c = idf * centroid_c (`weights`, one masked dot per
// cluster). A decision rarely needs all of them exactly: the locality band
// only asks which scores lie above top - tau. So a first pass scores every
// cluster in integers, the footprint's own int16 counts against int16 copies
// of v_c (`quantized`, one vpmaddwd per 16 cells), with a proven bound on its
// distance to the exact score; a cluster is scored exactly only where a
// decision depends on where inside that interval its score lies (see
// ClusterScores). Using the counts as they are leaves no signature to build.
struct detail::RouterScoring {
  // q_c = round(lambda_c v_c) with lambda_c = kScale / |v_c|: every |q| <=
  // kScale + 0.5 and |q_c| <= kScale + 0.5 sqrt(cells) < 33,100 for any
  // geometry (cells <= 2^22). The counts enter as they are while |count| <=
  // kMaxCountNorm (else shifted right, see ClusterScores), so x . q_c and all
  // its partial sums stay below 64,000 * 33,100 < 2^31 (Cauchy-Schwarz) and
  // the int32 lanes of the integer pass never wrap.
  static constexpr double kScale = 32000.0;
  static constexpr double kMaxCountNorm = 64000.0;
  static constexpr size_t kChunk = 16;  // cells per vpmaddwd

  std::shared_ptr<const ClusterTable> table;
  uint32_t clusters = 0;
  uint32_t blocks = 0;  // groups of 8 clusters
  size_t dim = 0;       // masked cells
  size_t chunks = 0;    // dim rounded up to kChunk, in chunks
  // Masked layers that follow each other, as whole chunks of the footprint
  // the int16 pass reads in place (empty when experts % kChunk != 0).
  struct Run {
    size_t cell = 0;    // first cell in the footprint
    size_t chunk = 0;   // first chunk in the masked cells
    size_t chunks = 0;  // length
  };
  std::vector<Run> runs;
  std::vector<float> weights;      // [clusters][dim]: v_c = idf * centroid
  std::vector<int16_t> quantized;  // [blocks][chunks][8][kChunk]: q_c = round(lambda_c v_c)
  std::vector<double> inv_lambda;  // [clusters]: 1 / lambda_c (0 for a zero v_c)
  std::vector<double> q_error;     // [clusters]: |q_c / lambda_c - v_c|
  std::vector<double> v_norm;      // [clusters]: |v_c|
  double fp32_error = 0.0;         // the exact score's own fp32 error bound, plus slack
  uint64_t epoch = 0;

  static std::shared_ptr<const RouterScoring> build(std::shared_ptr<const ClusterTable> t,
                                                    uint64_t epoch) {
    auto s = std::make_shared<RouterScoring>();
    s->clusters = t->num_clusters();
    s->blocks = (s->clusters + 7) / 8;
    s->dim = t->dim();
    s->chunks = (s->dim + kChunk - 1) / kChunk;
    const uint32_t experts = t->geometry.experts;
    const auto& mask = t->layer_mask;
    for (size_t i = 0; experts % kChunk == 0 && i < mask.size(); ++i) {
      if (i > 0 && mask[i] == mask[i - 1] + 1) {
        s->runs.back().chunks += experts / kChunk;
        continue;
      }
      s->runs.push_back({size_t{mask[i]} * experts, i * experts / kChunk, experts / kChunk});
    }
    s->weights.resize(size_t{s->clusters} * s->dim);
    s->quantized.assign(size_t{s->blocks} * s->chunks * 8 * kChunk, 0);
    s->inv_lambda.assign(s->clusters, 0.0);
    s->q_error.assign(s->clusters, 0.0);
    s->v_norm.assign(s->clusters, 0.0);
    // The fp32 exact score's summation error, gamma_dim = dim * u / (1 - dim *
    // u), for terms whose magnitudes add up to at most |count * idf| |c| <=
    // 1.001 |count * idf| (the table's unit tolerance), plus 1e-6 for the
    // roundings of the scale and of the float results.
    const double u = std::ldexp(1.0, -24);
    s->fp32_error = 1.001 * (s->dim * u / (1.0 - s->dim * u)) + 1e-6;
    for (uint32_t c = 0; c < s->clusters; ++c) {
      const auto cen = t->centroid(c);
      float* w = &s->weights[size_t{c} * s->dim];
      double v2 = 0.0;
      for (size_t i = 0; i < s->dim; ++i) {
        w[i] = t->idf[i] * cen[i];
        v2 += double{w[i]} * w[i];
      }
      if (v2 == 0.0) continue;  // scores 0 on both paths
      const double lambda = kScale / std::sqrt(v2);
      double e2 = 0.0;
      for (size_t i = 0; i < s->dim; ++i) {
        const double scaled = w[i] * lambda;
        const double q = std::nearbyint(scaled);
        e2 += (scaled - q) * (scaled - q);
        s->quantized[((c / 8) * s->chunks + i / kChunk) * 8 * kChunk + (c % 8) * kChunk +
                     i % kChunk] = static_cast<int16_t>(q);
      }
      s->inv_lambda[c] = 1.0 / lambda;
      s->q_error[c] = std::sqrt(e2) / lambda;
      s->v_norm[c] = std::sqrt(v2);
    }
    s->table = std::move(t);
    s->epoch = epoch;
    return s;
  }
};

namespace {

// One footprint's cluster scores as intervals that tighten on demand:
// lower(c) <= exact(c) <= upper(c), where exact(c) is the fp32 cosine (the
// same value whichever path asks for it). With `approximate`, one int16 pass
// bounds every cluster; exact(c) costs one fp32 dot and is cached.
// Allocation-free: the buffers live in the object (on the caller's stack).
class ClusterScores {
 public:
  ClusterScores(const RouterScoring& s, std::span<const int16_t> counts, bool approximate)
      : m_s(s), m_counts(counts.data()) {
    const ClusterTable& t = *s.table;
    const kernels::MaskedNorms norms = kernels::masked_norms(
        m_counts, t.layer_mask.data(), t.layer_mask.size(), t.geometry.experts, t.idf.data());
    m_inv_norm =
        norms.weighted2 > 0.0 ? static_cast<float>(1.0 / std::sqrt(norms.weighted2)) : 0.0f;
    std::fill_n(m_known, s.clusters, false);
    m_approximate = approximate && norms.weighted2 > 0.0;
    if (m_approximate) approximate_all(norms.counts2);
  }

  // c = kNoCluster (a worker the table does not know) scores 0.
  float exact(uint32_t c) {
    if (c == kNoCluster) return 0.0f;
    if (!m_known[c]) {
      const ClusterTable& t = *m_s.table;
      m_exact[c] = kernels::masked_dot(m_counts, t.layer_mask.data(), t.layer_mask.size(),
                                       t.geometry.experts, &m_s.weights[size_t{c} * m_s.dim]) *
                   m_inv_norm;
      m_known[c] = true;
    }
    return m_exact[c];
  }
  float lower(uint32_t c) { return settled(c) ? exact(c) : m_approx[c] - m_bound[c]; }
  float upper(uint32_t c) { return settled(c) ? exact(c) : m_approx[c] + m_bound[c]; }

 private:
  // Whether c's interval is a point: its exact score is known or free.
  bool settled(uint32_t c) const { return c == kNoCluster || m_known[c] || !m_approximate; }

  // counts2: |count|^2 over the masked cells, as masked_norms summed it.
  void approximate_all(double counts2) {
    const ClusterTable& t = *m_s.table;
    // An upper bound on |count|: fp32 sums of at most experts + 16 terms per
    // layer are off by less than (experts + 16) u relative.
    const double count_norm =
        std::sqrt(counts2 * (1.0 + (t.geometry.experts + 16) * std::ldexp(1.0, -23)));
    // x = count / 2^shift, rounded: the counts as they are (shift 0) unless
    // the prompt is so long that |x| could pass kMaxCountNorm.
    const size_t padded = m_s.chunks * RouterScoring::kChunk;
    const double half_ulp = 0.5 * std::sqrt(static_cast<double>(padded));
    uint32_t shift = 0;
    while (count_norm > RouterScoring::kMaxCountNorm &&
           std::ldexp(count_norm, -static_cast<int>(shift)) + half_ulp >
               RouterScoring::kMaxCountNorm)
      ++shift;
    int64_t totals[kMaxClusters + 8];
    std::fill_n(totals, size_t{m_s.blocks} * 8, int64_t{0});
    const auto score_chunks = [&](const int16_t* x, size_t chunk, size_t chunks) {
      for (uint32_t b = 0; b < m_s.blocks; ++b)
        kernels::dot_q16_block(x,
                               &m_s.quantized[(b * m_s.chunks + chunk) * 8 * RouterScoring::kChunk],
                               chunks, totals + 8 * b);
    };
    if (shift == 0 && !m_s.runs.empty()) {  // the counts in place
      for (const RouterScoring::Run& r : m_s.runs)
        score_chunks(m_counts + r.cell, r.chunk, r.chunks);
    } else {  // gathered (and shifted) into a buffer, a pass at a time
      constexpr size_t kCells = 4096;
      static_assert(kCells % RouterScoring::kChunk == 0);
      alignas(32) int16_t x[kCells];
      for (size_t first = 0; first < padded; first += kCells) {
        const size_t n = std::min(kCells, padded - first);
        const size_t real = std::min(n, m_s.dim - first);
        kernels::gather_counts(m_counts, t.layer_mask.data(), t.geometry.experts, shift, first,
                               real, x);
        std::fill(x + real, x + n, int16_t{0});
        score_chunks(x, first / RouterScoring::kChunk, n / RouterScoring::kChunk);
      }
    }
    // count = 2^shift x + r with |r| <= 2^(shift-1) sqrt(cells), and
    // q_c = lambda_c v_c + e_c, so
    //   count . v_c = 2^shift (x . q_c) / lambda_c - 2^shift (x . e_c) / lambda_c + r . v_c
    // and the int16 score is off the exact one by at most
    //   (|count| + |r|) |e_c| / lambda_c + |r| |v_c|, over |count * idf|.
    const double remainder = shift == 0 ? 0.0 : std::ldexp(half_ulp, static_cast<int>(shift));
    const double inv_norm = m_inv_norm;
    for (uint32_t c = 0; c < m_s.clusters; ++c) {
      m_approx[c] =
          static_cast<float>(std::ldexp(static_cast<double>(totals[c]), static_cast<int>(shift)) *
                             m_s.inv_lambda[c] * inv_norm);
      m_bound[c] = static_cast<float>(
          inv_norm * ((count_norm + remainder) * m_s.q_error[c] + remainder * m_s.v_norm[c]) +
          m_s.fp32_error);
    }
  }

  const RouterScoring& m_s;
  const int16_t* m_counts;
  float m_inv_norm = 0.0f;
  bool m_approximate = false;
  float m_approx[kMaxClusters];
  float m_bound[kMaxClusters];
  float m_exact[kMaxClusters];
  bool m_known[kMaxClusters];
};

}  // namespace

struct alignas(64) Router::Slot {
  std::atomic<int32_t> id{-1};
  std::atomic<uint8_t> state{static_cast<uint8_t>(WorkerState::removed)};
  std::atomic<uint32_t> cluster{kNoCluster};
  std::atomic<int64_t> inflight{0};
  std::atomic<uint64_t> routed{0};

  WorkerState get_state() const noexcept {
    return static_cast<WorkerState>(state.load(std::memory_order_acquire));
  }
};

Router::Router(const RouterOptions& options) : m_options(options) {}
Router::~Router() = default;

Result<std::unique_ptr<Router>> Router::create(std::shared_ptr<const ClusterTable> table,
                                               const RouterOptions& options) {
  if (!table) return Status{Errc::invalid_argument, "router needs a cluster table"};
  ELDR_TRY(table->validate());
  if (table->num_clusters() > kMaxClusters)
    return Status{Errc::unsupported, "at most " + std::to_string(kMaxClusters) + " clusters"};
  if (options.max_workers == 0 || options.max_workers > kMaxSlots)
    return Status{Errc::invalid_argument,
                  "max_workers must be in [1, " + std::to_string(kMaxSlots) + "]"};
  if (options.max_workers < table->num_clusters())
    return Status{Errc::invalid_argument, "max_workers is smaller than the table's worker count"};
  if (!(options.guard_ratio >= 0.0f && std::isfinite(options.guard_ratio)))
    return Status{Errc::invalid_argument, "guard_ratio must be finite and >= 0"};
  if (!(options.tau < 0.0f || (std::isfinite(options.tau) && options.tau <= 2.0f)))
    return Status{Errc::invalid_argument, "tau must be in [0, 2] (or negative for the default)"};
  if (options.policy == Policy::domain && table->domains.empty())
    return Status{Errc::invalid_argument,
                  "the domain policy needs a table fitted with labels (no domain pools)"};
  std::unique_ptr<Router> r(new Router(options));
  r->m_slots = std::make_unique<Slot[]>(options.max_workers);
  r->m_epoch.store(1);
  r->m_scoring.store(Scoring::build(table, 1));
  for (uint32_t c = 0; c < table->num_clusters(); ++c) {
    Slot& s = r->m_slots[c];
    s.id.store(table->worker_ids[c]);
    s.cluster.store(c);
    s.state.store(static_cast<uint8_t>(WorkerState::active));
  }
  r->m_slot_count.store(table->num_clusters(), std::memory_order_release);
  return r;
}

uint64_t Router::next_random() noexcept {
  const uint64_t n = m_rng_counter.fetch_add(1, std::memory_order_relaxed);
  return splitmix64(m_options.seed * 0x9e3779b97f4a7c15ULL + n);
}

float Router::tau_for(const Scoring& scoring) const noexcept {
  return m_options.tau >= 0.0f ? m_options.tau : scoring.table->default_tau;
}

float Router::tau() const noexcept { return tau_for(*m_scoring.load()); }

uint32_t Router::gather_active(uint32_t clusters, uint32_t n, std::span<const uint32_t> loads,
                               uint32_t* active, uint32_t* cluster, int64_t* load) const noexcept {
  uint32_t m = 0;
  for (uint32_t i = 0; i < n; ++i) {
    const Slot& s = m_slots[i];
    if (s.get_state() != WorkerState::active) continue;
    const uint32_t c = s.cluster.load(std::memory_order_relaxed);
    active[m] = i;
    cluster[m] = c < clusters ? c : kNoCluster;
    if (load) load[m] = loads.empty() ? s.inflight.load(std::memory_order_relaxed) : loads[i];
    ++m;
  }
  return m;
}

namespace {

// Counts of the table's geometry, none negative (the prompt's token count is
// not known here, so the per-layer sums are not checked).
Status check_counts(const ClusterTable& t, std::span<const int16_t> counts) {
  return validate_footprint(t.geometry, counts, std::nullopt);
}

// Largest exact score among the candidates j with keep(j) (-inf if none):
// only those whose interval reaches the best lower bound are scored exactly.
template <class Keep>
float exact_max(ClusterScores& cs, const uint32_t* cluster, uint32_t m, Keep keep) {
  float reach = -INFINITY;
  for (uint32_t j = 0; j < m; ++j)
    if (keep(j)) reach = std::max(reach, cs.lower(cluster[j]));
  float best = -INFINITY;
  for (uint32_t j = 0; j < m; ++j)
    if (keep(j) && cs.upper(cluster[j]) >= reach) best = std::max(best, cs.exact(cluster[j]));
  return best;
}

// exact(c) >= floor, scoring c exactly only when its interval straddles floor.
bool at_least(ClusterScores& cs, uint32_t c, float floor) {
  if (cs.lower(c) >= floor) return true;
  if (cs.upper(c) < floor) return false;
  return cs.exact(c) >= floor;
}

// The locality band over m > 0 candidates: j is a member iff its exact score
// is >= floor, floor = best - tau; with min2, a one-member band widens to the
// second-best score. Decided from the intervals where they settle it: the
// best score lies in [max lower, max upper], so j is a member when its lower
// bound clears (max upper) - tau and not one when its upper bound stays under
// (max lower) - tau; only the rest need the exact floor.
class Band {
 public:
  Band(ClusterScores& cs, const uint32_t* cluster, uint32_t m, float tau, bool min2)
      : m_cs(cs), m_cluster(cluster), m_m(m), m_tau(tau), m_min2(min2 && tau > 0.0f) {
    for (uint32_t j = 0; j < m; ++j) {
      m_best_lower = std::max(m_best_lower, cs.lower(cluster[j]));
      m_best_upper = std::max(m_best_upper, cs.upper(cluster[j]));
    }
    if (m_min2) exact_floor();  // the widening rule counts exact members
  }

  bool contains(uint32_t j) {
    const uint32_t c = m_cluster[j];
    if (!m_floor_known) {
      if (m_cs.lower(c) >= m_best_upper - m_tau) return true;
      if (m_cs.upper(c) < m_best_lower - m_tau) return false;
      exact_floor();
    }
    return at_least(m_cs, c, m_floor);
  }

 private:
  void exact_floor() {
    const float top = exact_max(m_cs, m_cluster, m_m, [](uint32_t) { return true; });
    m_floor = top - m_tau;
    m_floor_known = true;
    if (!m_min2) return;
    uint32_t members = 0;
    for (uint32_t j = 0; j < m_m && members < 2; ++j)
      members += at_least(m_cs, m_cluster[j], m_floor);
    if (members != 1) return;
    const float second = exact_max(m_cs, m_cluster, m_m, [&](uint32_t j) {
      return m_cs.upper(m_cluster[j]) < top || m_cs.exact(m_cluster[j]) < top;
    });
    if (second >= 0.0f) m_floor = second;
  }

  ClusterScores& m_cs;
  const uint32_t* m_cluster;
  uint32_t m_m;
  float m_tau;
  bool m_min2;
  float m_best_lower = -INFINITY, m_best_upper = -INFINITY;
  float m_floor = 0.0f;
  bool m_floor_known = false;
};

}  // namespace

Result<Decision> Router::route(std::span<const int16_t> counts, const RouteHints& hints) {
  const std::shared_ptr<const Scoring> scoring = m_scoring.load(std::memory_order_acquire);
  const ClusterTable& table = *scoring->table;
  if (Status s = check_counts(table, counts); !s) {
    m_rejected.fetch_add(1, std::memory_order_relaxed);
    return s;
  }
  const uint32_t n = m_slot_count.load(std::memory_order_acquire);
  if (!hints.loads.empty() && hints.loads.size() != n) {
    m_rejected.fetch_add(1, std::memory_order_relaxed);
    return Status{Errc::invalid_argument, "loads has " + std::to_string(hints.loads.size()) +
                                              " entries, the router has " + std::to_string(n) +
                                              " worker slots"};
  }

  // Active slots with their cluster and load, gathered once per decision.
  uint32_t active[kMaxSlots];
  uint32_t cluster[kMaxSlots];
  int64_t load[kMaxSlots];
  const uint32_t m = gather_active(scoring->clusters, n, hints.loads, active, cluster, load);
  if (m == 0) {
    m_rejected.fetch_add(1, std::memory_order_relaxed);
    return Status{Errc::no_worker, "no active worker to route to"};
  }

  // Least loaded of the candidates j with keep(j) true; ties: lowest slot, or a
  // uniformly random one among the tied when `random_ties`.
  auto least_loaded = [&](auto keep, bool random_ties, uint32_t& candidates) {
    int64_t best = INT64_MAX;
    uint32_t ties = 0;
    candidates = 0;
    for (uint32_t j = 0; j < m; ++j) {
      if (!keep(j)) continue;
      ++candidates;
      if (load[j] < best) {
        best = load[j];
        ties = 1;
      } else if (load[j] == best) {
        ++ties;
      }
    }
    uint32_t target = random_ties && ties > 1 ? static_cast<uint32_t>(next_random() % ties) : 0;
    for (uint32_t j = 0; j < m; ++j)
      if (keep(j) && load[j] == best && target-- == 0) return j;
    return 0u;  // unreachable: m > 0 and keep() selected at least one
  };

  // Only the locality policies look at scores before the pick; the others
  // score the picked worker alone, for the decision's similarity.
  const bool locality = m_options.policy == Policy::eldr || m_options.policy == Policy::eldr_guard;
  ClusterScores cs(*scoring, counts, locality);
  uint32_t pick = 0, band = 0;
  switch (m_options.policy) {
    case Policy::eldr:
    case Policy::eldr_guard: {
      Band in_band(cs, cluster, m, tau_for(*scoring), m_options.min2_band);
      bool member[kMaxSlots];
      for (uint32_t j = 0; j < m; ++j) member[j] = in_band.contains(j);
      pick = least_loaded([&](uint32_t j) { return member[j]; }, false, band);
      if (m_options.policy == Policy::eldr_guard) {
        int64_t lowest = load[0], total = 0;
        for (uint32_t j = 0; j < m; ++j) {
          lowest = std::min(lowest, load[j]);
          total += load[j];
        }
        const double slack = std::max<double>(
            m_options.guard_slack, m_options.guard_ratio * static_cast<double>(total) / m);
        if (static_cast<double>(load[pick] - lowest) > slack) {
          // Spill: the least-loaded worker, the most similar among ties.
          uint32_t best = m;
          for (uint32_t j = 0; j < m; ++j)
            if (load[j] == lowest && (best == m || cs.exact(cluster[j]) > cs.exact(cluster[best])))
              best = j;
          pick = best;
        }
      }
      break;
    }
    case Policy::round_robin:
      pick = static_cast<uint32_t>(m_rr_cursor.fetch_add(1, std::memory_order_relaxed) % m);
      band = 1;
      break;
    case Policy::random:
      pick = static_cast<uint32_t>(next_random() % m);
      band = 1;
      break;
    case Policy::jsq:
      pick = least_loaded([](uint32_t) { return true; }, true, band);
      break;
    case Policy::p2c: {
      const uint32_t a = static_cast<uint32_t>(next_random() % m);
      pick = a;
      band = 1;
      if (m > 1) {
        uint32_t b = static_cast<uint32_t>(next_random() % (m - 1));
        if (b >= a) ++b;
        if (load[b] < load[a]) pick = b;
        band = 2;
      }
      break;
    }
    case Policy::domain: {
      const DomainPools& pools = table.domains;
      int32_t domain = -1;
      for (size_t d = 0; d < pools.names.size(); ++d)
        if (pools.names[d] == hints.label) domain = static_cast<int32_t>(d);
      auto pool_of = [&](uint32_t j) {
        const uint32_t c = m_slots[active[j]].cluster.load(std::memory_order_relaxed);
        return c < pools.worker_domain.size() ? pools.worker_domain[c] : -2;
      };
      // The label's own pool, else the misc pool, else every active worker.
      auto pool_has = [&](int32_t want) {
        for (uint32_t j = 0; j < m; ++j)
          if (pool_of(j) == want) return true;
        return false;
      };
      const int32_t want = domain >= 0 && pool_has(domain) ? domain : pool_has(-1) ? -1 : -3;
      if (want == -3)
        pick = least_loaded([](uint32_t) { return true; }, true, band);
      else
        pick = least_loaded([&](uint32_t j) { return pool_of(j) == want; }, true, band);
      break;
    }
  }

  Slot& chosen = m_slots[active[pick]];
  if (hints.loads.empty()) chosen.inflight.fetch_add(1, std::memory_order_relaxed);
  chosen.routed.fetch_add(1, std::memory_order_relaxed);
  m_routed.fetch_add(1, std::memory_order_relaxed);
  Decision d;
  d.worker_id = chosen.id.load(std::memory_order_relaxed);
  d.worker_index = active[pick];
  d.similarity = cs.exact(cluster[pick]);
  d.band_size = band;
  d.policy = m_options.policy;
  d.table_epoch = scoring->epoch;
  return d;
}

Result<uint32_t> Router::scores(std::span<const int16_t> counts, std::span<float> out_scores,
                                std::span<uint8_t> in_band) const {
  const std::shared_ptr<const Scoring> scoring = m_scoring.load(std::memory_order_acquire);
  ELDR_TRY(check_counts(*scoring->table, counts));
  const uint32_t n = m_slot_count.load(std::memory_order_acquire);
  if (out_scores.size() != n || in_band.size() != n)
    return Status{Errc::invalid_argument, "scores and in_band must hold worker_slots() = " +
                                              std::to_string(n) + " entries"};
  uint32_t active[kMaxSlots];
  uint32_t cluster[kMaxSlots];
  const uint32_t m = gather_active(scoring->clusters, n, {}, active, cluster, nullptr);
  std::fill(out_scores.begin(), out_scores.end(), 0.0f);
  std::fill(in_band.begin(), in_band.end(), uint8_t{0});
  if (m == 0) return 0u;
  // Every score is reported, so every score is exact: no int16 pass.
  ClusterScores cs(*scoring, counts, false);
  Band band_of(cs, cluster, m, tau_for(*scoring), m_options.min2_band);
  uint32_t band = 0;
  for (uint32_t j = 0; j < m; ++j) {
    out_scores[active[j]] = cs.exact(cluster[j]);
    in_band[active[j]] = band_of.contains(j);
    band += in_band[active[j]];
  }
  return band;
}

Result<uint32_t> Router::find_slot(int32_t worker_id) const {
  const uint32_t n = m_slot_count.load(std::memory_order_acquire);
  for (uint32_t i = 0; i < n; ++i)
    if (m_slots[i].id.load(std::memory_order_relaxed) == worker_id &&
        m_slots[i].get_state() != WorkerState::removed)
      return i;
  return Status{Errc::not_found, "no worker with id " + std::to_string(worker_id)};
}

Status Router::complete(int32_t worker_id) {
  // A removed worker may still finish requests routed before its removal:
  // take the newest slot with the id, whatever its state.
  const uint32_t n = m_slot_count.load(std::memory_order_acquire);
  for (uint32_t i = n; i-- > 0;) {
    Slot& s = m_slots[i];
    if (s.id.load(std::memory_order_relaxed) != worker_id) continue;
    int64_t cur = s.inflight.load(std::memory_order_relaxed);
    while (cur > 0 && !s.inflight.compare_exchange_weak(cur, cur - 1, std::memory_order_relaxed)) {
    }
    if (cur > 0) return Status::ok();
    m_completes_rejected.fetch_add(1, std::memory_order_relaxed);
    return {Errc::state, "worker " + std::to_string(worker_id) + " has no request in flight"};
  }
  m_completes_rejected.fetch_add(1, std::memory_order_relaxed);
  return {Errc::not_found, "no worker with id " + std::to_string(worker_id)};
}

Status Router::set_load(int32_t worker_id, uint32_t inflight) {
  auto slot = find_slot(worker_id);
  if (!slot) return slot.status();
  m_slots[*slot].inflight.store(inflight, std::memory_order_relaxed);
  return Status::ok();
}

Status Router::add_worker(int32_t worker_id, std::optional<uint32_t> cluster) {
  if (worker_id < 0) return {Errc::invalid_argument, "worker ids must be >= 0"};
  std::lock_guard lock(m_admin);
  const auto scoring = m_scoring.load();
  if (cluster && *cluster >= scoring->clusters)
    return {Errc::out_of_range, "cluster " + std::to_string(*cluster) +
                                    " does not exist (table has " +
                                    std::to_string(scoring->clusters) + ")"};
  if (auto existing = find_slot(worker_id)) {
    Slot& s = m_slots[*existing];
    if (s.get_state() == WorkerState::active)
      return {Errc::state, "worker " + std::to_string(worker_id) + " is already active"};
    if (cluster) s.cluster.store(*cluster);
    s.state.store(static_cast<uint8_t>(WorkerState::active), std::memory_order_release);
    return Status::ok();
  }
  const uint32_t n = m_slot_count.load(std::memory_order_relaxed);
  if (n >= m_options.max_workers)
    return {Errc::capacity, "all " + std::to_string(m_options.max_workers) +
                                " worker slots are used (removed workers keep theirs)"};
  uint32_t chosen = 0;
  if (cluster) {
    chosen = *cluster;
  } else {
    // A cluster nobody serves first; else the one with the most in flight per worker.
    std::vector<int64_t> inflight(scoring->clusters, 0), members(scoring->clusters, 0);
    for (uint32_t i = 0; i < n; ++i) {
      const Slot& s = m_slots[i];
      const uint32_t c = s.cluster.load();
      if (s.get_state() != WorkerState::active || c >= scoring->clusters) continue;
      inflight[c] += s.inflight.load();
      ++members[c];
    }
    double worst = -1.0;
    for (uint32_t c = 0; c < scoring->clusters; ++c) {
      const double per = members[c] ? static_cast<double>(inflight[c]) / members[c] : 1e300;
      if (per > worst) {
        worst = per;
        chosen = c;
      }
    }
  }
  Slot& s = m_slots[n];
  s.id.store(worker_id);
  s.cluster.store(chosen);
  s.inflight.store(0);
  s.routed.store(0);
  s.state.store(static_cast<uint8_t>(WorkerState::active));
  m_slot_count.store(n + 1, std::memory_order_release);
  return Status::ok();
}

Status Router::drain_worker(int32_t worker_id) {
  std::lock_guard lock(m_admin);
  auto slot = find_slot(worker_id);
  if (!slot) return slot.status();
  m_slots[*slot].state.store(static_cast<uint8_t>(WorkerState::draining),
                             std::memory_order_release);
  return Status::ok();
}

Status Router::remove_worker(int32_t worker_id) {
  std::lock_guard lock(m_admin);
  auto slot = find_slot(worker_id);
  if (!slot) return slot.status();
  m_slots[*slot].state.store(static_cast<uint8_t>(WorkerState::removed), std::memory_order_release);
  return Status::ok();
}

Status Router::swap_table(std::shared_ptr<const ClusterTable> table) {
  if (!table) return {Errc::invalid_argument, "swap_table needs a table"};
  ELDR_TRY(table->validate());
  std::lock_guard lock(m_admin);
  const auto current = m_scoring.load();
  const Geometry& a = current->table->geometry;
  const Geometry& b = table->geometry;
  if (a.layers != b.layers || a.experts != b.experts)
    return {Errc::shape_mismatch,
            "new table's geometry " + b.to_string() + " differs from " + a.to_string()};
  if (table->num_clusters() > kMaxClusters)
    return {Errc::unsupported, "at most " + std::to_string(kMaxClusters) + " clusters"};
  if (m_options.policy == Policy::domain && table->domains.empty())
    return {Errc::invalid_argument, "the domain policy needs a table with domain pools"};
  uint32_t n = m_slot_count.load(std::memory_order_relaxed);
  uint32_t missing = 0;
  for (int32_t id : table->worker_ids) missing += !find_slot(id).is_ok();
  if (n + missing > m_options.max_workers)
    return {Errc::capacity, "the new table's workers do not fit in max_workers"};
  const uint64_t epoch = m_epoch.fetch_add(1) + 1;
  auto scoring = Scoring::build(table, epoch);
  for (uint32_t i = 0; i < n; ++i) {
    Slot& s = m_slots[i];
    if (s.get_state() == WorkerState::removed) continue;
    const auto it = std::find(table->worker_ids.begin(), table->worker_ids.end(), s.id.load());
    s.cluster.store(it == table->worker_ids.end()
                        ? kNoCluster
                        : static_cast<uint32_t>(it - table->worker_ids.begin()));
  }
  for (uint32_t c = 0; c < table->num_clusters(); ++c) {
    if (find_slot(table->worker_ids[c])) continue;
    Slot& s = m_slots[n];
    s.id.store(table->worker_ids[c]);
    s.cluster.store(c);
    s.inflight.store(0);
    s.routed.store(0);
    s.state.store(static_cast<uint8_t>(WorkerState::active));
    m_slot_count.store(++n, std::memory_order_release);
  }
  m_scoring.store(std::move(scoring), std::memory_order_release);
  return Status::ok();
}

uint32_t Router::worker_slots() const noexcept {
  return m_slot_count.load(std::memory_order_acquire);
}

std::vector<WorkerInfo> Router::workers() const {
  const uint32_t n = worker_slots();
  std::vector<WorkerInfo> out(n);
  for (uint32_t i = 0; i < n; ++i) {
    const Slot& s = m_slots[i];
    out[i] = {s.id.load(), s.get_state(), s.cluster.load(), s.inflight.load(), s.routed.load()};
  }
  return out;
}

std::shared_ptr<const ClusterTable> Router::table() const { return m_scoring.load()->table; }
uint64_t Router::table_epoch() const noexcept { return m_scoring.load()->epoch; }

RouterStats Router::stats() const noexcept {
  return {m_routed.load(), m_rejected.load(), m_completes_rejected.load()};
}

}  // namespace eldr
