#include "eldr/base64.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <string>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define ELDR_BASE64_AVX2 1
#endif

namespace eldr::base64 {
namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
constexpr uint32_t kBad = 0x01000000;  // above any 24-bit quantum: one OR flags a bad character

// One table per position of a quantum, each holding the character's 6 bits
// already shifted to where they land in the little-endian 32-bit word whose
// low three bytes are the decoded bytes in order. A quantum is then four
// loads and three ORs, and a chunk's validity is one test of the OR of all.
struct Tables {
  std::array<uint32_t, 256> t[4];
};

constexpr Tables make_tables() {
  Tables out{};
  for (int pos = 0; pos < 4; ++pos)
    for (int c = 0; c < 256; ++c) out.t[pos][c] = kBad;
  for (uint32_t v = 0; v < 64; ++v) {
    const auto c = static_cast<uint8_t>(kAlphabet[v]);
    // The 24 bits are v0<<18 | v1<<12 | v2<<6 | v3; byte 0 is bits 23..16.
    out.t[0][c] = v << 2;
    out.t[1][c] = (v >> 4) | ((v & 0xf) << 12);
    out.t[2][c] = ((v >> 2) << 8) | ((v & 0x3) << 22);
    out.t[3][c] = v << 16;
  }
  return out;
}

constexpr Tables kTables = make_tables();

inline uint32_t quantum(const uint8_t* in) noexcept {
  return kTables.t[0][in[0]] | kTables.t[1][in[1]] | kTables.t[2][in[2]] | kTables.t[3][in[3]];
}

#if defined(ELDR_BASE64_AVX2)
bool has_avx2() noexcept {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}

// 32 characters (8 quanta) -> 24 bytes per step, the classifier and the
// bit packing of Muła and Lemire ("Faster Base64 Encoding and Decoding
// Using AVX2 Instructions", 2018), as in aklomp/base64. Each 32-byte store
// writes 8 bytes past its 24, so it runs only while 11 or more quanta are
// left (33 output bytes of room); the scalar loop does the rest. Returns the
// quanta decoded, or n + 1 at a character outside the alphabet (the caller
// then locates it).
__attribute__((target("avx2"))) size_t decode_quanta_avx2(const uint8_t* in, size_t n,
                                                          uint8_t* out) noexcept {
  // Per low nibble (lo) and high nibble (hi) of a character, bit sets whose
  // AND is zero exactly for the 64 alphabet characters.
  const __m256i lut_lo =
      _mm256_setr_epi8(0x15, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x13, 0x1A, 0x1B,
                       0x1B, 0x1B, 0x1A, 0x15, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11,
                       0x13, 0x1A, 0x1B, 0x1B, 0x1B, 0x1A);
  const __m256i lut_hi =
      _mm256_setr_epi8(0x10, 0x10, 0x01, 0x02, 0x04, 0x08, 0x04, 0x08, 0x10, 0x10, 0x10, 0x10, 0x10,
                       0x10, 0x10, 0x10, 0x10, 0x10, 0x01, 0x02, 0x04, 0x08, 0x04, 0x08, 0x10, 0x10,
                       0x10, 0x10, 0x10, 0x10, 0x10, 0x10);
  // Offset from character to 6-bit value per high nibble ('/' gets its own).
  const __m256i lut_roll =
      _mm256_setr_epi8(0, 16, 19, 4, -65, -65, -71, -71, 0, 0, 0, 0, 0, 0, 0, 0, 0, 16, 19, 4, -65,
                       -65, -71, -71, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m256i mask_2f = _mm256_set1_epi8(0x2f);
  const __m256i pack_pairs = _mm256_set1_epi32(0x01400140);
  const __m256i pack_quads = _mm256_set1_epi32(0x00011000);
  const __m256i pack_bytes =
      _mm256_setr_epi8(2, 1, 0, 6, 5, 4, 10, 9, 8, 14, 13, 12, -1, -1, -1, -1, 2, 1, 0, 6, 5, 4, 10,
                       9, 8, 14, 13, 12, -1, -1, -1, -1);
  const __m256i pack_lanes = _mm256_setr_epi32(0, 1, 2, 4, 5, 6, -1, -1);
  size_t i = 0;
  for (; i + 11 <= n; i += 8) {
    __m256i str = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in));
    const __m256i hi_nibbles = _mm256_and_si256(_mm256_srli_epi32(str, 4), mask_2f);
    const __m256i lo_nibbles = _mm256_and_si256(str, mask_2f);
    const __m256i hi = _mm256_shuffle_epi8(lut_hi, hi_nibbles);
    const __m256i lo = _mm256_shuffle_epi8(lut_lo, lo_nibbles);
    if (!_mm256_testz_si256(lo, hi)) return n + 1;
    const __m256i eq_2f = _mm256_cmpeq_epi8(str, mask_2f);
    const __m256i roll = _mm256_shuffle_epi8(lut_roll, _mm256_add_epi8(eq_2f, hi_nibbles));
    str = _mm256_add_epi8(str, roll);
    // 6-bit values -> 12-bit pairs -> 24-bit quads -> packed bytes.
    __m256i packed = _mm256_madd_epi16(_mm256_maddubs_epi16(str, pack_pairs), pack_quads);
    packed = _mm256_shuffle_epi8(packed, pack_bytes);
    packed = _mm256_permutevar8x32_epi32(packed, pack_lanes);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), packed);
    in += 32;
    out += 24;
  }
  return i;
}
#endif

