// The worker side of the Service: load reports (an engine's through the
// ring, and the ones other nodes of the pool heard, applied alike to the
// router's load or step fit and to worker health), admin worker control
// (drain, add, remove), and the maintenance tick that expires silent workers
// and turns the router's workers into the segment's rows and the metrics'
// gauges. service.cpp holds the footprint and complete paths and the tables.
#include <algorithm>
#include <cmath>
#include <unordered_map>
#include <vector>

#include "log.hpp"
#include "service.hpp"

namespace eldr::sidecar {

// ---- reports and control ----------------------------------------------------------

void Service::on_worker_report(uint32_t client, uint32_t worker, uint32_t running, float kv_usage) {
  on_worker_report_ex(client, {worker, running, kv_usage, 0, 0.0f});
}

void Service::on_worker_report_ex(uint32_t /*client*/, const shm::WorkerReportRecord& r) {
  const auto worker = static_cast<int32_t>(r.worker);
  apply_report(worker, r.running, r.kv_usage, r.batch_size, r.step_ms);
  // Every node of the pool hears the engine (a worker is any node's).
  if (m_publisher && worker >= 0)
    m_publisher->reported({worker, r.running, r.kv_usage, r.batch_size, r.step_ms});
}

void Service::apply_peer_load(const PeerLoad& l) {
  apply_report(l.worker, l.running, l.kv_usage, l.batch_size, l.step_ms);
}

void Service::apply_report(int32_t worker, uint32_t running, float kv_usage, uint32_t batch_size,
                           float step_ms) {
  // batch_size and step_ms 0 = not reported. A step time needs its batch
  // size, and more than 10 s is no decode step: such values are dropped
  // (the rest of the report applies) and counted.
  WorkerReport report;
  if (batch_size != 0) report.batch = batch_size;
  if (step_ms != 0.0f) {
    if (!report.batch || !std::isfinite(step_ms) || step_ms < 0.0f || step_ms > kMaxStepMs)
      m_metrics.count_report_bad_value();
    else
      report.step_ms = step_ms;
  }
  // The engine's batch size takes precedence over its running count.
  Status s = worker < 0                 ? Status{Errc::not_found, "worker id out of range"}
             : report.batch.has_value() ? m_router->report(worker, report)
                                        : m_router->set_load(worker, running);
  if (!s) {
    if (s.code() == Errc::not_found) {
      m_metrics.count_report_unknown_worker();
      return;
    }
    m_metrics.count_report_bad_value();  // invalid_argument: nothing applied
    return;
  }
  m_health.on_report(worker, running, kv_usage, m_clock());
}

void Service::on_worker_control(uint32_t /*client*/, uint32_t worker_u, shm::WorkerOp op) {
  const auto worker = static_cast<int32_t>(worker_u);
  if (worker < 0) {
    ELDR_LOG(warn, "worker control for id %u ignored: ids must be < 2^31", worker_u);
    return;
  }
  m_health.on_control(worker, op);
}

// ---- maintenance ------------------------------------------------------------------

std::vector<shm::Host::WorkerRow> Service::maintain() {
  m_health.expire(m_clock());
  // Routing releases due twins before each pick; this releases them when
  // no request comes (so the counts shown settle).
  m_twins.release_due(*m_router, static_cast<double>(m_clock()) / 1e6);
  const auto workers = m_router->workers();
  // This node's requests per worker (inflight_local), counted from the
  // request map here rather than kept up to date on every route and release.
  std::unordered_map<int32_t, uint32_t> local;
  m_requests.for_each([&](const RequestMap::Held& h) { ++local[h.worker]; });
  std::vector<shm::Host::WorkerRow> rows;
  std::vector<WorkerGauge> gauges;
  rows.reserve(workers.size());
  gauges.reserve(workers.size());
  for (uint32_t slot = 0; slot < workers.size(); ++slot) {
    const WorkerInfo& w = workers[slot];
    const WorkerHealth::Entry* health = m_health.find(w.id);
    const bool healthy = health == nullptr || !health->stale;
    shm::Host::WorkerRow row;
    row.worker = w.id;
    row.state = static_cast<uint8_t>(w.state);
    row.healthy = healthy ? 1 : 0;
    row.inflight = static_cast<uint32_t>(std::max<int64_t>(w.inflight, 0));
    row.routed = w.routed;
    row.batch_experts = static_cast<float>(w.batch_experts);
    if (auto it = local.find(w.id); it != local.end()) row.inflight_local = it->second;
    if (health != nullptr) {
      row.running = health->running;
      row.kv_usage = health->kv_usage;
    }
    rows.push_back(row);
    gauges.push_back({slot, w.id, w.state, healthy, w.inflight, w.batch_experts});
  }
  m_metrics.set_workers(std::move(gauges));
  const RouterStats st = m_router->stats();
  const StepCost cost = m_router->step_cost();
  m_router_row = {static_cast<uint32_t>(m_router->options().policy),
                  cost.t0_ms,
                  cost.tseq_ms,
                  cost.alpha_us,
                  cost.max_batch,
                  st.step_samples,
                  m_metrics.complete_unknown(),
                  st.untracked,
                  m_metrics.complete_refused()};
  PredictorGauge predictor;
  if (const auto table = m_router->table(); table->predictor) {
    predictor.present = true;
    predictor.info = table->predictor->info();
    m_router_row.predictor_prototypes = predictor.info.prototypes;
    m_router_row.predictor_kinds = predictor.info.kinds;
    m_router_row.predictor_learned = predictor.info.learned;
  }
  m_metrics.set_predictor(predictor);
  m_metrics.set_router(
      {m_router->options().policy, cost, st.step_samples, st.untracked, st.completes_unknown});
  m_metrics.set_table_epoch(m_router->table_epoch());
  return rows;
}

}  // namespace eldr::sidecar
