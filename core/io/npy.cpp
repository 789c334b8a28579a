#include "eldr/npy.hpp"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <string_view>
#include <utility>

#include "eldr/internal/checked_math.hpp"
#include "eldr/internal/file_io.hpp"
#include "npy_common.hpp"

namespace eldr {

// NpyArray::bytes is documented as native little-endian and every writer here
// emits '<' descriptors straight from memory; a big-endian host would need a
// second swap path that nothing exercises.
static_assert(std::endian::native == std::endian::little, "eldr assumes a little-endian host");

namespace {

using npy_detail::guarded;
using npy_detail::kMagic;
using npy_detail::kMagicLen;
using npy_detail::kMaxDims;
using npy_detail::load_elem;
using npy_detail::shape_string;
using npy_detail::with_path;

// The header is a Python literal of a few dozen bytes; anything this large is
// garbage, and bounding it keeps the parser's work trivially small.
constexpr uint64_t kMaxHeaderLen = uint64_t{1} << 20;
// Whole-file cap for read_npy / load_labels: far above any calibration dump, and
// it turns a wrong path (a disk image, /dev/zero) into a clean error.
constexpr uint64_t kMaxFileBytes = uint64_t{16} << 30;

// ---- the header dict ---------------------------------------------------------
// The header is a Python dict literal written by numpy's repr; we accept exactly
// the subset numpy produces (and old Python 2 'L' suffixes), not general Python.
class HeaderParser {
 public:
  explicit HeaderParser(std::string_view text) : m_text(text) {}

  struct Fields {
    std::string descr;
    bool fortran_order = false;
    std::vector<uint64_t> shape;
  };

  Status parse(Fields* out) {
    bool have_descr = false, have_fortran = false, have_shape = false;
    skip_ws();
    if (!eat('{')) return fail("expected '{'");
    for (;;) {
      skip_ws();
      if (eat('}')) break;
      std::string key;
      ELDR_TRY(parse_string(&key));
      skip_ws();
      if (!eat(':')) return fail("expected ':' after key '" + key + "'");
      skip_ws();
      if (key == "descr") {
        if (have_descr) return fail("duplicate key 'descr'");
        have_descr = true;
        if (peek() == '[')
          return {Errc::unsupported, "npy header: structured dtypes are not supported"};
        ELDR_TRY(parse_string(&out->descr));
      } else if (key == "fortran_order") {
        if (have_fortran) return fail("duplicate key 'fortran_order'");
        have_fortran = true;
        ELDR_TRY(parse_bool(&out->fortran_order));
      } else if (key == "shape") {
        if (have_shape) return fail("duplicate key 'shape'");
        have_shape = true;
        ELDR_TRY(parse_shape(&out->shape));
      } else {
        return fail("unexpected key '" + key + "'");
      }
      skip_ws();
      if (eat(',')) continue;
      skip_ws();
      if (eat('}')) break;
      return fail("expected ',' or '}'");
    }
    // numpy pads with spaces and ends with '\n'; some writers pad with NULs.
    while (m_pos < m_text.size()) {
      char c = m_text[m_pos++];
      if (c != ' ' && c != '\n' && c != '\r' && c != '\t' && c != '\0')
        return fail("trailing bytes after the dict");
    }
    if (!have_descr || !have_fortran || !have_shape)
      return fail("missing key (needs 'descr', 'fortran_order' and 'shape')");
    return Status::ok();
  }