// Decodes n full quanta (no padding), writing 4 bytes per 3 (the caller leaves
// one spare byte). Returns the OR of every quantum word: kBad set = a bad char.
uint32_t decode_quanta(const uint8_t* in, size_t n, uint8_t* out) noexcept {
  uint32_t bad = 0;
  size_t i = 0;
#if defined(ELDR_BASE64_AVX2)
  if (has_avx2()) {
    i = decode_quanta_avx2(in, n, out);
    if (i > n) return kBad;
    in += i * 4;
    out += i * 3;
  }
#endif
  // Four quanta per iteration: independent table loads keep the load ports busy.
  for (; i + 4 <= n; i += 4) {
    const uint32_t a = quantum(in), b = quantum(in + 4), c = quantum(in + 8), d = quantum(in + 12);
    std::memcpy(out, &a, 4);
    std::memcpy(out + 3, &b, 4);
    std::memcpy(out + 6, &c, 4);
    std::memcpy(out + 9, &d, 4);
    bad |= a | b | c | d;
    in += 16;
    out += 12;
  }
  for (; i < n; ++i) {
    const uint32_t a = quantum(in);
    std::memcpy(out, &a, 4);
    bad |= a;
    in += 4;
    out += 3;
  }
  return bad;
}

// The first character from `from` on that is neither in the alphabet nor part
// of the final `pad` padding characters.
Status bad_char(std::string_view text, size_t from, size_t pad) {
  for (size_t i = from; i < text.size() - pad; ++i) {
    const auto c = static_cast<uint8_t>(text[i]);
    if (kTables.t[0][c] == kBad) {
      char shown[16];
      if (c >= 0x21 && c < 0x7f)
        std::snprintf(shown, sizeof shown, "'%c'", c);
      else
        std::snprintf(shown, sizeof shown, "0x%02x", c);
      return {Errc::corrupt, "base64: character " + std::string(shown) + " at offset " +
                                 std::to_string(i) + " is outside the alphabet" +
                                 (c == '=' ? " (padding before the end)" : "")};
    }
  }
  return {Errc::corrupt, "base64: bad character"};
}

}  // namespace

Result<Decoder> Decoder::create(std::string_view text) {
  if (text.size() % 4 != 0)
    return Status{Errc::corrupt, "base64: length " + std::to_string(text.size()) +
                                     " is not a multiple of 4 (truncated or unpadded)"};
  size_t pad = 0;
  if (!text.empty() && text.back() == '=') pad = text[text.size() - 2] == '=' ? 2 : 1;
  if (pad > 0 && text.size() >= 3 + pad && text[text.size() - 1 - pad] == '=')
    return Status{Errc::corrupt, "base64: more than two '=' of padding"};
  return Decoder(text, text.size() / 4 * 3 - pad, pad);
}

Result<size_t> Decoder::next(uint8_t* out, size_t capacity) {
  const auto* in = reinterpret_cast<const uint8_t*>(m_text.data());
  const size_t quanta_total = m_text.size() / 4;
  const size_t full_total = quanta_total - (m_pad ? 1 : 0);
  const size_t at = m_pos / 4;
  size_t written = 0;
  if (at < full_total) {
    const size_t room = capacity == 0 ? 0 : (capacity - 1) / 3;
    const size_t n = std::min(room, full_total - at);
    if (decode_quanta(in + m_pos, n, out) & kBad) return bad_char(m_text, m_pos, m_pad);
    m_pos += n * 4;
    written = n * 3;
  }
  if (m_pos / 4 == full_total && m_pad && m_pos < m_text.size() &&
      capacity - written >= 3 - m_pad) {
    // The last quantum: 2 or 3 significant characters, the rest '='.
    const uint8_t* q = in + m_pos;
    uint32_t w = kTables.t[0][q[0]] | kTables.t[1][q[1]];
    if (m_pad == 1) w |= kTables.t[2][q[2]];
    if (w & kBad) return bad_char(m_text, m_pos, m_pad);
    // Bits past the last byte must be zero: otherwise two texts would decode
    // to the same bytes, and a corrupted tail could pass unnoticed.
    const uint32_t tail_mask = m_pad == 2 ? 0x00ffff00u : 0x00ff0000u;
    if (w & tail_mask)
      return Status{Errc::corrupt, "base64: nonzero bits in the padding of the last quantum"};
    const uint8_t bytes[3] = {static_cast<uint8_t>(w), static_cast<uint8_t>(w >> 8),
                              static_cast<uint8_t>(w >> 16)};
    std::memcpy(out + written, bytes, 3 - m_pad);
    written += 3 - m_pad;
    m_pos = m_text.size();
  }
  m_produced += written;
  return written;
}

Status decode(std::string_view text, std::vector<uint8_t>* out) {
  auto dec = Decoder::create(text);
  if (!dec) return dec.status();
  std::vector<uint8_t> bytes(dec->decoded_size() + 1);
  size_t at = 0;
  while (dec->remaining() > 0) {
    auto n = dec->next(bytes.data() + at, bytes.size() - at);
    if (!n) return n.status();
    if (*n == 0) return {Errc::internal, "base64: decoder made no progress"};
    at += *n;
  }
  bytes.resize(at);
  *out = std::move(bytes);
  return Status::ok();
}

std::string encode(const uint8_t* data, size_t size) {
  std::string out;
  out.reserve((size + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= size; i += 3) {
    const uint32_t v = uint32_t{data[i]} << 16 | uint32_t{data[i + 1]} << 8 | data[i + 2];
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  if (i < size) {
    uint32_t v = uint32_t{data[i]} << 16;
    if (i + 1 < size) v |= uint32_t{data[i + 1]} << 8;
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < size ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

}  // namespace eldr::base64
