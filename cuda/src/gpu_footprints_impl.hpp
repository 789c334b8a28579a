// GpuFootprints' private state (GpuFootprints::Impl) and the CUDA helpers
// its files share: gpu_footprints.cpp (options, creation, the block rows and
// the request sums) and gpu_footprints_push.cpp (the ring hand-off). Host
// code only: the kernels are in gpu_kernels.cu.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "eldr/cuda/gpu_footprints.hpp"
#include "eldr/shm.hpp"
#include "eldr/shm/records.hpp"
#include "eldr/signature_cache.hpp"
#include "gpu_kernels.hpp"

namespace eldr::gpu {

namespace detail {

inline Status cuda_error(cudaError_t e, const std::string& what) {
  cudaGetLastError();  // clear a non-sticky error so the next call starts clean
  const Errc code = e == cudaErrorMemoryAllocation ? Errc::out_of_memory : Errc::cuda;
  return {code, what + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")"};
}

// Makes the object's device current for one call and restores the caller's.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    if (cudaGetDevice(&m_previous) != cudaSuccess) m_previous = -1;
    m_status = m_previous == device ? cudaSuccess : cudaSetDevice(device);
  }
  ~DeviceScope() {
    if (m_previous >= 0 && m_status == cudaSuccess) cudaSetDevice(m_previous);
  }
  cudaError_t status() const { return m_status; }

 private:
  int m_previous = -1;
  cudaError_t m_status = cudaSuccess;
};

// A kernel given a pageable host pointer faults and takes the whole CUDA
// context (the engine's) down with it: check every pointer first. Returns the
// address the kernel must use (mapped host memory may have a device address
// of its own).
template <class T>
Result<T*> device_view(T* p, const char* what, int device) {
  if (p == nullptr) return Status{Errc::invalid_argument, std::string(what) + " is NULL"};
  cudaPointerAttributes a{};
  if (cudaError_t e = cudaPointerGetAttributes(&a, p); e != cudaSuccess) {
    cudaGetLastError();
    return Status{
        Errc::invalid_argument,
        std::string(what) + " is not a CUDA-accessible pointer (" + cudaGetErrorString(e) + ")"};
  }
  switch (a.type) {
    case cudaMemoryTypeDevice:
      if (a.device != device)
        return Status{Errc::invalid_argument, std::string(what) + " lives on device " +
                                                  std::to_string(a.device) + ", not on device " +
                                                  std::to_string(device)};
      return p;
    case cudaMemoryTypeManaged:
      return p;
    case cudaMemoryTypeHost:
      if (a.devicePointer == nullptr)
        return Status{Errc::invalid_argument,
                      std::string(what) + " is pinned host memory not mapped for the device"};
      return static_cast<T*>(a.devicePointer);
    default:
      return Status{Errc::invalid_argument,
                    std::string(what) +
                        " is ordinary host memory: pass device, managed or mapped pinned memory"};
  }
}

// Addresses of this process and the file bytes mapped there (/proc/self/maps).
// The file identity matters: a restarted daemon's new segment (a new file)
// may be mapped at the very addresses of the old one, and a registration made
// for the old pages would send the GPU's writes to pages nobody reads.
struct Range {
  uintptr_t begin = 0;
  uintptr_t end = 0;
  uint64_t device = 0;
  uint64_t inode = 0;
  uint64_t offset = 0;  // in the file, of begin
  bool contains(uintptr_t p, size_t n) const { return p >= begin && p + n <= end; }
  bool overlaps(const Range& o) const { return begin < o.end && o.begin < end; }
  bool same_file_range(const Range& o) const {
    return begin == o.begin && end == o.end && device == o.device && inode == o.inode &&
           offset == o.offset;
  }
};

}  // namespace detail

#define ELDR_CUDA_TRY(call, what)                       \
  do {                                                  \
    if (cudaError_t e_ = (call); e_ != cudaSuccess)     \
      return ::eldr::gpu::detail::cuda_error(e_, what); \
  } while (0)

