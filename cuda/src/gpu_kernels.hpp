// Launchers of the footprint kernels (kernels.cu). Internal to cuda/: the
// public surface is GpuFootprints (eldr/cuda/gpu_footprints.hpp) and the C API.
//
// Row layout on the device: uint8 [num_blocks][layers][experts_padded], with
// experts_padded = experts rounded up to 4, so every (block, layer) slice is a
// whole number of 32-bit words (the unit of the atomic commits). Padding cells
// are never written and never read into a footprint.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace eldr::gpu::detail {

struct RowsView {
  uint8_t* rows = nullptr;
  uint32_t num_blocks = 0;
  uint32_t layers = 0;
  uint32_t experts = 0;
  uint32_t experts_padded = 0;
  uint32_t block_size = 0;  // also the saturation cap of a cell (<= 255)
};

// Sticky error bits; the same values as eldr::kRowErr* and ELDR_GPU_ERR_*
// (static_asserts in gpu_footprints.cpp and capi_gpu.cpp).
inline constexpr uint32_t kErrExpertId = 1u;
inline constexpr uint32_t kErrSlot = 2u;
inline constexpr uint32_t kErrBlockRow = 4u;
inline constexpr uint32_t kErrFootprint = 8u;
inline constexpr uint32_t kErrBlockId = 16u;

constexpr uint32_t padded_experts(uint32_t experts) { return (experts + 3u) & ~3u; }

// The accumulate kernel keeps one warp's histogram of padded_experts uint32
// in at most this much shared memory (no opt-in attribute needed).
inline constexpr uint32_t kHistogramBytesLimit = 48u << 10;

// One engine step (see BlockRows::accumulate for the exact semantics): a reset
// kernel zeroes the row slices of blocks whose offset-0 token is in the step,
// then the accumulate kernel (launched with programmatic dependent launch, so
// its id loads overlap the reset) adds the picks with saturating word commits.
// ids: [tokens][layers][top_k] (layer < 0) or [tokens][top_k]; id_bytes 4 or 8.
cudaError_t launch_update(const RowsView& rows, const void* ids, uint32_t id_bytes, uint32_t tokens,
                          int32_t layer, uint32_t top_k, const int64_t* slot_mapping,
                          uint32_t* flags, cudaStream_t stream);

// Scratch of the request sum, zero between calls (the kernel leaves it so).
struct SumScratch {
  int32_t* partial = nullptr;         // [max_requests][layers * experts_padded]
  uint32_t* arrivals = nullptr;       // [max_requests]
  uint32_t* request_flags = nullptr;  // [max_requests], cleared by the launcher
};

// How many CTAs share one request's blocks (the rest of the grid is requests).
uint32_t sum_splits(uint32_t max_blocks, uint32_t requests, int sm_count);

// out: int16 [requests][layers][experts] (device or mapped host memory).
cudaError_t launch_sum(const RowsView& rows, const int32_t* block_table, uint32_t max_blocks,
                       const int32_t* num_blocks, uint32_t requests, int16_t* out,
                       const SumScratch& scratch, uint32_t* flags, int sm_count,
                       cudaStream_t stream);

// Hand-off of up to kHandoffBatch consecutive ring records in one launch, a
// CTA per record: CTA r copies footprint r (cells int16) to dst[r] (the
// record's counts in host-mapped ring memory), or writes every cell as -1
// when request_flags[r] is set (the daemon rejects negative counts and
// answers the request id with an error decision: an inexact footprint is
// never routed silently). Each CTA fences at system scope; the last to
// finish stores commit_value, which publishes every record of the batch.
inline constexpr uint32_t kHandoffBatch = 32;
struct HandoffBatch {
  const int16_t* footprints = nullptr;      // device [count][cells]
  const uint32_t* request_flags = nullptr;  // device [count]
  uint32_t* arrivals = nullptr;             // device word, zero between launches
  uint64_t* commit_word = nullptr;          // device address of the ring's producer position
  uint64_t commit_value = 0;
  uint32_t cells = 0;
  uint32_t count = 0;  // 1..kHandoffBatch
  int16_t* dst[kHandoffBatch] = {};
};
cudaError_t launch_handoff(const HandoffBatch& batch, cudaStream_t stream);

}  // namespace eldr::gpu::detail
