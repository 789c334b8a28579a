// The footprint kernels: block-row update (reset + accumulate), request sum,
// ring hand-off. Semantics are BlockRows::accumulate / sum_requests in the
// core (the CPU reference); tests/cuda compares the two element by element.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "eldr/geometry.hpp"
#include "gpu_kernels.hpp"

namespace eldr::gpu::detail {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kWarp = 32;

// Programmatic dependent launch (sm_90): the dependent grid may start while
// the previous one runs; wait() blocks until that grid has completed and its
// writes are visible. Both are no-ops for a normally launched grid.
__device__ __forceinline__ void pdl_launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

// ---- pass 1: resets ------------------------------------------------------

// One warp per token. A live token at block offset 0 zeroes its block's slice
// (all layers, or the call's layer). Out-of-range slots are flagged here only,
// so each is counted once.
__global__ void reset_heads_kernel(const int64_t* __restrict__ slots, uint32_t tokens,
                                   uint32_t block_size, uint64_t capacity, uint8_t* rows,
                                   uint64_t row_bytes, uint64_t slice_offset, uint32_t slice_words,
                                   uint32_t* flags) {
  pdl_launch_dependents();
  const uint64_t token = (uint64_t{blockIdx.x} * blockDim.x + threadIdx.x) / kWarp;
  const unsigned lane = threadIdx.x % kWarp;
  if (token >= tokens) return;
  const int64_t slot = __ldg(slots + token);
  if (slot < 0) return;
  if (static_cast<uint64_t>(slot) >= capacity) {
    if (lane == 0) atomicOr(flags, kErrSlot);
    return;
  }
  if (static_cast<uint64_t>(slot) % block_size != 0) return;
  const uint64_t block = static_cast<uint64_t>(slot) / block_size;
  // Slices are whole 32-bit words (experts padded to 4); 16-byte stores where
  // the slice allows them.
  uint32_t* slice = reinterpret_cast<uint32_t*>(rows + block * row_bytes + slice_offset);
  uint32_t w = 0;
  if ((reinterpret_cast<uintptr_t>(slice) & 15u) == 0) {
    uint4* wide = reinterpret_cast<uint4*>(slice);
    const uint32_t n4 = slice_words / 4;
    for (uint32_t i = lane; i < n4; i += kWarp) wide[i] = make_uint4(0, 0, 0, 0);
    w = n4 * 4;
  }
  for (uint32_t i = w + lane; i < slice_words; i += kWarp) slice[i] = 0;
}

// ---- pass 2: accumulate --------------------------------------------------

// Adds counts c[0..3] to the four uint8 cells of `word`, each saturating at
// cap. Returns true when some cell would have passed cap. A CAS loop: a plain
// atomicAdd could carry into the neighbouring cell. Saturating adds of
// non-negative counts commute (the result is min(cap, start + sum)), so the
// final row does not depend on the order of the commits.
// The first attempt guesses the word is 0 (a block reset this step, the usual
// case), which saves the load: a wrong guess costs one failed CAS that returns
// the real value.
__device__ __forceinline__ bool commit_word(uint32_t* word, const uint32_t c[4], uint32_t cap) {
  uint32_t old = 0;
  bool over = false;
  while (true) {
    uint32_t next = 0;
    over = false;
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      uint32_t v = ((old >> (8 * b)) & 0xffu) + c[b];
      if (v > cap) {
        over = true;
        v = cap;
      }
      next |= v << (8 * b);
    }
    if (next == old) break;  // all cells already at cap: nothing to store
    const uint32_t seen = atomicCAS(word, old, next);
    if (seen == old) break;
    old = seen;
  }
  return over;
}

template <class Id>
__device__ __forceinline__ Id load_id(const Id* p) {
  return __ldg(p);
}

constexpr int kPreloadPicks = 8;  // picks held in registers per lane; more are read on use

