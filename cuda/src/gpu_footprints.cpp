#include "eldr/cuda/gpu_footprints.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <ctime>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <type_traits>

#include "eldr/shm.hpp"
#include "eldr/shm/records.hpp"
#include "eldr/shm/ring.hpp"
#include "eldr/signature_cache.hpp"
#include "gpu_kernels.hpp"

namespace eldr::gpu {

namespace {

using detail::RowsView;

static_assert(detail::kErrExpertId == kRowErrExpertId && detail::kErrSlot == kRowErrSlot &&
                  detail::kErrBlockRow == kRowErrBlockRow &&
                  detail::kErrFootprint == kRowErrFootprint &&
                  detail::kErrBlockId == kRowErrBlockId,
              "the kernels' error bits drifted from the CPU reference's");

Status cuda_error(cudaError_t e, const std::string& what) {
  cudaGetLastError();  // clear a non-sticky error so the next call starts clean
  const Errc code = e == cudaErrorMemoryAllocation ? Errc::out_of_memory : Errc::cuda;
  return {code, what + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")"};
}

#define ELDR_CUDA_TRY(call, what)                                                \
  do {                                                                           \
    if (cudaError_t e_ = (call); e_ != cudaSuccess) return cuda_error(e_, what); \
  } while (0)

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

// The whole mapping that holds p.
std::optional<Range> mapping_of(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  std::FILE* maps = std::fopen("/proc/self/maps", "re");
  if (maps == nullptr) return std::nullopt;
  std::optional<Range> found;
  char line[4096];
  while (std::fgets(line, sizeof(line), maps) != nullptr) {
    unsigned long long begin = 0, end = 0, offset = 0, inode = 0;
    unsigned major = 0, minor = 0;
    char perms[8] = {};
    if (std::sscanf(line, "%llx-%llx %7s %llx %x:%x %llu", &begin, &end, perms, &offset, &major,
                    &minor, &inode) != 7)
      continue;
    if (address >= begin && address < end) {
      found = Range{static_cast<uintptr_t>(begin), static_cast<uintptr_t>(end),
                    (uint64_t{major} << 32) | minor, inode, offset};
      break;
    }
  }
  std::fclose(maps);
  return found;
}

// The file range mapped at `bytes`, which must lie inside one mapping.
std::optional<Range> file_range_of(std::span<const uint8_t> bytes) {
  const auto begin = reinterpret_cast<uintptr_t>(bytes.data());
  const std::optional<Range> mapping = mapping_of(bytes.data());
  if (bytes.empty() || !mapping || !mapping->contains(begin, bytes.size())) return std::nullopt;
  return Range{begin, begin + bytes.size(), mapping->device, mapping->inode,
               mapping->offset + (begin - mapping->begin)};
}

uint64_t realtime_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// A CUDA host function: wakes the daemon once the stream has passed the
// hand-off's commit (the GPU cannot make the futex call itself).
void CUDART_CB ring_doorbell_once(void* bell) {
  auto* ring = static_cast<std::function<void()>*>(bell);
  (*ring)();
  delete ring;
}

}  // namespace

bool device_available() noexcept {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return count > 0;
}

Status validate(const Options& o) {
  ELDR_TRY(o.geometry.validate());
  if (o.geometry.top_k == 0)
    return {Errc::invalid_argument, "top_k must be > 0 (expert ids are [tokens][L][k])"};
  if (o.block_size == 0 || o.block_size > kMaxBlockSize)
    return {Errc::invalid_argument, "block_size must be in [1, " + std::to_string(kMaxBlockSize) +
                                        "], got " + std::to_string(o.block_size)};
  if (o.num_blocks == 0) return {Errc::invalid_argument, "num_blocks must be > 0"};
  if (o.max_requests == 0 || o.max_requests > 65535)
    return {Errc::invalid_argument,
            "max_requests_per_step must be in [1, 65535], got " + std::to_string(o.max_requests)};
  if (o.device < 0)
    return {Errc::invalid_argument, "device must be >= 0, got " + std::to_string(o.device)};
  return Status::ok();
}

struct GpuFootprints::Impl {
  Options options;
  RowsView rows;
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
    Range ring;
    bool borrowed = false;  // registered by someone else, who may unregister it
  };
  std::optional<KnownRing> known_ring;
  struct Registration {  // a ring this object registered, and for which attachment
    Range ring;
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

