// The experimental GPU section in a library built without CUDA: every call
// says so (ELDR_E_UNSUPPORTED with a message) instead of being absent, so
// bindings link against every build alike.
#include "capi_internal.hpp"

namespace {

constexpr const char* kNoCuda = "this libeldr was built without CUDA (ELDR_ENABLE_CUDA=OFF)";

}  // namespace

extern "C" {

bool eldr_gpu_available(void) { return false; }

eldr_status_t eldr_gpu_footprints_new(const eldr_gpu_options_t*, eldr_gpu_footprints_t**) {
  return eldr::capi::fail(ELDR_E_UNSUPPORTED, "eldr_gpu_footprints_new", kNoCuda);
}

void eldr_gpu_footprints_free(eldr_gpu_footprints_t*) {}

eldr_status_t eldr_gpu_footprints_update_blocks(eldr_gpu_footprints_t*, const void*, uint32_t,
                                                uint32_t, int32_t, const int64_t*, void*) {
  return eldr::capi::fail(ELDR_E_UNSUPPORTED, "eldr_gpu_footprints_update_blocks", kNoCuda);
}

eldr_status_t eldr_gpu_footprints_sum_requests(eldr_gpu_footprints_t*, const int32_t*, uint32_t,
                                               const int32_t*, uint32_t, int16_t*, void*) {
  return eldr::capi::fail(ELDR_E_UNSUPPORTED, "eldr_gpu_footprints_sum_requests", kNoCuda);
}

eldr_status_t eldr_gpu_footprints_push_requests(eldr_gpu_footprints_t*, eldr_client_t*,
                                                const char* const*, const int32_t*, uint32_t,
                                                const int32_t*, uint32_t, void*) {
  return eldr::capi::fail(ELDR_E_UNSUPPORTED, "eldr_gpu_footprints_push_requests", kNoCuda);
}

eldr_status_t eldr_gpu_footprints_take_errors(eldr_gpu_footprints_t*, void*, uint32_t*) {
  return eldr::capi::fail(ELDR_E_UNSUPPORTED, "eldr_gpu_footprints_take_errors", kNoCuda);
}

}  // extern "C"
