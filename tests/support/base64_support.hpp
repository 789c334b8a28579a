// A plain bit-by-bit base64 encoder (RFC 4648, padded) for building payloads
// independently of the decoder under test.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace eldr::test_support {

inline std::string b64(const std::vector<uint8_t>& bytes) {
  static const char* kA = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (uint8_t b : bytes) {
    acc = (acc << 8) | b;
    bits += 8;
    while (bits >= 6) {
      bits -= 6;
      out += kA[(acc >> bits) & 63];
    }
  }
  if (bits > 0) out += kA[(acc << (6 - bits)) & 63];
  while (out.size() % 4) out += '=';
  return out;
}

}  // namespace eldr::test_support