  ~Impl() {
    DeviceScope scope(options.device);
    // push_requests does not wait for the GPU: hand-offs may still be writing
    // into the registered rings, and doorbells be pending on bell_stream.
    cudaDeviceSynchronize();
    for (const Registration& r : registered)
      cudaHostUnregister(reinterpret_cast<void*>(r.ring.begin));
    cudaFree(rows.rows);
    cudaFree(flags);
    cudaFree(scratch.partial);
    cudaFree(scratch.arrivals);
    cudaFree(scratch.request_flags);
    cudaFree(footprints);
    cudaFree(handoff_arrivals);
    cudaFreeHost(host_flags);
    if (bell_stream != nullptr) cudaStreamDestroy(bell_stream);
    if (done_event != nullptr) cudaEventDestroy(done_event);
    cudaGetLastError();
  }

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
  void finish_push(shm::Client& client, cudaStream_t stream) {
    std::function<void()> bell = client.doorbell();
    if (mark_done(stream)) {
      bell();  // the stream has run: ring now
      return;
    }
    if (cudaStreamWaitEvent(bell_stream, done_event, 0) != cudaSuccess) {
      cudaGetLastError();
      return;
    }
    auto* pending = new std::function<void()>(std::move(bell));
    if (cudaLaunchHostFunc(bell_stream, ring_doorbell_once, pending) != cudaSuccess) {
      delete pending;
      cudaGetLastError();
    }
  }

  size_t padded_row_bytes() const { return size_t{rows.layers} * rows.experts_padded; }
  size_t cells() const { return options.geometry.cells(); }

  // Registers the client's ring (Claim::ring: its positions and data, not
  // the rest of the segment) with CUDA on first use. /proc/self/maps is read
  // again only when the client's attachment changed (an engine process has
  // thousands of mappings), for the ring's file identity: a restarted
  // daemon's new segment may be mapped at the very addresses of the old one.
  Status register_ring(const shm::Client& client, const shm::Client::Claim& claim) {
    const RingKey key{&client, client.daemon_generation(), client.reattachments(),
                      claim.commit_word};
    const auto payload = reinterpret_cast<uintptr_t>(claim.payload.data());
    if (known_ring && known_ring->key == key &&
        known_ring->ring.contains(payload, claim.payload.size()))
      return Status::ok();
    known_ring.reset();
    auto ring = file_range_of(claim.ring);
    if (!ring || !ring->contains(reinterpret_cast<uintptr_t>(claim.commit_word), 8) ||
        !ring->contains(payload, claim.payload.size()))
      return Status{Errc::internal,
                    "the claim is not inside its ring, or the ring not inside "
                    "one mapping of this process"};
    const bool known =
        std::any_of(registered.begin(), registered.end(),
                    [&](const Registration& r) { return r.ring.same_file_range(*ring); });
    if (!known) {
      // A ring of ours that overlaps it, or that this client wrote before it
      // re-attached, is gone. Hand-offs still in flight may write there: let
      // them finish before unpinning.
      const auto stale = [&](const Registration& r) {
        return r.ring.overlaps(*ring) || (r.key.client == key.client && r.key != key);
      };
      if (std::any_of(registered.begin(), registered.end(), stale))
        ELDR_CUDA_TRY(cudaDeviceSynchronize(), "waiting for the hand-offs into a gone ring");
      std::erase_if(registered, [&](const Registration& r) {
        const bool gone = stale(r);
        if (gone && cudaHostUnregister(reinterpret_cast<void*>(r.ring.begin)) != cudaSuccess)
          cudaGetLastError();  // its mapping is gone already: nothing left pinned
        return gone;
      });
      const cudaError_t e =
          cudaHostRegister(reinterpret_cast<void*>(ring->begin), ring->end - ring->begin,
                           cudaHostRegisterMapped | cudaHostRegisterPortable);
      if (e == cudaErrorHostMemoryAlreadyRegistered) {
        cudaGetLastError();  // registered by someone else (the engine): usable, not ours
        known_ring = KnownRing{key, *ring, true};
        return Status::ok();
      }
      if (e != cudaSuccess) return cuda_error(e, "cudaHostRegister of the client's ring");
      registered.push_back(Registration{*ring, key});
    }
    known_ring = KnownRing{key, *ring};
    return Status::ok();
  }

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
    auto counts = device_view(num_blocks, "num_blocks", options.device);
    if (!counts) return counts.status();
    num_blocks = counts.value();
    if (max_blocks > 0) {
      auto table = device_view(block_table, "block_table", options.device);
      if (!table) return table.status();
      block_table = table.value();
    }
    return Status::ok();
  }
};

