// One spin-wait step, for every polling loop of the project (the ring's
// consumer, the daemon's idle loop): tells the core (and an SMT sibling) that
// this thread is polling.
#pragma once

namespace eldr {

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace eldr