 private:
  Status fail(const std::string& what) const {
    return {Errc::corrupt,
            "npy header: " + what + " at offset " + std::to_string(m_pos) + " of the dict"};
  }
  char peek() const { return m_pos < m_text.size() ? m_text[m_pos] : '\0'; }
  bool eat(char c) {
    if (m_pos < m_text.size() && m_text[m_pos] == c) {
      ++m_pos;
      return true;
    }
    return false;
  }
  void skip_ws() {
    while (m_pos < m_text.size() && (m_text[m_pos] == ' ' || m_text[m_pos] == '\t' ||
                                     m_text[m_pos] == '\n' || m_text[m_pos] == '\r'))
      ++m_pos;
  }
  Status parse_string(std::string* out) {
    char quote = peek();
    if (quote != '\'' && quote != '"') return fail("expected a quoted string");
    ++m_pos;
    size_t end = m_text.find(quote, m_pos);
    // Keys and dtype strings never need escapes; a backslash means garbage.
    if (end == std::string_view::npos) return fail("unterminated string");
    std::string_view body = m_text.substr(m_pos, end - m_pos);
    if (body.find('\\') != std::string_view::npos || body.size() > 64)
      return fail("unexpected string content");
    *out = std::string(body);
    m_pos = end + 1;
    return Status::ok();
  }
  Status parse_bool(bool* out) {
    if (m_text.substr(m_pos, 4) == "True") {
      m_pos += 4;
      *out = true;
    } else if (m_text.substr(m_pos, 5) == "False") {
      m_pos += 5;
      *out = false;
    } else {
      return fail("expected True or False");
    }
    return Status::ok();
  }
  Status parse_uint(uint64_t* out) {
    if (m_pos >= m_text.size() || m_text[m_pos] < '0' || m_text[m_pos] > '9')
      return fail("expected a non-negative integer");
    uint64_t v = 0;
    while (m_pos < m_text.size() && m_text[m_pos] >= '0' && m_text[m_pos] <= '9') {
      uint64_t digit = static_cast<uint64_t>(m_text[m_pos] - '0');
      if (v > (std::numeric_limits<uint64_t>::max() - digit) / 10)
        return fail("dimension overflows 64 bits");
      v = v * 10 + digit;
      ++m_pos;
    }
    eat('L');  // Python 2 long literal
    *out = v;
    return Status::ok();
  }
  Status parse_shape(std::vector<uint64_t>* out) {
    out->clear();
    if (!eat('(')) return fail("expected '(' for shape");
    for (;;) {
      skip_ws();
      if (eat(')')) break;
      if (out->size() == kMaxDims) return fail("too many dimensions");
      uint64_t dim = 0;
      ELDR_TRY(parse_uint(&dim));
      out->push_back(dim);
      skip_ws();
      if (eat(',')) continue;
      skip_ws();
      if (eat(')')) break;
      return fail("expected ',' or ')' in shape");
    }
    return Status::ok();
  }