GpuFootprints::GpuFootprints(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
GpuFootprints::~GpuFootprints() = default;
const Options& GpuFootprints::options() const noexcept { return m_impl->options; }

Result<std::unique_ptr<GpuFootprints>> GpuFootprints::create(const Options& options) {
  ELDR_TRY(validate(options));
  int count = 0;
  if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess)
    return cuda_error(e, "no usable CUDA device");
  if (options.device >= count)
    return Status{Errc::invalid_argument, "device " + std::to_string(options.device) +
                                              " does not exist (" + std::to_string(count) +
                                              " CUDA devices)"};
  DeviceScope scope(options.device);
  ELDR_CUDA_TRY(scope.status(), "cudaSetDevice(" + std::to_string(options.device) + ")");

  auto impl = std::make_unique<Impl>();
  impl->options = options;
  const Geometry& g = options.geometry;
  RowsView& v = impl->rows;
  v.num_blocks = options.num_blocks;
  v.layers = g.layers;
  v.experts = g.experts;
  v.experts_padded = detail::padded_experts(g.experts);
  v.block_size = options.block_size;
  ELDR_CUDA_TRY(
      cudaDeviceGetAttribute(&impl->sm_count, cudaDevAttrMultiProcessorCount, options.device),
      "cudaDeviceGetAttribute");

  const size_t row_bytes = impl->padded_row_bytes();
  const size_t rows_bytes = row_bytes * options.num_blocks;
  ELDR_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&v.rows), rows_bytes),
                "allocating " + std::to_string(rows_bytes) + " bytes of block rows");
  ELDR_CUDA_TRY(cudaMemset(v.rows, 0, rows_bytes), "cudaMemset");
  ELDR_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&impl->flags), sizeof(uint32_t)), "cudaMalloc");
  ELDR_CUDA_TRY(cudaMemset(impl->flags, 0, sizeof(uint32_t)), "cudaMemset");
  const size_t partial_bytes = size_t{options.max_requests} * row_bytes * sizeof(int32_t);
  ELDR_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&impl->scratch.partial), partial_bytes),
                "allocating the request-sum scratch");
  ELDR_CUDA_TRY(cudaMemset(impl->scratch.partial, 0, partial_bytes), "cudaMemset");
  const size_t per_request = size_t{options.max_requests} * sizeof(uint32_t);
  ELDR_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&impl->scratch.arrivals), per_request),
                "cudaMalloc");
  ELDR_CUDA_TRY(cudaMemset(impl->scratch.arrivals, 0, per_request), "cudaMemset");
  ELDR_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&impl->scratch.request_flags), per_request),
                "cudaMalloc");
  ELDR_CUDA_TRY(cudaMemset(impl->scratch.request_flags, 0, per_request), "cudaMemset");
  ELDR_CUDA_TRY(cudaMallocHost(reinterpret_cast<void**>(&impl->host_flags), sizeof(uint32_t)),
                "cudaMallocHost");
  ELDR_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&impl->handoff_arrivals), sizeof(uint32_t)),
                "cudaMalloc");
  ELDR_CUDA_TRY(cudaMemset(impl->handoff_arrivals, 0, sizeof(uint32_t)), "cudaMemset");
  ELDR_CUDA_TRY(cudaStreamCreateWithFlags(&impl->bell_stream, cudaStreamNonBlocking),
                "creating the doorbell stream");
  ELDR_CUDA_TRY(cudaEventCreateWithFlags(&impl->done_event, cudaEventDisableTiming),
                "creating the ordering event");
  ELDR_CUDA_TRY(cudaDeviceSynchronize(), "initialising the block rows");
  return std::unique_ptr<GpuFootprints>(new GpuFootprints(std::move(impl)));
}

