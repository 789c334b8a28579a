// Private to core/route's Router (router.cpp, router_requests.cpp,
// router_workers.cpp): the worker slot the Router keeps per worker id, and the
// footprint check every entry point that takes counts runs first.
#pragma once

#include <atomic>
#include <cstdint>
#include <span>

#include "eldr/footprint.hpp"
#include "eldr/router.hpp"

namespace eldr {

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

namespace detail {

// Counts of the table's geometry, none negative (the prompt's token count is
// not known here, so the per-layer sums are not checked).
inline Status check_counts(const ClusterTable& t, std::span<const int16_t> counts) {
  return validate_footprint(t.geometry, counts, std::nullopt);
}

}  // namespace detail

}  // namespace eldr
