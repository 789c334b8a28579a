// The Router's request accounting: what happens after a decision. A request
// is recorded on its worker (in-flight count, and its footprint in the live
// batch when the policy reads batches), released by complete() or
// complete_request(), booked by callers that route elsewhere (book), and the
// engines' step reports feed the online step-cost fit. Worker membership is in
// router_workers.cpp, the decision path in router.cpp.
#include <cmath>
#include <mutex>
#include <vector>

#include "eldr/router.hpp"
#include "live_batch.hpp"
#include "router_slot.hpp"
#include "scoring.hpp"
#include "step_fit.hpp"

namespace eldr {

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
  ELDR_TRY(detail::check_counts(*scoring->table, counts));
  auto slot = find_slot(worker_id);
  if (!slot) return slot.status();
  std::lock_guard lock(m_live_mutex);
  if (m_live->tracks_footprints()) (void)m_live->demand(counts, m_live->demand_scratch());
  return record_locked(*slot, request_id);
}

CostCells Router::cost_cells() const noexcept { return m_live->layout(); }

Status Router::demand_codes(std::span<const int16_t> counts, std::span<uint8_t> codes) const {
  const std::shared_ptr<const Scoring> scoring = m_scoring.load(std::memory_order_acquire);
  ELDR_TRY(detail::check_counts(*scoring->table, counts));
  const size_t n = m_live->layout().count();
  if (codes.size() != n)
    return {Errc::invalid_argument, "codes must hold cost_cells().count() = " + std::to_string(n)};
  // demand() reads only the layout: no lock; scratch per thread.
  thread_local std::vector<float> p;
  thread_local std::vector<uint16_t> q12;
  p.resize(n);
  q12.resize(n);
  (void)m_live->demand(counts, p.data());
  detail::LiveBatches::encode(p.data(), n, q12.data(), codes.data());
  return Status::ok();
}

Status Router::book_demand(int32_t worker_id, std::span<const uint8_t> codes, uint64_t request_id) {
  const size_t n = m_live->layout().count();
  if (codes.size() != n)
    return {Errc::invalid_argument, "a booking's demand has " + std::to_string(codes.size()) +
                                        " codes, this router reads " + std::to_string(n) +
                                        " cells (same geometry and cost_cells needed)"};
  // Every byte is a code: nothing else to check.
  static_assert(kDemandCodes == 256);
  auto slot = find_slot(worker_id);
  if (!slot) return slot.status();
  std::lock_guard lock(m_live_mutex);
  return record_locked(*slot, request_id, codes.data());
}

Status Router::record_locked(uint32_t slot, std::optional<uint64_t> request_id,
                             const uint8_t* codes) {
  // The demand: the codes given, else the footprint demand() left in the
  // scratch (none when the policy keeps no batches).
  const auto joined = !m_live->tracks_footprints() ? m_live->join(slot, request_id, nullptr)
                      : codes                      ? m_live->join_codes(slot, request_id, codes)
                              : m_live->join(slot, request_id, m_live->demand_scratch());
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
  if (report.running && (!report.batch || *report.running > *report.batch))
    return {Errc::invalid_argument, "running needs a batch size and must not exceed it"};
  if (report.batch) m_slots[*slot].inflight.store(*report.batch, std::memory_order_relaxed);
  if (report.step_ms && report.batch && *report.batch > 0 && m_options.fit_step_cost &&
      m_live->tracks_footprints()) {
    std::lock_guard lock(m_live_mutex);
    // Only a step with nothing queued behind it: the step time depends on
    // the requests it ran, the router's batch footprint holds all of batch.
    const uint32_t running = report.running.value_or(*report.batch);
    if (running == *report.batch && running <= m_fit->prior().max_batch)
      m_fit->add(running, m_live->distinct(*slot) * m_live->layer_scale(), *report.step_ms);
  }
  return Status::ok();
}

StepCost Router::step_cost() const {
  std::lock_guard lock(m_live_mutex);
  return m_fit->current();
}

}  // namespace eldr