Status GpuFootprints::update_blocks(const void* expert_ids, uint32_t id_bytes, uint32_t tokens,
                                    int32_t layer, const int64_t* slot_mapping, void* stream) {
  Impl& m = *m_impl;
  if (id_bytes != 4 && id_bytes != 8)
    return {Errc::invalid_argument,
            "id_bytes must be 4 (int32) or 8 (int64), got " + std::to_string(id_bytes)};
  if (layer >= 0 && static_cast<uint32_t>(layer) >= m.rows.layers)
    return {Errc::out_of_range, "layer " + std::to_string(layer) + " is outside [0, " +
                                    std::to_string(m.rows.layers) + ")"};
  if (tokens == 0) return Status::ok();
  DeviceScope scope(m.options.device);
  ELDR_CUDA_TRY(scope.status(), "cudaSetDevice");
  auto ids = device_view(expert_ids, "expert_ids", m.options.device);
  if (!ids) return ids.status();
  auto slots = device_view(slot_mapping, "slot_mapping", m.options.device);
  if (!slots) return slots.status();
  ELDR_CUDA_TRY(
      detail::launch_update(m.rows, ids.value(), id_bytes, tokens, layer, m.options.geometry.top_k,
                            slots.value(), m.flags, static_cast<cudaStream_t>(stream)),
      "block-row update kernel launch");
  return Status::ok();
}

Status GpuFootprints::sum_requests(const int32_t* block_table, uint32_t max_blocks,
                                   const int32_t* num_blocks, uint32_t requests, int16_t* out,
                                   void* stream) {
  Impl& m = *m_impl;
  if (requests == 0) return Status::ok();
  DeviceScope scope(m.options.device);
  ELDR_CUDA_TRY(scope.status(), "cudaSetDevice");
  ELDR_TRY(m.check_sum_args(block_table, max_blocks, num_blocks, requests));
  auto dst = device_view(out, "out", m.options.device);
  if (!dst) return dst.status();
  const auto s = static_cast<cudaStream_t>(stream);
  ELDR_TRY(m.order_after_last(s));
  const Status summed = m.sum(block_table, max_blocks, num_blocks, requests, dst.value(), s);
  m.mark_done(s);  // its memset may have been enqueued even when the kernel was not
  return summed;
}

