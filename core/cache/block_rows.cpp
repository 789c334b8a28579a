#include "eldr/block_rows.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <new>
#include <stdexcept>
#include <string>

#include "row_checks.hpp"

namespace eldr {

using namespace detail;

namespace {

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

}  // namespace eldr
