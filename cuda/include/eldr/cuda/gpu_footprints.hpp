// GPU footprint collection (docs/design.md §6): per-KV-block expert-count rows kept on
// the device next to the KV cache, updated from the router's top-k ids each
// engine step, summed into a request's int16 footprint when its prefill ends,
// and handed to eldrd straight from the GPU into the client's ring.
//
// Internal C++ face of the C API's eldr_gpu_* calls (libeldr.so); the exact
// semantics are those of eldr::BlockRows::accumulate / sum_requests (the CPU
// reference in the core): bad input is skipped and reported through sticky
// kRowErr* bits, never wrapped.
//
// Not thread-safe: issue the calls on one object one at a time. Sums and
// pushes wait on the GPU for the previous sum or push, whatever its stream;
// update_blocks goes on the stream of the sums that read its rows (the rows
// and the flags are shared state). Pointers marked [device] must be
// device-accessible (device, managed or mapped pinned host memory); anything
// else is rejected before a kernel could fault on it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "eldr/geometry.hpp"
#include "eldr/status.hpp"

namespace eldr::shm {
class Client;
}

namespace eldr::gpu {

// True when the CUDA runtime finds at least one device (false without a
// driver or a device; never throws).
bool device_available() noexcept;

struct Options {
  Geometry geometry;            // top_k > 0
  uint32_t block_size = 16;     // KV block size in tokens, 1..255
  uint32_t num_blocks = 0;      // physical KV blocks
  uint32_t max_requests = 256;  // per sum / push call
  int32_t device = 0;           // CUDA device ordinal
};

// Checks options without touching CUDA (invalid_argument).
Status validate(const Options& options);

class GpuFootprints {
 public:
  // invalid_argument for bad options, cuda when there is no usable device,
  // out_of_memory when the rows do not fit.
  static Result<std::unique_ptr<GpuFootprints>> create(const Options& options);
  ~GpuFootprints();
  GpuFootprints(const GpuFootprints&) = delete;
  GpuFootprints& operator=(const GpuFootprints&) = delete;

  // One engine step. expert_ids [device]: [tokens][L][k] (layer < 0) or
  // [tokens][k] (layer >= 0), id_bytes 4 (int32) or 8 (int64); slot_mapping
  // [device] int64 [tokens]. Enqueued on `stream` (a cudaStream_t).
  Status update_blocks(const void* expert_ids, uint32_t id_bytes, uint32_t tokens, int32_t layer,
                       const int64_t* slot_mapping, void* stream);

  // block_table [device] int32 [requests][max_blocks], num_blocks [device]
  // int32 [requests], out [device or mapped host] int16 [requests][L][E].
  Status sum_requests(const int32_t* block_table, uint32_t max_blocks, const int32_t* num_blocks,
                      uint32_t requests, int16_t* out, void* stream);

  // Sums, then writes one FootprintMsg record per request into the client's
  // ring from the GPU (payload, system fence, commit store), without waiting
  // for the GPU: the host claims every record and writes its message around
  // the counts, then enqueues the sum and the hand-off on `stream` (one
  // launch per 32 requests), and, on a stream of this object's, a host
  // function that wakes the daemon after the commits.
  // - All or none: every request is claimed before anything is enqueued.
  //   ring_full: retry later; capacity: the step cannot fit the client's
  //   ring even when empty; state: the stream is capturing a CUDA graph.
  // - A request whose sum is flagged gets a record with negative counts,
  //   which the daemon rejects with an error decision for its id.
  // - Records are committed in call order: each sum or push waits (on the
  //   GPU, not the host) for the previous one, whatever their streams. The
  //   client must be this object's alone: while hand-offs are in flight, its
  //   CPU pushes return Errc::state. A client closed meanwhile keeps its slot
  //   until the last hand-off has committed.
  // - The client's ring (its own region of the segment: 4 KiB plus the ring
  //   size) is registered with CUDA (page-locked, mapped) on first use; the
  //   ring of an earlier attachment of the client is released when the client
  //   re-attached (after a device synchronise), the others when this object
  //   is destroyed.
  Status push_requests(shm::Client& client, std::span<const std::string_view> request_ids,
                       const int32_t* block_table, uint32_t max_blocks, const int32_t* num_blocks,
                       void* stream);

  // Reads and clears the sticky kRowErr* bits (synchronises the stream).
  Result<uint32_t> take_errors(void* stream);

  // For tests and tools: the rows, unpadded [num_blocks][L][E], and the
  // per-request bits of the last sum (synchronise the stream).
  Result<std::vector<uint8_t>> copy_rows(void* stream) const;
  Result<std::vector<uint32_t>> request_flags(uint32_t requests, void* stream) const;

  const Options& options() const noexcept;

 private:
  struct Impl;
  explicit GpuFootprints(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> m_impl;
};

}  // namespace eldr::gpu
