// Prompt records (format 2.2): the PromptMsg codec, the cut of a prompt
// longer than a record, the decoder's checks, and the transport end to end
// (a handler that routes no prompts still answers each).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "eldr/prompt_msg_generated.h"
#include "eldr/shm.hpp"
#include "eldr/shm/records.hpp"
#include "eldr/shm/ring.hpp"
#include "shm_test_support.hpp"

namespace eldr::shm {
namespace {

using detail::DecodedRecord;

// Decodes from an 8-aligned copy, as the daemon does.
Status decode(const std::vector<uint8_t>& bytes, DecodedRecord& out,
              std::vector<uint64_t>& storage) {
  storage.assign((bytes.size() + 7) / 8, 0);
  std::memcpy(storage.data(), bytes.data(), bytes.size());
  return detail::decode_record(RecordType::prompt, detail::kPromptSchema,
                               {reinterpret_cast<const uint8_t*>(storage.data()), bytes.size()},
                               out);
}

TEST(shm_prompt, a_prompt_round_trips_whole_when_it_fits) {
  const std::vector<uint32_t> tokens{1, 2, 3, (1u << 20) + 5};  // values are the daemon's to judge
  std::vector<uint8_t> bytes;
  ASSERT_TRUE(detail::encode_prompt({"req", Prompt::of_tokens(tokens)}, bytes).is_ok());
  DecodedRecord d;
  std::vector<uint64_t> storage;
  ASSERT_TRUE(decode(bytes, d, storage).is_ok());
  EXPECT_EQ(d.request_id, "req");
  EXPECT_EQ(d.prompt.prompt.kind, PromptKind::tokens);
  EXPECT_EQ(std::vector<uint32_t>(d.prompt.prompt.tokens.begin(), d.prompt.prompt.tokens.end()),
            tokens);
  EXPECT_FALSE(d.prompt.cut());
  const std::string text = "caf\xc3\xa9 au lait";
  ASSERT_TRUE(detail::encode_prompt({"t", Prompt::of_text(text)}, bytes).is_ok());
  ASSERT_TRUE(decode(bytes, d, storage).is_ok());
  EXPECT_EQ(d.prompt.prompt.kind, PromptKind::text);
  EXPECT_EQ(d.prompt.prompt.text, text);
  EXPECT_EQ(d.prompt.head_units, text.size());
  // Empty: framed fine (the predictor rejects it).
  ASSERT_TRUE(detail::encode_prompt({"e", Prompt::of_tokens({})}, bytes).is_ok());
  ASSERT_TRUE(decode(bytes, d, storage).is_ok());
  EXPECT_EQ(d.prompt.units(), 0u);
  // A bad request id never gets encoded.
  EXPECT_FALSE(detail::encode_prompt({"", Prompt::of_tokens(tokens)}, bytes).is_ok());
}

TEST(shm_prompt, a_long_prompt_keeps_three_quarters_head_and_a_tail) {
  std::vector<uint32_t> tokens(10000);
  for (uint32_t i = 0; i < tokens.size(); ++i) tokens[i] = i;
  flatbuffers::FlatBufferBuilder fbb;
  bool cut = false;
  ASSERT_TRUE(detail::encode_prompt({"long", Prompt::of_tokens(tokens)}, 4096, fbb, &cut).is_ok());
  EXPECT_TRUE(cut);
  EXPECT_LE(fbb.GetSize(), 4096u);
  std::vector<uint8_t> bytes(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
  DecodedRecord d;
  std::vector<uint64_t> storage;
  ASSERT_TRUE(decode(bytes, d, storage).is_ok());
  const PromptIn& p = d.prompt;
  EXPECT_TRUE(p.cut());
  EXPECT_EQ(p.prompt_units, tokens.size());
  const size_t kept = p.units();
  EXPECT_GT(kept, 900u);
  EXPECT_NEAR(double(p.head_units), 0.75 * double(kept), 4.0);
  EXPECT_EQ(p.prompt.tokens[p.head_units - 1], p.head_units - 1);
  EXPECT_EQ(p.prompt.tokens[p.head_units], tokens.size() - (kept - p.head_units));
  EXPECT_EQ(p.prompt.tokens.back(), tokens.back());
  // Too small for anything.
  EXPECT_EQ(detail::encode_prompt({"long", Prompt::of_tokens(tokens)}, 100, fbb).code(),
            Errc::capacity);
}

// Hand-built messages the encoder never makes: refused by the decoder.
TEST(shm_prompt, the_decoder_refuses_inconsistent_prompts) {
  const auto build = [](uint8_t kind, bool tokens, bool text, uint64_t units, uint32_t head) {
    flatbuffers::FlatBufferBuilder fbb;
    const std::vector<uint32_t> t{1, 2, 3};
    const std::vector<uint8_t> x{'a', 'b', 'c'};
    const auto tv = tokens ? fbb.CreateVector(t) : 0;
    const auto xv = text ? fbb.CreateVector(x) : 0;
    const auto id = fbb.CreateString("r");
    fb::FinishPromptMsgBuffer(fbb, fb::CreatePromptMsg(fbb, id, kind, tv, xv, units, head));
    return std::vector<uint8_t>(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
  };
  DecodedRecord d;
  std::vector<uint64_t> storage;
  EXPECT_TRUE(decode(build(0, true, false, 3, 3), d, storage).is_ok());
  EXPECT_TRUE(decode(build(0, true, false, 9, 2), d, storage).is_ok());   // cut
  EXPECT_FALSE(decode(build(2, true, false, 3, 3), d, storage).is_ok());  // unknown kind
  EXPECT_FALSE(decode(build(0, true, true, 3, 3), d, storage).is_ok());   // both
  EXPECT_FALSE(decode(build(1, true, false, 3, 3), d, storage).is_ok());  // text kind, tokens
  EXPECT_FALSE(decode(build(0, true, false, 2, 2), d, storage).is_ok());  // fewer than kept
  EXPECT_FALSE(decode(build(0, true, false, 3, 2), d, storage).is_ok());  // uncut, head short
  EXPECT_FALSE(decode(build(0, true, false, 9, 4), d, storage).is_ok());  // head past kept
  std::vector<uint8_t> junk(64, 7);
  EXPECT_EQ(decode(junk, d, storage).code(), Errc::corrupt);
}

// Through the transport: the record reaches on_prompt with its sender; a
// handler without on_prompt rejects it (a decision still comes).
TEST(shm_prompt, a_pushed_prompt_reaches_the_handler) {
  eldr::testing::TempDir dir("shm_prompt");
  eldr::testing::Pair p(dir, "prompt");
  ASSERT_TRUE(p.ready());
  struct Handler : eldr::testing::RecordingHandler {
    void on_prompt(const PromptIn& in) override {
      ids.emplace_back(in.request_id);
      units.push_back(in.units());
      cut.push_back(in.cut());
    }
    std::vector<std::string> ids;
    std::vector<uint64_t> units;
    std::vector<bool> cut;
  } handler;
  const std::vector<uint32_t> tokens(5000, 42);  // 20 KB: more than a 64 KiB ring's record
  bool was_cut = false;
  ASSERT_TRUE(p.client->push_prompt({"a", Prompt::of_tokens(tokens)}, &was_cut).is_ok());
  EXPECT_TRUE(was_cut);
  ASSERT_TRUE(p.client->push_prompt({"b", Prompt::of_text("hello")}).is_ok());
  size_t n = 0;
  for (int i = 0; i < 100 && n < 2; ++i) n += p.host->poll(handler);
  ASSERT_EQ(handler.ids, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(handler.cut[0]);
  EXPECT_LE(handler.units[0] * 4, detail::max_payload(1u << 16));
  EXPECT_EQ(handler.units[1], 5u);
  // The default on_prompt: rejected, with the id (so a decision can be published).
  eldr::testing::RecordingHandler plain;
  ASSERT_TRUE(p.client->push_prompt({"c", Prompt::of_text("x")}).is_ok());
  for (int i = 0; i < 100 && plain.rejections.empty(); ++i) (void)p.host->poll(plain);
  ASSERT_EQ(plain.rejections.size(), 1u);
  EXPECT_EQ(plain.rejections[0].request_id, "c");
  EXPECT_EQ(plain.rejections[0].why.code(), Errc::unsupported);
}

}  // namespace
}  // namespace eldr::shm