// The first kPreloadPicks picks of a token-layer into registers: 16-byte loads
// when the picks are aligned and at least that many (k = 8: 32 bytes of int32
// or 64 of int64 per token-layer, whole sectors), scalar loads otherwise.
__device__ __forceinline__ void preload(const int32_t* picks, uint32_t top_k,
                                        int32_t (&pre)[kPreloadPicks]) {
  if (top_k >= kPreloadPicks && (reinterpret_cast<uintptr_t>(picks) & 15u) == 0) {
    const int4* v = reinterpret_cast<const int4*>(picks);
#pragma unroll
    for (int q = 0; q < kPreloadPicks / 4; ++q) {
      const int4 x = __ldg(v + q);
      pre[4 * q] = x.x;
      pre[4 * q + 1] = x.y;
      pre[4 * q + 2] = x.z;
      pre[4 * q + 3] = x.w;
    }
    return;
  }
#pragma unroll
  for (int j = 0; j < kPreloadPicks; ++j)
    pre[j] = static_cast<uint32_t>(j) < top_k ? __ldg(picks + j) : 0;
}

__device__ __forceinline__ void preload(const int64_t* picks, uint32_t top_k,
                                        int64_t (&pre)[kPreloadPicks]) {
  if (top_k >= kPreloadPicks && (reinterpret_cast<uintptr_t>(picks) & 15u) == 0) {
    const longlong2* v = reinterpret_cast<const longlong2*>(picks);
#pragma unroll
    for (int q = 0; q < kPreloadPicks / 2; ++q) {
      const longlong2 x = __ldg(v + q);
      pre[2 * q] = x.x;
      pre[2 * q + 1] = x.y;
    }
    return;
  }
#pragma unroll
  for (int j = 0; j < kPreloadPicks; ++j)
    pre[j] = static_cast<uint32_t>(j) < top_k ? load_id(picks + j) : 0;
}

// A warp owns one item = (32-token tile, layer of the call). Its lanes are the
// tile's tokens; lanes are grouped by block (a tile usually spans one to three
// blocks), each group's picks are counted in the warp's shared histogram and
// committed once per 32-bit word of the (block, layer) slice. A block split
// across tiles is committed by several warps: the commits are atomic.
template <class Id>
__global__ void accumulate_kernel(const Id* __restrict__ ids, const int64_t* __restrict__ slots,
                                  uint32_t tokens, uint32_t call_layers, uint32_t layer_begin,
                                  uint32_t top_k, RowsView v, uint64_t capacity, uint32_t* flags) {
  extern __shared__ uint32_t hist_all[];
  const unsigned lane = threadIdx.x % kWarp;
  const unsigned warp = threadIdx.x / kWarp;
  const uint32_t epad = v.experts_padded;
  uint32_t* hist = hist_all + size_t{warp} * epad;
  for (uint32_t i = lane; i < epad; i += kWarp) hist[i] = 0;
  __syncwarp();

  const uint64_t item = uint64_t{blockIdx.x} * (blockDim.x / kWarp) + warp;
  const uint64_t tile = item / call_layers;
  const uint32_t call_layer = static_cast<uint32_t>(item % call_layers);
  bool waited = false;
  bool bad_expert = false;
  bool over = false;
  if (tile * kWarp < tokens) {  // uniform across the warp
    const uint64_t token = tile * kWarp + lane;
    int64_t slot = -1;
    if (token < tokens) slot = __ldg(slots + token);
    const bool live = slot >= 0 && static_cast<uint64_t>(slot) < capacity;
    const uint32_t block =
        live ? static_cast<uint32_t>(static_cast<uint64_t>(slot) / v.block_size) : 0xffffffffu;
    const Id* picks = ids + (token * call_layers + call_layer) * top_k;
    Id pre[kPreloadPicks] = {};
    if (live) preload(picks, top_k, pre);

    uint32_t pending = __ballot_sync(kFullMask, live);
    while (pending != 0) {
      const int leader = __ffs(pending) - 1;
      const uint32_t group_block = __shfl_sync(kFullMask, block, leader);
      const bool member = live && block == group_block;
      const uint32_t members = __ballot_sync(kFullMask, member);
      if (member) {
        for (uint32_t j = 0; j < top_k; ++j) {
          Id e = Id(0);
#pragma unroll
          for (int p = 0; p < kPreloadPicks; ++p)
            if (static_cast<uint32_t>(p) == j) e = pre[p];
          if (j >= kPreloadPicks) e = load_id(picks + j);
          if (e < Id(0) || e >= static_cast<Id>(v.experts)) {
            bad_expert = true;
            continue;
          }
          atomicAdd(hist + static_cast<uint32_t>(e), 1u);
        }
      }
      __syncwarp();
      if (!waited) {
        pdl_wait();  // the step's resets are done and visible
        waited = true;
      }
      uint32_t* slice = reinterpret_cast<uint32_t*>(
          v.rows + (uint64_t{group_block} * v.layers + layer_begin + call_layer) * epad);
      for (uint32_t w = lane; w < epad / 4; w += kWarp) {
        uint32_t c[4];
#pragma unroll
        for (int b = 0; b < 4; ++b) {
          c[b] = hist[w * 4 + b];
          hist[w * 4 + b] = 0;
        }
        if ((c[0] | c[1] | c[2] | c[3]) != 0) over |= commit_word(slice + w, c, v.block_size);
      }
      __syncwarp();
      pending &= ~members;
    }
  }
  // Every warp waits, live tokens or not: a grid launched with programmatic
  // dependent launch completes only after the grid it depends on (the resets
  // and their slot flags), so later work on the stream sees both.
  if (!waited) pdl_wait();
  const uint32_t mine = (bad_expert ? kErrExpertId : 0u) | (over ? kErrBlockRow : 0u);
  const uint32_t any = __reduce_or_sync(kFullMask, mine);
  if (lane == 0 && any != 0) atomicOr(flags, any);
}

