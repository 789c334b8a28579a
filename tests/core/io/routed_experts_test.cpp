#include "eldr/routed_experts.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base64_support.hpp"
#include "eldr/base64.hpp"
#include "eldr/npy.hpp"

namespace eldr {
namespace {

using eldr::test_support::b64;

// Payloads are built here independently of the decoder under test: a plain
// bit-by-bit base64 encoder, .npy images from encode_npy (whose bytes
// npy_test checks against the format), and the expected footprint as a
// bincount over the ids.

struct Ids {
  uint32_t rows, hidden, k, experts;
  std::vector<int64_t> v;  // [rows][hidden][k]
};

Ids random_ids(uint32_t rows, uint32_t hidden, uint32_t k, uint32_t experts, uint64_t seed,
               double cached = 0.0) {
  std::mt19937_64 rng(seed);
  Ids ids{rows, hidden, k, experts, {}};
  std::uniform_int_distribution<uint32_t> pick(0, experts - 1);
  std::bernoulli_distribution hit(cached);
  for (size_t i = 0; i < size_t{rows} * hidden * k; ++i)
    ids.v.push_back(cached > 0 && hit(rng) ? -1 : static_cast<int64_t>(pick(rng)));
  return ids;
}

template <class T>
std::vector<uint8_t> raw(const Ids& ids) {
  std::vector<uint8_t> out(ids.v.size() * sizeof(T));
  for (size_t i = 0; i < ids.v.size(); ++i) {
    const T t = static_cast<T>(ids.v[i]);
    for (size_t b = 0; b < sizeof(T); ++b)  // little-endian, byte by byte
      out[i * sizeof(T) + b] = static_cast<uint8_t>(static_cast<uint64_t>(t) >> (8 * b));
  }
  return out;
}

std::vector<uint8_t> raw_of(const Ids& ids, IdDtype d) {
  switch (d) {
    case IdDtype::u8:
      return raw<uint8_t>(ids);
    case IdDtype::u16:
      return raw<uint16_t>(ids);
    case IdDtype::i16:
      return raw<int16_t>(ids);
    case IdDtype::i32:
      return raw<int32_t>(ids);
    case IdDtype::i64:
      return raw<int64_t>(ids);
  }
  return {};
}

// The ids as numpy writes them: encode_npy (the one .npy writer, checked
// byte by byte in npy_test) over the [rows][hidden][k] shape.
std::vector<uint8_t> npy_of(NpyDtype dtype, const std::vector<uint64_t>& shape,
                            const std::vector<uint8_t>& data) {
  auto image = encode_npy(dtype, shape, data.data());
  EXPECT_TRUE(image) << image.status().to_string();
  return image ? std::move(*image) : std::vector<uint8_t>{};
}

std::vector<uint64_t> shape3(const Ids& ids) { return {ids.rows, ids.hidden, ids.k}; }

// `npy` with the data moved to the first offset past the header that is a
// multiple of `align` (numpy always uses 64): the dict's space padding
// shrinks, and the header length in the preamble follows.
std::vector<uint8_t> realigned(std::vector<uint8_t> npy, size_t align) {
  const size_t hlen = npy[8] | size_t{npy[9]} << 8;
  size_t dict = hlen - 1;  // the dict without its padding and '\n'
  while (npy[10 + dict - 1] == ' ') --dict;
  size_t new_hlen = dict + 1;
  while ((10 + new_hlen) % align != 0) ++new_hlen;
  npy.erase(npy.begin() + 10 + static_cast<std::ptrdiff_t>(dict),
            npy.begin() + 10 + static_cast<std::ptrdiff_t>(hlen));
  std::vector<uint8_t> pad(new_hlen - dict, ' ');
  pad.back() = '\n';
  npy.insert(npy.begin() + 10 + static_cast<std::ptrdiff_t>(dict), pad.begin(), pad.end());
  npy[8] = static_cast<uint8_t>(new_hlen & 0xff);
  npy[9] = static_cast<uint8_t>(new_hlen >> 8);
  return npy;
}

// `npy` with `from` replaced by `to` (the same length) in its header dict: a
// descriptor or a flag numpy would not write for these arrays.
std::vector<uint8_t> patched(std::vector<uint8_t> npy, const std::string& from,
                             const std::string& to) {
  const std::string header(npy.begin(), npy.begin() + 64);
  const size_t at = header.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  EXPECT_EQ(from.size(), to.size());
  if (at != std::string::npos)
    std::copy(to.begin(), to.end(), npy.begin() + static_cast<std::ptrdiff_t>(at));
  return npy;
}

// The expected footprint: a bincount over the chosen rows and MoE layers.
std::vector<int16_t> bincount(const Ids& ids, const std::vector<uint32_t>& moe, uint64_t first,
                              uint64_t count, uint64_t* cached = nullptr) {
  std::vector<uint32_t> layers = moe;
  if (layers.empty())
    for (uint32_t h = 0; h < ids.hidden; ++h) layers.push_back(h);
  std::vector<int16_t> fp(layers.size() * ids.experts, 0);
  uint64_t skipped = 0;
  for (uint64_t r = first; r < first + count; ++r)
    for (size_t l = 0; l < layers.size(); ++l)
      for (uint32_t j = 0; j < ids.k; ++j) {
        const int64_t id = ids.v[(r * ids.hidden + layers[l]) * ids.k + j];
        if (id < 0) {
          ++skipped;
          continue;
        }
        ++fp[l * ids.experts + static_cast<size_t>(id)];
      }
  if (cached) *cached = skipped;
  return fp;
}

RoutedExpertsOptions opts_for(const Ids& ids) {
  RoutedExpertsOptions o;
  o.num_experts = ids.experts;
  o.num_hidden_layers = ids.hidden;
  o.top_k = ids.k;
  return o;
}

constexpr IdDtype kAll[] = {IdDtype::u8, IdDtype::u16, IdDtype::i16, IdDtype::i32, IdDtype::i64};

NpyDtype npy_dtype_of(IdDtype d) {
  switch (d) {
    case IdDtype::u8:
      return NpyDtype::u8;
    case IdDtype::u16:
      return NpyDtype::u16;
    case IdDtype::i16:
      return NpyDtype::i16;
    case IdDtype::i32:
      return NpyDtype::i32;
    case IdDtype::i64:
      return NpyDtype::i64;
  }
  return NpyDtype::u8;
}

TEST(RoutedExperts, EveryWireFormatMatchesBincount) {
  // Odd sizes: rows that straddle the decoder's chunks and quanta.
  const Ids ids = random_ids(301, 7, 3, 200, 11);
  const auto want = bincount(ids, {}, 0, ids.rows);
  for (IdDtype d : kAll) {
    SCOPED_TRACE(id_dtype_name(d));
    const auto bytes = raw_of(ids, d);
    const auto o = opts_for(ids);
    std::vector<int16_t> got(want.size(), -7);

    auto r = footprint_from_ids(bytes, d, o, got);
    ASSERT_TRUE(r) << r.status().to_string();
    EXPECT_EQ(got, want);
    EXPECT_EQ(r->rows_in_payload, ids.rows);
    EXPECT_EQ(r->rows_counted, ids.rows);
    EXPECT_EQ(r->cached_entries, 0u);

    std::fill(got.begin(), got.end(), -7);
    r = footprint_from_base64_ids(b64(bytes), d, o, got);
    ASSERT_TRUE(r) << r.status().to_string();
    EXPECT_EQ(got, want);

    const auto npy = npy_of(npy_dtype_of(d), shape3(ids), bytes);
    RoutedExpertsOptions from_shape;
    from_shape.num_experts = ids.experts;  // axes from the shape
    std::fill(got.begin(), got.end(), -7);
    r = footprint_from_npy(npy, from_shape, got);
    ASSERT_TRUE(r) << r.status().to_string();
    EXPECT_EQ(got, want);
    EXPECT_EQ(r->dtype, d);
    EXPECT_EQ(r->num_hidden_layers, ids.hidden);
    EXPECT_EQ(r->top_k, ids.k);

    std::fill(got.begin(), got.end(), -7);
    r = footprint_from_base64_npy(b64(npy), o, got, &d);
    ASSERT_TRUE(r) << r.status().to_string();
    EXPECT_EQ(got, want);
  }
}

TEST(RoutedExperts, NpyDataAtEveryOffsetModThree) {
  // The data start decides how the first ids straddle a base64 quantum.
  const Ids ids = random_ids(50, 4, 2, 64, 3);
  const auto want = bincount(ids, {}, 0, ids.rows);
  for (size_t align : {16, 17, 19, 64}) {
    const auto npy = realigned(npy_of(NpyDtype::u16, shape3(ids), raw<uint16_t>(ids)), align);
    RoutedExpertsOptions o;
    o.num_experts = ids.experts;
    std::vector<int16_t> got(want.size());
    auto r = footprint_from_base64_npy(b64(npy), o, got);
    ASSERT_TRUE(r) << align << ": " << r.status().to_string();
    EXPECT_EQ(got, want);
  }
}

TEST(RoutedExperts, LargeSglangPayloadAcrossManyChunks) {
  const Ids ids = random_ids(2000, 48, 8, 128, 5);
  const auto want = bincount(ids, {}, 0, 1500);
  auto o = opts_for(ids);
  o.row_count = 1500;
  std::vector<int16_t> got(want.size());
  auto r = footprint_from_base64_ids(b64(raw<int32_t>(ids)), IdDtype::i32, o, got);
  ASSERT_TRUE(r) << r.status().to_string();
  EXPECT_EQ(got, want);
  EXPECT_EQ(r->rows_in_payload, 2000u);
  EXPECT_EQ(r->rows_counted, 1500u);
}

TEST(RoutedExperts, DenseLayersAreNeitherCountedNorChecked) {
  Ids ids = random_ids(40, 6, 2, 32, 8);
  // Hidden layers 0 and 3 are dense: the engine wrote garbage there.
  for (uint32_t r = 0; r < ids.rows; ++r)
    for (uint32_t j = 0; j < ids.k; ++j) {
      ids.v[(r * 6 + 0) * 2 + j] = 0;
      ids.v[(r * 6 + 3) * 2 + j] = 31000;
    }
  const std::vector<uint32_t> moe = {1, 2, 4, 5};
  const auto want = bincount(ids, moe, 0, ids.rows);
  auto o = opts_for(ids);
  o.moe_layers = moe;
  std::vector<int16_t> got(want.size());
  auto r = footprint_from_ids(raw<uint16_t>(ids), IdDtype::u16, o, got);
  ASSERT_TRUE(r) << r.status().to_string();
  EXPECT_EQ(got, want);
  EXPECT_EQ(r->footprint_layers, 4u);
  // Without the map, layer 3's ids are out of range.
  o.moe_layers = {};
  std::vector<int16_t> all(6 * 32);
  EXPECT_EQ(footprint_from_ids(raw<uint16_t>(ids), IdDtype::u16, o, all).status().code(),
            Errc::out_of_range);
}

TEST(RoutedExperts, BadLayerMaps) {
  const Ids ids = random_ids(4, 3, 2, 8, 1);
  auto o = opts_for(ids);
  std::vector<int16_t> out(2 * 8);
  const std::vector<uint32_t> past = {0, 3};
  o.moe_layers = past;
  EXPECT_EQ(footprint_from_ids(raw<int32_t>(ids), IdDtype::i32, o, out).status().code(),
            Errc::out_of_range);
  const std::vector<uint32_t> unsorted = {2, 1};
  o.moe_layers = unsorted;
  EXPECT_EQ(footprint_from_ids(raw<int32_t>(ids), IdDtype::i32, o, out).status().code(),
            Errc::invalid_argument);
  const std::vector<uint32_t> dup = {1, 1};
  o.moe_layers = dup;
  EXPECT_EQ(footprint_from_ids(raw<int32_t>(ids), IdDtype::i32, o, out).status().code(),
            Errc::invalid_argument);
}

TEST(RoutedExperts, RowRanges) {
  const Ids ids = random_ids(30, 3, 2, 16, 2);
  const auto bytes = raw<uint8_t>(ids);
  auto o = opts_for(ids);
  std::vector<int16_t> got(3 * 16);
  for (auto [first, count] :
       {std::pair<uint64_t, uint64_t>{0, 0}, {0, 30}, {5, 10}, {29, 1}, {30, 0}}) {
    o.first_row = first;
    o.row_count = count;
    auto r = footprint_from_ids(bytes, IdDtype::u8, o, got);
    ASSERT_TRUE(r) << first << "+" << count << ": " << r.status().to_string();
    EXPECT_EQ(got, bincount(ids, {}, first, count));
    EXPECT_EQ(r->rows_counted, count);
  }
  o.first_row = 7;
  o.row_count = kAllRows;
  ASSERT_TRUE(footprint_from_ids(bytes, IdDtype::u8, o, got));
  EXPECT_EQ(got, bincount(ids, {}, 7, 23));
  // Rows past the payload.
  const std::vector<int16_t> before = got;
  for (auto [first, count] :
       {std::pair<uint64_t, uint64_t>{0, 31}, {31, 0}, {20, 11}, {1, kAllRows - 1}}) {
    o.first_row = first;
    o.row_count = count;
    EXPECT_EQ(footprint_from_ids(bytes, IdDtype::u8, o, got).status().code(), Errc::out_of_range)
        << first << "+" << count;
    EXPECT_EQ(got, before);  // untouched on failure
  }
}

TEST(RoutedExperts, CachedEntriesAreSkippedAndCounted) {
  const Ids ids = random_ids(60, 4, 4, 100, 9, 0.3);
  uint64_t cached = 0;
  const auto want = bincount(ids, {}, 0, 50, &cached);
  ASSERT_GT(cached, 0u);
  auto o = opts_for(ids);
  o.row_count = 50;
  std::vector<int16_t> got(want.size());
  auto r = footprint_from_base64_ids(b64(raw<int16_t>(ids)), IdDtype::i16, o, got);
  ASSERT_TRUE(r) << r.status().to_string();
  EXPECT_EQ(got, want);
  EXPECT_EQ(r->cached_entries, cached);
  // -1 is a cached marker only in int16: elsewhere it is a bad id.
  o.row_count = kAllRows;
  EXPECT_EQ(footprint_from_ids(raw<int32_t>(ids), IdDtype::i32, o, got).status().code(),
            Errc::out_of_range);
  EXPECT_EQ(footprint_from_ids(raw<int64_t>(ids), IdDtype::i64, o, got).status().code(),
            Errc::out_of_range);
}

TEST(RoutedExperts, BadIds) {
  Ids ids = random_ids(10, 2, 2, 16, 4);
  std::vector<int16_t> out(2 * 16, 5);
  const auto before = out;
  auto o = opts_for(ids);
  for (int64_t bad : {16, 255, -2}) {
    Ids b = ids;
    b.v[b.v.size() - 1] = bad;  // the very last id
    for (IdDtype d : kAll) {
      if (bad < 0 && (d == IdDtype::u8 || d == IdDtype::u16)) continue;
      if (bad > 255 && d == IdDtype::u8) continue;
      auto st = footprint_from_base64_ids(b64(raw_of(b, d)), d, o, out).status();
      EXPECT_EQ(st.code(), Errc::out_of_range) << bad << " " << id_dtype_name(d);
      EXPECT_NE(st.message().find("row 9"), std::string::npos) << st.message();
      EXPECT_EQ(out, before);
    }
  }
  // 0 is a valid id.
  for (auto& v : ids.v) v = 0;
  auto r = footprint_from_ids(raw<uint8_t>(ids), IdDtype::u8, o, out);
  ASSERT_TRUE(r);
  EXPECT_EQ(out[0], 20);
  EXPECT_EQ(out[16], 20);
}

TEST(RoutedExperts, CellPastInt16) {
  Ids ids = random_ids(32768, 1, 1, 4, 1);
  for (auto& v : ids.v) v = 2;
  auto o = opts_for(ids);
  std::vector<int16_t> out(4, 0);
  EXPECT_EQ(footprint_from_ids(raw<uint8_t>(ids), IdDtype::u8, o, out).status().code(),
            Errc::out_of_range);
  EXPECT_EQ(out, std::vector<int16_t>(4, 0));
  o.row_count = 32767;  // exactly the limit
  ASSERT_TRUE(footprint_from_ids(raw<uint8_t>(ids), IdDtype::u8, o, out));
  EXPECT_EQ(out[2], 32767);
}

TEST(RoutedExperts, LengthNotWholeRows) {
  const Ids ids = random_ids(5, 3, 2, 8, 6);
  auto bytes = raw<int32_t>(ids);
  auto o = opts_for(ids);
  std::vector<int16_t> out(3 * 8);
  for (size_t drop : {1, 4, 20}) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.end() - static_cast<std::ptrdiff_t>(drop));
    EXPECT_EQ(footprint_from_ids(cut, IdDtype::i32, o, out).status().code(), Errc::corrupt);
    EXPECT_EQ(footprint_from_base64_ids(b64(cut), IdDtype::i32, o, out).status().code(),
              Errc::corrupt);
  }
  // The same bytes read as another dtype with the wrong row size.
  EXPECT_EQ(footprint_from_ids(bytes, IdDtype::i64,
                               {.num_experts = 8, .num_hidden_layers = 7, .top_k = 1},
                               std::span(out).first(7 * 8))
                .status()
                .code(),
            Errc::corrupt);
}