  std::string_view m_text;
  size_t m_pos = 0;
};

struct ParsedDescr {
  NpyDtype dtype;
  bool swap;
};

Result<ParsedDescr> parse_descr(std::string_view descr) {
  std::string_view body = descr;
  bool big = false;
  if (!body.empty() && (body[0] == '<' || body[0] == '>' || body[0] == '|' || body[0] == '=')) {
    big = body[0] == '>';
    body.remove_prefix(1);
  }
  struct Entry {
    std::string_view code;
    NpyDtype dtype;
  };
  static constexpr Entry kTable[] = {
      {"i1", NpyDtype::i8},  {"b", NpyDtype::i8},   {"u1", NpyDtype::u8},  {"B", NpyDtype::u8},
      {"i2", NpyDtype::i16}, {"u2", NpyDtype::u16}, {"i4", NpyDtype::i32}, {"u4", NpyDtype::u32},
      {"i8", NpyDtype::i64}, {"u8", NpyDtype::u64}, {"f4", NpyDtype::f32}, {"f8", NpyDtype::f64},
  };
  for (const auto& e : kTable)
    if (body == e.code) return ParsedDescr{e.dtype, big && npy_dtype_size(e.dtype) > 1};
  return Status{Errc::unsupported, "npy: unsupported dtype '" + std::string(descr) +
                                       "' (supported: i1 u1 i2 u2 i4 u4 i8 u8 f4 f8)"};
}

void byteswap_in_place(uint8_t* data, uint64_t count, size_t width) {
  for (uint64_t i = 0; i < count; ++i) std::reverse(data + i * width, data + (i + 1) * width);
}

uint32_t read_le32(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

// Reads the magic, version and header length; returns the offset of the data.
Result<uint64_t> header_size_impl(std::span<const uint8_t> file, size_t* len_bytes_out) {
  if (file.size() < kMagicLen + 2 || std::memcmp(file.data(), kMagic, kMagicLen) != 0)
    return Status{Errc::corrupt, "not an npy file (bad magic)"};
  const uint8_t major = file[6], minor = file[7];
  size_t len_bytes = 0;
  if (major == 1 && minor == 0)
    len_bytes = 2;
  else if ((major == 2 || major == 3) && minor == 0)
    len_bytes = 4;
  else
    return Status{Errc::unsupported, "npy format version " + std::to_string(major) + "." +
                                         std::to_string(minor) + " is not supported"};
  const size_t preamble = kMagicLen + 2 + len_bytes;
  if (file.size() < preamble)
    return Status{Errc::corrupt, "npy file truncated inside the preamble (" +
                                     std::to_string(file.size()) + " bytes)"};
  const uint64_t header_len = len_bytes == 2 ? uint64_t{file[8]} | uint64_t{file[9]} << 8
                                             : uint64_t{read_le32(file.data() + 8)};
  if (header_len > kMaxHeaderLen)
    return Status{Errc::corrupt,
                  "npy header length " + std::to_string(header_len) + " is implausibly large"};
  if (len_bytes_out) *len_bytes_out = len_bytes;
  return preamble + header_len;
}

Result<NpyHeader> header_impl(std::span<const uint8_t> file) {
  size_t len_bytes = 0;
  auto data_start = header_size_impl(file, &len_bytes);
  if (!data_start) return data_start.status();
  const size_t preamble = kMagicLen + 2 + len_bytes;
  if (*data_start > file.size())
    return Status{Errc::corrupt, "npy header length " + std::to_string(*data_start - preamble) +
                                     " runs past the end of the file (" +
                                     std::to_string(file.size()) + " bytes)"};
  std::string_view header(reinterpret_cast<const char*>(file.data() + preamble),
                          static_cast<size_t>(*data_start - preamble));
  HeaderParser::Fields fields;
  ELDR_TRY(HeaderParser(header).parse(&fields));
  auto descr = parse_descr(fields.descr);
  if (!descr) return descr.status();
  NpyHeader out;
  out.dtype = descr->dtype;
  out.big_endian = descr->swap;
  out.fortran_order = fields.fortran_order;
  out.shape = std::move(fields.shape);
  out.data_offset = *data_start;
  uint64_t count = 1;
  for (uint64_t d : out.shape)
    if (!checked_mul(count, d, &count))
      return Status{Errc::corrupt, "npy shape " + shape_string(out.shape) + " overflows"};
  if (!checked_mul(count, npy_dtype_size(out.dtype), &out.data_bytes))
    return Status{Errc::corrupt, "npy shape " + shape_string(out.shape) + " overflows"};
  return out;
}

// Parses a whole .npy image. When `owned` is given it holds the same bytes as
// `file`, and the element data is moved out of it instead of copied: capture
// dumps can be gigabytes, and read_npy should not need twice that.
Result<NpyArray> parse_impl(std::span<const uint8_t> file, std::vector<uint8_t>* owned) {
  auto header = header_impl(file);
  if (!header) return header.status();
  if (header->fortran_order)
    return Status{Errc::unsupported, "npy: fortran_order True is not supported (save C order)"};
  const size_t data_start = static_cast<size_t>(header->data_offset);

  NpyArray out;
  out.dtype = header->dtype;
  out.shape = std::move(header->shape);
  const size_t width = npy_dtype_size(out.dtype);
  const uint64_t count = header->data_bytes / width;
  const uint64_t expected = header->data_bytes;
  const uint64_t actual = file.size() - data_start;
  if (actual != expected)
    return Status{Errc::corrupt, "npy data is " + std::to_string(actual) + " bytes but shape " +
                                     shape_string(out.shape) + " of " + npy_dtype_descr(out.dtype) +
                                     " needs " + std::to_string(expected) + " bytes" +
                                     (actual < expected ? " (truncated)" : " (trailing bytes)")};

  if (owned) {
    owned->erase(owned->begin(), owned->begin() + static_cast<std::ptrdiff_t>(data_start));
    out.bytes = std::move(*owned);
  } else {
    out.bytes.assign(file.begin() + static_cast<std::ptrdiff_t>(data_start), file.end());
  }
  if (header->big_endian) byteswap_in_place(out.bytes.data(), count, width);
  return out;
}

bool is_integer_dtype(NpyDtype d) { return d != NpyDtype::f32 && d != NpyDtype::f64; }

}  // namespace

Result<uint64_t> npy_header_size(std::span<const uint8_t> prefix) {
  return guarded("npy_header_size",
                 [&]() -> Result<uint64_t> { return header_size_impl(prefix, nullptr); });
}

Result<NpyHeader> parse_npy_header(std::span<const uint8_t> prefix) {
  return guarded("parse_npy_header", [&]() -> Result<NpyHeader> { return header_impl(prefix); });
}

Result<NpyArray> parse_npy(std::span<const uint8_t> file_bytes) {
  return guarded("parse_npy",
                 [&]() -> Result<NpyArray> { return parse_impl(file_bytes, nullptr); });
}

Result<NpyArray> read_npy(const std::string& path) {
  return guarded("read_npy", [&]() -> Result<NpyArray> {
    auto bytes = read_file(path, kMaxFileBytes);
    if (!bytes) return bytes.status();
    std::vector<uint8_t> owned = std::move(*bytes);
    auto parsed = parse_impl(owned, &owned);
    if (!parsed) return with_path(path, parsed.status());
    return parsed;
  });
}

Result<CountsTensor> load_counts_npy(const std::string& path) {
  return guarded("load_counts_npy", [&]() -> Result<CountsTensor> {
    auto array = read_npy(path);
    if (!array) return array.status();
    const auto& shape = array->shape;
    if (shape.size() != 3)
      return Status{
          Errc::shape_mismatch,
          path + ": counts must be a 3-D array [N, L, E], got shape " + shape_string(shape)};
    if (shape[1] == 0 || shape[1] > kMaxLayers || shape[2] == 0 || shape[2] > kMaxExperts)
      return Status{Errc::shape_mismatch, path + ": counts shape " + shape_string(shape) +
                                              " needs 1 <= L <= " + std::to_string(kMaxLayers) +
                                              " and 1 <= E <= " + std::to_string(kMaxExperts)};
    if (!is_integer_dtype(array->dtype))
      return Status{Errc::invalid_argument, path + ": counts must have an integer dtype, got " +
                                                npy_dtype_descr(array->dtype)};
    auto values = npy_to_int16(*array);
    if (!values) return with_path(path, values.status());

    CountsTensor out;
    out.n = shape[0];
    out.layers = static_cast<uint32_t>(shape[1]);
    out.experts = static_cast<uint32_t>(shape[2]);
    out.data = std::move(*values);
    const size_t row = size_t{out.layers} * out.experts;
    for (size_t i = 0; i < out.data.size(); ++i) {
      if (out.data[i] < 0) {
        const size_t cell = i % row;
        return Status{Errc::out_of_range, path + ": negative count " + std::to_string(out.data[i]) +
                                              " at [" + std::to_string(i / row) + ", " +
                                              std::to_string(cell / out.experts) + ", " +
                                              std::to_string(cell % out.experts) + "]"};
      }
    }
    return out;
  });
}

Result<std::vector<std::string>> load_labels(const std::string& path) {
  return guarded("load_labels", [&]() -> Result<std::vector<std::string>> {
    auto bytes = read_file(path, kMaxFileBytes);
    if (!bytes) return bytes.status();
    std::vector<std::string> labels;

    if (bytes->size() >= kMagicLen && std::memcmp(bytes->data(), kMagic, kMagicLen) == 0) {
      auto array = parse_npy(*bytes);
      if (!array) return with_path(path, array.status());
      if (array->shape.size() != 1)
        return Status{Errc::shape_mismatch, path + ": labels must be a 1-D array, got shape " +
                                                shape_string(array->shape)};
      if (!is_integer_dtype(array->dtype))
        return Status{
            Errc::invalid_argument,
            path + ": npy labels must have an integer dtype, got " + npy_dtype_descr(array->dtype)};
      labels.reserve(static_cast<size_t>(array->count()));
      if (array->dtype == NpyDtype::u64) {
        // Not routed through int64: ids above 2^63 are still valid labels.
        for (uint64_t i = 0; i < array->count(); ++i)
          labels.push_back(std::to_string(load_elem<uint64_t>(array->bytes.data(), i)));
      } else {
        auto values = npy_to_int64(*array);
        if (!values) return with_path(path, values.status());
        for (int64_t v : *values) labels.push_back(std::to_string(v));
      }
      return labels;
    }

    std::string_view text(reinterpret_cast<const char*>(bytes->data()), bytes->size());
    if (text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);  // UTF-8 BOM from editors
    size_t line_no = 0;
    while (!text.empty()) {
      ++line_no;
      size_t nl = text.find('\n');
      std::string_view line = text.substr(0, nl);
      text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.find_first_not_of(" \t") == std::string_view::npos)
        return Status{Errc::corrupt, path + ":" + std::to_string(line_no) +
                                         ": blank label (one label per line, no blank lines)"};
      labels.emplace_back(line);
    }
    return labels;
  });
}

}  // namespace eldr
