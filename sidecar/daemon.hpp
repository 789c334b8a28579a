// eldrd's core without the process plumbing: the segment (shm::Host), the
// routing service, metrics and the optional refit thread, driven by one
// consumer loop. eldrd_main.cpp adds config, signals and systemd around it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "config.hpp"
#include "eldr/shm.hpp"
#include "metrics.hpp"
#include "pool_node.hpp"
#include "predictor_saver.hpp"
#include "service.hpp"

namespace eldr::sidecar {

class Daemon {
 public:
  static Result<std::unique_ptr<Daemon>> create(const DaemonConfig& config,
                                                std::shared_ptr<const ClusterTable> table);
  // Stops refit and metrics, saves what the predictor learned
  // ([predictor] save_on_exit), then removes the segment (Host).
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // The consumer loop, until `stop`. Idle back-off: spin with pause, yield,
  // sleep 1 us doubling to 1 ms, then block on the clients' doorbell.
  // `tick` runs after each maintenance pass (~100 ms): the watchdog ping.
  void run(const std::atomic<bool>& stop, const std::function<void()>& tick = {});

  // Reload the configured table file (any thread; routing continues).
  Status reload();

  shm::Host& host() noexcept { return *m_host; }
  Service& service() noexcept { return *m_service; }
  Metrics& metrics() noexcept { return m_metrics; }
  // Saves the table with what its predictor learned ([predictor]).
  PredictorSaver& predictor_saver() noexcept { return *m_saver; }
  // In a pool ([pool]): this node; nullptr otherwise.
  PoolNode* pool_node() noexcept { return m_pool.get(); }
  uint16_t metrics_port() const noexcept;

 private:
  struct HostSink final : DecisionSink {
    shm::Host* host = nullptr;
    Metrics* metrics = nullptr;
    void publish(std::string_view request_id, const shm::DecisionIn& decision) override {
      if (const std::optional<uint64_t> evicted_age = host->publish(request_id, decision))
        metrics->observe_decision_evicted(*evicted_age);
    }
  };
  explicit Daemon(const DaemonConfig& config);
  void maintain();
  void refit_loop();

  DaemonConfig m_config;
  Metrics m_metrics;
  HostSink m_sink;
  std::unique_ptr<shm::Host> m_host;
  std::unique_ptr<Service> m_service;
  std::unique_ptr<PoolNode> m_pool;         // uses *m_service and *m_host: after them
  std::unique_ptr<PredictorSaver> m_saver;  // uses *m_service
  std::unique_ptr<MetricsServer> m_metrics_server;
  uint64_t m_reclaims = 0;  // client slots reclaimed since start
  std::thread m_refit_thread;
  std::mutex m_refit_mutex;
  std::condition_variable m_refit_cv;
  bool m_refit_stop = false;
};

}  // namespace eldr::sidecar
