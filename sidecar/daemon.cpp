#include "daemon.hpp"

#include <sched.h>
#include <time.h>

#include <algorithm>
#include <chrono>

#include "eldr/internal/cpu_relax.hpp"
#include "log.hpp"

namespace eldr::sidecar {

namespace {

constexpr uint64_t kMaintainPeriodNs = 100'000'000;  // heartbeat, reaping, gauges
// One PAUSE per empty poll while spinning: it takes ~30 ns on this Zen 3
// guest, so the 16 per poll of earlier builds kept a record waiting 0.24 us
// on average before the daemon looked. ~2,000 polls spin ~0.2 ms.
constexpr uint32_t kSpinRounds = 2000;
constexpr uint32_t kYieldRounds = 200;
constexpr uint32_t kMaxSleepUs = 1000;
constexpr auto kDoorbellWait = std::chrono::microseconds(10'000);

// Idle back-off, one step per empty poll; `idle` counts the empty polls.
void back_off(uint32_t idle, shm::Host& host) {
  if (idle < kSpinRounds) {
    cpu_relax();
  } else if (idle < kSpinRounds + kYieldRounds) {
    sched_yield();
  } else {
    const uint32_t step = idle - kSpinRounds - kYieldRounds;  // 1, 2, 4 ... 1024 us
    if (step <= 10) {
      const uint32_t us = std::min<uint32_t>(1u << step, kMaxSleepUs);
      const timespec ts{0, static_cast<long>(us) * 1000};
      nanosleep(&ts, nullptr);
    } else {
      host.wait_for_work(kDoorbellWait);
    }
  }
}

}  // namespace

Daemon::Daemon(const DaemonConfig& config) : m_config(config), m_metrics(config.max_workers) {}

Result<std::unique_ptr<Daemon>> Daemon::create(const DaemonConfig& config,
                                               std::shared_ptr<const ClusterTable> table) {
  ELDR_TRY(config.validate());
  std::unique_ptr<Daemon> d(new Daemon(config));
  auto host = shm::Host::create(config.segment());
  if (!host) return host.status();
  d->m_host = std::move(*host);
  d->m_sink.host = d->m_host.get();
  d->m_sink.metrics = &d->m_metrics;
  auto service =
      Service::create(std::move(table), ServiceOptions::from(config), d->m_sink, d->m_metrics);
  if (!service) return service.status();
  d->m_service = std::move(*service);
  if (config.pool.enabled()) {
    auto node = PoolNode::create(
        config.pool, *d->m_service, d->m_metrics, [h = d->m_host.get()] { h->wake(); },
        config.refit.enabled ? &config.refit : nullptr);
    if (!node) return node.status();
    d->m_pool = std::move(*node);
  }
  if (config.metrics_port != 0) {
    auto server = MetricsServer::start(d->m_metrics, static_cast<uint16_t>(config.metrics_port));
    if (!server) return server.status();
    d->m_metrics_server = std::move(*server);
  }
  d->m_saver = std::make_unique<PredictorSaver>(config, *d->m_service, d->m_metrics);
  d->maintain();  // workers and epoch visible to `eldr status` from the start
  if (config.refit.enabled) d->m_refit_thread = std::thread([p = d.get()] { p->refit_loop(); });
  return d;
}

Daemon::~Daemon() {
  {
    std::lock_guard lock(m_refit_mutex);
    m_refit_stop = true;
  }
  m_refit_cv.notify_all();
  if (m_refit_thread.joinable()) m_refit_thread.join();
  m_metrics_server.reset();
  // The consumer loop has stopped: nothing learns any more.
  if (m_saver) m_saver->stop_and_save();
  m_saver.reset();
  m_pool.reset();
  m_service.reset();
  m_host.reset();
}

uint16_t Daemon::metrics_port() const noexcept {
  return m_metrics_server ? m_metrics_server->port() : 0;
}

void Daemon::maintain() {
  // Logged for the 1st..8th reclaim, then at each power of two: a client that
  // keeps breaking the protocol and re-registering must not flood the log.
  for (uint32_t slot : m_host->maintain()) {
    ++m_reclaims;
    if (m_reclaims <= 8 || (m_reclaims & (m_reclaims - 1)) == 0)
      ELDR_LOG(
          info,
          "client slot %u is gone (closed, exited or quarantined): ring reclaimed [%llu so far]",
          slot, static_cast<unsigned long long>(m_reclaims));
  }
  if (m_pool) m_host->publish_pool_status(m_pool->maintain());
  const auto rows = m_service->maintain();
  m_host->publish_workers(rows, m_service->table_epoch(), m_service->router_row());
  m_metrics.set_clients(m_host->clients());
  m_metrics.set_transport(m_host->counters());
}

void Daemon::run(const std::atomic<bool>& stop, const std::function<void()>& tick) {
  uint32_t idle = 0;
  uint64_t next_maintain = monotonic_ns() + kMaintainPeriodNs;
  while (!stop.load(std::memory_order_relaxed)) {
    // Only ring records reset the idle back-off: the peers' messages come
    // with a wake-up of their own (Host::wake), and spinning after each
    // would burn a core per node for every message the pool sends.
    if (m_pool) (void)m_pool->drain();
    if (m_host->poll(*m_service) != 0) {
      idle = 0;
    } else {
      back_off(idle, *m_host);
      if (idle < UINT32_MAX) ++idle;
    }
    const uint64_t now = monotonic_ns();
    if (now >= next_maintain) {
      maintain();
      if (tick) tick();
      next_maintain = now + kMaintainPeriodNs;
    }
  }
  // Answer what was already committed before we go (bounded: producers that
  // keep pushing must not hold the shutdown up).
  for (int round = 0; round < 64 && m_host->poll(*m_service) != 0; ++round) {
  }
}

Status Daemon::reload() {
  // In a pool that has a table, the pool's is the one: a local file would
  // make this node route differently from the others.
  if (m_pool && m_pool->table_revision() != 0) {
    ELDR_LOG(warn,
             "reload refused: this node routes with the pool's table (revision %llu); "
             "publish a new one with eldr table publish",
             static_cast<unsigned long long>(m_pool->table_revision()));
    return {Errc::state, "this node routes with the pool's table (revision " +
                             std::to_string(m_pool->table_revision()) +
                             "): publish with eldr table publish"};
  }
  if (m_config.table.empty()) {
    ELDR_LOG(warn, "reload: no table file configured (running on a synthetic table)");
    return {Errc::state, "no table file configured (running on a synthetic table)"};
  }
  const uint64_t before = m_service->table_epoch();
  Status s = m_service->reload(m_config.table);
  // The file just read is the one saves may overwrite again.
  if (s && m_saver) m_saver->adopt_file();
  if (s)
    ELDR_LOG(info, "reloaded %s: table epoch %llu -> %llu", m_config.table.c_str(),
             static_cast<unsigned long long>(before),
             static_cast<unsigned long long>(m_service->table_epoch()));
  else
    ELDR_LOG(error, "reload of %s failed, the old table keeps routing: %s", m_config.table.c_str(),
             s.to_string().c_str());
  return s;
}

void Daemon::refit_loop() {
  const auto period = std::chrono::seconds(m_config.refit.period_s);
  std::unique_lock lock(m_refit_mutex);
  while (!m_refit_cv.wait_for(lock, period, [this] { return m_refit_stop; })) {
    lock.unlock();
    // In a pool one node refits, the refit lease's holder, and publishes the
    // table for every node (its window holds the peers' booked footprints too).
    if (m_pool && !m_pool->holds_refit_lease()) {
      ELDR_LOG(debug, "online refit skipped: another node of the pool holds the refit lease");
      lock.lock();
      continue;
    }
    const uint64_t before = m_service->table_epoch();
    OnlineRefit::Install install;
    if (m_pool)
      install = [c = m_pool.get()](std::shared_ptr<const ClusterTable> t) {
        return c->publish_table(std::move(t));
      };
    Status s = m_service->refit_now(install);
    if (s)
      ELDR_LOG(info, "online refit on %llu footprints: table epoch %llu -> %llu",
               static_cast<unsigned long long>(
                   std::min<uint64_t>(m_service->samples_seen(), m_config.refit.window)),
               static_cast<unsigned long long>(before),
               static_cast<unsigned long long>(m_service->table_epoch()));
    else if (s.code() == Errc::state)
      ELDR_LOG(debug, "online refit skipped: %s", s.to_string().c_str());
    else
      ELDR_LOG(warn, "online refit failed, the current table keeps routing: %s",
               s.to_string().c_str());
    lock.lock();
  }
}

}  // namespace eldr::sidecar
