// Routed-expert payload decoders through the C API: payloads built here
// (ids, base64, .npy by encode_npy) against a bincount, and the C conventions
// (versions, NULLs, untouched out-params, the thread's message).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base64_support.hpp"
#include "eldr/eldr.h"
#include "eldr/npy.hpp"  // encode_npy: the one .npy writer

namespace {

using eldr::test_support::b64;

constexpr uint32_t kRows = 37, kHidden = 5, kK = 3, kExperts = 40;

struct Payload {
  std::vector<int32_t> ids;  // [rows][hidden][k]
  std::vector<uint8_t> bytes_i32, bytes_u8;
};

Payload make_payload(uint64_t seed) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  Payload p;
  for (uint32_t i = 0; i < kRows * kHidden * kK; ++i) {
    const auto id = static_cast<int32_t>(rng() % kExperts);
    p.ids.push_back(id);
    for (int b = 0; b < 4; ++b) p.bytes_i32.push_back(static_cast<uint8_t>(id >> (8 * b)));
    p.bytes_u8.push_back(static_cast<uint8_t>(id));
  }
  return p;
}

std::vector<int16_t> bincount(const Payload& p, const std::vector<uint32_t>& moe, uint64_t first,
                              uint64_t count) {
  std::vector<int16_t> fp(moe.size() * kExperts, 0);
  for (uint64_t r = first; r < first + count; ++r)
    for (size_t l = 0; l < moe.size(); ++l)
      for (uint32_t j = 0; j < kK; ++j) ++fp[l * kExperts + p.ids[(r * kHidden + moe[l]) * kK + j]];
  return fp;
}

std::vector<uint8_t> npy_u8(const std::vector<uint8_t>& data) {
  return eldr::encode_npy(eldr::NpyDtype::u8, std::vector<uint64_t>{kRows, kHidden, kK},
                          data.data())
      .value();
}

eldr_routed_experts_options_t options() {
  eldr_routed_experts_options_t o = ELDR_ROUTED_EXPERTS_OPTIONS_INIT;
  o.num_experts = kExperts;
  o.num_hidden_layers = kHidden;
  o.top_k = kK;
  return o;
}

TEST(capi_routed_experts, init_matches_macro) {
  eldr_routed_experts_options_t o;
  std::memset(&o, 0xab, sizeof o);
  eldr_routed_experts_options_init(&o);
  EXPECT_EQ(o.version, static_cast<uint32_t>(ELDR_ROUTED_EXPERTS_OPTIONS_VERSION));
  EXPECT_EQ(o.row_count, ELDR_ALL_ROWS);
  EXPECT_EQ(o.moe_layers, nullptr);
  eldr_routed_experts_info_t i;
  std::memset(&i, 0xab, sizeof i);
  eldr_routed_experts_info_init(&i);
  EXPECT_EQ(i.version, static_cast<uint32_t>(ELDR_ROUTED_EXPERTS_INFO_VERSION));
  EXPECT_EQ(i.cached_entries, 0u);
  eldr_routed_experts_options_init(nullptr);
  eldr_routed_experts_info_init(nullptr);
}