// ---- request sum ----------------------------------------------------------

constexpr int kSumThreads = 256;
// Block ids staged in shared memory per pass. Also the packed-sum bound: two
// 16-bit lanes per 32-bit accumulator hold 256 rows of cells <= 255 (65280).
constexpr uint32_t kSumChunk = 256;

__device__ __forceinline__ void finalize_cells(uint32_t word, const int32_t acc[4], uint32_t epad,
                                               uint32_t experts, int16_t* out,
                                               uint32_t* local_flags) {
  const uint32_t words_per_layer = epad / 4;
  const uint32_t layer = word / words_per_layer;
  const uint32_t e0 = (word % words_per_layer) * 4;
  int16_t* dst = out + uint64_t{layer} * experts + e0;
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    if (e0 + b >= experts) break;
    int32_t value = acc[b];
    if (value > 32767) {
      atomicOr(local_flags, kErrFootprint);
      value = 32767;
    }
    dst[b] = static_cast<int16_t>(value);
  }
}

// grid (splits, requests). Each CTA sums its share of one request's blocks for
// every cell; one split writes out directly, several meet in `partial` and the
// last CTA to arrive finalizes (and leaves partial/arrivals zero again).
__global__ void __launch_bounds__(kSumThreads)
    sum_kernel(RowsView v, const int32_t* __restrict__ table, uint32_t max_blocks,
               const int32_t* __restrict__ counts, int16_t* out, SumScratch scratch,
               uint32_t* flags) {
  __shared__ int32_t block_ids[kSumChunk];
  __shared__ uint32_t cta_flags;
  __shared__ bool last_arrival;
  const uint32_t splits = gridDim.x;
  const uint32_t split = blockIdx.x;
  const uint32_t request = blockIdx.y;
  const uint32_t tid = threadIdx.x;
  if (tid == 0) cta_flags = 0;
  __syncthreads();

  int64_t n = __ldg(counts + request);
  if (n < 0 || n > int64_t{max_blocks}) {
    if (tid == 0) atomicOr(&cta_flags, kErrBlockId);
    n = n < 0 ? 0 : int64_t{max_blocks};
  }
  const int64_t begin = n * split / splits;
  const int64_t end = n * (split + 1) / splits;
  const int32_t* blocks = table + uint64_t{request} * max_blocks;
  const uint32_t epad = v.experts_padded;
  const uint32_t words = v.layers * epad / 4;
  const uint64_t row_words = words;
  const uint32_t* rows = reinterpret_cast<const uint32_t*>(v.rows);
  const uint64_t cells = uint64_t{v.layers} * v.experts;
  int16_t* request_out = out + request * cells;
  int32_t* partial = scratch.partial + uint64_t{request} * words * 4;

  const uint32_t passes = (words + kSumThreads - 1) / kSumThreads;
  for (uint32_t pass = 0; pass < passes; ++pass) {
    const uint32_t w = pass * kSumThreads + tid;
    const bool active = w < words;
    int32_t acc[4] = {0, 0, 0, 0};
    for (int64_t c = begin; c < end; c += kSumChunk) {
      const uint32_t len = static_cast<uint32_t>(end - c < kSumChunk ? end - c : kSumChunk);
      __syncthreads();
      for (uint32_t i = tid; i < len; i += kSumThreads) {
        int32_t b = __ldg(blocks + c + i);
        if (b < 0 || static_cast<uint32_t>(b) >= v.num_blocks) {
          atomicOr(&cta_flags, kErrBlockId);
          b = -1;
        }
        block_ids[i] = b;
      }
      __syncthreads();
      if (!active) continue;
      // Bytes 0 and 2 in `even`, 1 and 3 in `odd`: two 16-bit sums per register.
      uint32_t even = 0, odd = 0;
#pragma unroll 4
      for (uint32_t i = 0; i < len; ++i) {
        const int32_t b = block_ids[i];
        if (b < 0) continue;
        const uint32_t x = __ldg(rows + uint64_t(b) * row_words + w);
        even += x & 0x00ff00ffu;
        odd += (x >> 8) & 0x00ff00ffu;
      }
      acc[0] += static_cast<int32_t>(even & 0xffffu);
      acc[1] += static_cast<int32_t>(odd & 0xffffu);
      acc[2] += static_cast<int32_t>(even >> 16);
      acc[3] += static_cast<int32_t>(odd >> 16);
    }
    if (!active) continue;
    if (splits == 1) {
      finalize_cells(w, acc, epad, v.experts, request_out, &cta_flags);
    } else {
#pragma unroll
      for (int b = 0; b < 4; ++b)
        if (acc[b] != 0) atomicAdd(partial + uint64_t{w} * 4 + b, acc[b]);
    }
  }

  if (splits > 1) {
    __threadfence();
    __syncthreads();
    if (tid == 0) last_arrival = atomicAdd(scratch.arrivals + request, 1u) == splits - 1;
    __syncthreads();
    if (last_arrival) {
      __threadfence();
      for (uint32_t w = tid; w < words; w += kSumThreads) {
        int32_t acc[4];
#pragma unroll
        for (int b = 0; b < 4; ++b) {
          acc[b] = __ldcg(partial + uint64_t{w} * 4 + b);
          partial[uint64_t{w} * 4 + b] = 0;
        }
        finalize_cells(w, acc, epad, v.experts, request_out, &cta_flags);
      }
      if (tid == 0) scratch.arrivals[request] = 0;
    }
  }
  __syncthreads();
  if (tid == 0 && cta_flags != 0) {
    atomicOr(scratch.request_flags + request, cta_flags);
    atomicOr(flags, cta_flags);
  }
}

