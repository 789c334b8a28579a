// Per-KV-block expert rows (docs/design.md §6): the CPU reference of the GPU
// kernels (cuda/), one uint8 [L][E] row per physical KV block, updated from
// each step's top-k picks and summed into a request's footprint. A request
// with a prefix-cache hit gets exactly its cold-prefill footprint.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "eldr/geometry.hpp"
#include "eldr/status.hpp"

namespace eldr {

// Largest block size whose row entries fit uint8 (a token picks an expert at
// most once per layer, so an entry never exceeds the block size).
inline constexpr uint32_t kMaxBlockSize = 255;

// Sticky error bits of BlockRows' flagging path (and of the GPU kernels); the
// values are the C API's ELDR_GPU_ERR_*.
inline constexpr uint32_t kRowErrExpertId = 1u;   // an expert id < 0 or >= E
inline constexpr uint32_t kRowErrSlot = 2u;       // a slot >= num_blocks * block_size
inline constexpr uint32_t kRowErrBlockRow = 4u;   // a row cell would pass block_size
inline constexpr uint32_t kRowErrFootprint = 8u;  // a request cell would pass 32767
inline constexpr uint32_t kRowErrBlockId = 16u;   // a block table entry or count out of range
// Largest block table row accepted by sum_requests: 2^22 blocks of cells
// <= 255 keep an int32 sum exact (2^22 * 255 < 2^31).
inline constexpr uint32_t kMaxBlocksPerRequest = 1u << 22;

class BlockRows {
 public:
  static Result<BlockRows> create(const Geometry& geometry, uint32_t num_blocks,
                                  uint32_t block_size);

  // One engine step. expert_ids: [T][L][k]; slot_mapping: [T], physical slot =
  // block * block_size + offset, negative = padding token (skipped).
  // Semantics (identical on the GPU): every block whose offset-0 token is in
  // this step is reset first, then all of the step's picks are added.
  // Validates everything before writing anything: on error rows are unchanged.
  Status update_step(std::span<const int32_t> expert_ids, std::span<const int64_t> slot_mapping);
  // Same for one MoE layer: expert_ids [T][k]; resets only that layer's slice.
  Status update_layer(uint32_t layer, std::span<const int32_t> expert_ids,
                      std::span<const int64_t> slot_mapping);

  // Footprint of a request = sum of its blocks' rows (int32 accumulation,
  // int16 out; out_of_range when a cell exceeds 32767).
  Status request_footprint(std::span<const int32_t> block_table, std::span<int16_t> out) const;

  // ---- flagging path: the exact semantics of the GPU kernels (cuda/) ----
  // The GPU cannot stop a step halfway or return a message, so this path never
  // rejects data: it skips what is bad, saturates instead of wrapping, and
  // reports sticky kRowErr* bits. Only shapes and arguments are Status errors.
  //
  // One step: layer < 0: expert_ids [T][L][k]; layer >= 0: [T][k] for that
  // layer only. slot_mapping [T]: negative = padding (skipped, picks unread);
  // slot >= num_blocks * block_size: kRowErrSlot, token skipped. Pass 1: every
  // block whose offset-0 token is in the step has its row slice (all layers,
  // or `layer`) zeroed. Pass 2: each pick adds 1 to its cell; an expert id
  // outside [0, E) is kRowErrExpertId and skipped; a cell that would pass
  // block_size stays at block_size and sets kRowErrBlockRow (final cell =
  // min(block_size, start + picks): independent of the order of the adds).
  // Duplicate picks and duplicate slots are counted as given.
  Result<uint32_t> accumulate(std::span<const int32_t> expert_ids,
                              std::span<const int64_t> slot_mapping, int32_t layer = -1);
  Result<uint32_t> accumulate(std::span<const int64_t> expert_ids,
                              std::span<const int64_t> slot_mapping, int32_t layer = -1);

  // R requests: block_table [R][max_blocks], num_blocks [R] (entries past it
  // are ignored), out [R][L][E]. A count outside [0, max_blocks] is clamped
  // into it and a block id outside [0, num_blocks()) skipped, both
  // kRowErrBlockId; a cell above 32767 is written as 32767 with
  // kRowErrFootprint. request_flags (empty, or [R]) gets each request's bits,
  // so a caller can hold back exactly the footprints that are not exact.
  Result<uint32_t> sum_requests(std::span<const int32_t> block_table, uint32_t max_blocks,
                                std::span<const int32_t> num_blocks, std::span<int16_t> out,
                                std::span<uint32_t> request_flags = {}) const;

  std::span<const uint8_t> row(uint32_t block) const noexcept;
  const Geometry& geometry() const noexcept { return m_geometry; }
  uint32_t num_blocks() const noexcept { return m_num_blocks; }
  uint32_t block_size() const noexcept { return m_block_size; }

 private:
  Geometry m_geometry;
  uint32_t m_num_blocks = 0;
  uint32_t m_block_size = 0;
  std::vector<uint8_t> m_rows;  // num_blocks * L * E
};

}  // namespace eldr
