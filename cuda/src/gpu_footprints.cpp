// GpuFootprints, the CUDA footprint collector's host code: option
// validation, creation (the device's block rows and scratch), the block-row
// updates, the request sums and the read-backs. The ring hand-off
// (push_requests) is in gpu_footprints_push.cpp, the kernels in gpu_kernels.cu.
#include "eldr/cuda/gpu_footprints.hpp"

#include <cuda_runtime_api.h>

#include <cstring>
#include <string>

#include "eldr/signature_cache.hpp"
#include "gpu_footprints_impl.hpp"
#include "gpu_kernels.hpp"

namespace eldr::gpu {

namespace {

using detail::cuda_error;
using detail::device_view;
using detail::DeviceScope;
using detail::RowsView;

static_assert(detail::kErrExpertId == kRowErrExpertId && detail::kErrSlot == kRowErrSlot &&
                  detail::kErrBlockRow == kRowErrBlockRow &&
                  detail::kErrFootprint == kRowErrFootprint &&
                  detail::kErrBlockId == kRowErrBlockId,
              "the kernels' error bits drifted from the CPU reference's");

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

GpuFootprints::Impl::~Impl() {
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
