// The C API's experimental GPU section (eldr.h, ELDR_EXPERIMENTAL_GPU) over
// eldr::gpu::GpuFootprints. Compiled into libeldr.so when CUDA is enabled.
#include <memory>
#include <string_view>
#include <vector>

#include "capi_internal.hpp"
#include "eldr/cuda/gpu_footprints.hpp"
#include "eldr/signature_cache.hpp"

static_assert(ELDR_GPU_ERR_EXPERT_ID == eldr::kRowErrExpertId &&
                  ELDR_GPU_ERR_SLOT == eldr::kRowErrSlot &&
                  ELDR_GPU_ERR_BLOCK_ROW == eldr::kRowErrBlockRow &&
                  ELDR_GPU_ERR_FOOTPRINT == eldr::kRowErrFootprint &&
                  ELDR_GPU_ERR_BLOCK_ID == eldr::kRowErrBlockId,
              "ELDR_GPU_ERR_* drifted from the core's kRowErr* bits");

struct eldr_gpu_footprints {
  std::unique_ptr<eldr::gpu::GpuFootprints> impl;
};

namespace {

using eldr::capi::fail;

eldr_status_t status_of(const eldr::Status& s) { return s ? ELDR_OK : fail(s); }

}  // namespace

extern "C" {

ELDR_API bool eldr_gpu_available(void) { return eldr::gpu::device_available(); }

ELDR_API eldr_status_t eldr_gpu_footprints_new(const eldr_gpu_options_t* opts,
                                               eldr_gpu_footprints_t** out) {
  return eldr::capi::guarded("eldr_gpu_footprints_new", [&]() -> eldr_status_t {
    if (opts == nullptr) return fail(ELDR_E_INVALID_ARGUMENT, "opts is NULL");
    if (out == nullptr) return fail(ELDR_E_INVALID_ARGUMENT, "out is NULL");
    if (opts->version == 0)
      return fail(ELDR_E_INVALID_ARGUMENT, "opts->version is 0: use ELDR_GPU_OPTIONS_INIT");
    if (opts->version > ELDR_GPU_OPTIONS_VERSION)
      return fail(ELDR_E_UNSUPPORTED, "opts->version " + std::to_string(opts->version) +
                                          " is newer than this library's " +
                                          std::to_string(ELDR_GPU_OPTIONS_VERSION));
    eldr::gpu::Options o;
    o.geometry = {opts->layers, opts->experts, opts->top_k};
    o.block_size = opts->block_size;
    o.num_blocks = opts->num_blocks;
    o.max_requests = opts->max_requests_per_step;
    o.device = opts->device;
    auto created = eldr::gpu::GpuFootprints::create(o);
    if (!created) return fail(created.status());
    *out = new eldr_gpu_footprints{std::move(created).value()};
    return ELDR_OK;
  });
}

ELDR_API void eldr_gpu_footprints_free(eldr_gpu_footprints_t* gpu) { delete gpu; }

ELDR_API eldr_status_t eldr_gpu_footprints_update_blocks(eldr_gpu_footprints_t* gpu,
                                                         const void* expert_ids, uint32_t id_bytes,
                                                         uint32_t tokens, int32_t layer,
                                                         const int64_t* slot_mapping,
                                                         void* stream) {
  return eldr::capi::guarded("eldr_gpu_footprints_update_blocks", [&]() -> eldr_status_t {
    if (gpu == nullptr) return fail(ELDR_E_INVALID_ARGUMENT, "gpu is NULL");
    if (tokens > 0 && expert_ids == nullptr)
      return fail(ELDR_E_INVALID_ARGUMENT, "expert_ids is NULL");
    if (tokens > 0 && slot_mapping == nullptr)
      return fail(ELDR_E_INVALID_ARGUMENT, "slot_mapping is NULL");
    return status_of(
        gpu->impl->update_blocks(expert_ids, id_bytes, tokens, layer, slot_mapping, stream));
  });
}

ELDR_API eldr_status_t eldr_gpu_footprints_sum_requests(
    eldr_gpu_footprints_t* gpu, const int32_t* block_table, uint32_t max_blocks,
    const int32_t* num_blocks, uint32_t requests, int16_t* out, void* stream) {
  return eldr::capi::guarded("eldr_gpu_footprints_sum_requests", [&]() -> eldr_status_t {
    if (gpu == nullptr) return fail(ELDR_E_INVALID_ARGUMENT, "gpu is NULL");
    if (requests > 0 &&
        (num_blocks == nullptr || out == nullptr || (max_blocks > 0 && block_table == nullptr)))
      return fail(ELDR_E_INVALID_ARGUMENT, "block_table, num_blocks or out is NULL");
    return status_of(
        gpu->impl->sum_requests(block_table, max_blocks, num_blocks, requests, out, stream));
  });
}

ELDR_API eldr_status_t eldr_gpu_footprints_push_requests(
    eldr_gpu_footprints_t* gpu, eldr_client_t* client, const char* const* request_ids,
    const int32_t* block_table, uint32_t max_blocks, const int32_t* num_blocks, uint32_t requests,
    void* stream) {
  return eldr::capi::guarded("eldr_gpu_footprints_push_requests", [&]() -> eldr_status_t {
    if (gpu == nullptr) return fail(ELDR_E_INVALID_ARGUMENT, "gpu is NULL");
    eldr::shm::Client* c = eldr::capi::client_of(client);
    if (c == nullptr) return fail(ELDR_E_INVALID_ARGUMENT, "client is NULL");
    if (requests > 0 && (request_ids == nullptr || num_blocks == nullptr ||
                         (max_blocks > 0 && block_table == nullptr)))
      return fail(ELDR_E_INVALID_ARGUMENT, "request_ids, block_table or num_blocks is NULL");
    if (requests > gpu->impl->options().max_requests)
      return fail(ELDR_E_INVALID_ARGUMENT, "requests exceed max_requests_per_step");
    std::vector<std::string_view> ids(requests);
    for (uint32_t r = 0; r < requests; ++r) {
      if (request_ids[r] == nullptr)
        return fail(ELDR_E_INVALID_ARGUMENT, "request_ids[" + std::to_string(r) + "] is NULL");
      // Bounded scan: a valid id has at most kMaxRequestId bytes.
      const char* id = request_ids[r];
      size_t n = 0;
      while (n <= eldr::shm::kMaxRequestId && id[n] != '\0') ++n;
      ids[r] = std::string_view(id, n);
    }
    return status_of(
        gpu->impl->push_requests(*c, ids, block_table, max_blocks, num_blocks, stream));
  });
}

ELDR_API eldr_status_t eldr_gpu_footprints_take_errors(eldr_gpu_footprints_t* gpu, void* stream,
                                                       uint32_t* out) {
  return eldr::capi::guarded("eldr_gpu_footprints_take_errors", [&]() -> eldr_status_t {
    if (gpu == nullptr) return fail(ELDR_E_INVALID_ARGUMENT, "gpu is NULL");
    if (out == nullptr) return fail(ELDR_E_INVALID_ARGUMENT, "out is NULL");
    auto taken = gpu->impl->take_errors(stream);
    if (!taken) return fail(taken.status());
    *out = taken.value();
    return ELDR_OK;
  });
}

}  // extern "C"