TEST(RoutedExperts, BadBase64) {
  const Ids ids = random_ids(4, 2, 2, 8, 7);
  const std::string good = b64(raw<int32_t>(ids));
  auto o = opts_for(ids);
  std::vector<int16_t> out(2 * 8);
  ASSERT_TRUE(footprint_from_base64_ids(good, IdDtype::i32, o, out));
  auto code = [&](const std::string& text) {
    return footprint_from_base64_ids(text, IdDtype::i32, o, out).status().code();
  };
  std::string s = good;
  s[5] = '!';
  EXPECT_EQ(code(s), Errc::corrupt);
  s = good;
  s[good.size() - 1] = '\n';
  EXPECT_EQ(code(s), Errc::corrupt);
  s = good;
  s[2] = '=';  // padding in the middle
  EXPECT_EQ(code(s), Errc::corrupt);
  s = good;
  s[8] = '-';  // url-safe alphabet
  EXPECT_EQ(code(s), Errc::corrupt);
  EXPECT_EQ(code(good.substr(0, good.size() - 1)), Errc::corrupt);  // not a multiple of 4
  EXPECT_EQ(code(good + "===="), Errc::corrupt);
  EXPECT_EQ(code(good + "AAA="), Errc::corrupt);  // 2 bytes more: not whole rows either way
}

