// The online refit (off by default): a ring of the most recent refit.window
// dense footprints, and a fit on them aligned (Hungarian) to the current
// table's workers, so each cluster stays on the worker that already holds its
// KV cache, swapped into the router. Create one only when refit.enabled.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "config.hpp"
#include "eldr/router.hpp"
#include "metrics.hpp"

namespace eldr::sidecar {

class OnlineRefit {
 public:
  // Errc::invalid_argument when config.window is 0. `cells`: the table
  // geometry's. `seed` is offset by the samples seen at each refit.
  // `router` and `metrics` must outlive this.
  static Result<std::unique_ptr<OnlineRefit>> create(const RefitConfig& config, size_t cells,
                                                     uint64_t seed, Router& router,
                                                     Metrics& metrics);

  // Routing thread: copies one routed footprint into the window. Never blocks:
  // a footprint routed while a refit copies the window out is not kept.
  void keep(std::span<const int16_t> counts);

  // Where a fitted table goes: by default swapped into the router; in a
  // pool, published as the pool's table (every node swaps it in).
  using Install = std::function<Status(std::shared_ptr<const ClusterTable>)>;

  // Any thread, one refit at a time: fits on the window and installs the
  // table. Errc::state when fewer than refit.min_samples (or k) footprints
  // were seen, or none since the last refit.
  Status run(const Install& install = {});

  uint64_t samples_seen() const noexcept { return m_samples_seen.load(); }

 private:
  OnlineRefit(const RefitConfig& config, size_t cells, uint64_t seed, Router& router,
              Metrics& metrics);
  struct Window {
    std::vector<int16_t> counts;  // n footprints of `cells` counts each
    uint64_t n = 0;
  };
  // The first min(seen, window) footprints of the ring (their order does not
  // matter to the fit).
  Window copy_window(size_t cells);

  const RefitConfig m_config;
  const uint64_t m_seed;
  Router& m_router;
  Metrics& m_metrics;

  std::mutex m_samples_mutex;  // guards m_samples
  std::vector<int16_t> m_samples;
  std::atomic<uint64_t> m_samples_seen{0};
  std::mutex m_refit_mutex;  // one refit at a time; guards the field below
  uint64_t m_samples_at_last_refit = 0;
};

}  // namespace eldr::sidecar
