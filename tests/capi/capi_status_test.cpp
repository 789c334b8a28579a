// Status names and strings, version queries, the per-thread last error, and
// the GPU section of a library built without CUDA.
#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <string>
#include <thread>

#include "capi_test_support.hpp"
#include "eldr/eldr.h"

namespace {

constexpr eldr_status_t kAllCodes[] = {
    ELDR_OK,
    ELDR_E_INVALID_ARGUMENT,
    ELDR_E_SHAPE_MISMATCH,
    ELDR_E_OUT_OF_RANGE,
    ELDR_E_IO,
    ELDR_E_CORRUPT,
    ELDR_E_UNSUPPORTED,
    ELDR_E_NOT_FOUND,
    ELDR_E_NO_WORKER,
    ELDR_E_CAPACITY,
    ELDR_E_STATE,
    ELDR_E_INTERNAL,
    ELDR_E_RING_FULL,
    ELDR_E_TIMEOUT,
    ELDR_E_NO_DAEMON,
    ELDR_E_INCOMPATIBLE,
    ELDR_E_OUT_OF_MEMORY,
    ELDR_E_CUDA,
    ELDR_E_PERMISSION,
};

TEST(capi_status, every_code_has_its_own_name_and_string) {
  std::set<std::string> names, strings;
  for (eldr_status_t code : kAllCodes) {
    const std::string name = eldr_status_name(code);
    const std::string text = eldr_status_string(code);
    EXPECT_EQ(name.rfind("ELDR_", 0), 0u) << code;
    EXPECT_NE(name, "ELDR_E_UNKNOWN") << code;
    EXPECT_FALSE(text.empty()) << code;
    names.insert(name);
    strings.insert(text);
  }
  EXPECT_EQ(names.size(), std::size(kAllCodes));
  EXPECT_EQ(strings.size(), std::size(kAllCodes));
  EXPECT_STREQ(eldr_status_name(ELDR_OK), "ELDR_OK");
  EXPECT_STREQ(eldr_status_name(ELDR_E_TIMEOUT), "ELDR_E_TIMEOUT");
  EXPECT_STREQ(eldr_status_name(ELDR_E_PERMISSION), "ELDR_E_PERMISSION");
}

TEST(capi_status, unknown_codes_get_the_unknown_name) {
  for (eldr_status_t code : {1, -19, -1000, INT32_MIN, INT32_MAX}) {
    EXPECT_STREQ(eldr_status_name(code), "ELDR_E_UNKNOWN") << code;
    EXPECT_STREQ(eldr_status_string(code), "unknown status code") << code;
  }
}

TEST(capi_status, version_and_abi_match_the_header) {
  EXPECT_EQ(eldr_version_number(), static_cast<uint32_t>(ELDR_VERSION_NUMBER));
  EXPECT_EQ(eldr_abi_version(), static_cast<uint32_t>(ELDR_ABI_VERSION));
  EXPECT_EQ(ELDR_VERSION_NUMBER,
            ELDR_VERSION_MAJOR * 10000 + ELDR_VERSION_MINOR * 100 + ELDR_VERSION_PATCH);
  const std::string expected = std::to_string(ELDR_VERSION_MAJOR) + "." +
                               std::to_string(ELDR_VERSION_MINOR) + "." +
                               std::to_string(ELDR_VERSION_PATCH);
  EXPECT_EQ(std::string(eldr_version_string()), expected);
}

TEST(capi_status, last_error_names_the_call_and_the_argument) {
  int32_t worker = -1;
  ASSERT_EQ(eldr::capi_test::route_worker(nullptr, nullptr, 1, 1, &worker),
            ELDR_E_INVALID_ARGUMENT);
  EXPECT_TRUE(eldr::capi_test::message_names("eldr_router_route"));
  EXPECT_NE(std::string(eldr_last_error_message()).find("router"), std::string::npos);
  EXPECT_EQ(worker, -1);
}

TEST(capi_status, last_error_stays_until_the_next_failure) {
  ASSERT_EQ(eldr_table_load(nullptr, nullptr), ELDR_E_INVALID_ARGUMENT);
  const std::string first = eldr_last_error_message();
  uint32_t v = eldr_abi_version();  // a call that cannot fail leaves the message alone
  EXPECT_EQ(v, static_cast<uint32_t>(ELDR_ABI_VERSION));
  EXPECT_EQ(first, eldr_last_error_message());
  eldr_table_t* table = nullptr;
  ASSERT_EQ(eldr_table_load("/nonexistent/eldr/h3/table.eldr", &table), ELDR_E_IO);
  EXPECT_TRUE(eldr::capi_test::message_names("eldr_table_load"));
  EXPECT_NE(first, eldr_last_error_message());
  EXPECT_EQ(table, nullptr);
}

TEST(capi_status, last_error_is_per_thread) {
  ASSERT_EQ(eldr_table_load(nullptr, nullptr), ELDR_E_INVALID_ARGUMENT);
  const std::string mine = eldr_last_error_message();
  std::string other_before, other_after;
  std::thread other([&] {
    other_before = eldr_last_error_message();
    EXPECT_EQ(eldr_router_complete_worker(nullptr, 0), ELDR_E_INVALID_ARGUMENT);
    other_after = eldr_last_error_message();
  });
  other.join();
  EXPECT_EQ(other_before, "");
  EXPECT_NE(other_after.find("eldr_router_complete_worker"), std::string::npos);
  EXPECT_EQ(mine, eldr_last_error_message());
}

TEST(capi_status, policy_names_cover_every_policy) {
  EXPECT_STREQ(eldr_policy_name(ELDR_POLICY_ELDR), "eldr");
  EXPECT_STREQ(eldr_policy_name(ELDR_POLICY_ROUND_ROBIN), "round_robin");
  std::set<std::string> names;
  EXPECT_STREQ(eldr_policy_name(ELDR_POLICY_ELDR_COST), "eldr_cost");
  for (uint32_t p = ELDR_POLICY_ELDR; p <= ELDR_POLICY_ELDR_COST; ++p) {
    ASSERT_NE(eldr_policy_name(p), nullptr) << p;
    names.insert(eldr_policy_name(p));
  }
  EXPECT_EQ(names.size(), 8u);
  EXPECT_EQ(eldr_policy_name(ELDR_POLICY_ELDR_COST + 1), nullptr);
  EXPECT_EQ(eldr_policy_name(UINT32_MAX), nullptr);
}

TEST(capi_status, init_functions_match_the_init_macros) {
  eldr_decision_t d;
  std::memset(&d, 0xab, sizeof d);
  eldr_decision_init(&d);
  const eldr_decision_t d0 = ELDR_DECISION_INIT;
  EXPECT_EQ(std::memcmp(&d, &d0, sizeof d), 0);
  EXPECT_EQ(d.version, static_cast<uint32_t>(ELDR_DECISION_VERSION));
  EXPECT_EQ(d.worker, -1);

  eldr_client_options_t c;
  std::memset(&c, 0xab, sizeof c);
  eldr_client_options_init(&c);
  const eldr_client_options_t c0 = ELDR_CLIENT_OPTIONS_INIT;
  EXPECT_EQ(std::memcmp(&c, &c0, sizeof c), 0);

  eldr_fit_options_t f;
  std::memset(&f, 0xab, sizeof f);
  eldr_fit_options_init(&f);
  const eldr_fit_options_t f0 = ELDR_FIT_OPTIONS_INIT;
  EXPECT_EQ(std::memcmp(&f, &f0, sizeof f), 0);

  eldr_router_options_t r;
  std::memset(&r, 0xab, sizeof r);
  eldr_router_options_init(&r);
  const eldr_router_options_t r0 = ELDR_ROUTER_OPTIONS_INIT;
  EXPECT_EQ(std::memcmp(&r, &r0, sizeof r), 0);

  eldr_table_info_t t;
  std::memset(&t, 0xab, sizeof t);
  eldr_table_info_init(&t);
  const eldr_table_info_t t0 = ELDR_TABLE_INFO_INIT;
  EXPECT_EQ(std::memcmp(&t, &t0, sizeof t), 0);

  eldr_worker_report_t w;
  std::memset(&w, 0xab, sizeof w);
  eldr_worker_report_init(&w);
  const eldr_worker_report_t w0 = ELDR_WORKER_REPORT_INIT;
  EXPECT_EQ(std::memcmp(&w, &w0, sizeof w), 0);

  // NULL is a no-op, not a crash.
  eldr_decision_init(nullptr);
  eldr_worker_report_init(nullptr);
  eldr_client_options_init(nullptr);
  eldr_fit_options_init(nullptr);
  eldr_router_options_init(nullptr);
  eldr_table_info_init(nullptr);
}

TEST(capi_status, destroy_functions_accept_null) {
  // A destructor given NULL does nothing: it returns, and it neither sets nor
  // clears the thread's last error (a destructor has no status to report).
  ASSERT_EQ(eldr_table_load(nullptr, nullptr), ELDR_E_INVALID_ARGUMENT);
  const std::string before = eldr_last_error_message();
  ASSERT_TRUE(eldr::capi_test::message_names("eldr_table_load"));
  eldr_table_free(nullptr);
  EXPECT_EQ(before, eldr_last_error_message()) << "eldr_table_free(NULL)";
  eldr_router_free(nullptr);
  EXPECT_EQ(before, eldr_last_error_message()) << "eldr_router_free(NULL)";
  eldr_client_free(nullptr);
  EXPECT_EQ(before, eldr_last_error_message()) << "eldr_client_free(NULL)";
  eldr_pool_free(nullptr);
  EXPECT_EQ(before, eldr_last_error_message()) << "eldr_pool_free(NULL)";
  eldr_gpu_footprints_free(nullptr);
  EXPECT_EQ(before, eldr_last_error_message()) << "eldr_gpu_footprints_free(NULL)";
  // The library still answers afterwards: the next failure replaces the message.
  EXPECT_EQ(eldr_router_complete(nullptr, 0), ELDR_E_INVALID_ARGUMENT);
  EXPECT_TRUE(eldr::capi_test::message_names("eldr_router_complete"));
}

TEST(capi_gpu, a_build_without_cuda_answers_unsupported_with_a_message) {
#if defined(ELDR_CAPI_TEST_WITH_CUDA)
  GTEST_SKIP() << "CUDA build: the cuda suite tests the GPU section";
#endif
  EXPECT_FALSE(eldr_gpu_available());
  eldr_gpu_options_t options = ELDR_GPU_OPTIONS_INIT;
  eldr_gpu_footprints_t* gpu = nullptr;
  EXPECT_EQ(eldr_gpu_footprints_new(&options, &gpu), ELDR_E_UNSUPPORTED);
  EXPECT_EQ(gpu, nullptr);
  EXPECT_TRUE(eldr::capi_test::message_names("eldr_gpu_footprints_new"));
  EXPECT_EQ(eldr_gpu_footprints_update_blocks(nullptr, nullptr, 4, 0, -1, nullptr, nullptr),
            ELDR_E_UNSUPPORTED);
  EXPECT_EQ(eldr_gpu_footprints_sum_requests(nullptr, nullptr, 0, nullptr, 0, nullptr, nullptr),
            ELDR_E_UNSUPPORTED);
  EXPECT_EQ(
      eldr_gpu_footprints_push_requests(nullptr, nullptr, nullptr, nullptr, 0, nullptr, 0, nullptr),
      ELDR_E_UNSUPPORTED);
  uint32_t flags = 77;
  EXPECT_EQ(eldr_gpu_footprints_take_errors(nullptr, nullptr, &flags), ELDR_E_UNSUPPORTED);
  EXPECT_EQ(flags, 77u);
  eldr_gpu_footprints_free(nullptr);
}

}  // namespace
