// SignatureCache (docs/design.md §6): rows keyed by the chained block hash,
// LRU-bounded by bytes, must give every request its cold-prefill footprint,
// prefix-cache hits included.
#include "eldr/signature_cache.hpp"

#include <gtest/gtest.h>

#include "block_rows_support.hpp"

namespace eldr {
namespace {

using namespace test_support;

uint64_t mix(uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Chained prefix hashes, as engines compute them for prefix caching: a block's
// hash covers its own token ids and its parent's hash.
std::vector<uint64_t> chained_hashes(const std::vector<uint64_t>& token_ids, uint32_t bs) {
  std::vector<uint64_t> hashes;
  uint64_t parent = 0x5eed;
  for (size_t begin = 0; begin < token_ids.size(); begin += bs) {
    uint64_t h = mix(parent);
    for (size_t t = begin; t < std::min(token_ids.size(), begin + bs); ++t)
      h = mix(h ^ token_ids[t]);
    hashes.push_back(h);
    parent = h;
  }
  return hashes;
}

// Records tokens [begin, end) of a prompt, split at block boundaries.
Status record_range(SignatureCache& sut, const Geometry& g, uint32_t bs,
                    const std::vector<uint64_t>& hashes, const std::vector<int32_t>& ids,
                    size_t begin, size_t end) {
  const size_t per_token = size_t{g.layers} * g.top_k;
  while (begin < end) {
    const size_t block = begin / bs;
    const size_t stop = std::min(end, (block + 1) * bs);
    ELDR_TRY(sut.record(
        hashes[block], static_cast<uint32_t>(begin % bs),
        std::span<const int32_t>(ids).subspan(begin * per_token, (stop - begin) * per_token),
        static_cast<uint32_t>(stop - begin)));
    begin = stop;
  }
  return Status::ok();
}

std::vector<int32_t> hand_ids(size_t first, size_t count) {
  std::vector<int32_t> ids;
  for (size_t t = first; t < first + count; ++t)
    ids.insert(ids.end(), kHandPicks[t].begin(), kHandPicks[t].end());
  return ids;
}

// The footprint of a list of hashes, or the error code as a one-cell marker.
Result<std::vector<int16_t>> cache_footprint(SignatureCache& sut, const Geometry& g,
                                             const std::vector<uint64_t>& hashes) {
  std::vector<int16_t> out(g.cells(), 0);
  Status st = sut.request_footprint(hashes, out);
  if (!st.is_ok()) return st;
  return out;
}

std::vector<uint8_t> constant_row(const Geometry& g, uint8_t v) {
  return std::vector<uint8_t>(g.cells(), v);
}

TEST(SignatureCacheTest, create_validates_geometry_block_size_and_budget) {
  EXPECT_EQ(SignatureCache::create(kSmall, 0, 1024).status().code(), Errc::invalid_argument);
  EXPECT_EQ(SignatureCache::create(kSmall, 256, 1024).status().code(), Errc::invalid_argument);
  EXPECT_EQ(SignatureCache::create({2, 0, 2}, 4, 1024).status().code(), Errc::invalid_argument);
  EXPECT_EQ(SignatureCache::create({2, 4, 0}, 4, 1024).status().code(), Errc::invalid_argument);
  // One row is L*E = 8 bytes.
  EXPECT_EQ(SignatureCache::create(kSmall, 4, 7).status().code(), Errc::invalid_argument);
  auto sut = SignatureCache::create(kSmall, 4, 8);
  ASSERT_TRUE(sut.is_ok());
  EXPECT_EQ(sut->stats().entries, 0u);
  EXPECT_EQ(sut->stats().bytes, 0u);
}

TEST(SignatureCacheTest, record_accumulates_chunks_and_offset_zero_resets) {
  SignatureCache sut = make_cache(kSmall, kSmallBlock, 1024);
  ASSERT_TRUE(sut.record(42, 0, hand_ids(0, 3), 3).is_ok());
  auto fp = cache_footprint(sut, kSmall, {42});
  ASSERT_TRUE(fp.is_ok());
  EXPECT_EQ(*fp, (std::vector<int16_t>{3, 2, 1, 0, 1, 1, 2, 2}));

  ASSERT_TRUE(sut.record(42, 3, hand_ids(3, 1), 1).is_ok());
  fp = cache_footprint(sut, kSmall, {42});
  ASSERT_TRUE(fp.is_ok());
  EXPECT_EQ(*fp, (std::vector<int16_t>{4, 2, 1, 1, 2, 1, 3, 2}));

  // Offset 0 again: the hash is being rebuilt, stale counts must go.
  ASSERT_TRUE(sut.record(42, 0, hand_ids(4, 1), 1).is_ok());
  fp = cache_footprint(sut, kSmall, {42});
  ASSERT_TRUE(fp.is_ok());
  EXPECT_EQ(*fp, (std::vector<int16_t>{0, 1, 1, 0, 1, 1, 0, 0}));

  // An empty head record creates an empty row.
  ASSERT_TRUE(sut.record(43, 0, {}, 0).is_ok());
  EXPECT_TRUE(sut.contains(43));
  EXPECT_EQ(sut.stats().entries, 2u);
}

TEST(SignatureCacheTest, put_row_inserts_or_replaces_a_row) {
  SignatureCache sut = make_cache(kSmall, kSmallBlock, 1024);
  const std::vector<uint8_t> row = {4, 2, 1, 1, 2, 1, 3, 2};
  ASSERT_TRUE(sut.put_row(9, row).is_ok());
  ASSERT_TRUE(sut.record(10, 0, hand_ids(0, 4), 4).is_ok());
  auto fp = cache_footprint(sut, kSmall, {9, 10});
  ASSERT_TRUE(fp.is_ok());
  EXPECT_EQ(*fp, (std::vector<int16_t>{8, 4, 2, 2, 4, 2, 6, 4}));
  ASSERT_TRUE(sut.put_row(9, constant_row(kSmall, 0)).is_ok());
  fp = cache_footprint(sut, kSmall, {9, 10});
  ASSERT_TRUE(fp.is_ok());
  EXPECT_EQ(*fp, (std::vector<int16_t>{4, 2, 1, 1, 2, 1, 3, 2}));
  EXPECT_EQ(sut.stats().entries, 2u);
}

void check_cache_prefix_hit_matches_cold_prefill(uint32_t bs, uint64_t seed) {
  SCOPED_TRACE("block_size " + std::to_string(bs) + " seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const Geometry& g = kQwen;
  SignatureCache sut = make_cache(g, bs, 64 * g.cells());

  const size_t a_tokens = bs + rng() % (5 * bs);
  std::vector<uint64_t> a_text(a_tokens);
  for (auto& t : a_text) t = rng();
  const auto a_ids = random_picks(rng, g, a_tokens);
  const auto a_hashes = chained_hashes(a_text, bs);
  for (auto [begin, end] : random_chunks(rng, 0, a_tokens, 2 * bs))
    ASSERT_TRUE(record_range(sut, g, bs, a_hashes, a_ids, begin, end).is_ok());

  // B (maybe on another engine of the node) shares A's first m full blocks.
  const size_t m = 1 + rng() % (a_tokens / bs);
  const size_t cached = m * bs;
  const size_t b_tokens = cached + 1 + rng() % (3 * bs);
  std::vector<uint64_t> b_text(a_text.begin(), a_text.begin() + static_cast<ptrdiff_t>(cached));
  while (b_text.size() < b_tokens) b_text.push_back(rng());
  std::vector<int32_t> b_ids(a_ids.begin(),
                             a_ids.begin() + static_cast<ptrdiff_t>(cached * g.layers * g.top_k));
  const auto extra = random_picks(rng, g, b_tokens - cached);
  b_ids.insert(b_ids.end(), extra.begin(), extra.end());
  const auto b_hashes = chained_hashes(b_text, bs);
  for (size_t i = 0; i < m; ++i) ASSERT_EQ(b_hashes[i], a_hashes[i]);

  for (auto [begin, end] : random_chunks(rng, cached, b_tokens, 2 * bs))
    ASSERT_TRUE(record_range(sut, g, bs, b_hashes, b_ids, begin, end).is_ok());

  auto fp = cache_footprint(sut, g, b_hashes);
  ASSERT_TRUE(fp.is_ok()) << fp.status().to_string();
  ASSERT_EQ(*fp, cold_footprint(g, b_ids));
  // Order of the hashes does not matter.
  std::vector<uint64_t> shuffled = a_hashes;
  std::shuffle(shuffled.begin(), shuffled.end(), rng);
  fp = cache_footprint(sut, g, shuffled);
  ASSERT_TRUE(fp.is_ok()) << fp.status().to_string();
  ASSERT_EQ(*fp, cold_footprint(g, a_ids));
}

TEST(SignatureCacheTest, prefix_hit_footprint_equals_cold_prefill_footprint) {
  for (uint32_t bs : {16u, 64u})
    for (uint64_t seed = 1; seed <= 12; ++seed) {
      check_cache_prefix_hit_matches_cold_prefill(bs, seed);
      if (HasFatalFailure()) return;
    }
}

TEST(SignatureCacheTest, evicts_least_recently_used_rows_to_stay_within_the_byte_budget) {
  // 8-byte rows, budget for three (a remainder does not buy a fourth).
  SignatureCache sut = make_cache(kSmall, kSmallBlock, 3 * 8 + 7);
  ASSERT_TRUE(sut.put_row(1, constant_row(kSmall, 1)).is_ok());
  ASSERT_TRUE(sut.record(2, 0, hand_ids(0, 1), 1).is_ok());
  ASSERT_TRUE(sut.put_row(3, constant_row(kSmall, 3)).is_ok());
  EXPECT_EQ(sut.stats().bytes, 24u);

  ASSERT_TRUE(cache_footprint(sut, kSmall, {1}).is_ok());  // 1 is now the most recent
  ASSERT_TRUE(sut.put_row(4, constant_row(kSmall, 4)).is_ok());
  EXPECT_FALSE(sut.contains(2));
  EXPECT_TRUE(sut.contains(1));
  EXPECT_TRUE(sut.contains(3));
  EXPECT_TRUE(sut.contains(4));

  // Writing refreshes too: recency is now 3, 4, 1.
  ASSERT_TRUE(sut.record(3, 0, hand_ids(1, 1), 1).is_ok());
  ASSERT_TRUE(sut.put_row(5, constant_row(kSmall, 0)).is_ok());
  EXPECT_FALSE(sut.contains(1));
  ASSERT_TRUE(sut.put_row(6, constant_row(kSmall, 0)).is_ok());
  EXPECT_FALSE(sut.contains(4));
  EXPECT_TRUE(sut.contains(3));

  // Replacing an existing row never evicts.
  ASSERT_TRUE(sut.put_row(5, constant_row(kSmall, 2)).is_ok());
  const auto st = sut.stats();
  EXPECT_EQ(st.entries, 3u);
  EXPECT_EQ(st.bytes, 24u);
  EXPECT_EQ(st.evictions, 3u);
  EXPECT_EQ(st.hits, 1u);
  EXPECT_EQ(st.misses, 0u);
}

TEST(SignatureCacheTest, budget_of_one_row_keeps_the_row_just_written) {
  SignatureCache sut = make_cache(kSmall, kSmallBlock, 8);
  for (uint64_t h = 1; h <= 4; ++h) {
    ASSERT_TRUE(sut.record(h, 0, hand_ids(0, 2), 2).is_ok());
    EXPECT_TRUE(sut.contains(h));
    EXPECT_EQ(sut.stats().entries, 1u);
  }
  EXPECT_EQ(sut.stats().evictions, 3u);
  // Chunked writes to the surviving block still work.
  EXPECT_TRUE(sut.record(4, 2, hand_ids(2, 2), 2).is_ok());
  // The evicted head is gone: its continuation cannot be recorded.
  EXPECT_EQ(sut.record(3, 2, hand_ids(2, 2), 2).code(), Errc::not_found);
}

TEST(SignatureCacheTest, missing_block_is_not_found_and_leaves_out_untouched) {
  SignatureCache sut = make_cache(kSmall, kSmallBlock, 1024);
  ASSERT_TRUE(sut.put_row(1, constant_row(kSmall, 1)).is_ok());
  std::vector<int16_t> out(kSmall.cells(), 77);
  const Status st = sut.request_footprint(std::vector<uint64_t>{1, 0x3e7, 0x3e8}, out);
  EXPECT_EQ(st.code(), Errc::not_found);
  EXPECT_NE(st.message().find("0x3e7"), std::string::npos) << st.message();
  EXPECT_EQ(out, std::vector<int16_t>(kSmall.cells(), 77));
  EXPECT_EQ(sut.stats().misses, 2u);
  EXPECT_EQ(sut.stats().hits, 1u);

  std::vector<int16_t> short_out(3, 77);
  EXPECT_EQ(sut.request_footprint(std::vector<uint64_t>{1}, short_out).code(),
            Errc::shape_mismatch);
  EXPECT_EQ(short_out, std::vector<int16_t>(3, 77));
}

TEST(SignatureCacheTest, invalid_records_return_the_right_code_and_leave_the_row_unchanged) {
  SignatureCache sut = make_cache(kSmall, kSmallBlock, 1024);
  ASSERT_TRUE(sut.record(5, 0, hand_ids(0, 2), 2).is_ok());
  const auto before = cache_footprint(sut, kSmall, {5});
  ASSERT_TRUE(before.is_ok());
  const auto stats_before = sut.stats();

  auto ids = [](std::vector<int32_t> bad) {  // one valid token, then `bad`
    std::vector<int32_t> v = kHandPicks[3];
    v.insert(v.end(), bad.begin(), bad.end());
    return v;
  };
  std::vector<int32_t> short_ids = hand_ids(2, 2);
  short_ids.pop_back();
  EXPECT_EQ(sut.record(5, 2, short_ids, 2).code(), Errc::shape_mismatch);
  EXPECT_EQ(sut.record(5, 2, ids({0, 4, 1, 2}), 2).code(), Errc::out_of_range);
  EXPECT_EQ(sut.record(5, 2, ids({-1, 0, 1, 2}), 2).code(), Errc::out_of_range);
  EXPECT_EQ(sut.record(5, 2, ids({0, 1, 2, 2}), 2).code(), Errc::invalid_argument);
  EXPECT_EQ(sut.record(5, 3, hand_ids(2, 2), 2).code(), Errc::out_of_range);  // 3 + 2 > 4
  EXPECT_EQ(sut.record(5, 4, {}, 0).code(), Errc::out_of_range);
  EXPECT_EQ(sut.record(5, 0xffffffffu, hand_ids(2, 1), 1).code(), Errc::out_of_range);
  EXPECT_EQ(sut.record(6, 2, hand_ids(2, 2), 2).code(), Errc::not_found);
  EXPECT_FALSE(sut.contains(6));
  // Offsets 0-1 rewritten without the head: t0/t1 share expert 0 in layer 0,
  // so with three more tokens that cell would pass 4.
  ASSERT_TRUE(sut.record(5, 2, hand_ids(2, 2), 2).is_ok());
  const auto full = cache_footprint(sut, kSmall, {5});
  ASSERT_TRUE(full.is_ok());
  EXPECT_EQ(sut.record(5, 1, hand_ids(0, 1), 1).code(), Errc::out_of_range);
  EXPECT_EQ(cache_footprint(sut, kSmall, {5}).value(), *full);

  EXPECT_EQ(sut.put_row(7, std::vector<uint8_t>(7, 0)).code(), Errc::shape_mismatch);
  EXPECT_EQ(sut.put_row(7, constant_row(kSmall, 5)).code(), Errc::out_of_range);
  EXPECT_FALSE(sut.contains(7));
  EXPECT_EQ(sut.stats().entries, stats_before.entries);
  EXPECT_EQ(sut.stats().evictions, 0u);
}

TEST(SignatureCacheTest, request_footprint_is_exact_up_to_32767_and_rejects_more) {
  const Geometry g{1, 2, 1};
  SignatureCache sut = make_cache(g, 255, 1 << 20);
  std::vector<uint64_t> hashes;
  for (uint64_t h = 0; h < 128; ++h) {
    ASSERT_TRUE(sut.put_row(h, std::vector<uint8_t>{255, 0}).is_ok());
    hashes.push_back(h);
  }
  ASSERT_TRUE(sut.put_row(128, std::vector<uint8_t>{127, 1}).is_ok());
  hashes.push_back(128);
  std::vector<int16_t> out(2, 5);
  ASSERT_TRUE(sut.request_footprint(hashes, out).is_ok());
  EXPECT_EQ(out, (std::vector<int16_t>{32767, 1}));

  ASSERT_TRUE(sut.put_row(128, std::vector<uint8_t>{128, 1}).is_ok());
  std::fill(out.begin(), out.end(), 5);
  EXPECT_EQ(sut.request_footprint(hashes, out).code(), Errc::out_of_range);
  EXPECT_EQ(out, (std::vector<int16_t>{5, 5}));
}

TEST(SignatureCacheTest, move_keeps_rows_lru_order_and_stats) {
  SignatureCache source = make_cache(kSmall, kSmallBlock, 2 * 8);
  ASSERT_TRUE(source.put_row(1, constant_row(kSmall, 1)).is_ok());
  ASSERT_TRUE(source.put_row(2, constant_row(kSmall, 2)).is_ok());
  ASSERT_TRUE(cache_footprint(source, kSmall, {1}).is_ok());
  SignatureCache sut(std::move(source));
  EXPECT_EQ(sut.stats().entries, 2u);
  EXPECT_EQ(sut.stats().hits, 1u);
  ASSERT_TRUE(sut.put_row(3, constant_row(kSmall, 3)).is_ok());
  EXPECT_FALSE(sut.contains(2));  // the LRU list survived the move
  auto fp = cache_footprint(sut, kSmall, {1, 3});
  ASSERT_TRUE(fp.is_ok());
  EXPECT_EQ(*fp, std::vector<int16_t>(kSmall.cells(), 4));
}

// Fails a deadlocked test instead of hanging the suite; no timing assertion.
class Watchdog {
 public:
  explicit Watchdog(std::chrono::seconds limit)
      : m_thread([this, limit] {
          std::unique_lock<std::mutex> lock(m_mutex);
          if (!m_cv.wait_for(lock, limit, [this] { return m_done; })) {
            std::fprintf(stderr, "watchdog: test still running after %llds, deadlock?\n",
                         static_cast<long long>(limit.count()));
            std::abort();
          }
        }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(m_mutex);
      m_done = true;
    }
    m_cv.notify_one();
    m_thread.join();
  }

 private:
  std::mutex m_mutex;
  std::condition_variable m_cv;
  bool m_done = false;
  std::thread m_thread;
};

TEST(SignatureCacheTest, concurrent_records_and_reads_stay_consistent) {
  Watchdog watchdog(std::chrono::seconds(120));
  const Geometry g{4, 16, 2};
  const uint32_t bs = 8;
  // Room for 16 of the 32 hashes in play: evictions race with reads.
  SignatureCache sut = make_cache(g, bs, 16 * g.cells());
  std::atomic<int> bad_status{0};
  std::atomic<int> bad_sum{0};
  std::atomic<int> footprints{0};
  std::atomic<int> lookups{0};

  auto worker = [&](uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<int16_t> out(g.cells());
    for (int i = 0; i < 400; ++i) {
      const uint64_t h = rng() % 32;
      switch (rng() % 4) {
        case 0: {  // a whole block from its head: every row keeps layer sums k*bs
          const auto ids = random_picks(rng, g, bs);
          if (!sut.record(h, 0, ids, bs).is_ok()) ++bad_status;
          break;
        }
        case 1: {
          std::vector<uint8_t> row(g.cells(), 0);
          for (uint32_t l = 0; l < g.layers; ++l)
            for (uint32_t e = 0; e < bs * g.top_k; ++e) ++row[l * g.experts + e % g.experts];
          if (!sut.put_row(h, row).is_ok()) ++bad_status;
          break;
        }
        case 2: {
          const std::vector<uint64_t> hashes = {h, (h + 1) % 32, (h + 7) % 32};
          const Status st = sut.request_footprint(hashes, out);
          ++lookups;
          if (st.is_ok()) {
            ++footprints;
            for (uint32_t l = 0; l < g.layers; ++l) {
              int sum = 0;
              for (uint32_t e = 0; e < g.experts; ++e) sum += out[l * g.experts + e];
              if (sum != static_cast<int>(3 * bs * g.top_k)) ++bad_sum;
            }
          } else if (st.code() != Errc::not_found) {
            ++bad_status;
          }
          break;
        }
        default: {
          (void)sut.contains(h);
          const auto s = sut.stats();
          if (s.bytes != s.entries * g.cells() || s.bytes > 16 * g.cells()) ++bad_status;
        }
      }
    }
  };
  std::vector<std::thread> threads;
  for (uint64_t t = 0; t < 4; ++t) threads.emplace_back(worker, 100 + t);
  for (auto& t : threads) t.join();

  EXPECT_EQ(bad_status.load(), 0);
  EXPECT_EQ(bad_sum.load(), 0);
  const auto s = sut.stats();
  EXPECT_LE(s.entries, 16u);
  EXPECT_EQ(s.hits + s.misses, 3u * static_cast<uint64_t>(lookups.load()));
  EXPECT_GE(lookups.load(), footprints.load());
}

}  // namespace
}  // namespace eldr