struct GpuFootprints::Impl {
  Options options;
  detail::RowsView rows;
  uint32_t* flags = nullptr;       // device: sticky bits
  uint32_t* host_flags = nullptr;  // pinned: take_errors' landing word
  detail::SumScratch scratch;
  int16_t* footprints = nullptr;         // device [max_requests][L][E]: push staging, lazily
  uint32_t* handoff_arrivals = nullptr;  // device: the batched hand-off's arrival count
  int sm_count = 1;
  // The client attachment whose ring was last checked, and that ring; it is
  // looked up again only when the attachment changes.
  struct RingKey {
    const shm::Client* client = nullptr;
    uint64_t generation = 0;
    uint64_t reattachments = 0;
    const uint64_t* commit_word = nullptr;
    bool operator==(const RingKey&) const = default;
  };
  struct KnownRing {
    RingKey key;
    detail::Range ring;
    bool borrowed = false;  // registered by someone else, who may unregister it
  };
  std::optional<KnownRing> known_ring;
  struct Registration {  // a ring this object registered, and for which attachment
    detail::Range ring;
    RingKey key;
  };
  std::vector<Registration> registered;
  // Recorded after each sum and push. The sum scratch, the push staging and
  // the ring's commit order are shared by every call: the next sum or push,
  // on whatever stream (a handle may be reused, or per-thread), waits for it.
  cudaEvent_t done_event = nullptr;
  // The doorbell's host function runs on a stream of its own (a host
  // function stalls its stream until it has run), after done_event.
  cudaStream_t bell_stream = nullptr;
  // Scratch of push_requests, kept between calls.
  shm::detail::FootprintEncoder encoder;
  std::vector<shm::Client::Claim> claims;
  std::vector<int16_t*> counts_addresses;  // device addresses of each claim's counts

  ~Impl();

  // Before a sum or push on `stream`: after the last one, on the GPU.
  Status order_after_last(cudaStream_t stream) {
    ELDR_CUDA_TRY(cudaStreamWaitEvent(stream, done_event, 0),
                  "ordering after the previous sum or push");
    return Status::ok();
  }

  // After a sum or push was enqueued (in whole or in part) on `stream`. If
  // the event cannot be recorded, the host waits for the stream instead:
  // the next call must not overtake this one. Returns whether it waited.
  bool mark_done(cudaStream_t stream) {
    if (cudaEventRecord(done_event, stream) == cudaSuccess) return false;
    cudaGetLastError();
    cudaStreamSynchronize(stream);
    return true;
  }

  // After a push's hand-offs: marks them done and wakes the daemon (it may
  // be asleep on its doorbell) once the stream has passed them. If the host
  // function cannot be enqueued, the daemon still finds the records at its
  // next look (within 10 ms).
  void finish_push(shm::Client& client, cudaStream_t stream);

  size_t padded_row_bytes() const { return size_t{rows.layers} * rows.experts_padded; }
  size_t cells() const { return options.geometry.cells(); }

  // Registers the client's ring (Claim::ring: its positions and data, not
  // the rest of the segment) with CUDA on first use. /proc/self/maps is read
  // again only when the client's attachment changed (an engine process has
  // thousands of mappings), for the ring's file identity: a restarted
  // daemon's new segment may be mapped at the very addresses of the old one.
  Status register_ring(const shm::Client& client, const shm::Client::Claim& claim);

  // The device address of registered host memory.
  template <class T>
  Result<T*> device_address(T* host) {
    void* device = nullptr;
    ELDR_CUDA_TRY(cudaHostGetDevicePointer(&device, const_cast<std::remove_const_t<T>*>(host), 0),
                  "cudaHostGetDevicePointer of the ring's shared memory");
    return static_cast<T*>(device);
  }

  Status sum(const int32_t* block_table, uint32_t max_blocks, const int32_t* num_blocks,
             uint32_t requests, int16_t* out, cudaStream_t stream) {
    ELDR_CUDA_TRY(detail::launch_sum(rows, block_table, max_blocks, num_blocks, requests, out,
                                     scratch, flags, sm_count, stream),
                  "request-sum kernel launch");
    return Status::ok();
  }

  // Validates the sum's arguments; on success the table and counts hold the
  // addresses the kernel uses.
  Status check_sum_args(const int32_t*& block_table, uint32_t max_blocks,
                        const int32_t*& num_blocks, uint32_t requests) const {
    if (requests > options.max_requests)
      return {Errc::invalid_argument, std::to_string(requests) +
                                          " requests exceed max_requests_per_step " +
                                          std::to_string(options.max_requests)};
    if (max_blocks > kMaxBlocksPerRequest)
      return {Errc::invalid_argument, "max_blocks " + std::to_string(max_blocks) + " exceeds " +
                                          std::to_string(kMaxBlocksPerRequest)};
    auto counts = detail::device_view(num_blocks, "num_blocks", options.device);
    if (!counts) return counts.status();
    num_blocks = counts.value();
    if (max_blocks > 0) {
      auto table = detail::device_view(block_table, "block_table", options.device);
      if (!table) return table.status();
      block_table = table.value();
    }
    return Status::ok();
  }
};

}  // namespace eldr::gpu
