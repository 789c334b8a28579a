// Routing over NATS: the route reply and the complete, encoded as the daemon
// does and decoded as a pool handle does (and the reverse), from any bytes.
#include "eldr/pool/route_wire.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace eldr::pool {
namespace {

TEST(RouteWire, a_reply_round_trips_every_field) {
  const RouteReply sent{-3, "why", "req-1", 7, 0.5f, 3, 2, 42, 99, "node-a"};
  const std::vector<uint8_t> bytes = encode_route_reply(sent);
  // From an odd address too: a client library's buffer need not be aligned.
  std::vector<uint8_t> shifted(bytes.size() + 1);
  std::copy(bytes.begin(), bytes.end(), shifted.begin() + 1);
  for (std::span<const uint8_t> in :
       {std::span<const uint8_t>(bytes), std::span<const uint8_t>(shifted).subspan(1)}) {
    auto got = decode_route_reply(in);
    ASSERT_TRUE(got) << got.status().message();
    EXPECT_EQ(got->status, -3);
    EXPECT_EQ(got->message, "why");
    EXPECT_EQ(got->request_id, "req-1");
    EXPECT_EQ(got->worker, 7);
    EXPECT_EQ(got->similarity, 0.5f);
    EXPECT_EQ(got->band_size, 3u);
    EXPECT_EQ(got->policy, 2u);
    EXPECT_EQ(got->table_epoch, 42u);
    EXPECT_EQ(got->completion_token, 99u);
    EXPECT_EQ(got->node, "node-a");
    EXPECT_EQ(got->confidence, 1.0f);   // the default: a footprint's, or an older node's
    EXPECT_FALSE(got->acks_completes);  // the default: a node before confirmations
  }
  RouteReply prompt = sent;
  prompt.confidence = 0.375f;
  prompt.acks_completes = true;
  auto got = decode_route_reply(encode_route_reply(prompt));
  ASSERT_TRUE(got) << got.status().message();
  EXPECT_EQ(got->confidence, 0.375f);
  EXPECT_TRUE(got->acks_completes);
}

TEST(RouteWire, a_complete_round_trips_and_needs_its_token) {
  auto got = decode_route_complete(encode_route_complete("req-2", 5));
  ASSERT_TRUE(got) << got.status().message();
  EXPECT_EQ(got->request_id, "req-2");
  EXPECT_EQ(got->completion_token, 5u);
  EXPECT_EQ(decode_route_complete(encode_route_complete("req-2", 0)).status().code(),
            Errc::corrupt);
}

TEST(RouteWire, a_cancel_round_trips_and_needs_its_key) {
  auto got = decode_route_cancel(encode_route_cancel("req-3", 0xfeedf00d12345678));
  ASSERT_TRUE(got) << got.status().message();
  EXPECT_EQ(got->request_id, "req-3");
  EXPECT_EQ(got->route_key, 0xfeedf00d12345678u);
  EXPECT_EQ(decode_route_cancel(encode_route_cancel("req-3", 0)).status().code(), Errc::corrupt);
  EXPECT_EQ(decode_route_cancel({}).status().code(), Errc::corrupt);
}

TEST(RouteWire, a_gateway_beat_round_trips_and_needs_its_id) {
  for (const bool leaving : {false, true}) {
    auto got = decode_gateway_beat(encode_gateway_beat({0xabc, leaving}));
    ASSERT_TRUE(got) << got.status().message();
    EXPECT_EQ(got->gateway, 0xabcu);
    EXPECT_EQ(got->leaving, leaving);
  }
  EXPECT_EQ(decode_gateway_beat(encode_gateway_beat({0, true})).status().code(), Errc::corrupt);
}

TEST(RouteWire, a_key_is_sixteen_hex_digits_and_anything_else_is_none) {
  for (const uint64_t key : {uint64_t{1}, uint64_t{0xabcdef}, ~uint64_t{0}}) {
    const std::string text = format_key(key);
    EXPECT_EQ(text.size(), 16u);
    EXPECT_EQ(parse_key(text), key) << text;
  }
  EXPECT_EQ(parse_key("00000000000000FF"), 0xffu);  // either case
  for (const char* bad : {"", "0", "0000000000000000", "00000000000000001", "12g4", "-1", " 1"})
    EXPECT_EQ(parse_key(bad), 0u) << "'" << bad << "'";
}

TEST(RouteWire, other_bytes_are_corrupt_never_a_crash) {
  const std::vector<uint8_t> reply = encode_route_reply({});
  EXPECT_EQ(decode_route_reply({}).status().code(), Errc::corrupt);
  EXPECT_EQ(decode_route_reply(encode_route_complete("x", 1)).status().code(), Errc::corrupt);
  for (size_t cut = 0; cut < reply.size(); ++cut)
    (void)decode_route_reply(std::span<const uint8_t>(reply).first(cut));
  for (size_t i = 0; i < reply.size(); ++i) {
    std::vector<uint8_t> flipped = reply;
    flipped[i] ^= 0xff;
    (void)decode_route_reply(flipped);
    (void)decode_route_complete(flipped);
    (void)decode_route_cancel(flipped);
    (void)decode_gateway_beat(flipped);
  }
}

}  // namespace
}  // namespace eldr::pool
