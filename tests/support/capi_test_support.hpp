// Shared fixtures of the C API tests: RAII owners for the C handles and a
// small two-domain calibration set whose fit gives two well separated
// clusters (requests of domain 0 use experts [0, E/2), domain 1 the rest).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "eldr/eldr.h"

namespace eldr::capi_test {

struct TableDeleter {
  void operator()(eldr_table_t* t) const noexcept { eldr_table_free(t); }
};
struct RouterDeleter {
  void operator()(eldr_router_t* r) const noexcept { eldr_router_free(r); }
};
struct ClientDeleter {
  void operator()(eldr_client_t* c) const noexcept { eldr_client_free(c); }
};
using TablePtr = std::unique_ptr<eldr_table_t, TableDeleter>;
using RouterPtr = std::unique_ptr<eldr_router_t, RouterDeleter>;
using ClientPtr = std::unique_ptr<eldr_client_t, ClientDeleter>;

// eldr_router_route for the tests that need only the worker id (NULL worker:
// NULL out, so the API's own NULL check is what a test sees).
inline eldr_status_t route_worker(eldr_router_t* router, const int16_t* counts, uint32_t layers,
                                  uint32_t experts, int32_t* worker) {
  eldr_decision_t d = ELDR_DECISION_INIT;
  const eldr_status_t s = eldr_router_route(router, counts, layers, experts, nullptr, 0,
                                            worker == nullptr ? nullptr : &d);
  if (s == ELDR_OK) *worker = d.worker;
  return s;
}

inline constexpr uint32_t kLayers = 2;
inline constexpr uint32_t kExperts = 8;
inline constexpr uint32_t kTopK = 2;
inline constexpr uint32_t kCells = kLayers * kExperts;

// One footprint of `domain` (0 or 1): tokens spread over that domain's half
// of the experts in every layer, with a per-request variation.
inline std::vector<int16_t> domain_footprint(uint32_t domain, uint32_t variant = 0) {
  std::vector<int16_t> counts(kCells, 0);
  const uint32_t half = kExperts / 2;
  for (uint32_t l = 0; l < kLayers; ++l) {
    for (uint32_t e = 0; e < half; ++e) {
      counts[l * kExperts + domain * half + e] = static_cast<int16_t>(1 + (e + variant) % 3);
    }
  }
  return counts;
}

// 2 * per_domain calibration footprints, alternating domains.
inline std::vector<int16_t> calibration(uint32_t per_domain) {
  std::vector<int16_t> all;
  for (uint32_t i = 0; i < 2 * per_domain; ++i) {
    const auto one = domain_footprint(i % 2, i / 2);
    all.insert(all.end(), one.begin(), one.end());
  }
  return all;
}

inline TablePtr fit_two_domain_table(uint64_t seed = 1) {
  const std::vector<int16_t> prefill = calibration(20);
  eldr_fit_options_t options = ELDR_FIT_OPTIONS_INIT;
  options.num_workers = 2;
  options.seed = seed;
  options.threads = 1;
  eldr_table_t* table = nullptr;
  const eldr_status_t s = eldr_table_fit(prefill.data(), nullptr, prefill.size() / kCells, kLayers,
                                         kExperts, kTopK, &options, &table);
  EXPECT_EQ(s, ELDR_OK) << eldr_last_error_message();
  return TablePtr(table);
}

inline RouterPtr make_router(const eldr_table_t* table, uint32_t policy = ELDR_POLICY_ELDR,
                             float tau = -1.0f) {
  eldr_router_options_t options = ELDR_ROUTER_OPTIONS_INIT;
  options.policy = policy;
  options.tau = tau;
  options.seed = 7;
  eldr_router_t* router = nullptr;
  const eldr_status_t s = eldr_router_new(table, &options, &router);
  EXPECT_EQ(s, ELDR_OK) << eldr_last_error_message();
  return RouterPtr(router);
}

// Worker ids in slot order.
inline std::vector<int32_t> worker_ids(const eldr_router_t* router) {
  uint32_t n = 0;
  EXPECT_EQ(eldr_router_get_worker_slots(router, &n), ELDR_OK);
  std::vector<int32_t> ids(n);
  EXPECT_EQ(eldr_router_get_workers(router, ids.data(), nullptr, nullptr, n), ELDR_OK);
  return ids;
}

inline std::vector<uint32_t> inflight(const eldr_router_t* router) {
  uint32_t n = 0;
  EXPECT_EQ(eldr_router_get_worker_slots(router, &n), ELDR_OK);
  std::vector<int32_t> ids(n);
  std::vector<uint32_t> loads(n);
  EXPECT_EQ(eldr_router_get_workers(router, ids.data(), nullptr, loads.data(), n), ELDR_OK);
  return loads;
}

// The message of the last failure names the function that failed.
inline ::testing::AssertionResult message_names(const char* fn) {
  const std::string message = eldr_last_error_message();
  if (message.find(fn) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "last error \"" << message << "\" does not name " << fn;
}

}  // namespace eldr::capi_test
