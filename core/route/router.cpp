#include "eldr/router.hpp"

#include <algorithm>
#include <cmath>

#include "band.hpp"
#include "eldr/footprint.hpp"
#include "eldr/random.hpp"
#include "live_batch.hpp"
#include "policies/policies.hpp"
#include "scoring.hpp"
#include "step_fit.hpp"

namespace eldr {

using detail::ClusterScores;
using detail::kMaxSlots;

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

}  // namespace

Result<Decision> Router::route(std::span<const int16_t> counts, const RouteHints& hints) {
  const std::shared_ptr<const Scoring> scoring = m_scoring.load(std::memory_order_acquire);
  const ClusterTable& table = *scoring->table;
  if (Status s = check_counts(table, counts); !s) {
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
  const uint32_t m = gather_active(scoring->clusters, n, hints.loads, active, cluster, load);
  if (m == 0) {
    m_rejected.fetch_add(1, std::memory_order_relaxed);
    return Status{Errc::no_worker, "no active worker to route to"};
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
  detail::Band band_of(cs, cluster, m, tau_for(*scoring), m_options.min2_band);
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

namespace {

// One request less in flight, never below zero; whether there was one.
bool release_one(std::atomic<int64_t>& inflight) noexcept {
  int64_t cur = inflight.load(std::memory_order_relaxed);
  while (cur > 0 && !inflight.compare_exchange_weak(cur, cur - 1, std::memory_order_relaxed)) {
  }
  return cur > 0;
}

}  // namespace

Status Router::complete_request(uint64_t request_id) {
  std::lock_guard lock(m_live_mutex);
  auto slot = m_live->leave_id(request_id);
  if (!slot) {
    m_completes_rejected.fetch_add(1, std::memory_order_relaxed);
    m_completes_unknown.fetch_add(1, std::memory_order_relaxed);
    return slot.status();
  }
  (void)release_one(m_slots[*slot].inflight);
  return Status::ok();
}

Status Router::book(int32_t worker_id, std::span<const int16_t> counts, uint64_t request_id) {
  const std::shared_ptr<const Scoring> scoring = m_scoring.load(std::memory_order_acquire);
  ELDR_TRY(check_counts(*scoring->table, counts));
  auto slot = find_slot(worker_id);
  if (!slot) return slot.status();
  std::lock_guard lock(m_live_mutex);
  if (m_live->tracks_footprints()) (void)m_live->demand(counts, m_live->demand_scratch());
  return record_locked(*slot, request_id);
}

Status Router::record_locked(uint32_t slot, std::optional<uint64_t> request_id) {
  const auto joined = m_live->join(
      slot, request_id, m_live->tracks_footprints() ? m_live->demand_scratch() : nullptr);
  if (joined == detail::LiveBatches::Join::duplicate)
    return {Errc::state, "request " + std::to_string(*request_id) + " is already in flight"};
  // Join::untracked: counted all the same; untracked() counts it.
  m_slots[slot].inflight.fetch_add(1, std::memory_order_relaxed);
  return Status::ok();
}

Status Router::complete(int32_t worker_id) {
  // A removed worker may still finish requests routed before its removal:
  // take the newest slot with the id, whatever its state.
  const uint32_t n = m_slot_count.load(std::memory_order_acquire);
  for (uint32_t i = n; i-- > 0;) {
    Slot& s = m_slots[i];
    if (s.id.load(std::memory_order_relaxed) != worker_id) continue;
    std::lock_guard lock(m_live_mutex);
    const bool had_record = m_live->leave_oldest(i);
    if (release_one(s.inflight) || had_record) return Status::ok();
    m_completes_rejected.fetch_add(1, std::memory_order_relaxed);
    return {Errc::state, "worker " + std::to_string(worker_id) + " has no request in flight"};
  }
  m_completes_rejected.fetch_add(1, std::memory_order_relaxed);
  return {Errc::not_found, "no worker with id " + std::to_string(worker_id)};
}

Status Router::report(int32_t worker_id, const WorkerReport& report) {
  auto slot = find_slot(worker_id);
  if (!slot) return slot.status();
  if (report.step_ms && !(std::isfinite(*report.step_ms) && *report.step_ms > 0.0))
    return {Errc::invalid_argument, "step_ms must be finite and > 0"};
  if (report.batch) m_slots[*slot].inflight.store(*report.batch, std::memory_order_relaxed);
  if (report.step_ms && report.batch && *report.batch > 0 && m_options.fit_step_cost &&
      m_live->tracks_footprints()) {
    std::lock_guard lock(m_live_mutex);
    m_fit->add(*report.batch, m_live->distinct(*slot) * m_live->layer_scale(), *report.step_ms);
  }
  return Status::ok();
}

StepCost Router::step_cost() const {
  std::lock_guard lock(m_live_mutex);
  return m_fit->current();
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
  return swap_table(std::move(table), std::nullopt);
}

Status Router::swap_table(std::shared_ptr<const ClusterTable> table,
                          std::optional<uint64_t> epoch_wanted) {
  if (!table) return {Errc::invalid_argument, "swap_table needs a table"};
  ELDR_TRY(table->validate());
  std::lock_guard lock(m_admin);
  if (epoch_wanted && *epoch_wanted <= m_epoch.load())
    return {Errc::state, "table epoch " + std::to_string(*epoch_wanted) +
                             " is not above the current " + std::to_string(m_epoch.load())};
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
  // Under m_admin: nothing else moves the epoch between the check and here.
  const uint64_t epoch = epoch_wanted ? *epoch_wanted : m_epoch.load() + 1;
  m_epoch.store(epoch);
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
  // A table that carries measured step constants replaces them, unless the
  // caller fixed its own (the fit starts again from the new ones).
  if (!m_options.step_cost && table->step_cost) {
    std::lock_guard live(m_live_mutex);
    if (m_fit->prior() != *table->step_cost)
      m_fit = std::make_unique<detail::StepFit>(*table->step_cost);
  }
  return Status::ok();
}

uint32_t Router::worker_slots() const noexcept {
  return m_slot_count.load(std::memory_order_acquire);
}

std::vector<WorkerInfo> Router::workers() const {
  const uint32_t n = worker_slots();
  std::vector<WorkerInfo> out(n);
  std::lock_guard lock(m_live_mutex);
  for (uint32_t i = 0; i < n; ++i) {
    const Slot& s = m_slots[i];
    out[i] = {s.id.load(),
              s.get_state(),
              s.cluster.load(),
              s.inflight.load(),
              s.routed.load(),
              m_live->requests(i),
              m_live->distinct(i) * m_live->layer_scale()};
  }
  return out;
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
  return st;
}

}  // namespace eldr