// ---- ring hand-off --------------------------------------------------------

constexpr int kHandoffThreads = 512;

__global__ void __launch_bounds__(kHandoffThreads) handoff_kernel(const HandoffBatch b) {
  __shared__ bool last;
  const uint32_t r = blockIdx.x;
  const int16_t* footprint = b.footprints + uint64_t{r} * b.cells;
  int16_t* dst = b.dst[r];
  const bool poisoned = __ldg(b.request_flags + r) != 0;
  // Pairs of cells as 32-bit stores where dst allows (fewer, wider PCIe writes).
  if ((reinterpret_cast<uintptr_t>(dst) & 3u) == 0) {
    uint32_t* dst2 = reinterpret_cast<uint32_t*>(dst);
    for (uint32_t i = threadIdx.x; i < b.cells / 2; i += kHandoffThreads) {
      const uint32_t lo = poisoned ? 0xffffu : static_cast<uint16_t>(footprint[2 * i]);
      const uint32_t hi = poisoned ? 0xffffu : static_cast<uint16_t>(footprint[2 * i + 1]);
      dst2[i] = lo | (hi << 16);
    }
    if ((b.cells & 1u) != 0 && threadIdx.x == 0)
      dst[b.cells - 1] = poisoned ? int16_t(-1) : footprint[b.cells - 1];
  } else {
    for (uint32_t i = threadIdx.x; i < b.cells; i += kHandoffThreads)
      dst[i] = poisoned ? int16_t(-1) : footprint[i];
  }
  // Every thread's payload stores are ordered before the barrier at system
  // scope; the arrival count then orders every CTA's before the commit.
  __threadfence_system();
  __syncthreads();
  if (threadIdx.x == 0) last = gridDim.x == 1 || atomicAdd(b.arrivals, 1u) == gridDim.x - 1;
  __syncthreads();
  if (threadIdx.x == 0 && last) {
    if (gridDim.x > 1) {
      __threadfence_system();
      *b.arrivals = 0;  // zero again for the next launch (stream order)
    }
    // One store publishes the batch to the daemon's CPU.
    asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(b.commit_word), "l"(b.commit_value)
                 : "memory");
  }
}