TEST(Base64, StrictPadding) {
  std::vector<uint8_t> out;
  ASSERT_TRUE(base64::decode("QQ==", &out));
  EXPECT_EQ(out, std::vector<uint8_t>{'A'});
  ASSERT_TRUE(base64::decode("QUI=", &out));
  EXPECT_EQ(out, (std::vector<uint8_t>{'A', 'B'}));
  ASSERT_TRUE(base64::decode("", &out));
  EXPECT_TRUE(out.empty());
  for (const char* bad :
       {"QR==", "QUJ=", "Q===", "====", "QQ=A", "QQ", "Q", "QUJD\n", "QU=D", "=QUJ"})
    EXPECT_EQ(base64::decode(bad, &out).code(), Errc::corrupt) << bad;
  // Every byte value at every position round-trips through an independent encoder.
  std::vector<uint8_t> all;
  for (int i = 0; i < 256 * 3 + 2; ++i) all.push_back(static_cast<uint8_t>(i * 7 + (i >> 8)));
  for (size_t n = 0; n < 12; ++n) {
    std::vector<uint8_t> part(all.begin(), all.end() - static_cast<std::ptrdiff_t>(n));
    ASSERT_TRUE(base64::decode(b64(part), &out));
    EXPECT_EQ(out, part);
    EXPECT_EQ(base64::encode(part.data(), part.size()), b64(part));
  }
}

