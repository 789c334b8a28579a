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

inline uint32_t padded_experts(uint32_t experts) { return (experts + 3u) & ~3u; }

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

// Hand-off of one request: copies its footprint (cells int16) into `dst`
// (host-mapped ring payload), or writes every cell as -1 when its request
// flags are set (the daemon rejects negative counts and answers the request
// id with an error decision: an inexact footprint is never routed silently),
// then fences at system scope and stores commit_value to commit_word.
cudaError_t launch_handoff(const int16_t* footprint, uint32_t cells, const uint32_t* request_flags,
                           int16_t* dst, uint64_t* commit_word, uint64_t commit_value,
                           cudaStream_t stream);

}  // namespace eldr::gpu::detail
