// Signature cache co-indexed with the KV cache (docs/design.md §6): the
// host/node-wide variant of BlockRows (block_rows.hpp), keyed by the block's
// chained content hash and LRU-bounded by bytes. It gives a request the
// footprint of its cold prefill, prefix-cache hits included.
#pragma once

#include <cstdint>
#include <list>
#include <mutex>
#include <span>
#include <unordered_map>
#include <vector>

#include "eldr/block_rows.hpp"
#include "eldr/geometry.hpp"
#include "eldr/status.hpp"

namespace eldr {

struct SignatureCacheStats {
  uint64_t entries = 0;
  uint64_t bytes = 0;
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t evictions = 0;
};

// Thread-safe (one mutex: host-side bookkeeping, not the decode hot path).
class SignatureCache {
 public:
  // byte_budget bounds the rows' bytes (L*E each); at least one row must fit.
  static Result<SignatureCache> create(const Geometry& geometry, uint32_t block_size,
                                       size_t byte_budget);
  SignatureCache(SignatureCache&& other) noexcept;
  SignatureCache& operator=(SignatureCache&&) = delete;

  // Adds tokens [offset, offset + tokens) of block `block_hash`;
  // expert_ids [tokens][L][k]. offset 0 resets the row (creating it if needed);
  // offset > 0 on an unknown block is not_found (its head was never seen).
  Status record(uint64_t block_hash, uint32_t offset, std::span<const int32_t> expert_ids,
                uint32_t tokens);
  // Inserts or replaces a complete row (e.g. copied from the GPU rows).
  Status put_row(uint64_t block_hash, std::span<const uint8_t> row);
  bool contains(uint64_t block_hash) const;

  // Sum of the rows of the request's blocks, in any order. A missing block is
  // not_found (the message names it) and leaves out unchanged: never a
  // silently partial footprint. Hits refresh the blocks' LRU position.
  Status request_footprint(std::span<const uint64_t> block_hashes, std::span<int16_t> out);

  SignatureCacheStats stats() const;

 private:
  SignatureCache(const Geometry& geometry, uint32_t block_size, size_t byte_budget);
  struct Entry {
    std::vector<uint8_t> row;
    std::list<uint64_t>::iterator lru_pos;
  };
  Entry& touch_or_create(uint64_t block_hash);  // caller holds m_mutex
  void evict_to_budget();                       // caller holds m_mutex

  Geometry m_geometry;
  uint32_t m_block_size = 0;
  size_t m_byte_budget = 0;
  mutable std::mutex m_mutex;
  std::unordered_map<uint64_t, Entry> m_entries;
  std::list<uint64_t> m_lru;  // front = most recent
  SignatureCacheStats m_stats;
};

}  // namespace eldr