// Up to 8 warps per CTA, as many as the shared-memory budget's histograms allow.
struct AccumulateShape {
  uint32_t warps = 0;
  uint64_t grid = 0;
  size_t shared_bytes = 0;
};
static_assert(padded_experts(kMaxExperts) * sizeof(uint32_t) <= kHistogramBytesLimit,
              "one warp's histogram must fit the shared-memory budget");

AccumulateShape accumulate_shape(const RowsView& v, uint32_t tokens, uint32_t call_layers) {
  const size_t hist_bytes = size_t{v.experts_padded} * sizeof(uint32_t);
  AccumulateShape shape;
  shape.warps = static_cast<uint32_t>(std::clamp<size_t>(kHistogramBytesLimit / hist_bytes, 1, 8));
  const uint64_t items = (uint64_t{tokens} + kWarp - 1) / kWarp * call_layers;
  shape.grid = (items + shape.warps - 1) / shape.warps;
  shape.shared_bytes = shape.warps * hist_bytes;
  return shape;
}

// Launches with the status of this launch alone: cudaGetLastError after a
// <<<>>> launch may instead report an error an earlier, unrelated launch of
// the engine left behind (and then a step would be launched in part).
template <class... Params, class... Args>
cudaError_t launch(void (*kernel)(Params...), dim3 grid, unsigned threads, cudaStream_t stream,
                   Args... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = dim3(threads);
  config.stream = stream;
  return cudaLaunchKernelEx(&config, kernel, args...);
}

template <class Id>
cudaError_t launch_accumulate(const RowsView& v, const AccumulateShape& shape, const Id* ids,
                              uint32_t tokens, uint32_t call_layers, uint32_t layer_begin,
                              uint32_t top_k, const int64_t* slots, uint64_t capacity,
                              uint32_t* flags, cudaStream_t stream) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(shape.grid));
  config.blockDim = dim3(shape.warps * kWarp);
  config.dynamicSmemBytes = shape.shared_bytes;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  cudaError_t e = cudaLaunchKernelEx(&config, accumulate_kernel<Id>, ids, slots, tokens,
                                     call_layers, layer_begin, top_k, v, capacity, flags);
  if (e == cudaSuccess) return e;
  // Where programmatic dependent launch is refused, an ordinary launch is
  // just as correct (griddepcontrol.wait is then a no-op), only a bit later.
  cudaGetLastError();
  config.numAttrs = 0;
  return cudaLaunchKernelEx(&config, accumulate_kernel<Id>, ids, slots, tokens, call_layers,
                            layer_begin, top_k, v, capacity, flags);
}

}  // namespace

