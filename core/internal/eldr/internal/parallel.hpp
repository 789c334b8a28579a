// A minimal fork-join helper: the fit's loops are embarrassingly parallel and
// short-lived, so plain std::threads per call beat a pool's bookkeeping here.
#pragma once

#include <algorithm>
#include <cstddef>
#include <thread>
#include <vector>

namespace eldr {

inline unsigned resolve_threads(unsigned requested) {
  if (requested) return requested;
  const unsigned hw = std::thread::hardware_concurrency();
  return hw ? hw : 1;
}

// Calls body(begin, end, worker) over contiguous chunks of [0, n).
template <class Body>
void parallel_for(size_t n, unsigned threads, Body&& body) {
  threads = static_cast<unsigned>(std::min<size_t>(std::max(1u, threads), std::max<size_t>(n, 1)));
  if (threads <= 1) {
    body(size_t{0}, n, 0u);
    return;
  }
  std::vector<std::thread> pool;
  pool.reserve(threads - 1);
  const size_t chunk = (n + threads - 1) / threads;
  for (unsigned t = 1; t < threads; ++t) {
    const size_t b = std::min(n, t * chunk), e = std::min(n, b + chunk);
    pool.emplace_back([&body, b, e, t] { body(b, e, t); });
  }
  body(size_t{0}, std::min(n, chunk), 0u);
  for (auto& th : pool) th.join();
}

}  // namespace eldr
