// Checks and helpers that BlockRows and SignatureCache share: the cache shape,
// one token-layer's top-k picks, adding a token to a staged row without
// overfilling it, and the int16 limit of a request footprint. Private to
// cache/.
#pragma once

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "eldr/block_rows.hpp"
#include "eldr/geometry.hpp"
#include "eldr/status.hpp"

namespace eldr::detail {

inline constexpr int32_t kFootprintMax = std::numeric_limits<int16_t>::max();
// A request footprint is summed in int32. Each row entry is <= 255, so checking
// the running maximum every this many rows keeps the sum far from int32
// overflow (65536 * 255 + 32767 < 2^31) without a per-row scan.
inline constexpr size_t kOverflowCheckEvery = 65536;

inline std::string hex(uint64_t v) {
  char buf[2 + 16];
  buf[0] = '0';
  buf[1] = 'x';
  auto res = std::to_chars(buf + 2, buf + sizeof(buf), v, 16);
  return std::string(buf, res.ptr);
}

// Shared by both caches: they need k to parse [tokens][L][k] pick arrays and
// uint8 entries bounded by the block size.
inline Status validate_cache_shape(const Geometry& geometry, uint32_t block_size) {
  ELDR_TRY(geometry.validate());
  if (geometry.top_k == 0)
    return {Errc::invalid_argument,
            "a signature cache needs a geometry with top_k > 0 (it parses [tokens][L][k] picks)"};
  if (block_size == 0 || block_size > kMaxBlockSize)
    return {Errc::invalid_argument, "block_size must be in [1, " + std::to_string(kMaxBlockSize) +
                                        "], got " + std::to_string(block_size)};
  return Status::ok();
}

// Checks one token-layer's top-k picks: ids in [0, E), no expert twice. The
// stamp array makes the duplicate test O(k) instead of O(k^2); a stamp is the
// 1-based index of the token-layer that last saw the expert.
class PickChecker {
 public:
  explicit PickChecker(uint32_t experts) : m_stamp(experts, 0) {}

  Status check(const int32_t* picks, uint32_t k, size_t token, uint32_t layer) {
    ++m_current;
    for (uint32_t j = 0; j < k; ++j) {
      const int32_t e = picks[j];
      if (e < 0 || static_cast<size_t>(e) >= m_stamp.size())
        return {Errc::out_of_range, "expert id " + std::to_string(e) + " of token " +
                                        std::to_string(token) + " layer " + std::to_string(layer) +
                                        " is outside [0, " + std::to_string(m_stamp.size()) + ")"};
      if (m_stamp[static_cast<size_t>(e)] == m_current)
        return {Errc::invalid_argument, "token " + std::to_string(token) + " picks expert " +
                                            std::to_string(e) + " twice in layer " +
                                            std::to_string(layer)};
      m_stamp[static_cast<size_t>(e)] = m_current;
    }
    return Status::ok();
  }

 private:
  std::vector<uint64_t> m_stamp;
  uint64_t m_current = 0;
};

// The row cell an add would push past block_size.
struct Overfill {
  uint32_t layer = 0;
  uint32_t expert = 0;
};

// Adds the picks of one token ([layer_count][k], already validated) to a
// staged row slice that starts at layer_begin. Stops before any entry would
// pass block_size (so also before uint8 wraps) and reports that cell; the
// caller builds the message, so the per-token path allocates nothing.
inline bool add_token(const int32_t* picks, uint32_t layer_begin, uint32_t layer_count, uint32_t k,
                      uint32_t experts, uint32_t block_size, uint8_t* slice, Overfill* bad) {
  for (uint32_t l = 0; l < layer_count; ++l) {
    for (uint32_t j = 0; j < k; ++j) {
      const auto e = static_cast<uint32_t>(picks[size_t{l} * k + j]);
      uint8_t& cell = slice[size_t{l} * experts + e];
      if (cell >= block_size) {
        *bad = {layer_begin + l, e};
        return false;
      }
      ++cell;
    }
  }
  return true;
}

inline Status overfill_error(const std::string& block, const Overfill& bad, uint32_t block_size) {
  return {Errc::out_of_range, "block " + block + " layer " + std::to_string(bad.layer) +
                                  " expert " + std::to_string(bad.expert) +
                                  " would exceed block_size " + std::to_string(block_size) +
                                  " (an offset written twice without its block being reset?)"};
}

// Checks the running int32 sum; true when some cell already exceeds int16.
inline bool exceeds_int16(const std::vector<int32_t>& acc, size_t* cell) {
  for (size_t i = 0; i < acc.size(); ++i)
    if (acc[i] > kFootprintMax) {
      *cell = i;
      return true;
    }
  return false;
}

inline Status too_large(const Geometry& g, size_t cell, int32_t value) {
  return {Errc::out_of_range, "footprint layer " + std::to_string(cell / g.experts) + " expert " +
                                  std::to_string(cell % g.experts) + " reaches " +
                                  std::to_string(value) +
                                  ", beyond int16 (prompt longer than 32767 tokens?)"};
}

inline Status footprint_shape(const Geometry& g, size_t got) {
  return {Errc::shape_mismatch, "footprint output has " + std::to_string(got) +
                                    " cells, geometry " + g.to_string() + " needs " +
                                    std::to_string(g.cells())};
}

inline void narrow_into(const std::vector<int32_t>& acc, std::span<int16_t> out) {
  std::transform(acc.begin(), acc.end(), out.begin(),
                 [](int32_t v) { return static_cast<int16_t>(v); });
}

}  // namespace eldr::detail