TEST(capi_routed_experts, every_entry_point_matches_bincount) {
  const Payload p = make_payload(1);
  const std::vector<uint32_t> moe = {1, 2, 4};  // hidden layers 0 and 3 are dense
  auto o = options();
  o.moe_layers = moe.data();
  o.num_moe_layers = static_cast<uint32_t>(moe.size());
  o.first_row = 3;
  o.row_count = 30;
  const auto want = bincount(p, moe, 3, 30);
  std::vector<int16_t> got(want.size(), -1);
  eldr_routed_experts_info_t info = ELDR_ROUTED_EXPERTS_INFO_INIT;

  ASSERT_EQ(eldr_routed_experts_decode_ids(p.bytes_i32.data(), p.bytes_i32.size(), ELDR_DTYPE_INT32,
                                           &o, got.data(), got.size(), &info),
            ELDR_OK)
      << eldr_last_error_message();
  EXPECT_EQ(got, want);
  EXPECT_EQ(info.rows_in_payload, kRows);
  EXPECT_EQ(info.rows_counted, 30u);
  EXPECT_EQ(info.layers, 3u);
  EXPECT_EQ(info.dtype, static_cast<uint32_t>(ELDR_DTYPE_INT32));

  const std::string text = b64(p.bytes_i32);
  std::fill(got.begin(), got.end(), -1);
  ASSERT_EQ(eldr_routed_experts_decode_base64_ids(text.data(), text.size(), ELDR_DTYPE_INT32, &o,
                                                  got.data(), got.size(), nullptr),
            ELDR_OK)
      << eldr_last_error_message();
  EXPECT_EQ(got, want);

  const std::string npy = b64(npy_u8(p.bytes_u8));
  auto from_shape = o;
  from_shape.num_hidden_layers = 0;
  from_shape.top_k = 0;
  for (int32_t dtype : {ELDR_DTYPE_AUTO, ELDR_DTYPE_UINT8}) {
    std::fill(got.begin(), got.end(), -1);
    info = ELDR_ROUTED_EXPERTS_INFO_INIT;
    ASSERT_EQ(eldr_routed_experts_decode_base64_npy(npy.data(), npy.size(), dtype, &from_shape,
                                                    got.data(), got.size(), &info),
              ELDR_OK)
        << eldr_last_error_message();
    EXPECT_EQ(got, want);
    EXPECT_EQ(info.dtype, static_cast<uint32_t>(ELDR_DTYPE_UINT8));
    EXPECT_EQ(info.num_hidden_layers, kHidden);
    EXPECT_EQ(info.top_k, kK);
  }
  info = ELDR_ROUTED_EXPERTS_INFO_INIT;
  ASSERT_EQ(eldr_routed_experts_inspect_base64_npy(npy.data(), npy.size(), &info), ELDR_OK);
  EXPECT_EQ(info.rows_in_payload, kRows);
  EXPECT_EQ(info.num_hidden_layers, kHidden);
  EXPECT_EQ(info.top_k, kK);
  EXPECT_EQ(info.rows_counted, 0u);
  const std::string cut = npy.substr(0, npy.size() - 8);
  EXPECT_EQ(eldr_routed_experts_inspect_base64_npy(cut.data(), cut.size(), &info), ELDR_E_CORRUPT);
}

TEST(capi_routed_experts, cached_entries_in_int16) {
  std::vector<uint8_t> bytes;
  for (int16_t v : {int16_t{-1}, int16_t{2}, int16_t{-1}, int16_t{0}}) {
    bytes.push_back(static_cast<uint8_t>(v & 0xff));
    bytes.push_back(static_cast<uint8_t>((v >> 8) & 0xff));
  }
  eldr_routed_experts_options_t o = ELDR_ROUTED_EXPERTS_OPTIONS_INIT;
  o.num_experts = 4;
  o.num_hidden_layers = 1;
  o.top_k = 2;
  std::vector<int16_t> got(4);
  eldr_routed_experts_info_t info = ELDR_ROUTED_EXPERTS_INFO_INIT;
  ASSERT_EQ(eldr_routed_experts_decode_ids(bytes.data(), bytes.size(), ELDR_DTYPE_INT16, &o,
                                           got.data(), got.size(), &info),
            ELDR_OK);
  EXPECT_EQ(got, (std::vector<int16_t>{1, 0, 1, 0}));
  EXPECT_EQ(info.cached_entries, 2u);
}

