#include "eldr/npy.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "temp_dir.hpp"

namespace eldr {
namespace {

namespace fs = std::filesystem;

using testing::TempDir;

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Hand-assembles an .npy image, so tests control every header byte.
std::vector<uint8_t> make_npy(const std::string& dict, const std::vector<uint8_t>& data,
                              uint8_t major = 1, uint8_t minor = 0) {
  const size_t len_bytes = major == 1 ? 2 : 4;
  std::string header = dict;
  const size_t preamble = 8 + len_bytes;
  while ((preamble + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::vector<uint8_t> out = {0x93, 'N', 'U', 'M', 'P', 'Y', major, minor};
  for (size_t i = 0; i < len_bytes; ++i)
    out.push_back(static_cast<uint8_t>(header.size() >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

std::string dict_for(const std::string& descr, const std::string& shape,
                     const std::string& fortran = "False") {
  return "{'descr': '" + descr + "', 'fortran_order': " + fortran + ", 'shape': " + shape + ", }";
}

template <class T>
std::vector<uint8_t> as_bytes(const std::vector<T>& values) {
  std::vector<uint8_t> out(values.size() * sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

template <class T>
std::vector<uint8_t> as_big_endian_bytes(const std::vector<T>& values) {
  std::vector<uint8_t> out = as_bytes(values);
  for (size_t i = 0; i < out.size(); i += sizeof(T))
    std::reverse(out.begin() + i, out.begin() + i + sizeof(T));
  return out;
}

Result<NpyArray> parse(const std::vector<uint8_t>& bytes) { return parse_npy(bytes); }

constexpr NpyDtype kAllDtypes[] = {NpyDtype::i8,  NpyDtype::u8,  NpyDtype::i16, NpyDtype::u16,
                                   NpyDtype::i32, NpyDtype::u32, NpyDtype::i64, NpyDtype::u64,
                                   NpyDtype::f32, NpyDtype::f64};

// ---- write / read round trips -------------------------------------------------

TEST(npy_round_trip, every_dtype_survives_write_then_read) {
  TempDir dir;
  for (NpyDtype dtype : kAllDtypes) {
    SCOPED_TRACE(npy_dtype_descr(dtype));
    const size_t width = npy_dtype_size(dtype);
    const std::vector<uint64_t> shape = {2, 3};
    std::vector<uint8_t> data(6 * width);
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 37 + 11);
    const std::string path = dir.file("a.npy");
    ASSERT_TRUE(write_npy(path, dtype, shape, data.data()).is_ok());

    auto sut = read_npy(path);
    ASSERT_TRUE(sut.is_ok()) << sut.status().to_string();
    EXPECT_EQ(sut->dtype, dtype);
    EXPECT_EQ(sut->shape, shape);
    EXPECT_EQ(sut->count(), 6u);
    EXPECT_EQ(sut->bytes, data);
    // The data starts on a 64-byte boundary, like numpy's own writer.
    EXPECT_EQ((read_bytes(path).size() - data.size()) % 64, 0u);
  }
}

TEST(npy_round_trip, zero_d_and_empty_arrays) {
  TempDir dir;
  const int32_t scalar = -7;
  ASSERT_TRUE(write_npy(dir.file("s.npy"), NpyDtype::i32, {}, &scalar).is_ok());
  auto sut = read_npy(dir.file("s.npy"));
  ASSERT_TRUE(sut.is_ok()) << sut.status().to_string();
  EXPECT_TRUE(sut->shape.empty());
  EXPECT_EQ(sut->count(), 1u);
  EXPECT_EQ(npy_to_int32(*sut).value(), std::vector<int32_t>{-7});

  const std::vector<uint64_t> empty_shape = {0, 5};
  ASSERT_TRUE(write_npy(dir.file("e.npy"), NpyDtype::f32, empty_shape, nullptr).is_ok());
  auto empty = read_npy(dir.file("e.npy"));
  ASSERT_TRUE(empty.is_ok()) << empty.status().to_string();
  EXPECT_EQ(empty->shape, empty_shape);
  EXPECT_TRUE(empty->bytes.empty());
}

TEST(npy_round_trip, header_is_what_numpy_writes) {
  TempDir dir;
  const std::vector<int16_t> values = {1, 2, 3};
  const uint64_t shape[] = {3};
  ASSERT_TRUE(write_npy(dir.file("h.npy"), NpyDtype::i16, shape, values.data()).is_ok());
  const auto bytes = read_bytes(dir.file("h.npy"));
  ASSERT_GE(bytes.size(), 64u);
  EXPECT_EQ(std::memcmp(bytes.data(), "\x93NUMPY\x01\x00", 8), 0);
  const size_t hlen = bytes[8] | bytes[9] << 8;
  EXPECT_EQ((10 + hlen) % 64, 0u);
  const std::string header(bytes.begin() + 10, bytes.begin() + 10 + static_cast<long>(hlen));
  EXPECT_EQ(header.rfind("{'descr': '<i2', 'fortran_order': False, 'shape': (3,), }", 0), 0u);
  EXPECT_EQ(header.back(), '\n');
}

TEST(npy_write, rejects_null_data_and_overflowing_shape) {
  TempDir dir;
  const uint64_t shape[] = {4};
  EXPECT_EQ(write_npy(dir.file("x.npy"), NpyDtype::u8, shape, nullptr).code(),
            Errc::invalid_argument);
  const uint64_t huge[] = {uint64_t{1} << 40, uint64_t{1} << 40};
  const uint8_t byte = 0;
  EXPECT_EQ(write_npy(dir.file("x.npy"), NpyDtype::u8, huge, &byte).code(), Errc::invalid_argument);
}

// ---- encode_npy: the one .npy writer ---------------------------------------

TEST(npy_encode, round_trips_through_the_reader) {
  const std::vector<int32_t> values = {1, -2, 3, 40000, -5, 6};
  const uint64_t shape[] = {2, 3};
  auto image = encode_npy(NpyDtype::i32, shape, values.data());
  ASSERT_TRUE(image.is_ok()) << image.status().to_string();
  auto sut = parse_npy(*image);
  ASSERT_TRUE(sut.is_ok()) << sut.status().to_string();
  EXPECT_EQ(sut->dtype, NpyDtype::i32);
  EXPECT_EQ(sut->shape, (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(npy_to_int32(*sut).value(), values);

  // The same bytes as write_npy puts in a file.
  TempDir dir;
  ASSERT_TRUE(write_npy(dir.file("w.npy"), NpyDtype::i32, shape, values.data()).is_ok());
  EXPECT_EQ(read_bytes(dir.file("w.npy")), *image);
}

TEST(npy_encode, header_is_padded_to_a_multiple_of_64) {
  // .npy format 1.0: magic, version 1.0, a little-endian uint16 header length,
  // then the dict padded with spaces and ended by '\n' so that the data starts
  // on a multiple of 64 bytes; every dtype and rank moves the dict's length.
  const uint8_t data[8 * 64] = {};
  const std::vector<std::vector<uint64_t>> shapes = {
      {}, {0}, {1}, {7}, {2, 3}, {1, 2, 3, 4}, {1, 1, 1, 1, 1, 1, 1, 1}, {123456789, 0, 3}};
  for (NpyDtype dtype : {NpyDtype::u8, NpyDtype::i16, NpyDtype::f64})
    for (const auto& shape : shapes) {
      auto header = encode_npy_header(dtype, shape);
      ASSERT_TRUE(header.is_ok()) << header.status().to_string();
      const std::string& h = *header;
      ASSERT_GE(h.size(), 64u);
      EXPECT_EQ(h.size() % 64, 0u) << h;
      EXPECT_EQ(h.compare(0, 8, std::string("\x93NUMPY\x01\x00", 8)), 0);
      const size_t hlen = static_cast<uint8_t>(h[8]) | static_cast<uint8_t>(h[9]) << 8;
      EXPECT_EQ(10 + hlen, h.size());
      EXPECT_EQ(h.back(), '\n');
      const size_t dict_end = h.find('}');
      ASSERT_NE(dict_end, std::string::npos);
      EXPECT_EQ(h.find_first_not_of(' ', dict_end + 1), h.size() - 1) << "padding is spaces";
      auto parsed = parse_npy_header(
          std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(h.data()), h.size()));
      ASSERT_TRUE(parsed.is_ok()) << parsed.status().to_string();
      EXPECT_EQ(parsed->data_offset, h.size());
      EXPECT_EQ(parsed->shape, shape);
      EXPECT_EQ(parsed->dtype, dtype);

      uint64_t count = 1;
      for (uint64_t d : shape) count *= d;
      if (count * npy_dtype_size(dtype) > sizeof data) continue;
      auto image = encode_npy(dtype, shape, data);
      ASSERT_TRUE(image.is_ok()) << image.status().to_string();
      EXPECT_EQ(image->size(), h.size() + count * npy_dtype_size(dtype));
      EXPECT_TRUE(std::equal(h.begin(), h.end(), image->begin(),
                             [](char a, uint8_t b) { return static_cast<uint8_t>(a) == b; }));
    }
}

TEST(npy_encode, rejects_what_write_npy_rejects) {
  const uint64_t shape[] = {4};
  EXPECT_EQ(encode_npy(NpyDtype::u8, shape, nullptr).status().code(), Errc::invalid_argument);
  const uint64_t huge[] = {uint64_t{1} << 40, uint64_t{1} << 40};
  const uint8_t byte = 0;
  EXPECT_EQ(encode_npy(NpyDtype::u8, huge, &byte).status().code(), Errc::invalid_argument);
  EXPECT_EQ(encode_npy_header(NpyDtype::u8, huge).status().code(), Errc::invalid_argument);
  const std::vector<uint64_t> too_many(65, 1);
  EXPECT_EQ(encode_npy_header(NpyDtype::u8, too_many).status().code(), Errc::invalid_argument);
  const uint64_t empty[] = {0, 3};
  EXPECT_TRUE(encode_npy(NpyDtype::u8, empty, nullptr).is_ok());
}

TEST(npy_write, unwritable_path_is_an_io_error) {
  const uint8_t byte = 0;
  const uint64_t shape[] = {1};
  Status st = write_npy("/nonexistent-dir/x.npy", NpyDtype::u8, shape, &byte);
  EXPECT_EQ(st.code(), Errc::io);
  EXPECT_NE(st.message().find("/nonexistent-dir/x.npy"), std::string::npos);
}

// ---- header variants ------------------------------------------------------------

TEST(npy_parse, big_endian_files_are_byte_swapped) {
  const std::vector<int16_t> i16 = {1, -2, 300, -32768};
  auto sut = parse(make_npy(dict_for(">i2", "(4,)"), as_big_endian_bytes(i16)));
  ASSERT_TRUE(sut.is_ok()) << sut.status().to_string();
  EXPECT_EQ(sut->dtype, NpyDtype::i16);
  EXPECT_EQ(npy_to_int16(*sut).value(), i16);

  const std::vector<double> f64 = {1.5, -2.25, 1e300};
  auto doubles = parse(make_npy(dict_for(">f8", "(3,)"), as_big_endian_bytes(f64)));
  ASSERT_TRUE(doubles.is_ok()) << doubles.status().to_string();
  EXPECT_EQ(doubles->bytes, as_bytes(f64));

  const std::vector<uint32_t> u32 = {0x01020304u, 0xdeadbeefu};
  auto words = parse(make_npy(dict_for(">u4", "(2,)"), as_big_endian_bytes(u32)));
  ASSERT_TRUE(words.is_ok()) << words.status().to_string();
  EXPECT_EQ(words->bytes, as_bytes(u32));
}

TEST(npy_parse, native_and_not_applicable_byte_orders) {
  const std::vector<int32_t> v = {5, -6};
  for (const char* descr : {"<i4", "=i4", "|i4"}) {
    auto sut = parse(make_npy(dict_for(descr, "(2,)"), as_bytes(v)));
    ASSERT_TRUE(sut.is_ok()) << descr << ": " << sut.status().to_string();
    EXPECT_EQ(npy_to_int32(*sut).value(), v);
  }
  auto bytes = parse(make_npy(dict_for("|u1", "(3,)"), {1, 2, 3}));
  ASSERT_TRUE(bytes.is_ok());
  EXPECT_EQ(bytes->dtype, NpyDtype::u8);
  auto big_byte = parse(make_npy(dict_for(">i1", "(1,)"), {0xff}));
  ASSERT_TRUE(big_byte.is_ok());
  EXPECT_EQ(npy_to_int16(*big_byte).value(), std::vector<int16_t>{-1});
}

TEST(npy_parse, version_2_and_3_headers) {
  const std::vector<float> v = {0.5f, 1.5f};
  for (uint8_t major : {2, 3}) {
    auto sut = parse(make_npy(dict_for("<f4", "(1, 2)"), as_bytes(v), major));
    ASSERT_TRUE(sut.is_ok()) << int{major} << ": " << sut.status().to_string();
    EXPECT_EQ(sut->shape, (std::vector<uint64_t>{1, 2}));
    EXPECT_EQ(npy_to_float(*sut).value(), v);
  }
}

TEST(npy_parse, double_quotes_key_order_and_python2_long_suffix) {
  const std::vector<int16_t> v = {1, 2, 3, 4, 5, 6};
  auto sut = parse(
      make_npy("{\"shape\": (2L, 3L), \"fortran_order\": False, \"descr\": \"<i2\"}", as_bytes(v)));
  ASSERT_TRUE(sut.is_ok()) << sut.status().to_string();
  EXPECT_EQ(sut->shape, (std::vector<uint64_t>{2, 3}));
}

// ---- malformed files -----------------------------------------------------------------

TEST(npy_parse, every_truncation_of_a_valid_file_is_an_error) {
  const std::vector<int32_t> v = {1, 2, 3};
  const auto full = make_npy(dict_for("<i4", "(3,)"), as_bytes(v));
  ASSERT_TRUE(parse(full).is_ok());
  for (size_t len = 0; len < full.size(); ++len) {
    auto sut = parse_npy(std::span<const uint8_t>(full.data(), len));
    EXPECT_FALSE(sut.is_ok()) << "prefix of " << len << " bytes parsed";
  }
}

TEST(npy_parse, truncated_file_on_disk_names_the_path_and_sizes) {
  TempDir dir;
  const std::vector<int32_t> v = {1, 2, 3};
  auto bytes = make_npy(dict_for("<i4", "(3,)"), as_bytes(v));
  bytes.erase(bytes.end() - 4, bytes.end());
  write_bytes(dir.file("t.npy"), bytes);
  auto sut = read_npy(dir.file("t.npy"));
  ASSERT_FALSE(sut.is_ok());
  EXPECT_EQ(sut.status().code(), Errc::corrupt);
  const std::string msg = sut.status().message();
  EXPECT_NE(msg.find(dir.file("t.npy")), std::string::npos) << msg;
  EXPECT_NE(msg.find("8 bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("12 bytes"), std::string::npos) << msg;
}

TEST(npy_parse, shape_that_disagrees_with_the_data_is_corrupt) {
  const std::vector<int32_t> three = {1, 2, 3};
  auto shorter = parse(make_npy(dict_for("<i4", "(4,)"), as_bytes(three)));
  ASSERT_FALSE(shorter.is_ok());
  EXPECT_EQ(shorter.status().code(), Errc::corrupt);
  EXPECT_NE(shorter.status().message().find("12 bytes"), std::string::npos);
  EXPECT_NE(shorter.status().message().find("16 bytes"), std::string::npos);

  auto longer = parse(make_npy(dict_for("<i4", "(2,)"), as_bytes(three)));
  ASSERT_FALSE(longer.is_ok());
  EXPECT_EQ(longer.status().code(), Errc::corrupt);
}

TEST(npy_parse, shape_whose_size_overflows_is_corrupt) {
  for (const char* shape :
       {"(4294967296, 4294967296, 2)", "(9223372036854775808,)",
        "(18446744073709551615, 18446744073709551615)", "(99999999999999999999999,)"}) {
    auto sut = parse(make_npy(dict_for("<i8", shape), {}));
    ASSERT_FALSE(sut.is_ok()) << shape;
    EXPECT_EQ(sut.status().code(), Errc::corrupt) << shape;
  }
}

TEST(npy_parse, fortran_order_is_unsupported) {
  const std::vector<int16_t> v = {1, 2, 3, 4};
  auto sut = parse(make_npy(dict_for("<i2", "(2, 2)", "True"), as_bytes(v)));
  ASSERT_FALSE(sut.is_ok());
  EXPECT_EQ(sut.status().code(), Errc::unsupported);
}

TEST(npy_parse, garbage_headers_are_corrupt) {
  const std::vector<std::string> dicts = {
      "",
      "{",
      "not a dict",
      "[1, 2]",
      "{'descr': '<i2'}",
      "{'descr': '<i2', 'fortran_order': False}",
      "{'descr': '<i2', 'fortran_order': False, 'shape': (1,), 'extra': 1}",
      "{'descr': '<i2', 'descr': '<i2', 'fortran_order': False, 'shape': (1,)}",
      "{'descr': <i2, 'fortran_order': False, 'shape': (1,)}",
      "{'descr': '<i2, 'fortran_order': False, 'shape': (1,)}",
      "{'descr': '<i2', 'fortran_order': false, 'shape': (1,)}",
      "{'descr': '<i2', 'fortran_order': False, 'shape': (-1,)}",
      "{'descr': '<i2', 'fortran_order': False, 'shape': (1.5,)}",
      "{'descr': '<i2', 'fortran_order': False, 'shape': [1]}",
      "{'descr': '<i2', 'fortran_order': False, 'shape': (1,)} junk",
      "{'descr': '<i2' 'fortran_order': False, 'shape': (1,)}",
  };
  for (const auto& dict : dicts) {
    auto sut = parse(make_npy(dict, {0, 0}));
    ASSERT_FALSE(sut.is_ok()) << dict;
    EXPECT_EQ(sut.status().code(), Errc::corrupt) << dict << " -> " << sut.status().to_string();
  }
}

TEST(npy_parse, unknown_dtypes_are_unsupported) {
  for (const char* descr : {"<c8", "|b1", "<U4", "<f2", "<i16", "", "<", "O"}) {
    auto sut = parse(make_npy(dict_for(descr, "(1,)"), std::vector<uint8_t>(8, 0)));
    ASSERT_FALSE(sut.is_ok()) << descr;
    EXPECT_EQ(sut.status().code(), Errc::unsupported) << descr;
  }
  auto structured = parse(
      make_npy("{'descr': [('a', '<i4')], 'fortran_order': False, 'shape': (1,), }", {0, 0, 0, 0}));
  ASSERT_FALSE(structured.is_ok());
  EXPECT_EQ(structured.status().code(), Errc::unsupported);
}

TEST(npy_parse, bad_magic_version_and_header_length) {
  const std::vector<int16_t> v = {1};
  auto good = make_npy(dict_for("<i2", "(1,)"), as_bytes(v));

  auto bad_magic = good;
  bad_magic[1] = 'X';
  EXPECT_EQ(parse(bad_magic).status().code(), Errc::corrupt);

  for (auto [major, minor] : {std::pair{4, 0}, std::pair{1, 1}, std::pair{0, 0}}) {
    auto bad_version = good;
    bad_version[6] = static_cast<uint8_t>(major);
    bad_version[7] = static_cast<uint8_t>(minor);
    EXPECT_EQ(parse(bad_version).status().code(), Errc::unsupported) << major << "." << minor;
  }

  auto long_header = good;
  long_header[8] = 0xff;
  long_header[9] = 0xff;
  EXPECT_EQ(parse(long_header).status().code(), Errc::corrupt);

  auto v2 = make_npy(dict_for("<i2", "(1,)"), as_bytes(v), 2);
  v2[11] = 0x7f;  // header length ~2 GiB in a tiny file
  EXPECT_EQ(parse(v2).status().code(), Errc::corrupt);
}

TEST(npy_parse, missing_file_is_an_io_error_naming_the_path) {
  auto sut = read_npy("/nonexistent-dir/missing.npy");
  ASSERT_FALSE(sut.is_ok());
  EXPECT_EQ(sut.status().code(), Errc::io);
  EXPECT_NE(sut.status().message().find("/nonexistent-dir/missing.npy"), std::string::npos);
}

// ---- conversions -----------------------------------------------------------------

NpyArray array_of(NpyDtype dtype, const std::vector<uint8_t>& bytes, uint64_t n) {
  NpyArray a;
  a.dtype = dtype;
  a.shape = {n};
  a.bytes = bytes;
  return a;
}

TEST(npy_convert, integers_within_range_convert_and_outside_name_the_element) {
  const std::vector<int32_t> ok = {-32768, 0, 32767};
  EXPECT_EQ(npy_to_int16(array_of(NpyDtype::i32, as_bytes(ok), 3)).value(),
            (std::vector<int16_t>{-32768, 0, 32767}));

  const std::vector<int32_t> bad = {1, 2, 40000};
  auto sut = npy_to_int16(array_of(NpyDtype::i32, as_bytes(bad), 3));
  ASSERT_FALSE(sut.is_ok());
  EXPECT_EQ(sut.status().code(), Errc::out_of_range);
  EXPECT_NE(sut.status().message().find("element 2"), std::string::npos);
  EXPECT_NE(sut.status().message().find("40000"), std::string::npos);

  const std::vector<uint64_t> big = {uint64_t{1} << 63};
  EXPECT_EQ(npy_to_int64(array_of(NpyDtype::u64, as_bytes(big), 1)).status().code(),
            Errc::out_of_range);
  const std::vector<uint32_t> u32 = {0x80000000u};
  EXPECT_EQ(npy_to_int32(array_of(NpyDtype::u32, as_bytes(u32), 1)).status().code(),
            Errc::out_of_range);
  EXPECT_EQ(npy_to_int64(array_of(NpyDtype::u32, as_bytes(u32), 1)).value(),
            std::vector<int64_t>{0x80000000LL});
}

TEST(npy_convert, floats_convert_to_integers_only_when_integral_and_in_range) {
  const std::vector<float> integral = {-3.0f, 0.0f, 7.0f};
  EXPECT_EQ(npy_to_int16(array_of(NpyDtype::f32, as_bytes(integral), 3)).value(),
            (std::vector<int16_t>{-3, 0, 7}));
  for (float bad : {1.5f, std::nanf(""), std::numeric_limits<float>::infinity(), 40000.0f}) {
    const std::vector<float> v = {bad};
    EXPECT_EQ(npy_to_int16(array_of(NpyDtype::f32, as_bytes(v), 1)).status().code(),
              Errc::out_of_range)
        << bad;
  }
  // 2^63 is one past int64's maximum; -2^63 is its minimum.
  const std::vector<double> edge = {-9223372036854775808.0};
  EXPECT_EQ(npy_to_int64(array_of(NpyDtype::f64, as_bytes(edge), 1)).value(),
            std::vector<int64_t>{std::numeric_limits<int64_t>::min()});
  const std::vector<double> over = {9223372036854775808.0};
  EXPECT_EQ(npy_to_int64(array_of(NpyDtype::f64, as_bytes(over), 1)).status().code(),
            Errc::out_of_range);
}

TEST(npy_convert, to_float_range_checks_doubles) {
  const std::vector<double> ok = {0.25, -1e30};
  EXPECT_EQ(npy_to_float(array_of(NpyDtype::f64, as_bytes(ok), 2)).value(),
            (std::vector<float>{0.25f, -1e30f}));
  const std::vector<double> too_big = {1e300};
  EXPECT_EQ(npy_to_float(array_of(NpyDtype::f64, as_bytes(too_big), 1)).status().code(),
            Errc::out_of_range);
  const std::vector<int64_t> ints = {-5, 1 << 20};
  EXPECT_EQ(npy_to_float(array_of(NpyDtype::i64, as_bytes(ints), 2)).value(),
            (std::vector<float>{-5.0f, 1048576.0f}));
}

TEST(npy_convert, array_whose_bytes_disagree_with_its_shape_is_rejected) {
  auto sut = npy_to_int32(array_of(NpyDtype::i32, {1, 2, 3}, 1));
  ASSERT_FALSE(sut.is_ok());
  EXPECT_EQ(sut.status().code(), Errc::shape_mismatch);
}

// ---- counts -----------------------------------------------------------------------

TEST(npy_counts, save_then_load_round_trips) {
  TempDir dir;
  CountsTensor counts;
  counts.n = 2;
  counts.layers = 3;
  counts.experts = 4;
  for (int i = 0; i < 24; ++i) counts.data.push_back(static_cast<int16_t>(i * 100));
  ASSERT_TRUE(save_counts_npy(dir.file("c.npy"), counts).is_ok());
  auto sut = load_counts_npy(dir.file("c.npy"));
  ASSERT_TRUE(sut.is_ok()) << sut.status().to_string();
  EXPECT_EQ(sut->n, 2u);
  EXPECT_EQ(sut->layers, 3u);
  EXPECT_EQ(sut->experts, 4u);
  EXPECT_EQ(sut->data, counts.data);
  EXPECT_EQ(sut->row(1)[0], 1200);
}

TEST(npy_counts, any_integer_dtype_that_fits_int16_is_accepted) {
  TempDir dir;
  const std::vector<uint8_t> u8 = {0, 1, 2, 255};
  const uint64_t shape[] = {1, 2, 2};
  ASSERT_TRUE(write_npy(dir.file("u8.npy"), NpyDtype::u8, shape, u8.data()).is_ok());
  auto sut = load_counts_npy(dir.file("u8.npy"));
  ASSERT_TRUE(sut.is_ok()) << sut.status().to_string();
  EXPECT_EQ(sut->data, (std::vector<int16_t>{0, 1, 2, 255}));

  const std::vector<int64_t> i64 = {0, 1, 2, 32768};
  ASSERT_TRUE(write_npy(dir.file("i64.npy"), NpyDtype::i64, shape, i64.data()).is_ok());
  EXPECT_EQ(load_counts_npy(dir.file("i64.npy")).status().code(), Errc::out_of_range);
}

TEST(npy_counts, negative_counts_are_out_of_range_with_their_index) {
  TempDir dir;
  CountsTensor counts;
  counts.n = 2;
  counts.layers = 2;
  counts.experts = 3;
  counts.data.assign(12, 1);
  counts.data[1 * 6 + 1 * 3 + 2] = -4;
  ASSERT_TRUE(save_counts_npy(dir.file("neg.npy"), counts).is_ok());
  auto sut = load_counts_npy(dir.file("neg.npy"));
  ASSERT_FALSE(sut.is_ok());
  EXPECT_EQ(sut.status().code(), Errc::out_of_range);
  EXPECT_NE(sut.status().message().find("[1, 1, 2]"), std::string::npos) << sut.status().message();
  EXPECT_NE(sut.status().message().find(dir.file("neg.npy")), std::string::npos);
}

TEST(npy_counts, wrong_rank_geometry_or_dtype_is_rejected) {
  TempDir dir;
  const std::vector<int16_t> v(8, 1);
  const uint64_t two_d[] = {2, 4};
  ASSERT_TRUE(write_npy(dir.file("2d.npy"), NpyDtype::i16, two_d, v.data()).is_ok());
  EXPECT_EQ(load_counts_npy(dir.file("2d.npy")).status().code(), Errc::shape_mismatch);

  const uint64_t too_many_layers[] = {0, kMaxLayers + 1, 4};
  ASSERT_TRUE(write_npy(dir.file("l.npy"), NpyDtype::i16, too_many_layers, v.data()).is_ok());
  EXPECT_EQ(load_counts_npy(dir.file("l.npy")).status().code(), Errc::shape_mismatch);

  const uint64_t too_many_experts[] = {0, 4, kMaxExperts + 1};
  ASSERT_TRUE(write_npy(dir.file("e.npy"), NpyDtype::i16, too_many_experts, v.data()).is_ok());
  EXPECT_EQ(load_counts_npy(dir.file("e.npy")).status().code(), Errc::shape_mismatch);

  const std::vector<float> f(8, 1.0f);
  const uint64_t three_d[] = {2, 2, 2};
  ASSERT_TRUE(write_npy(dir.file("f.npy"), NpyDtype::f32, three_d, f.data()).is_ok());
  EXPECT_EQ(load_counts_npy(dir.file("f.npy")).status().code(), Errc::invalid_argument);
}

TEST(npy_counts, save_rejects_a_tensor_whose_data_disagrees_with_its_shape) {
  TempDir dir;
  CountsTensor counts;
  counts.n = 2;
  counts.layers = 2;
  counts.experts = 2;
  counts.data.assign(7, 0);
  EXPECT_EQ(save_counts_npy(dir.file("x.npy"), counts).code(), Errc::shape_mismatch);
}

// ---- labels -----------------------------------------------------------------------

TEST(npy_labels, text_file_one_label_per_line) {
  TempDir dir;
  const std::string text =
      "\xEF\xBB\xBF"
      "code\r\nmath\nlegal text\r\nmedical";
  write_bytes(dir.file("l.txt"), std::vector<uint8_t>(text.begin(), text.end()));
  auto sut = load_labels(dir.file("l.txt"));
  ASSERT_TRUE(sut.is_ok()) << sut.status().to_string();
  EXPECT_EQ(*sut, (std::vector<std::string>{"code", "math", "legal text", "medical"}));

  const std::string trailing = "a\nb\n";
  write_bytes(dir.file("t.txt"), std::vector<uint8_t>(trailing.begin(), trailing.end()));
  EXPECT_EQ(load_labels(dir.file("t.txt")).value(), (std::vector<std::string>{"a", "b"}));

  write_bytes(dir.file("empty.txt"), {});
  EXPECT_TRUE(load_labels(dir.file("empty.txt")).value().empty());
}

TEST(npy_labels, blank_line_is_an_error_naming_the_line) {
  TempDir dir;
  for (const std::string text : {"a\n\nb\n", "a\r\n\r\nb", "a\n  \nb", "\n"}) {
    write_bytes(dir.file("b.txt"), std::vector<uint8_t>(text.begin(), text.end()));
    auto sut = load_labels(dir.file("b.txt"));
    ASSERT_FALSE(sut.is_ok()) << text;
    EXPECT_EQ(sut.status().code(), Errc::corrupt);
    EXPECT_NE(sut.status().message().find(dir.file("b.txt") + ":"), std::string::npos);
  }
}

TEST(npy_labels, integer_npy_vector_becomes_decimal_strings) {
  TempDir dir;
  const std::vector<int64_t> v = {3, -1, 0, 12};
  const uint64_t shape[] = {4};
  ASSERT_TRUE(write_npy(dir.file("l.npy"), NpyDtype::i64, shape, v.data()).is_ok());
  auto sut = load_labels(dir.file("l.npy"));
  ASSERT_TRUE(sut.is_ok()) << sut.status().to_string();
  EXPECT_EQ(*sut, (std::vector<std::string>{"3", "-1", "0", "12"}));

  const std::vector<uint64_t> u = {18446744073709551615ull};
  const uint64_t one[] = {1};
  ASSERT_TRUE(write_npy(dir.file("u.npy"), NpyDtype::u64, one, u.data()).is_ok());
  EXPECT_EQ(load_labels(dir.file("u.npy")).value(),
            std::vector<std::string>{"18446744073709551615"});
}

TEST(npy_labels, npy_labels_must_be_an_integer_vector) {
  TempDir dir;
  const std::vector<int32_t> v = {1, 2, 3, 4};
  const uint64_t two_d[] = {2, 2};
  ASSERT_TRUE(write_npy(dir.file("2d.npy"), NpyDtype::i32, two_d, v.data()).is_ok());
  EXPECT_EQ(load_labels(dir.file("2d.npy")).status().code(), Errc::shape_mismatch);

  const std::vector<float> f = {1.0f};
  const uint64_t one[] = {1};
  ASSERT_TRUE(write_npy(dir.file("f.npy"), NpyDtype::f32, one, f.data()).is_ok());
  EXPECT_EQ(load_labels(dir.file("f.npy")).status().code(), Errc::invalid_argument);

  auto truncated = make_npy(dict_for("<i4", "(2,)"), {1, 0, 0, 0});
  write_bytes(dir.file("t.npy"), truncated);
  EXPECT_EQ(load_labels(dir.file("t.npy")).status().code(), Errc::corrupt);

  EXPECT_EQ(load_labels(dir.file("missing.txt")).status().code(), Errc::io);
}

}  // namespace
}  // namespace eldr
