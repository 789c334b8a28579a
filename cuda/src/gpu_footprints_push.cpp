// GpuFootprints' ring hand-off: push_requests claims a step's footprint
// records in the client's ring on the host, registers the ring's pages with
// CUDA, sums the requests on the GPU and has the hand-off kernel write the
// counts and commit the records, then rings the daemon's doorbell.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <ctime>
#include <functional>
#include <optional>
#include <span>
#include <string>

#include "eldr/cuda/gpu_footprints.hpp"
#include "eldr/shm.hpp"
#include "eldr/shm/records.hpp"
#include "eldr/shm/ring.hpp"
#include "eldr/signature_cache.hpp"
#include "gpu_footprints_impl.hpp"
#include "gpu_kernels.hpp"

namespace eldr::gpu {

namespace {

using detail::cuda_error;
using detail::DeviceScope;
using detail::Range;

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

void GpuFootprints::Impl::finish_push(shm::Client& client, cudaStream_t stream) {
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

Status GpuFootprints::Impl::register_ring(const shm::Client& client,
                                          const shm::Client::Claim& claim) {
  const RingKey key{&client, client.daemon_generation(), client.reattachments(), claim.commit_word};
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
  const bool known = std::any_of(registered.begin(), registered.end(), [&](const Registration& r) {
    return r.ring.same_file_range(*ring);
  });
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

}  // namespace eldr::gpu