cudaError_t launch_update(const RowsView& v, const void* ids, uint32_t id_bytes, uint32_t tokens,
                          int32_t layer, uint32_t top_k, const int64_t* slot_mapping,
                          uint32_t* flags, cudaStream_t stream) {
  if (tokens == 0) return cudaSuccess;
  const uint32_t call_layers = layer < 0 ? v.layers : 1u;
  const uint32_t layer_begin = layer < 0 ? 0u : static_cast<uint32_t>(layer);
  const uint64_t capacity = uint64_t{v.num_blocks} * v.block_size;
  const uint64_t row_bytes = uint64_t{v.layers} * v.experts_padded;

  // Checked before the resets are enqueued: a step is launched whole or not at all.
  const AccumulateShape shape = accumulate_shape(v, tokens, call_layers);
  if (shape.grid > 0x7fffffffu) return cudaErrorInvalidConfiguration;

  constexpr unsigned kResetThreads = 256;
  const uint64_t reset_grid = (uint64_t{tokens} * kWarp + kResetThreads - 1) / kResetThreads;
  if (cudaError_t e = launch(reset_heads_kernel, dim3(static_cast<unsigned>(reset_grid)),
                             kResetThreads, stream, slot_mapping, tokens, v.block_size, capacity,
                             v.rows, row_bytes, uint64_t{layer_begin} * v.experts_padded,
                             call_layers * v.experts_padded / 4, flags);
      e != cudaSuccess)
    return e;

  if (id_bytes == 8)
    return launch_accumulate(v, shape, static_cast<const int64_t*>(ids), tokens, call_layers,
                             layer_begin, top_k, slot_mapping, capacity, flags, stream);
  return launch_accumulate(v, shape, static_cast<const int32_t*>(ids), tokens, call_layers,
                           layer_begin, top_k, slot_mapping, capacity, flags, stream);
}

uint32_t sum_splits(uint32_t max_blocks, uint32_t requests, int sm_count) {
  // At least 16 blocks per CTA (below that the partial sums' atomics cost
  // more than the split saves), and about two CTAs per SM over all requests.
  const uint64_t by_work = (uint64_t{max_blocks} + 15) / 16;
  const uint64_t by_grid =
      std::max<uint64_t>(1, (2 * static_cast<uint64_t>(std::max(sm_count, 1)) + requests - 1) /
                                std::max<uint32_t>(requests, 1));
  return static_cast<uint32_t>(std::clamp<uint64_t>(std::min(by_work, by_grid), 1, 65535));
}

cudaError_t launch_sum(const RowsView& v, const int32_t* block_table, uint32_t max_blocks,
                       const int32_t* num_blocks, uint32_t requests, int16_t* out,
                       const SumScratch& scratch, uint32_t* flags, int sm_count,
                       cudaStream_t stream) {
  if (requests == 0) return cudaSuccess;
  if (cudaError_t e =
          cudaMemsetAsync(scratch.request_flags, 0, requests * sizeof(uint32_t), stream);
      e != cudaSuccess)
    return e;
  const uint32_t splits = sum_splits(max_blocks, requests, sm_count);
  if (requests > 65535) return cudaErrorInvalidConfiguration;
  return launch(sum_kernel, dim3(splits, requests), kSumThreads, stream, v, block_table, max_blocks,
                num_blocks, out, scratch, flags);
}

cudaError_t launch_handoff(const HandoffBatch& batch, cudaStream_t stream) {
  if (batch.count == 0 || batch.count > kHandoffBatch) return cudaErrorInvalidValue;
  return launch(handoff_kernel, dim3(batch.count), kHandoffThreads, stream, batch);
}

}  // namespace eldr::gpu::detail
