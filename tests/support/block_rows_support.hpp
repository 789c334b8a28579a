// Helpers of the BlockRows and SignatureCache suites: hand-checkable
// geometries and picks, random prompts in physical KV blocks, batched engine
// steps, and the cold-prefill footprint both caches must reproduce.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "eldr/signature_cache.hpp"

namespace eldr::test_support {

// L=2, E=4, k=2, block size 4: small enough to check every count by hand.
inline constexpr Geometry kSmall{2, 4, 2};
inline constexpr uint32_t kSmallBlock = 4;
inline constexpr Geometry kQwen{48, 128, 8};

// A batch of tokens as the engine hands it over: picks [T][L][k] and slots [T].
struct Step {
  std::vector<int32_t> ids;
  std::vector<int64_t> slots;

  void add(std::span<const int32_t> picks, int64_t slot) {
    ids.insert(ids.end(), picks.begin(), picks.end());
    slots.push_back(slot);
  }
};

// Hand-written picks of the small geometry, token t = {layer0 k picks, layer1 k picks}.
inline const std::vector<std::vector<int32_t>> kHandPicks = {
    {0, 1, 2, 3},  // t0
    {0, 2, 2, 1},  // t1
    {1, 0, 3, 0},  // t2
    {3, 0, 2, 0},  // t3
    {1, 2, 0, 1},  // t4
    {2, 3, 3, 1},  // t5
};

inline Step hand_step(size_t first, size_t count, int64_t first_slot) {
  Step step;
  for (size_t t = first; t < first + count; ++t)
    step.add(kHandPicks[t], first_slot + static_cast<int64_t>(t - first));
  return step;
}

inline std::vector<uint8_t> row_of(const BlockRows& rows, uint32_t block) {
  auto r = rows.row(block);
  return {r.begin(), r.end()};
}

inline std::vector<uint8_t> all_rows(const BlockRows& rows) {
  std::vector<uint8_t> out;
  for (uint32_t b = 0; b < rows.num_blocks(); ++b) {
    auto r = rows.row(b);
    out.insert(out.end(), r.begin(), r.end());
  }
  return out;
}

inline BlockRows make_rows(const Geometry& g, uint32_t num_blocks, uint32_t block_size) {
  auto created = BlockRows::create(g, num_blocks, block_size);
  EXPECT_TRUE(created.is_ok()) << created.status().to_string();
  return std::move(created).value();
}

inline SignatureCache make_cache(const Geometry& g, uint32_t block_size, size_t budget) {
  auto created = SignatureCache::create(g, block_size, budget);
  EXPECT_TRUE(created.is_ok()) << created.status().to_string();
  return std::move(created).value();
}

// Distinct experts per token-layer, as a real top-k gate gives.
inline std::vector<int32_t> random_picks(std::mt19937_64& rng, const Geometry& g, size_t tokens) {
  std::uniform_int_distribution<int32_t> expert(0, static_cast<int32_t>(g.experts) - 1);
  std::vector<int32_t> ids(tokens * g.layers * g.top_k);
  for (size_t tl = 0; tl < tokens * g.layers; ++tl) {
    int32_t* picks = ids.data() + tl * g.top_k;
    for (uint32_t j = 0; j < g.top_k; ++j) {
      int32_t e = 0;
      do e = expert(rng);
      while (std::find(picks, picks + j, e) != picks + j);
      picks[j] = e;
    }
  }
  return ids;
}

// The reference: footprint computed straight from every prompt token's picks.
inline std::vector<int16_t> cold_footprint(const Geometry& g, std::span<const int32_t> ids) {
  std::vector<int32_t> acc(g.cells(), 0);
  const size_t per_token = size_t{g.layers} * g.top_k;
  for (size_t i = 0; i < ids.size(); ++i) {
    const size_t layer = (i % per_token) / g.top_k;
    ++acc[layer * g.experts + static_cast<size_t>(ids[i])];
  }
  return {acc.begin(), acc.end()};
}

inline std::span<const int32_t> token_picks(const std::vector<int32_t>& ids, const Geometry& g,
                                            size_t token) {
  const size_t per_token = size_t{g.layers} * g.top_k;
  return std::span<const int32_t>(ids).subspan(token * per_token, per_token);
}

// Splits [begin, end) into chunks of random size in [1, max_chunk].
inline std::vector<std::pair<size_t, size_t>> random_chunks(std::mt19937_64& rng, size_t begin,
                                                            size_t end, size_t max_chunk) {
  std::vector<std::pair<size_t, size_t>> chunks;
  std::uniform_int_distribution<size_t> len(1, max_chunk);
  while (begin < end) {
    const size_t n = std::min(len(rng), end - begin);
    chunks.emplace_back(begin, begin + n);
    begin += n;
  }
  return chunks;
}

// A request's prompt living in physical KV blocks.
struct Request {
  std::vector<int32_t> ids;     // [tokens][L][k]
  std::vector<int32_t> blocks;  // block table
  size_t tokens = 0;

  int64_t slot(size_t token, uint32_t block_size) const {
    return int64_t{blocks[token / block_size]} * block_size + token % block_size;
  }
};

// Gives a request the physical blocks it still lacks from the free list.
inline void allocate(Request& r, std::vector<int32_t>& free_blocks, uint32_t block_size) {
  const size_t needed = (r.tokens + block_size - 1) / block_size;
  while (r.blocks.size() < needed) {
    ASSERT_FALSE(free_blocks.empty());
    r.blocks.push_back(free_blocks.back());
    free_blocks.pop_back();
  }
}

// Builds one engine step from chunks of several requests, tokens shuffled and
// padding (with garbage picks) mixed in, as a batched engine would.
inline Step batched_step(
    std::mt19937_64& rng, const Geometry& g, uint32_t block_size,
    const std::vector<std::pair<const Request*, std::pair<size_t, size_t>>>& parts) {
  const size_t per_token = size_t{g.layers} * g.top_k;
  std::vector<std::pair<std::vector<int32_t>, int64_t>> tokens;
  for (const auto& [req, range] : parts)
    for (size_t t = range.first; t < range.second; ++t) {
      auto p = token_picks(req->ids, g, t);
      tokens.emplace_back(std::vector<int32_t>(p.begin(), p.end()), req->slot(t, block_size));
    }
  const size_t padding = rng() % 3;
  for (size_t i = 0; i < padding; ++i) tokens.emplace_back(std::vector<int32_t>(per_token, -1), -1);
  std::shuffle(tokens.begin(), tokens.end(), rng);
  Step step;
  for (const auto& [picks, slot] : tokens) step.add(picks, slot);
  return step;
}

}  // namespace eldr::test_support
