// Base64 (RFC 4648 standard alphabet, padded) decoding for untrusted payloads:
// the routed-expert decoders, the CLI's decode bench. Strict: the length must be a
// multiple of 4, '=' may only end the text (at most two), no whitespace, and
// the unused bits of the last quantum must be zero, so every byte string has
// exactly one accepted encoding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "eldr/status.hpp"

namespace eldr::base64 {

// Streams the decoded bytes of one text in caller-sized pieces.
class Decoder {
 public:
  // Checks length and padding (corrupt on failure); characters are checked as
  // they are decoded.
  static Result<Decoder> create(std::string_view text);

  size_t decoded_size() const noexcept { return m_decoded_size; }
  size_t remaining() const noexcept { return m_decoded_size - m_produced; }

  // Decodes the next min(remaining(), room) bytes into out, where room is the
  // largest multiple of 3 that leaves one spare byte in `capacity` (the
  // decoder stores 4 bytes per 3 decoded); capacity must be at least 4 unless
  // only the last, padded quantum is left. Returns the bytes written, or
  // corrupt naming the offset of the first character outside the alphabet.
  Result<size_t> next(uint8_t* out, size_t capacity);

 private:
  explicit Decoder(std::string_view text, size_t decoded, size_t pad)
      : m_text(text), m_decoded_size(decoded), m_pad(pad) {}

  std::string_view m_text;
  size_t m_decoded_size = 0;
  size_t m_pad = 0;       // '=' characters at the end (0..2)
  size_t m_pos = 0;       // characters consumed
  size_t m_produced = 0;  // bytes produced
};

// Decodes a whole text (tests, the bench's plain-decode baseline).
Status decode(std::string_view text, std::vector<uint8_t>* out);
// Encodes bytes (tests and the bench build payloads with it).
std::string encode(const uint8_t* data, size_t size);

}  // namespace eldr::base64