// Every alphabet character and a set of outsiders at every position of a text
// long enough for the vector path, against a bit-by-bit reference decoder.
TEST(Base64, EveryCharacterAtEveryPosition) {
  static const std::string kA = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  auto reference = [&](const std::string& text) {
    std::vector<uint8_t> out;
    uint32_t acc = 0;
    int bits = 0;
    for (char c : text) {
      acc = (acc << 6) | static_cast<uint32_t>(kA.find(c));
      bits += 6;
      if (bits >= 8) {
        bits -= 8;
        out.push_back(static_cast<uint8_t>(acc >> bits));
      }
    }
    return out;
  };
  std::mt19937 rng(3);
  std::string text;
  for (int i = 0; i < 4 * 40; ++i) text += kA[rng() % 64];
  std::vector<uint8_t> out;
  for (size_t pos = 0; pos < text.size(); ++pos) {
    std::string t = text;
    for (char c : kA) {
      t[pos] = c;
      ASSERT_TRUE(base64::decode(t, &out)) << pos;
      ASSERT_EQ(out, reference(t)) << pos << " " << c;
    }
    for (int c : std::initializer_list<int>{'=', '-', '_', ' ', '\n', '.', '*', 0, 0x7f, 0x80, 0xc0,
                                            0xff, '@', '[', '`', '{'}) {
      if (c == '=' && pos + 1 == t.size()) continue;  // that is valid padding
      t[pos] = static_cast<char>(c);
      const Status st = base64::decode(t, &out);
      ASSERT_EQ(st.code(), Errc::corrupt) << pos << " " << c;
      ASSERT_NE(st.message().find("offset " + std::to_string(pos)), std::string::npos)
          << st.message();
    }
  }
}

