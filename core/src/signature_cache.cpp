#include "eldr/signature_cache.hpp"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <limits>
#include <new>
#include <string>

namespace eldr {

namespace {

constexpr int32_t kFootprintMax = std::numeric_limits<int16_t>::max();
// A request footprint is summed in int32. Each row entry is <= 255, so checking
// the running maximum every this many rows keeps the sum far from int32
// overflow (65536 * 255 + 32767 < 2^31) without a per-row scan.
constexpr size_t kOverflowCheckEvery = 65536;

std::string hex(uint64_t v) {
  char buf[2 + 16];
  buf[0] = '0';
  buf[1] = 'x';
  auto res = std::to_chars(buf + 2, buf + sizeof(buf), v, 16);
  return std::string(buf, res.ptr);
}

// Shared by both caches: they need k to parse [tokens][L][k] pick arrays and
// uint8 entries bounded by the block size.
Status validate_cache_shape(const Geometry& geometry, uint32_t block_size) {
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
bool add_token(const int32_t* picks, uint32_t layer_begin, uint32_t layer_count, uint32_t k,
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

Status overfill_error(const std::string& block, const Overfill& bad, uint32_t block_size) {
  return {Errc::out_of_range, "block " + block + " layer " + std::to_string(bad.layer) +
                                  " expert " + std::to_string(bad.expert) +
                                  " would exceed block_size " + std::to_string(block_size) +
                                  " (an offset written twice without its block being reset?)"};
}

// Checks the running int32 sum; true when some cell already exceeds int16.
bool exceeds_int16(const std::vector<int32_t>& acc, size_t* cell) {
  for (size_t i = 0; i < acc.size(); ++i)
    if (acc[i] > kFootprintMax) {
      *cell = i;
      return true;
    }
  return false;
}

Status too_large(const Geometry& g, size_t cell, int32_t value) {
  return {Errc::out_of_range, "footprint layer " + std::to_string(cell / g.experts) + " expert " +
                                  std::to_string(cell % g.experts) + " reaches " +
                                  std::to_string(value) +
                                  ", beyond int16 (prompt longer than 32767 tokens?)"};
}

Status footprint_shape(const Geometry& g, size_t got) {
  return {Errc::shape_mismatch, "footprint output has " + std::to_string(got) +
                                    " cells, geometry " + g.to_string() + " needs " +
                                    std::to_string(g.cells())};
}

void narrow_into(const std::vector<int32_t>& acc, std::span<int16_t> out) {
  std::transform(acc.begin(), acc.end(), out.begin(),
                 [](int32_t v) { return static_cast<int16_t>(v); });
}

// One step (all layers) or one layer of BlockRows. The step is staged: the
// touched blocks' row slices are copied (or zeroed when the step writes their
// offset 0), the picks are added to the copies, and only a fully valid step is
// copied back. That gives the GPU's "reset, then add" result while leaving the
// rows untouched on any error. A free function, not a member, so the public
// header stays as agreed.
Status apply_picks(const Geometry& geometry, uint32_t num_blocks, uint32_t block_size,
                   std::vector<uint8_t>& rows, uint32_t layer_begin, uint32_t layer_count,
                   std::span<const int32_t> expert_ids, std::span<const int64_t> slot_mapping) {
  const uint32_t k = geometry.top_k;
  const uint32_t experts = geometry.experts;
  const size_t tokens = slot_mapping.size();
  const size_t per_token = size_t{layer_count} * k;
  if (expert_ids.size() != tokens * per_token)
    return {Errc::shape_mismatch, "expert_ids has " + std::to_string(expert_ids.size()) +
                                      " entries, expected tokens*" +
                                      (layer_count == 1 ? std::string("k") : std::string("L*k")) +
                                      " = " + std::to_string(tokens * per_token)};

  // Padding tokens are skipped entirely, their picks included: engines fill
  // them with whatever the gate produced for padding, which is not input.
  const uint64_t capacity = uint64_t{num_blocks} * block_size;
  std::vector<int64_t> live;  // slots of the non-padding tokens
  live.reserve(tokens);
  PickChecker checker(experts);
  for (size_t t = 0; t < tokens; ++t) {
    const int64_t slot = slot_mapping[t];
    if (slot < 0) continue;
    if (static_cast<uint64_t>(slot) >= capacity)
      return {Errc::out_of_range, "slot " + std::to_string(slot) + " of token " +
                                      std::to_string(t) + " is outside [0, " +
                                      std::to_string(capacity) + ")"};
    for (uint32_t l = 0; l < layer_count; ++l)
      ELDR_TRY(
          checker.check(expert_ids.data() + t * per_token + size_t{l} * k, k, t, layer_begin + l));
    live.push_back(slot);
  }
  std::sort(live.begin(), live.end());
  // One slot holds one token: two tokens on a slot in one step is an engine bug
  // that would silently double-count.
  if (auto dup = std::adjacent_find(live.begin(), live.end()); dup != live.end())
    return {Errc::invalid_argument,
            "slot " + std::to_string(*dup) + " is written by two tokens in one step"};

  // Slots are sorted, so their blocks come out sorted too.
  std::vector<uint32_t> touched;
  std::vector<bool> reset;
  for (int64_t slot : live) {
    const auto block = static_cast<uint32_t>(static_cast<uint64_t>(slot) / block_size);
    const bool head = static_cast<uint64_t>(slot) % block_size == 0;
    if (touched.empty() || touched.back() != block) {
      touched.push_back(block);
      reset.push_back(head);
    } else if (head) {
      reset.back() = true;
    }
  }

  const size_t slice = size_t{layer_count} * experts;
  const size_t slice_begin = size_t{layer_begin} * experts;
  const size_t cells = geometry.cells();
  std::vector<uint8_t> staged(touched.size() * slice, 0);
  for (size_t i = 0; i < touched.size(); ++i)
    if (!reset[i])
      std::memcpy(staged.data() + i * slice, rows.data() + touched[i] * cells + slice_begin, slice);

  for (size_t t = 0; t < tokens; ++t) {
    const int64_t slot = slot_mapping[t];
    if (slot < 0) continue;
    const auto block = static_cast<uint32_t>(static_cast<uint64_t>(slot) / block_size);
    const size_t i = static_cast<size_t>(std::lower_bound(touched.begin(), touched.end(), block) -
                                         touched.begin());
    Overfill bad;
    if (!add_token(expert_ids.data() + t * per_token, layer_begin, layer_count, k, experts,
                   block_size, staged.data() + i * slice, &bad))
      return overfill_error(std::to_string(block), bad, block_size);
  }

  for (size_t i = 0; i < touched.size(); ++i)
    std::memcpy(rows.data() + touched[i] * cells + slice_begin, staged.data() + i * slice, slice);
  return Status::ok();
}

// The flagging step of BlockRows (GPU semantics, see the header). Id is the
// engine's id width; ids are compared at that width, never truncated.
template <class Id>
Result<uint32_t> accumulate_flagged(const Geometry& geometry, uint32_t num_blocks,
                                    uint32_t block_size, std::vector<uint8_t>& rows, int32_t layer,
                                    std::span<const Id> expert_ids,
                                    std::span<const int64_t> slot_mapping) {
  if (rows.empty()) return Status{Errc::state, "BlockRows was not made by BlockRows::create"};
  if (layer >= 0 && static_cast<uint32_t>(layer) >= geometry.layers)
    return Status{Errc::out_of_range, "layer " + std::to_string(layer) + " is outside [0, " +
                                          std::to_string(geometry.layers) + ")"};
  const uint32_t layer_begin = layer < 0 ? 0 : static_cast<uint32_t>(layer);
  const uint32_t layer_count = layer < 0 ? geometry.layers : 1;
  const uint32_t k = geometry.top_k;
  const size_t tokens = slot_mapping.size();
  const size_t per_token = size_t{layer_count} * k;
  if (expert_ids.size() != tokens * per_token)
    return Status{Errc::shape_mismatch, "expert_ids has " + std::to_string(expert_ids.size()) +
                                            " entries, expected tokens*" +
                                            (layer < 0 ? "L*k" : "k") + " = " +
                                            std::to_string(tokens * per_token)};

  const uint64_t capacity = uint64_t{num_blocks} * block_size;
  const size_t cells = geometry.cells();
  const size_t experts = geometry.experts;
  uint32_t flags = 0;
  auto live = [&](int64_t slot) {
    if (slot < 0) return false;
    if (static_cast<uint64_t>(slot) >= capacity) {
      flags |= kRowErrSlot;
      return false;
    }
    return true;
  };
  // Pass 1: resets, all before any add of the step.
  for (size_t t = 0; t < tokens; ++t) {
    const int64_t slot = slot_mapping[t];
    if (!live(slot) || static_cast<uint64_t>(slot) % block_size != 0) continue;
    uint8_t* row = rows.data() + static_cast<size_t>(slot / block_size) * cells;
    std::fill_n(row + size_t{layer_begin} * experts, size_t{layer_count} * experts, uint8_t{0});
  }
  // Pass 2: saturating adds.
  for (size_t t = 0; t < tokens; ++t) {
    const int64_t slot = slot_mapping[t];
    if (!live(slot)) continue;
    uint8_t* slice = rows.data() + static_cast<size_t>(slot / block_size) * cells +
                     size_t{layer_begin} * experts;
    const Id* picks = expert_ids.data() + t * per_token;
    for (uint32_t l = 0; l < layer_count; ++l)
      for (uint32_t j = 0; j < k; ++j) {
        const Id e = picks[size_t{l} * k + j];
        if (e < 0 || static_cast<uint64_t>(e) >= experts) {
          flags |= kRowErrExpertId;
          continue;
        }
        uint8_t& cell = slice[size_t{l} * experts + static_cast<size_t>(e)];
        if (cell >= block_size)
          flags |= kRowErrBlockRow;
        else
          ++cell;
      }
  }
  return flags;
}

}  // namespace

// ---------------------------------------------------------------- BlockRows

Result<BlockRows> BlockRows::create(const Geometry& geometry, uint32_t num_blocks,
                                    uint32_t block_size) {
  ELDR_TRY(validate_cache_shape(geometry, block_size));
  if (num_blocks == 0) return Status{Errc::invalid_argument, "num_blocks must be > 0"};
  BlockRows rows;
  rows.m_geometry = geometry;
  rows.m_num_blocks = num_blocks;
  rows.m_block_size = block_size;
  // Sized like the KV cache's block count: a huge request is a caller mistake
  // that must come back as a status, not an exception.
  try {
    rows.m_rows.assign(size_t{num_blocks} * geometry.cells(), 0);
  } catch (const std::bad_alloc&) {
    return Status{Errc::capacity, "cannot allocate " + std::to_string(num_blocks) + " rows of " +
                                      std::to_string(geometry.cells()) + " bytes"};
  } catch (const std::length_error&) {
    return Status{Errc::capacity, "row storage for " + std::to_string(num_blocks) +
                                      " blocks exceeds the address space"};
  }
  return rows;
}

Status BlockRows::update_step(std::span<const int32_t> expert_ids,
                              std::span<const int64_t> slot_mapping) {
  if (m_rows.empty()) return {Errc::state, "BlockRows was not made by BlockRows::create"};
  return apply_picks(m_geometry, m_num_blocks, m_block_size, m_rows, 0, m_geometry.layers,
                     expert_ids, slot_mapping);
}

Status BlockRows::update_layer(uint32_t layer, std::span<const int32_t> expert_ids,
                               std::span<const int64_t> slot_mapping) {
  if (layer >= m_geometry.layers)
    return {Errc::out_of_range, "layer " + std::to_string(layer) + " is outside [0, " +
                                    std::to_string(m_geometry.layers) + ")"};
  if (m_rows.empty()) return {Errc::state, "BlockRows was not made by BlockRows::create"};
  return apply_picks(m_geometry, m_num_blocks, m_block_size, m_rows, layer, 1, expert_ids,
                     slot_mapping);
}

Status BlockRows::request_footprint(std::span<const int32_t> block_table,
                                    std::span<int16_t> out) const {
  if (out.size() != m_geometry.cells()) return footprint_shape(m_geometry, out.size());
  for (size_t i = 0; i < block_table.size(); ++i)
    if (block_table[i] < 0 || static_cast<uint32_t>(block_table[i]) >= m_num_blocks)
      return {Errc::out_of_range, "block_table[" + std::to_string(i) +
                                      "] = " + std::to_string(block_table[i]) + " is outside [0, " +
                                      std::to_string(m_num_blocks) + ")"};
  const size_t cells = m_geometry.cells();
  std::vector<int32_t> acc(cells, 0);
  size_t bad = 0;
  for (size_t i = 0; i < block_table.size(); ++i) {
    const uint8_t* row = m_rows.data() + static_cast<size_t>(block_table[i]) * cells;
    for (size_t c = 0; c < cells; ++c) acc[c] += row[c];
    if ((i + 1) % kOverflowCheckEvery == 0 && exceeds_int16(acc, &bad))
      return too_large(m_geometry, bad, acc[bad]);
  }
  if (exceeds_int16(acc, &bad)) return too_large(m_geometry, bad, acc[bad]);
  narrow_into(acc, out);
  return Status::ok();
}

Result<uint32_t> BlockRows::accumulate(std::span<const int32_t> expert_ids,
                                       std::span<const int64_t> slot_mapping, int32_t layer) {
  return accumulate_flagged(m_geometry, m_num_blocks, m_block_size, m_rows, layer, expert_ids,
                            slot_mapping);
}

Result<uint32_t> BlockRows::accumulate(std::span<const int64_t> expert_ids,
                                       std::span<const int64_t> slot_mapping, int32_t layer) {
  return accumulate_flagged(m_geometry, m_num_blocks, m_block_size, m_rows, layer, expert_ids,
                            slot_mapping);
}

Result<uint32_t> BlockRows::sum_requests(std::span<const int32_t> block_table, uint32_t max_blocks,
                                         std::span<const int32_t> num_blocks,
                                         std::span<int16_t> out,
                                         std::span<uint32_t> request_flags) const {
  if (m_rows.empty()) return Status{Errc::state, "BlockRows was not made by BlockRows::create"};
  const size_t requests = num_blocks.size();
  const size_t cells = m_geometry.cells();
  if (max_blocks > kMaxBlocksPerRequest)
    return Status{Errc::invalid_argument, "max_blocks " + std::to_string(max_blocks) + " exceeds " +
                                              std::to_string(kMaxBlocksPerRequest)};
  if (block_table.size() != requests * max_blocks)
    return Status{Errc::shape_mismatch, "block_table has " + std::to_string(block_table.size()) +
                                            " entries, expected requests*max_blocks = " +
                                            std::to_string(requests * max_blocks)};
  if (out.size() != requests * cells)
    return Status{Errc::shape_mismatch,
                  "out has " + std::to_string(out.size()) +
                      " cells, expected requests*L*E = " + std::to_string(requests * cells)};
  if (!request_flags.empty() && request_flags.size() != requests)
    return Status{Errc::shape_mismatch, "request_flags has " +
                                            std::to_string(request_flags.size()) +
                                            " entries, expected " + std::to_string(requests)};
  uint32_t flags = 0;
  std::vector<int32_t> acc(cells);
  for (size_t r = 0; r < requests; ++r) {
    uint32_t mine = 0;
    int64_t count = num_blocks[r];
    if (count < 0 || count > int64_t{max_blocks}) {
      mine |= kRowErrBlockId;
      count = std::clamp<int64_t>(count, 0, max_blocks);
    }
    std::fill(acc.begin(), acc.end(), 0);
    const int32_t* table = block_table.data() + r * max_blocks;
    for (int64_t i = 0; i < count; ++i) {
      const int32_t block = table[i];
      if (block < 0 || static_cast<uint32_t>(block) >= m_num_blocks) {
        mine |= kRowErrBlockId;
        continue;
      }
      const uint8_t* row = m_rows.data() + static_cast<size_t>(block) * cells;
      for (size_t c = 0; c < cells; ++c) acc[c] += row[c];
    }
    int16_t* dst = out.data() + r * cells;
    for (size_t c = 0; c < cells; ++c) {
      if (acc[c] > kFootprintMax) mine |= kRowErrFootprint;
      dst[c] = static_cast<int16_t>(std::min(acc[c], kFootprintMax));
    }
    if (!request_flags.empty()) request_flags[r] = mine;
    flags |= mine;
  }
  return flags;
}

std::span<const uint8_t> BlockRows::row(uint32_t block) const noexcept {
  if (block >= m_num_blocks) return {};
  const size_t cells = m_geometry.cells();
  return {m_rows.data() + size_t{block} * cells, cells};
}

// ----------------------------------------------------------- SignatureCache

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
