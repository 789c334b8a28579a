#include "eldr/router.hpp"

#include <algorithm>
#include <cmath>

#include "band.hpp"
#include "eldr/random.hpp"
#include "live_batch.hpp"
#include "policies/policies.hpp"
#include "prompt_memory.hpp"
#include "router_slot.hpp"
#include "scoring.hpp"
#include "step_fit.hpp"

namespace eldr {

using detail::ClusterScores;
using detail::kMaxSlots;

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
  if (options.cost_cells == 0 || options.cost_cells > 65536)
    return Status{Errc::invalid_argument, "cost_cells must be in [1, 65536]"};
  // Step constants: the caller's, the table's, the preset of its geometry.
  StepCost cost;
  if (options.step_cost)
    cost = *options.step_cost;
  else if (table->step_cost)
    cost = *table->step_cost;
  else if (auto preset = step_model_for(table->geometry))
    cost = preset->cost;
  ELDR_TRY(cost.validate());
  auto live =
      detail::LiveBatches::create(table->geometry, options.max_workers, options.max_inflight,
                                  options.cost_cells, detail::reads_batches(options.policy));
  if (!live) return live.status();
  std::unique_ptr<Router> r(new Router(options));
  r->m_live = std::move(*live);
  r->m_fit = std::make_unique<detail::StepFit>(cost);
  r->m_prompts = std::make_unique<detail::PromptMemory>(options.max_inflight);
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

float Router::tau_for(const Scoring& scoring) const noexcept {
  return m_options.tau >= 0.0f ? m_options.tau : scoring.table->default_tau;
}

float Router::tau() const noexcept { return tau_for(*m_scoring.load()); }

uint32_t Router::gather_active(uint32_t clusters, uint32_t n, std::span<const uint32_t> loads,
                               std::span<const int32_t> among, uint32_t* active, uint32_t* cluster,
                               int64_t* load) const noexcept {
  uint32_t m = 0;
  for (uint32_t i = 0; i < n; ++i) {
    const Slot& s = m_slots[i];
    if (s.get_state() != WorkerState::active) continue;
    if (!among.empty() &&
        std::find(among.begin(), among.end(), s.id.load(std::memory_order_relaxed)) == among.end())
      continue;
    const uint32_t c = s.cluster.load(std::memory_order_relaxed);
    active[m] = i;
    cluster[m] = c < clusters ? c : kNoCluster;
    if (load) load[m] = loads.empty() ? s.inflight.load(std::memory_order_relaxed) : loads[i];
    ++m;
  }
  return m;
}

Result<Decision> Router::route(std::span<const int16_t> counts, const RouteHints& hints) {
  const std::shared_ptr<const Scoring> scoring = m_scoring.load(std::memory_order_acquire);
  const ClusterTable& table = *scoring->table;
  if (Status s = detail::check_counts(table, counts); !s) {
    m_rejected.fetch_add(1, std::memory_order_relaxed);
    return s;
  }
  const uint32_t n = m_slot_count.load(std::memory_order_acquire);
  if (!hints.loads.empty() && hints.request_id) {
    m_rejected.fetch_add(1, std::memory_order_relaxed);
    return Status{Errc::invalid_argument,
                  "a request id needs the router's own accounting (route without loads)"};
  }
  if (!hints.loads.empty() && hints.loads.size() != n) {
    m_rejected.fetch_add(1, std::memory_order_relaxed);
    return Status{Errc::invalid_argument, "loads has " + std::to_string(hints.loads.size()) +
                                              " entries, the router has " + std::to_string(n) +
                                              " worker slots"};
  }

  // Gather: the active slots with their cluster and load, once per decision.
  uint32_t active[kMaxSlots];
  uint32_t cluster[kMaxSlots];
  int64_t load[kMaxSlots];
  const uint32_t m =
      gather_active(scoring->clusters, n, hints.loads, hints.workers, active, cluster, load);
  if (m == 0) {
    m_rejected.fetch_add(1, std::memory_order_relaxed);
    return Status{Errc::no_worker, hints.workers.empty() ? "no active worker to route to"
                                                         : "none of the given workers is active"};
  }

  // Score: only the policies that compare scores before the pick bound them
  // all with the int16 pass; the others score the picked worker alone, for
  // the decision's similarity.
  ClusterScores cs(*scoring, counts, detail::reads_scores(m_options.policy));

  // Pick, then account: the in-flight count and the request's record (with
  // its footprint in the worker's batch, for eldr_cost). eldr_cost reads
  // the batches, so its pick and the record change happen under one lock.
  const detail::Candidates candidates{m, active, cluster, load};
  detail::PickContext ctx{m_options,         table,       cs,
                          tau_for(*scoring), hints.label, {m_options.seed, &m_rng_counter},
                          m_rr_cursor};
  const bool record = hints.loads.empty();
  std::unique_lock live_lock(m_live_mutex, std::defer_lock);
  detail::Pick picked;
  if (detail::reads_batches(m_options.policy)) {
    live_lock.lock();
    detail::CostInputs in;
    in.live = m_live.get();
    in.demand = m_live->demand_scratch();
    in.demand_total = m_live->demand(counts, m_live->demand_scratch());
    in.cost = m_fit->current();
    ctx.cost = &in;
    picked = detail::pick(m_options.policy, candidates, ctx);
  } else {
    picked = detail::pick(m_options.policy, candidates, ctx);
    if (record) live_lock.lock();
  }
  const uint32_t pick = picked.candidate;
  Slot& chosen = m_slots[active[pick]];
  if (record) {
    if (Status s = record_locked(active[pick], hints.request_id); !s) {
      live_lock.unlock();
      m_rejected.fetch_add(1, std::memory_order_relaxed);
      return s;
    }
  }
  if (live_lock.owns_lock()) live_lock.unlock();
  chosen.routed.fetch_add(1, std::memory_order_relaxed);
  m_routed.fetch_add(1, std::memory_order_relaxed);
  Decision d;
  d.worker_id = chosen.id.load(std::memory_order_relaxed);
  d.worker_index = active[pick];
  d.similarity = cs.exact(cluster[pick]);
  d.band_size = picked.band;
  d.policy = m_options.policy;
  d.table_epoch = scoring->epoch;
  return d;
}

Result<uint32_t> Router::scores(std::span<const int16_t> counts, std::span<float> out_scores,
                                std::span<uint8_t> in_band) const {
  const std::shared_ptr<const Scoring> scoring = m_scoring.load(std::memory_order_acquire);
  ELDR_TRY(detail::check_counts(*scoring->table, counts));
  const uint32_t n = m_slot_count.load(std::memory_order_acquire);
  if (out_scores.size() != n || in_band.size() != n)
    return Status{Errc::invalid_argument, "scores and in_band must hold worker_slots() = " +
                                              std::to_string(n) + " entries"};
  uint32_t active[kMaxSlots];
  uint32_t cluster[kMaxSlots];
  const uint32_t m = gather_active(scoring->clusters, n, {}, {}, active, cluster, nullptr);
  std::fill(out_scores.begin(), out_scores.end(), 0.0f);
  std::fill(in_band.begin(), in_band.end(), uint8_t{0});
  if (m == 0) return 0u;
  // Every score is reported, so every score is exact: no int16 pass.
  ClusterScores cs(*scoring, counts, false);
  detail::Band band_of(cs, cluster, m, tau_for(*scoring), m_options.min2_band);
  uint32_t band = 0;
  for (uint32_t j = 0; j < m; ++j) {
    out_scores[active[j]] = cs.exact(cluster[j]);
    in_band[active[j]] = band_of.contains(j);
    band += in_band[active[j]];
  }
  return band;
}

std::shared_ptr<const ClusterTable> Router::table() const { return m_scoring.load()->table; }
uint64_t Router::table_epoch() const noexcept { return m_scoring.load()->epoch; }

RouterStats Router::stats() const {
  RouterStats st;
  st.routed = m_routed.load();
  st.rejected = m_rejected.load();
  st.completes_rejected = m_completes_rejected.load();
  st.completes_unknown = m_completes_unknown.load();
  std::lock_guard lock(m_live_mutex);
  st.untracked = m_live->untracked();
  st.step_samples = m_fit->samples();
  st.prompts_routed = m_prompts_routed.load();
  st.prompts_rejected = m_prompts_rejected.load();
  st.learned = m_learned.load();
  st.learn_rejected = m_learn_rejected.load();
  std::lock_guard prompts(m_prompt_mutex);
  st.prompts_dropped = m_prompts->dropped();
  return st;
}

}  // namespace eldr