TEST(RoutedExperts, BadNpy) {
  const Ids ids = random_ids(6, 3, 2, 16, 12);
  const auto data = raw<uint8_t>(ids);
  RoutedExpertsOptions o;
  o.num_experts = 16;
  std::vector<int16_t> out(3 * 16);
  auto code = [&](const std::vector<uint8_t>& npy) {
    const auto a = footprint_from_npy(npy, o, out).status().code();
    const auto b = footprint_from_base64_npy(b64(npy), o, out).status().code();
    EXPECT_EQ(a, b);
    return a;
  };
  const auto good = npy_of(NpyDtype::u8, shape3(ids), data);
  ASSERT_EQ(code(good), Errc::ok);
  EXPECT_EQ(code(npy_of(NpyDtype::f32, {6, 3, 2}, std::vector<uint8_t>(6 * 3 * 2 * 4))),
            Errc::unsupported);
  EXPECT_EQ(code(npy_of(NpyDtype::u32, {6, 3, 2}, std::vector<uint8_t>(6 * 3 * 2 * 4))),
            Errc::unsupported);
  EXPECT_EQ(code(patched(good, "False", " True")), Errc::unsupported);
  EXPECT_EQ(code(patched(npy_of(NpyDtype::u16, {6, 3, 2}, std::vector<uint8_t>(6 * 3 * 2 * 2)),
                         "<u2", ">u2")),
            Errc::unsupported);
  EXPECT_EQ(code(npy_of(NpyDtype::u8, {36}, data)), Errc::shape_mismatch);
  EXPECT_EQ(code(npy_of(NpyDtype::u8, {6, 6}, data)), Errc::shape_mismatch);
  EXPECT_EQ(code(npy_of(NpyDtype::u8, {1, 6, 3, 2}, data)), Errc::shape_mismatch);
  EXPECT_EQ(code({good.begin(), good.end() - 1}), Errc::corrupt);
  auto trailing = good;
  trailing.push_back(0);
  EXPECT_EQ(code(trailing), Errc::corrupt);
  // Truncated inside the preamble and inside the header dict.
  for (size_t keep : {0, 5, 9, 11, 40})
    EXPECT_NE(code({good.begin(), good.begin() + static_cast<std::ptrdiff_t>(keep)}), Errc::ok)
        << keep;
  auto bad_magic = good;
  bad_magic[1] = 'X';
  EXPECT_EQ(code(bad_magic), Errc::corrupt);
  auto bad_dict = good;
  bad_dict[12] = '#';
  EXPECT_EQ(code(bad_dict), Errc::corrupt);
  // Caller's axes and dtype must match the shape.
  o.num_hidden_layers = 4;
  EXPECT_EQ(code(good), Errc::shape_mismatch);
  o.num_hidden_layers = 3;
  o.top_k = 3;
  EXPECT_EQ(code(good), Errc::shape_mismatch);
  o.top_k = 2;
  const IdDtype u16 = IdDtype::u16;
  EXPECT_EQ(footprint_from_npy(good, o, out, &u16).status().code(), Errc::shape_mismatch);
  EXPECT_EQ(footprint_from_base64_npy(b64(good), o, out, &u16).status().code(),
            Errc::shape_mismatch);
  // A wrong output size.
  std::vector<int16_t> small(3 * 15);
  EXPECT_EQ(footprint_from_npy(good, o, small).status().code(), Errc::shape_mismatch);
}

TEST(RoutedExperts, BadOptions) {
  const Ids ids = random_ids(2, 2, 2, 8, 1);
  std::vector<int16_t> out(2 * 8);
  auto o = opts_for(ids);
  o.num_experts = 0;
  EXPECT_EQ(footprint_from_ids(raw<uint8_t>(ids), IdDtype::u8, o, out).status().code(),
            Errc::invalid_argument);
  o = opts_for(ids);
  o.top_k = 0;
  EXPECT_EQ(footprint_from_ids(raw<uint8_t>(ids), IdDtype::u8, o, out).status().code(),
            Errc::invalid_argument);
  o = opts_for(ids);
  o.num_hidden_layers = 0;
  EXPECT_EQ(footprint_from_base64_ids("", IdDtype::u8, o, out).status().code(),
            Errc::invalid_argument);
  EXPECT_EQ(parse_id_dtype("float32").status().code(), Errc::invalid_argument);
  EXPECT_EQ(*parse_id_dtype("uint16"), IdDtype::u16);
}

}  // namespace
}  // namespace eldr
