// Worker health from load reports: a worker whose reports stop for longer than
// the timeout is drained out of routing (stale) and re-added on its next
// report. An admin drain (a control record) is tracked apart, so a report
// never undoes it: only a control add does. Consumer thread only.
#pragma once

#include <cstdint>
#include <unordered_map>

#include "eldr/router.hpp"
#include "eldr/shm.hpp"
#include "metrics.hpp"

namespace eldr::sidecar {

class WorkerHealth {
 public:
  struct Entry {
    uint64_t last_report_ns = 0;
    uint32_t running = 0;
    float kv_usage = 0.0f;
    bool reported = false;
    bool stale = false;          // reports stopped: drained by us, re-added on the next report
    bool admin_drained = false;  // drained by a control record: only a control add undoes it
  };

  // report_timeout_ms 0: reports never expire. `router` and `metrics` must
  // outlive this.
  WorkerHealth(Router& router, Metrics& metrics, uint32_t report_timeout_ms);

  // A load report of a worker the router knows (the caller has set its load):
  // a stale worker rejoins routing unless the admin drained it.
  void on_report(int32_t worker, uint32_t running, float kv_usage, uint64_t now_ns);
  // A worker control record, applied to the router.
  void on_control(int32_t worker, shm::WorkerOp op);
  // Takes the workers whose reports stopped out of routing (each counted once).
  void expire(uint64_t now_ns);

  // nullptr for a worker that never reported and was never controlled.
  const Entry* find(int32_t worker) const;

 private:
  void add(int32_t worker);
  void drain(int32_t worker);
  void remove(int32_t worker);
  void apply_routing_state(int32_t worker, const Entry& entry);

  Router& m_router;
  Metrics& m_metrics;
  uint64_t m_timeout_ns;
  std::unordered_map<int32_t, Entry> m_workers;
};

}  // namespace eldr::sidecar
