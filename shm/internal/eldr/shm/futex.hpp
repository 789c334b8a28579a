// futex(2) on a 32-bit word in shared memory. Shared futexes (no
// FUTEX_PRIVATE_FLAG): waiter and waker are different processes mapping the
// same segment, so the kernel keys the wait queue on the physical page.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>

#include "eldr/internal/cpu_relax.hpp"

namespace eldr::shm::detail {

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) &&
                  std::atomic<uint32_t>::is_always_lock_free,
              "futex words must be plain lock-free 32-bit integers");

// Sleeps while *word == expected, at most `timeout` (relative, CLOCK_MONOTONIC).
// Returns early on a wake-up, a signal, a spurious wake-up or when the word
// already differs: callers always re-check the state they wait for.
inline void futex_wait(std::atomic<uint32_t>* word, uint32_t expected,
                       std::chrono::nanoseconds timeout) {
  if (timeout.count() <= 0) return;
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1'000'000'000);
  ts.tv_nsec = static_cast<long>(timeout.count() % 1'000'000'000);
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

// Wakes up to `count` waiters sleeping on word.
inline void futex_wake(std::atomic<uint32_t>* word, int count = INT_MAX) {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, count, nullptr, nullptr, 0);
}

}  // namespace eldr::shm::detail
