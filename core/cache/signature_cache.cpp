#include "eldr/signature_cache.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <new>
#include <stdexcept>
#include <string>

#include "row_checks.hpp"

namespace eldr {

using namespace detail;

SignatureCache::SignatureCache(const Geometry& geometry, uint32_t block_size, size_t byte_budget)
    : m_geometry(geometry), m_block_size(block_size), m_byte_budget(byte_budget) {}

// The source may still be reachable from other threads while it is being
// moved from, so its state is taken under its lock.
SignatureCache::SignatureCache(SignatureCache&& other) noexcept {
  std::lock_guard<std::mutex> lock(other.m_mutex);
  m_geometry = other.m_geometry;
  m_block_size = other.m_block_size;
  m_byte_budget = other.m_byte_budget;
  // std::list and std::unordered_map keep their nodes on move, so the
  // entries' LRU iterators stay valid and now point into m_lru.
  m_entries = std::move(other.m_entries);
  m_lru = std::move(other.m_lru);
  m_stats = other.m_stats;
  other.m_entries.clear();
  other.m_lru.clear();
  other.m_stats = {};
}

Result<SignatureCache> SignatureCache::create(const Geometry& geometry, uint32_t block_size,
                                              size_t byte_budget) {
  ELDR_TRY(validate_cache_shape(geometry, block_size));
  if (byte_budget < geometry.cells())
    return Status{Errc::invalid_argument,
                  "byte_budget " + std::to_string(byte_budget) + " cannot hold one row of " +
                      std::to_string(geometry.cells()) + " bytes (" + geometry.to_string() + ")"};
  return SignatureCache(geometry, block_size, byte_budget);
}

SignatureCache::Entry& SignatureCache::touch_or_create(uint64_t block_hash) {
  auto it = m_entries.find(block_hash);
  if (it != m_entries.end()) {
    m_lru.splice(m_lru.begin(), m_lru, it->second.lru_pos);
    return it->second;
  }
  m_lru.push_front(block_hash);
  Entry& entry = m_entries[block_hash];
  entry.row.assign(m_geometry.cells(), 0);
  entry.lru_pos = m_lru.begin();
  m_stats.entries = m_entries.size();
  m_stats.bytes = m_stats.entries * m_geometry.cells();
  return entry;
}

// The entry written by the current call is at the LRU front and the budget
// holds at least one row, so stopping at one entry never evicts it.
void SignatureCache::evict_to_budget() {
  const size_t row_bytes = m_geometry.cells();
  while (m_entries.size() * row_bytes > m_byte_budget && m_lru.size() > 1) {
    m_entries.erase(m_lru.back());
    m_lru.pop_back();
    ++m_stats.evictions;
  }
  m_stats.entries = m_entries.size();
  m_stats.bytes = m_stats.entries * row_bytes;
}

Status SignatureCache::record(uint64_t block_hash, uint32_t offset,
                              std::span<const int32_t> expert_ids, uint32_t tokens) {
  const uint32_t k = m_geometry.top_k;
  const size_t per_token = size_t{m_geometry.layers} * k;
  if (expert_ids.size() != size_t{tokens} * per_token)
    return {Errc::shape_mismatch,
            "expert_ids has " + std::to_string(expert_ids.size()) +
                " entries, expected tokens*L*k = " + std::to_string(size_t{tokens} * per_token)};
  if (offset >= m_block_size || uint64_t{offset} + tokens > m_block_size)
    return {Errc::out_of_range, "tokens [" + std::to_string(offset) + ", " +
                                    std::to_string(uint64_t{offset} + tokens) +
                                    ") do not fit a block of " + std::to_string(m_block_size)};
  PickChecker checker(m_geometry.experts);
  for (uint32_t t = 0; t < tokens; ++t)
    for (uint32_t l = 0; l < m_geometry.layers; ++l)
      ELDR_TRY(checker.check(expert_ids.data() + t * per_token + size_t{l} * k, k, t, l));

  std::lock_guard<std::mutex> lock(m_mutex);
  // Staged like BlockRows so that an over-filled row leaves the entry as it was.
  std::vector<uint8_t> staged(m_geometry.cells(), 0);
  if (offset > 0) {
    auto it = m_entries.find(block_hash);
    if (it == m_entries.end())
      return {Errc::not_found, "block " + hex(block_hash) + " has no row: its offset 0 was " +
                                   "never recorded (or it was evicted)"};
    staged = it->second.row;
  }
  for (uint32_t t = 0; t < tokens; ++t) {
    Overfill bad;
    if (!add_token(expert_ids.data() + t * per_token, 0, m_geometry.layers, k, m_geometry.experts,
                   m_block_size, staged.data(), &bad))
      return overfill_error(hex(block_hash), bad, m_block_size);
  }
  const bool is_new = !m_entries.contains(block_hash);
  touch_or_create(block_hash).row = std::move(staged);
  if (is_new) evict_to_budget();
  return Status::ok();
}

Status SignatureCache::put_row(uint64_t block_hash, std::span<const uint8_t> row) {
  if (row.size() != m_geometry.cells())
    return {Errc::shape_mismatch, "row has " + std::to_string(row.size()) + " cells, geometry " +
                                      m_geometry.to_string() + " needs " +
                                      std::to_string(m_geometry.cells())};
  for (size_t i = 0; i < row.size(); ++i)
    if (row[i] > m_block_size)
      return {Errc::out_of_range, "row layer " + std::to_string(i / m_geometry.experts) +
                                      " expert " + std::to_string(i % m_geometry.experts) + " = " +
                                      std::to_string(row[i]) + " exceeds block_size " +
                                      std::to_string(m_block_size)};
  std::lock_guard<std::mutex> lock(m_mutex);
  const bool is_new = !m_entries.contains(block_hash);
  Entry& entry = touch_or_create(block_hash);
  std::copy(row.begin(), row.end(), entry.row.begin());
  if (is_new) evict_to_budget();
  return Status::ok();
}

bool SignatureCache::contains(uint64_t block_hash) const {
  std::lock_guard<std::mutex> lock(m_mutex);
  return m_entries.contains(block_hash);
}

// hits/misses count block lookups made by request_footprint (every block of
// every call, failed calls included); record/put_row/contains do not count.
// A failed call changes nothing else: no LRU refresh, out untouched.
Status SignatureCache::request_footprint(std::span<const uint64_t> block_hashes,
                                         std::span<int16_t> out) {
  if (out.size() != m_geometry.cells()) return footprint_shape(m_geometry, out.size());
  std::lock_guard<std::mutex> lock(m_mutex);
  std::vector<Entry*> found;
  found.reserve(block_hashes.size());
  size_t missing = 0;
  size_t first_missing = 0;
  for (size_t i = 0; i < block_hashes.size(); ++i) {
    auto it = m_entries.find(block_hashes[i]);
    if (it == m_entries.end()) {
      if (missing++ == 0) first_missing = i;
    } else {
      found.push_back(&it->second);
    }
  }
  m_stats.hits += found.size();
  m_stats.misses += missing;
  if (missing > 0)
    return {Errc::not_found, "block " + hex(block_hashes[first_missing]) + " (index " +
                                 std::to_string(first_missing) + ") is not cached; " +
                                 std::to_string(missing) + " of " +
                                 std::to_string(block_hashes.size()) + " blocks missing"};

  const size_t cells = m_geometry.cells();
  std::vector<int32_t> acc(cells, 0);
  size_t bad = 0;
  for (size_t i = 0; i < found.size(); ++i) {
    const uint8_t* row = found[i]->row.data();
    for (size_t c = 0; c < cells; ++c) acc[c] += row[c];
    if ((i + 1) % kOverflowCheckEvery == 0 && exceeds_int16(acc, &bad))
      return too_large(m_geometry, bad, acc[bad]);
  }
  if (exceeds_int16(acc, &bad)) return too_large(m_geometry, bad, acc[bad]);
  for (Entry* entry : found) m_lru.splice(m_lru.begin(), m_lru, entry->lru_pos);
  narrow_into(acc, out);
  return Status::ok();
}

SignatureCacheStats SignatureCache::stats() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  SignatureCacheStats s = m_stats;
  s.entries = m_entries.size();
  s.bytes = s.entries * m_geometry.cells();
  return s;
}

}  // namespace eldr
