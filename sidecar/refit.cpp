#include "refit.hpp"

#include <algorithm>
#include <string>

#include "eldr/fit.hpp"

namespace eldr::sidecar {

Result<std::unique_ptr<OnlineRefit>> OnlineRefit::create(const RefitConfig& config, size_t cells,
                                                         uint64_t seed, Router& router,
                                                         Metrics& metrics) {
  if (config.window == 0) return Status{Errc::invalid_argument, "refit.window must be >= 1"};
  return std::unique_ptr<OnlineRefit>(new OnlineRefit(config, cells, seed, router, metrics));
}

OnlineRefit::OnlineRefit(const RefitConfig& config, size_t cells, uint64_t seed, Router& router,
                         Metrics& metrics)
    : m_config(config),
      m_seed(seed),
      m_router(router),
      m_metrics(metrics),
      m_samples(size_t{config.window} * cells) {}

void OnlineRefit::keep(std::span<const int16_t> counts) {
  // Never block routing on a refit that is copying the window out.
  std::unique_lock lock(m_samples_mutex, std::try_to_lock);
  if (!lock.owns_lock()) return;
  const size_t cells = counts.size();
  const uint64_t n = m_samples_seen.load(std::memory_order_relaxed);
  std::copy(counts.begin(), counts.end(),
            m_samples.begin() + static_cast<ptrdiff_t>((n % m_config.window) * cells));
  m_samples_seen.store(n + 1, std::memory_order_relaxed);
}

OnlineRefit::Window OnlineRefit::copy_window(size_t cells) {
  std::lock_guard lock(m_samples_mutex);
  Window w;
  w.n = std::min<uint64_t>(m_samples_seen.load(), m_config.window);
  w.counts.assign(m_samples.begin(), m_samples.begin() + static_cast<ptrdiff_t>(w.n * cells));
  return w;
}

Status OnlineRefit::run(const Install& install) {
  std::lock_guard refit_lock(m_refit_mutex);
  const auto current = m_router.table();
  const Geometry& g = current->geometry;
  const Window window = copy_window(g.cells());
  const uint64_t n = window.n;
  const uint64_t seen = m_samples_seen.load();
  if (seen == m_samples_at_last_refit)
    return {Errc::state, "no new footprints since the last refit"};
  const uint32_t k = current->num_clusters();
  if (n < m_config.min_samples || n < k) {
    return {Errc::state, "refit needs " +
                             std::to_string(std::max<uint64_t>(m_config.min_samples, k)) +
                             " footprints, has " + std::to_string(n)};
  }
  FitOptions fo;
  fo.workers = k;
  fo.seed = m_seed + m_samples_seen.load();
  fo.default_tau = current->default_tau;
  fo.model = current->model;
  fo.worker_ids = current->worker_ids;
  fo.align_to = current.get();  // Hungarian alignment: clusters keep their workers
  fo.threads = 1;               // leave the other cores to routing
  auto fitted = fit_table({g, n, window.counts, {}, {}}, fo);
  if (!fitted) {
    m_metrics.count_refit(false);
    return fitted.status();
  }
  fitted->fit.source = "eldrd refit";
  // The refit moves clusters, not the footprint predictor: the new table
  // predicts with the same one (what it learned included).
  fitted->predictor = current->predictor;
  m_samples_at_last_refit = seen;
  auto table = std::make_shared<const ClusterTable>(std::move(*fitted));
  Status s = install ? install(std::move(table)) : m_router.swap_table(std::move(table));
  m_metrics.count_refit(s.is_ok());
  if (s) m_metrics.set_table_epoch(m_router.table_epoch());
  return s;
}

}  // namespace eldr::sidecar
