#include "worker_health.hpp"

#include "log.hpp"

namespace eldr::sidecar {

WorkerHealth::WorkerHealth(Router& router, Metrics& metrics, uint32_t report_timeout_ms)
    : m_router(router), m_metrics(metrics), m_timeout_ns(uint64_t{report_timeout_ms} * 1000000u) {}

const WorkerHealth::Entry* WorkerHealth::find(int32_t worker) const {
  const auto it = m_workers.find(worker);
  return it == m_workers.end() ? nullptr : &it->second;
}

void WorkerHealth::apply_routing_state(int32_t worker, const Entry& entry) {
  const bool routable = !entry.stale && !entry.admin_drained;
  Status s = routable ? m_router.add_worker(worker) : m_router.drain_worker(worker);
  if (!s && s.code() != Errc::state)  // state: already active
    ELDR_LOG(warn, "worker %d: %s", worker, s.to_string().c_str());
}

void WorkerHealth::on_report(int32_t worker, uint32_t running, float kv_usage, uint64_t now_ns) {
  Entry& h = m_workers[worker];
  h.last_report_ns = now_ns;
  h.running = running;
  h.kv_usage = kv_usage;
  h.reported = true;
  if (h.stale) {
    h.stale = false;
    ELDR_LOG(info, "worker %d reports again%s", worker,
             h.admin_drained ? " (stays drained by the admin)" : ": back in routing");
    apply_routing_state(worker, h);
  }
}

void WorkerHealth::expire(uint64_t now_ns) {
  if (m_timeout_ns == 0) return;
  for (auto& [worker, h] : m_workers) {
    if (!h.reported || h.stale || now_ns - h.last_report_ns <= m_timeout_ns) continue;
    h.stale = true;
    m_metrics.count_stale_transition();
    ELDR_LOG(warn, "worker %d: no load report for %llu ms, taken out of routing", worker,
             static_cast<unsigned long long>((now_ns - h.last_report_ns) / 1000000u));
    apply_routing_state(worker, h);
  }
}

void WorkerHealth::on_control(int32_t worker, shm::WorkerOp op) {
  switch (op) {
    case shm::WorkerOp::add:
      add(worker);
      return;
    case shm::WorkerOp::drain:
      drain(worker);
      return;
    case shm::WorkerOp::remove:
      remove(worker);
      return;
  }
  ELDR_LOG(warn, "worker control with unknown op %u ignored", static_cast<unsigned>(op));
}

void WorkerHealth::add(int32_t worker) {
  Entry& h = m_workers[worker];
  h.admin_drained = false;
  if (h.stale) {
    ELDR_LOG(info, "worker %d added; it rejoins routing on its next report", worker);
    return;
  }
  Status s = m_router.add_worker(worker);
  if (!s && s.code() != Errc::state) {
    ELDR_LOG(warn, "add worker %d: %s", worker, s.to_string().c_str());
    if (!h.reported) m_workers.erase(worker);  // nothing to remember about it
    return;
  }
  ELDR_LOG(info, "worker %d added", worker);
}

void WorkerHealth::drain(int32_t worker) {
  if (Status s = m_router.drain_worker(worker); !s) {
    ELDR_LOG(warn, "drain worker %d: %s", worker, s.to_string().c_str());
    return;
  }
  m_workers[worker].admin_drained = true;
  ELDR_LOG(info, "worker %d drained", worker);
}

void WorkerHealth::remove(int32_t worker) {
  if (Status s = m_router.remove_worker(worker); !s) {
    ELDR_LOG(warn, "remove worker %d: %s", worker, s.to_string().c_str());
    return;
  }
  m_workers.erase(worker);
  ELDR_LOG(info, "worker %d removed", worker);
}

}  // namespace eldr::sidecar