Status GpuFootprints::push_requests(shm::Client& client,
                                    std::span<const std::string_view> request_ids,
                                    const int32_t* block_table, uint32_t max_blocks,
                                    const int32_t* num_blocks, void* stream) {
  Impl& m = *m_impl;
  const auto requests = static_cast<uint32_t>(request_ids.size());
  if (request_ids.size() > m.options.max_requests)
    return {Errc::invalid_argument, std::to_string(request_ids.size()) +
                                        " requests exceed max_requests_per_step " +
                                        std::to_string(m.options.max_requests)};
  for (size_t r = 0; r < request_ids.size(); ++r)
    if (Status s = shm::validate_request_id(request_ids[r]); !s)
      return {s.code(), "request_ids[" + std::to_string(r) + "]: " + s.message()};
  if (requests == 0) return Status::ok();
  DeviceScope scope(m.options.device);
  ELDR_CUDA_TRY(scope.status(), "cudaSetDevice");
  const auto s = static_cast<cudaStream_t>(stream);
  // Claims are made on the host at call time: a graph replay would commit
  // stale positions into the ring.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  ELDR_CUDA_TRY(cudaStreamIsCapturing(s, &capture), "cudaStreamIsCapturing");
  if (capture != cudaStreamCaptureStatusNone)
    return {Errc::state,
            "push_requests cannot be captured in a CUDA graph: its ring records are claimed on "
            "the host when it is called"};
  ELDR_TRY(m.check_sum_args(block_table, max_blocks, num_blocks, requests));
  const size_t cells = m.cells();
  if (m.footprints == nullptr)
    ELDR_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&m.footprints),
                             size_t{m.options.max_requests} * cells * sizeof(int16_t)),
                  "allocating the push staging footprints");

  // Every record is claimed (and its message written around the counts)
  // before anything is enqueued: a step reaches the ring whole or not at all.
  // Nothing waits for the GPU: earlier steps' claims may still be pending.
  const Geometry& g = m.options.geometry;
  const uint64_t prefill_end_ns = realtime_ns();
  m.claims.clear();
  m.counts_addresses.clear();
  auto abort_from = [&](size_t first, Status st) {
    if (first < m.claims.size()) (void)client.abort(m.claims[first]);
    return st;
  };
  uint64_t attachment = 0;
  for (uint32_t r = 0; r < requests; ++r) {
    if (Status st =
            m.encoder.encode_dense_skeleton(request_ids[r], g.layers, g.experts, prefill_end_ns);
        !st)
      return abort_from(0, st);
    auto claim = client.claim(shm::RecordType::footprint, m.encoder.size());
    if (!claim) {
      Status st = claim.status();
      if (st.code() == Errc::ring_full) {
        // Retrying helps only if the whole step fits an empty ring.
        uint64_t need = (requests - r + 1) * shm::detail::record_span(m.encoder.size());
        for (const shm::Client::Claim& c : m.claims)
          need += shm::detail::record_span(c.payload.size());
        const uint32_t ring = client.ring_bytes();
        if (need > ring)
          st = {Errc::capacity, "a step of " + std::to_string(requests) +
                                    " footprints needs about " + std::to_string(need) +
                                    " bytes of a client ring of " + std::to_string(ring) +
                                    ": push fewer requests per call or raise eldrd's ring_bytes"};
      }
      return abort_from(
          0, {st.code(), st.message() + " (claiming request " + std::to_string(r) + " of " +
                             std::to_string(requests) + "; none was pushed)"});
    }
    m.claims.push_back(*claim);
    if (r == 0) attachment = client.reattachments();
    if (client.reattachments() != attachment) {
      // The client re-attached to a restarted daemon between two claims: the
      // earlier ones went with the old ring. Drop this one too.
      (void)client.abort(*claim);
      return Status{Errc::no_daemon,
                    "the daemon restarted while the step's records were claimed; none was pushed"};
    }
    if (Status st = m.register_ring(client, *claim); !st) return abort_from(0, st);
    auto* host_counts =
        reinterpret_cast<int16_t*>(claim->payload.data() + m.encoder.counts_offset());
    auto counts = m.device_address(host_counts);
    if (!counts && m.known_ring && m.known_ring->borrowed) {
      // Whoever had registered the ring has unregistered it since: register it ourselves.
      m.known_ring.reset();
      if (Status st = m.register_ring(client, *claim); !st) return abort_from(0, st);
      counts = m.device_address(host_counts);
    }
    if (!counts) return abort_from(0, counts.status());
    m.encoder.write_to(claim->payload.data());  // everything but the counts
    m.counts_addresses.push_back(*counts);
  }
  auto commit_word = m.device_address(m.claims.front().commit_word);
  if (!commit_word) return abort_from(0, commit_word.status());
  if (Status st = m.order_after_last(s); !st) return abort_from(0, st);
  if (Status st = m.sum(block_table, max_blocks, num_blocks, requests, m.footprints, s); !st) {
    m.mark_done(s);
    return abort_from(0, st);
  }
  // The messages' bytes are written before the launch that publishes them.
  std::atomic_thread_fence(std::memory_order_release);
  for (uint32_t first = 0; first < requests; first += detail::kHandoffBatch) {
    detail::HandoffBatch batch;
    batch.count = std::min(detail::kHandoffBatch, requests - first);
    batch.footprints = m.footprints + size_t{first} * cells;
    batch.request_flags = m.scratch.request_flags + first;
    batch.arrivals = m.handoff_arrivals;
    batch.commit_word = *commit_word;
    batch.commit_value = m.claims[first + batch.count - 1].commit_position;
    batch.cells = static_cast<uint32_t>(cells);
    std::copy_n(m.counts_addresses.begin() + first, batch.count, batch.dst);
    if (cudaError_t e = detail::launch_handoff(batch, s); e != cudaSuccess) {
      Status st = cuda_error(e, "ring hand-off kernel launch");
      if (first > 0)
        m.finish_push(client, s);  // the batches before this one were enqueued
      else
        m.mark_done(s);  // the sum was
      return abort_from(first,
                        {st.code(), st.message() + " (requests [0, " + std::to_string(first) +
                                        ") were pushed, the rest not)"});
    }
  }
  m.finish_push(client, s);
  return Status::ok();
}

