// Deterministic, platform-independent randomness: the fit, the baselines and
// the synthetic workloads must give the same result everywhere for a seed
// (std:: distributions are implementation-defined, so they are not used).
#pragma once

#include <cmath>
#include <cstdint>

namespace eldr {

constexpr uint64_t splitmix64(uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// xoshiro256**: small, fast, good enough for sampling and k-means++.
class Rng {
 public:
  explicit Rng(uint64_t seed) noexcept {
    uint64_t x = seed;
    for (auto& s : m_s) s = splitmix64(x++);
  }
  uint64_t next() noexcept {
    const uint64_t result = rotl(m_s[1] * 5, 7) * 9;
    const uint64_t t = m_s[1] << 17;
    m_s[2] ^= m_s[0];
    m_s[3] ^= m_s[1];
    m_s[1] ^= m_s[2];
    m_s[0] ^= m_s[3];
    m_s[2] ^= t;
    m_s[3] = rotl(m_s[3], 45);
    return result;
  }
  // Uniform in [0, n) without modulo bias (Lemire); n > 0.
  uint64_t below(uint64_t n) noexcept {
    __uint128_t m = static_cast<__uint128_t>(next()) * n;
    uint64_t low = static_cast<uint64_t>(m);
    if (low < n) {
      const uint64_t threshold = -n % n;
      while (low < threshold) {
        m = static_cast<__uint128_t>(next()) * n;
        low = static_cast<uint64_t>(m);
      }
    }
    return static_cast<uint64_t>(m >> 64);
  }
  // Uniform in [0, 1).
  double uniform() noexcept { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  // Standard normal (Box-Muller; one value per call keeps the state simple).
  double normal() noexcept {
    double u1 = uniform();
    while (u1 <= 0.0) u1 = uniform();
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  static constexpr uint64_t rotl(uint64_t x, int k) noexcept { return (x << k) | (x >> (64 - k)); }
  uint64_t m_s[4];
};

}  // namespace eldr