TEST(capi_routed_experts, failures_leave_out_params_untouched) {
  const Payload p = make_payload(2);
  auto o = options();
  std::vector<int16_t> got(kHidden * kExperts, 7);
  eldr_routed_experts_info_t info = ELDR_ROUTED_EXPERTS_INFO_INIT;
  info.rows_counted = 99;
  auto expect_fail = [&](eldr_status_t want, eldr_status_t s, const char* needle) {
    EXPECT_EQ(s, want) << eldr_status_name(s) << ": " << eldr_last_error_message();
    EXPECT_NE(std::strstr(eldr_last_error_message(), needle), nullptr) << eldr_last_error_message();
    EXPECT_EQ(got, std::vector<int16_t>(kHidden * kExperts, 7));
    EXPECT_EQ(info.rows_counted, 99u);
  };
  std::string text = b64(p.bytes_i32);
  text[10] = '*';
  expect_fail(ELDR_E_CORRUPT,
              eldr_routed_experts_decode_base64_ids(text.data(), text.size(), ELDR_DTYPE_INT32, &o,
                                                    got.data(), got.size(), &info),
              "base64");
  auto bad = p.bytes_i32;
  bad[4 * 7] = static_cast<uint8_t>(kExperts);
  expect_fail(ELDR_E_OUT_OF_RANGE,
              eldr_routed_experts_decode_ids(bad.data(), bad.size(), ELDR_DTYPE_INT32, &o,
                                             got.data(), got.size(), &info),
              "expert id 40");
  expect_fail(ELDR_E_CORRUPT,
              eldr_routed_experts_decode_ids(p.bytes_i32.data(), p.bytes_i32.size() - 4,
                                             ELDR_DTYPE_INT32, &o, got.data(), got.size(), &info),
              "whole");
  expect_fail(
      ELDR_E_SHAPE_MISMATCH,
      eldr_routed_experts_decode_ids(p.bytes_i32.data(), p.bytes_i32.size(), ELDR_DTYPE_INT32, &o,
                                     got.data(), got.size() - 1, &info),
      "cells");
  expect_fail(ELDR_E_INVALID_ARGUMENT,
              eldr_routed_experts_decode_ids(p.bytes_i32.data(), p.bytes_i32.size(), 99, &o,
                                             got.data(), got.size(), &info),
              "dtype");
  expect_fail(ELDR_E_INVALID_ARGUMENT,
              eldr_routed_experts_decode_ids(p.bytes_i32.data(), p.bytes_i32.size(),
                                             ELDR_DTYPE_AUTO, &o, got.data(), got.size(), &info),
              "AUTO");
  expect_fail(ELDR_E_INVALID_ARGUMENT,
              eldr_routed_experts_decode_ids(nullptr, 4, ELDR_DTYPE_INT32, &o, got.data(),
                                             got.size(), &info),
              "payload");
  expect_fail(
      ELDR_E_INVALID_ARGUMENT,
      eldr_routed_experts_decode_ids(p.bytes_i32.data(), p.bytes_i32.size(), ELDR_DTYPE_INT32,
                                     nullptr, got.data(), got.size(), &info),
      "options");
  o.row_count = kRows + 1;
  expect_fail(ELDR_E_OUT_OF_RANGE,
              eldr_routed_experts_decode_ids(p.bytes_i32.data(), p.bytes_i32.size(),
                                             ELDR_DTYPE_INT32, &o, got.data(), got.size(), &info),
              "past the payload");
  o = options();
  o.num_moe_layers = 2;  // moe_layers NULL
  expect_fail(ELDR_E_INVALID_ARGUMENT,
              eldr_routed_experts_decode_ids(p.bytes_i32.data(), p.bytes_i32.size(),
                                             ELDR_DTYPE_INT32, &o, got.data(), got.size(), &info),
              "moe_layers");
  o = options();
  o.version = 0;
  expect_fail(ELDR_E_INVALID_ARGUMENT,
              eldr_routed_experts_decode_ids(p.bytes_i32.data(), p.bytes_i32.size(),
                                             ELDR_DTYPE_INT32, &o, got.data(), got.size(), &info),
              "version");
  o.version = ELDR_ROUTED_EXPERTS_OPTIONS_VERSION + 1;
  EXPECT_EQ(eldr_routed_experts_decode_ids(p.bytes_i32.data(), p.bytes_i32.size(), ELDR_DTYPE_INT32,
                                           &o, got.data(), got.size(), &info),
            ELDR_E_UNSUPPORTED);
  o = options();
  const std::string npy = b64(npy_u8(p.bytes_u8));
  expect_fail(ELDR_E_SHAPE_MISMATCH,
              eldr_routed_experts_decode_base64_npy(npy.data(), npy.size(), ELDR_DTYPE_UINT16, &o,
                                                    got.data(), got.size(), &info),
              "uint16");
  const std::string cut = npy.substr(0, 24);
  expect_fail(ELDR_E_CORRUPT,
              eldr_routed_experts_decode_base64_npy(cut.data(), cut.size(), ELDR_DTYPE_AUTO, &o,
                                                    got.data(), got.size(), &info),
              "npy");
}

}  // namespace
