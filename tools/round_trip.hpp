// One footprint pushed to eldrd and its decision waited for, timed: what
// `eldr loadgen` does per request and `eldr bench ring` measures.
#pragma once

#include <chrono>
#include <cstdint>
#include <thread>

#include "eldr/shm.hpp"
#include "eldr/status.hpp"

namespace eldr::cli {

using Clock = std::chrono::steady_clock;

struct RoundTrip {
  shm::DecisionIn decision;
  uint64_t ns = 0;       // push -> decision back
  uint64_t push_ns = 0;  // of which the push (encode, copy into the ring, checksum)
};

inline uint64_t ns_since(Clock::time_point start) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count());
}

// Push one footprint and wait for its decision; a full ring is retried (the
// daemon drains it) until the timeout.
inline Result<RoundTrip> round_trip(shm::Client& client, const shm::FootprintOut& f,
                                    uint32_t timeout_ms, uint64_t& ring_full_retries) {
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    Status pushed = client.push_footprint(f);
    if (pushed) break;
    if (pushed.code() != Errc::ring_full || Clock::now() > deadline) return pushed;
    ++ring_full_retries;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  const uint64_t push_ns = ns_since(start);
  auto d = client.wait_decision(f.request_id, timeout_ms);
  if (!d) return d.status();
  return RoundTrip{*d, ns_since(start), push_ns};
}

}  // namespace eldr::cli
