// The Router's worker membership: finding a worker's slot, adding, draining
// and removing workers, overriding a worker's load, swapping in a new cluster
// table (which re-maps every slot to its cluster and adds the table's new
// workers), and the per-worker snapshot workers(). Slots are never freed: a
// removed worker keeps its slot so late completions still find it. The
// decision path is in router.cpp, request accounting in router_requests.cpp.
#include <algorithm>
#include <mutex>
#include <vector>

#include "eldr/router.hpp"
#include "live_batch.hpp"
#include "router_slot.hpp"
#include "scoring.hpp"
#include "step_fit.hpp"

namespace eldr {

Result<uint32_t> Router::find_slot(int32_t worker_id) const {
  const uint32_t n = m_slot_count.load(std::memory_order_acquire);
  for (uint32_t i = 0; i < n; ++i)
    if (m_slots[i].id.load(std::memory_order_relaxed) == worker_id &&
        m_slots[i].get_state() != WorkerState::removed)
      return i;
  return Status{Errc::not_found, "no worker with id " + std::to_string(worker_id)};
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

}  // namespace eldr