Result<uint32_t> GpuFootprints::take_errors(void* stream) {
  Impl& m = *m_impl;
  DeviceScope scope(m.options.device);
  ELDR_CUDA_TRY(scope.status(), "cudaSetDevice");
  const auto s = static_cast<cudaStream_t>(stream);
  ELDR_CUDA_TRY(cudaMemcpyAsync(m.host_flags, m.flags, sizeof(uint32_t), cudaMemcpyDeviceToHost, s),
                "reading the error flags");
  ELDR_CUDA_TRY(cudaMemsetAsync(m.flags, 0, sizeof(uint32_t), s), "clearing the error flags");
  ELDR_CUDA_TRY(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  return *m.host_flags;
}

Result<std::vector<uint8_t>> GpuFootprints::copy_rows(void* stream) const {
  const Impl& m = *m_impl;
  DeviceScope scope(m.options.device);
  ELDR_CUDA_TRY(scope.status(), "cudaSetDevice");
  const auto s = static_cast<cudaStream_t>(stream);
  const size_t padded = m.padded_row_bytes() / m.rows.layers;
  std::vector<uint8_t> raw(m.padded_row_bytes() * m.rows.num_blocks);
  ELDR_CUDA_TRY(cudaMemcpyAsync(raw.data(), m.rows.rows, raw.size(), cudaMemcpyDeviceToHost, s),
                "copying the rows");
  ELDR_CUDA_TRY(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  const size_t experts = m.rows.experts;
  std::vector<uint8_t> out(size_t{m.rows.num_blocks} * m.rows.layers * experts);
  for (size_t i = 0; i < size_t{m.rows.num_blocks} * m.rows.layers; ++i)
    std::memcpy(out.data() + i * experts, raw.data() + i * padded, experts);
  return out;
}

Result<std::vector<uint32_t>> GpuFootprints::request_flags(uint32_t requests, void* stream) const {
  const Impl& m = *m_impl;
  if (requests > m.options.max_requests)
    return Status{Errc::invalid_argument, "more requests than max_requests_per_step"};
  DeviceScope scope(m.options.device);
  ELDR_CUDA_TRY(scope.status(), "cudaSetDevice");
  const auto s = static_cast<cudaStream_t>(stream);
  std::vector<uint32_t> out(requests);
  ELDR_CUDA_TRY(cudaMemcpyAsync(out.data(), m.scratch.request_flags, requests * sizeof(uint32_t),
                                cudaMemcpyDeviceToHost, s),
                "copying the request flags");
  ELDR_CUDA_TRY(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  return out;
}

}  // namespace eldr::gpu
