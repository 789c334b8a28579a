// Routing over NATS: the route reply and the complete, encoded as the daemon
// does and decoded as a pool handle does (and the reverse), from any bytes.
#include "eldr/pool/route_wire.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
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

TEST(RouteWire, a_footprints_request_round_trips_from_any_address) {
  const std::vector<int16_t> counts = {0, 3, 0, 1, 2, 0, 0, 7};
  const std::vector<uint8_t> bytes = encode_route_request("req-1", 0xfeed, 0xbeef, 2, 4, counts);
  EXPECT_TRUE(is_route_request(bytes));
  std::vector<uint8_t> shifted(bytes.size() + 1);
  std::copy(bytes.begin(), bytes.end(), shifted.begin() + 1);
  for (std::span<const uint8_t> in :
       {std::span<const uint8_t>(bytes), std::span<const uint8_t>(shifted).subspan(1)}) {
    auto got = decode_route_request(in);
    ASSERT_TRUE(got) << got.status().message();
    EXPECT_EQ(got->request_id, "req-1");
    EXPECT_EQ(got->route_key, 0xfeedu);
    EXPECT_EQ(got->gateway, 0xbeefu);
    EXPECT_EQ(got->kind, RouteKind::footprint);
    EXPECT_EQ(got->layers, 2u);
    EXPECT_EQ(got->experts, 4u);
    EXPECT_EQ(got->counts, counts);
  }
}

TEST(RouteWire, a_prompts_request_round_trips_its_tokens_or_its_text) {
  const std::vector<uint32_t> ids = {1, 2, 70000, 5};
  auto tokens = decode_route_request(encode_route_request("t", 1, 2, Prompt::of_tokens(ids)));
  ASSERT_TRUE(tokens) << tokens.status().message();
  EXPECT_EQ(tokens->kind, RouteKind::tokens);
  EXPECT_EQ(tokens->tokens, ids);
  EXPECT_EQ(tokens->prompt().kind, PromptKind::tokens);
  EXPECT_EQ(tokens->prompt().tokens.size(), 4u);
  auto text = decode_route_request(encode_route_request("x", 1, 2, Prompt::of_text("héllo")));
  ASSERT_TRUE(text) << text.status().message();
  EXPECT_EQ(text->kind, RouteKind::text);
  EXPECT_EQ(text->prompt().text, "héllo");
}

TEST(RouteWire, a_request_without_its_identity_or_with_a_bad_body_is_refused) {
  const std::vector<int16_t> counts(8, 1);
  // No key, no gateway: a RouteRequest always names both.
  EXPECT_EQ(decode_route_request(encode_route_request("r", 0, 2, 2, 4, counts)).status().code(),
            Errc::invalid_argument);
  EXPECT_EQ(decode_route_request(encode_route_request("r", 1, 0, 2, 4, counts)).status().code(),
            Errc::invalid_argument);
  // A footprint of another shape than its counts, or a negative count.
  EXPECT_FALSE(decode_route_request(encode_route_request("r", 1, 2, 3, 4, counts)));
  std::vector<int16_t> negative = counts;
  negative[3] = -1;
  EXPECT_FALSE(decode_route_request(encode_route_request("r", 1, 2, 2, 4, negative)));
  // A prompt past the predictor's limits.
  const std::vector<uint32_t> long_prompt(kMaxPromptTokens + 1, 7);
  EXPECT_EQ(decode_route_request(encode_route_request("r", 1, 2, Prompt::of_tokens(long_prompt)))
                .status()
                .code(),
            Errc::invalid_argument);
  const std::string long_text(kMaxPromptBytes + 1, 'a');
  EXPECT_EQ(decode_route_request(encode_route_request("r", 1, 2, Prompt::of_text(long_text)))
                .status()
                .code(),
            Errc::invalid_argument);
  // The ring's records and the reply are no RouteRequest.
  EXPECT_EQ(decode_route_request(encode_route_reply({})).status().code(), Errc::corrupt);
  EXPECT_EQ(decode_route_request({}).status().code(), Errc::corrupt);
}

TEST(RouteWire, a_request_of_another_version_is_unsupported) {
  // Version 2 as a newer gateway would send it: the same fields, its number.
  std::vector<uint8_t> bytes = encode_route_request("r", 1, 2, 2, 4, std::vector<int16_t>(8, 1));
  auto got = decode_route_request(bytes);
  ASSERT_TRUE(got);
  // Find the version (a uint32 1 in the table) by flipping candidates: the
  // first one that decodes as another version is the field.
  bool found = false;
  for (size_t at = 8; at + 4 <= bytes.size() && !found; at += 4) {
    uint32_t v = 0;
    std::memcpy(&v, bytes.data() + at, 4);
    if (v != kRouteRequestVersion) continue;
    std::vector<uint8_t> other = bytes;
    const uint32_t next = kRouteRequestVersion + 1;
    std::memcpy(other.data() + at, &next, 4);
    const auto r = decode_route_request(other);
    if (!r && r.status().code() == Errc::unsupported) {
      found = true;
      EXPECT_NE(r.status().message().find("version 2"), std::string::npos) << r.status().message();
    }
  }
  EXPECT_TRUE(found);
}

TEST(RouteWire, a_complete_round_trips_and_needs_its_token) {
  auto got = decode_route_complete(encode_route_complete("req-2", 5));
  ASSERT_TRUE(got) << got.status().message();
  EXPECT_EQ(got->request_id, "req-2");
  EXPECT_EQ(got->completion_token, 5u);
  EXPECT_EQ(got->route_key, 0u);  // a node's forward, a gateway before keys
  got = decode_route_complete(encode_route_complete("req-2", 5, 0x77));
  ASSERT_TRUE(got);
  EXPECT_EQ(got->route_key, 0x77u);
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
  const std::vector<uint8_t> request =
      encode_route_request("req", 1, 2, 2, 4, std::vector<int16_t>(8, 1));
  for (size_t cut = 0; cut < request.size(); ++cut)
    EXPECT_FALSE(decode_route_request(std::span<const uint8_t>(request).first(cut)));
  for (size_t i = 0; i < request.size(); ++i) {
    std::vector<uint8_t> flipped = request;
    flipped[i] ^= 0xff;
    if (auto r = decode_route_request(flipped)) {
      // Whatever decodes holds what the decoder promises.
      EXPECT_NE(r->route_key, 0u);
      EXPECT_NE(r->gateway, 0u);
      if (r->kind == RouteKind::footprint) {
        EXPECT_EQ(r->counts.size(), size_t{r->layers} * r->experts);
      }
    }
  }
}

}  // namespace
}  // namespace eldr::pool
