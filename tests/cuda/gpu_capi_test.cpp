// The C API's GPU section through libeldr.so: argument validation answers
// with a status and a message whether or not a device exists (no crash, no
// CUDA context touched for a NULL or a bad option); with a device, the calls
// that need a live handle are checked too.
#define ELDR_EXPERIMENTAL_GPU
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "eldr/eldr.h"

namespace {

eldr_gpu_options_t good_options() {
  eldr_gpu_options_t o = ELDR_GPU_OPTIONS_INIT;
  o.layers = 4;
  o.experts = 8;
  o.top_k = 2;
  o.block_size = 16;
  o.num_blocks = 8;
  o.max_requests_per_step = 4;
  return o;
}

std::string last_message() { return eldr_last_error_message(); }

TEST(GpuCapiTest, null_arguments_are_invalid_without_touching_a_device) {
  eldr_gpu_footprints_t* sut = nullptr;
  eldr_gpu_options_t o = good_options();
  EXPECT_EQ(eldr_gpu_footprints_new(nullptr, &sut), ELDR_E_INVALID_ARGUMENT);
  EXPECT_NE(last_message().find("opts"), std::string::npos);
  EXPECT_EQ(eldr_gpu_footprints_new(&o, nullptr), ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(sut, nullptr);
  int32_t x = 0;
  int64_t slot = 0;
  int16_t out = 0;
  uint32_t flags = 0;
  const char* id = "r";
  EXPECT_EQ(eldr_gpu_footprints_update_blocks(nullptr, &x, 4, 1, -1, &slot, nullptr),
            ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_gpu_footprints_sum_requests(nullptr, &x, 1, &x, 1, &out, nullptr),
            ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_gpu_footprints_push_requests(nullptr, nullptr, &id, &x, 1, &x, 1, nullptr),
            ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_gpu_footprints_take_errors(nullptr, nullptr, &flags), ELDR_E_INVALID_ARGUMENT);
  EXPECT_FALSE(last_message().empty());
  eldr_gpu_footprints_free(nullptr);  // accepted, like every _free
}

TEST(GpuCapiTest, bad_options_are_rejected_before_any_device_check) {
  struct Bad {
    const char* what;
    void (*edit)(eldr_gpu_options_t&);
    eldr_status_t want;
  };
  const Bad cases[] = {
      {"version 0", [](eldr_gpu_options_t& o) { o.version = 0; }, ELDR_E_INVALID_ARGUMENT},
      {"newer version", [](eldr_gpu_options_t& o) { o.version = 2; }, ELDR_E_UNSUPPORTED},
      {"no layers", [](eldr_gpu_options_t& o) { o.layers = 0; }, ELDR_E_INVALID_ARGUMENT},
      {"no experts", [](eldr_gpu_options_t& o) { o.experts = 0; }, ELDR_E_INVALID_ARGUMENT},
      {"top_k 0", [](eldr_gpu_options_t& o) { o.top_k = 0; }, ELDR_E_INVALID_ARGUMENT},
      {"block_size 0", [](eldr_gpu_options_t& o) { o.block_size = 0; }, ELDR_E_INVALID_ARGUMENT},
      {"block_size 256", [](eldr_gpu_options_t& o) { o.block_size = 256; },
       ELDR_E_INVALID_ARGUMENT},
      {"no blocks", [](eldr_gpu_options_t& o) { o.num_blocks = 0; }, ELDR_E_INVALID_ARGUMENT},
      {"no requests", [](eldr_gpu_options_t& o) { o.max_requests_per_step = 0; },
       ELDR_E_INVALID_ARGUMENT},
      {"device -1", [](eldr_gpu_options_t& o) { o.device = -1; }, ELDR_E_INVALID_ARGUMENT},
  };
  for (const Bad& c : cases) {
    SCOPED_TRACE(c.what);
    eldr_gpu_options_t o = good_options();
    c.edit(o);
    eldr_gpu_footprints_t* sut = nullptr;
    EXPECT_EQ(eldr_gpu_footprints_new(&o, &sut), c.want);
    EXPECT_EQ(sut, nullptr);
    EXPECT_FALSE(last_message().empty());
  }
}

TEST(GpuCapiTest, valid_options_without_a_device_are_a_cuda_error) {
  if (eldr_gpu_available()) GTEST_SKIP() << "a CUDA device is present";
  eldr_gpu_options_t o = good_options();
  eldr_gpu_footprints_t* sut = nullptr;
  EXPECT_EQ(eldr_gpu_footprints_new(&o, &sut), ELDR_E_CUDA);
  EXPECT_EQ(sut, nullptr);
  EXPECT_NE(last_message().find("CUDA"), std::string::npos) << last_message();
}

TEST(GpuCapiTest, cuda_available_agrees_with_the_runtime) {
  int count = 0;
  const bool runtime = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
  cudaGetLastError();
  EXPECT_EQ(eldr_gpu_available(), runtime);
}

TEST(GpuCapiTest, live_handle_validates_every_argument) {
  if (!eldr_gpu_available()) GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount found none)";
  eldr_gpu_options_t o = good_options();
  eldr_gpu_footprints_t* sut = nullptr;
  ASSERT_EQ(eldr_gpu_footprints_new(&o, &sut), ELDR_OK) << last_message();
  int32_t* ids = nullptr;
  int64_t* slots = nullptr;
  int16_t* out = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&ids), 64 * sizeof(int32_t)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&slots), 4 * sizeof(int64_t)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&out), 4 * 32 * sizeof(int16_t)), cudaSuccess);
  ASSERT_EQ(cudaMemset(ids, 0, 64 * sizeof(int32_t)), cudaSuccess);
  ASSERT_EQ(cudaMemset(slots, 0, 4 * sizeof(int64_t)), cudaSuccess);
  std::vector<int32_t> host(64, 0);

  EXPECT_EQ(eldr_gpu_footprints_update_blocks(sut, ids, 3, 4, -1, slots, nullptr),
            ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_gpu_footprints_update_blocks(sut, ids, 4, 4, 4, slots, nullptr),
            ELDR_E_OUT_OF_RANGE);
  EXPECT_EQ(eldr_gpu_footprints_update_blocks(sut, nullptr, 4, 4, -1, slots, nullptr),
            ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_gpu_footprints_update_blocks(sut, host.data(), 4, 4, -1, slots, nullptr),
            ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_gpu_footprints_update_blocks(sut, ids, 4, 4, -1, slots, nullptr), ELDR_OK)
      << last_message();
  EXPECT_EQ(eldr_gpu_footprints_sum_requests(sut, ids, 1, ids, 5, out, nullptr),
            ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_gpu_footprints_sum_requests(sut, ids, 1, nullptr, 1, out, nullptr),
            ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_gpu_footprints_sum_requests(sut, ids, 1, ids, 1, out, nullptr), ELDR_OK)
      << last_message();
  const char* id = "r";
  EXPECT_EQ(eldr_gpu_footprints_push_requests(sut, nullptr, &id, ids, 1, ids, 1, nullptr),
            ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_gpu_footprints_take_errors(sut, nullptr, nullptr), ELDR_E_INVALID_ARGUMENT);
  uint32_t flags = 99;
  EXPECT_EQ(eldr_gpu_footprints_take_errors(sut, nullptr, &flags), ELDR_OK) << last_message();
  EXPECT_EQ(flags, 0u);
  eldr_gpu_footprints_free(sut);
  cudaFree(ids);
  cudaFree(slots);
  cudaFree(out);
}

}  // namespace
