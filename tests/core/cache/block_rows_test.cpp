// BlockRows, the CPU reference of the GPU kernels (docs/design.md §6):
// per-block rows co-indexed with the KV cache must give every request its
// cold-prefill footprint, prefix-cache hits included.
#include "eldr/block_rows.hpp"

#include <gtest/gtest.h>

#include "block_rows_support.hpp"

namespace eldr {
namespace {

using namespace test_support;

TEST(BlockRowsTest, create_validates_geometry_block_size_and_block_count) {
  EXPECT_EQ(BlockRows::create(kSmall, 4, 0).status().code(), Errc::invalid_argument);
  EXPECT_EQ(BlockRows::create(kSmall, 4, 256).status().code(), Errc::invalid_argument);
  EXPECT_EQ(BlockRows::create(kSmall, 0, 4).status().code(), Errc::invalid_argument);
  EXPECT_EQ(BlockRows::create({0, 4, 2}, 4, 4).status().code(), Errc::invalid_argument);
  EXPECT_EQ(BlockRows::create({2, 4, 5}, 4, 4).status().code(), Errc::invalid_argument);
  // k is needed to parse the picks.
  EXPECT_EQ(BlockRows::create({2, 4, 0}, 4, 4).status().code(), Errc::invalid_argument);

  auto sut = BlockRows::create(kSmall, 3, 255);
  ASSERT_TRUE(sut.is_ok());
  EXPECT_EQ(sut->num_blocks(), 3u);
  EXPECT_EQ(sut->block_size(), 255u);
  EXPECT_EQ(sut->geometry(), kSmall);
  EXPECT_EQ(sut->row(2).size(), kSmall.cells());
  EXPECT_TRUE(sut->row(3).empty());
}

TEST(BlockRowsTest, step_adds_picks_into_the_rows_of_the_blocks_its_tokens_occupy) {
  BlockRows sut = make_rows(kSmall, 3, kSmallBlock);
  // t0..t3 fill block 1, t4 starts block 2.
  Step step = hand_step(0, 5, 4);
  ASSERT_TRUE(sut.update_step(step.ids, step.slots).is_ok());

  EXPECT_EQ(row_of(sut, 0), (std::vector<uint8_t>{0, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(row_of(sut, 1), (std::vector<uint8_t>{4, 2, 1, 1, 2, 1, 3, 2}));
  EXPECT_EQ(row_of(sut, 2), (std::vector<uint8_t>{0, 1, 1, 0, 1, 1, 0, 0}));
}

TEST(BlockRowsTest, block_reused_by_a_new_request_carries_no_stale_counts) {
  BlockRows sut = make_rows(kSmall, 3, kSmallBlock);
  Step old_request = hand_step(0, 4, 4);
  ASSERT_TRUE(sut.update_step(old_request.ids, old_request.slots).is_ok());

  // A new request gets physical block 1; its offset-0 token comes last in the
  // step, yet the reset still happens before any of the step's picks.
  Step step;
  step.add(kHandPicks[5], 5);
  step.add(kHandPicks[4], 4);
  ASSERT_TRUE(sut.update_step(step.ids, step.slots).is_ok());
  EXPECT_EQ(row_of(sut, 1), (std::vector<uint8_t>{0, 1, 2, 1, 1, 2, 0, 1}));
}

TEST(BlockRowsTest, partial_blocks_accumulate_across_chunks) {
  BlockRows sut = make_rows(kSmall, 3, kSmallBlock);
  Step chunk1 = hand_step(0, 3, 4);  // block 1 offsets 0..2
  ASSERT_TRUE(sut.update_step(chunk1.ids, chunk1.slots).is_ok());
  EXPECT_EQ(row_of(sut, 1), (std::vector<uint8_t>{3, 2, 1, 0, 1, 1, 2, 2}));

  Step chunk2 = hand_step(3, 3, 7);  // block 1 offset 3, block 2 offsets 0..1
  ASSERT_TRUE(sut.update_step(chunk2.ids, chunk2.slots).is_ok());
  EXPECT_EQ(row_of(sut, 1), (std::vector<uint8_t>{4, 2, 1, 1, 2, 1, 3, 2}));
  EXPECT_EQ(row_of(sut, 2), (std::vector<uint8_t>{0, 1, 2, 1, 1, 2, 0, 1}));

  BlockRows one_shot = make_rows(kSmall, 3, kSmallBlock);
  Step all = hand_step(0, 6, 4);
  ASSERT_TRUE(one_shot.update_step(all.ids, all.slots).is_ok());
  EXPECT_EQ(all_rows(sut), all_rows(one_shot));
}

TEST(BlockRowsTest, padding_slots_are_skipped_with_their_picks) {
  BlockRows sut = make_rows(kSmall, 3, kSmallBlock);
  Step step;
  step.add(std::vector<int32_t>{-7, 99, 3, 3}, -1);  // garbage picks: never read
  step.add(kHandPicks[0], 4);
  step.add(std::vector<int32_t>{0, 0, 0, 0}, -5);
  step.add(kHandPicks[1], 5);
  ASSERT_TRUE(sut.update_step(step.ids, step.slots).is_ok());

  BlockRows reference = make_rows(kSmall, 3, kSmallBlock);
  Step plain = hand_step(0, 2, 4);
  ASSERT_TRUE(reference.update_step(plain.ids, plain.slots).is_ok());
  EXPECT_EQ(all_rows(sut), all_rows(reference));

  Step only_padding;
  only_padding.add(kHandPicks[2], -1);
  ASSERT_TRUE(sut.update_step(only_padding.ids, only_padding.slots).is_ok());
  ASSERT_TRUE(sut.update_step({}, {}).is_ok());
  EXPECT_EQ(all_rows(sut), all_rows(reference));
}

TEST(BlockRowsTest, update_layer_resets_and_adds_only_its_layer) {
  BlockRows sut = make_rows(kSmall, 3, kSmallBlock);
  Step full = hand_step(0, 4, 4);
  ASSERT_TRUE(sut.update_step(full.ids, full.slots).is_ok());

  // Block 1 reused: only layer 0 has run so far in the new step.
  const std::vector<int32_t> layer0 = {3, 2};
  const std::vector<int64_t> slots = {4};
  ASSERT_TRUE(sut.update_layer(0, layer0, slots).is_ok());
  EXPECT_EQ(row_of(sut, 1), (std::vector<uint8_t>{0, 0, 1, 1, 2, 1, 3, 2}));
  ASSERT_TRUE(sut.update_layer(1, std::vector<int32_t>{1, 0}, slots).is_ok());
  EXPECT_EQ(row_of(sut, 1), (std::vector<uint8_t>{0, 0, 1, 1, 1, 1, 0, 0}));
}

TEST(BlockRowsTest, update_layer_per_layer_equals_update_step) {
  std::mt19937_64 rng(7);
  const Geometry g{6, 16, 3};
  const uint32_t bs = 8;
  const uint32_t num_blocks = 12;
  BlockRows by_step = make_rows(g, num_blocks, bs);
  BlockRows sut = make_rows(g, num_blocks, bs);
  // Offsets written since each block's last reset: a step may only write an
  // offset again when it also writes the block's offset 0, as an engine does.
  std::vector<std::vector<bool>> written(num_blocks, std::vector<bool>(bs, false));
  for (int s = 0; s < 60; ++s) {
    std::vector<int64_t> candidates(size_t{num_blocks} * bs);
    std::iota(candidates.begin(), candidates.end(), 0);
    std::shuffle(candidates.begin(), candidates.end(), rng);
    candidates.resize(1 + rng() % 24);
    std::vector<bool> reset(num_blocks, false);
    for (int64_t slot : candidates)
      if (slot % bs == 0) reset[static_cast<size_t>(slot / bs)] = true;
    for (uint32_t b = 0; b < num_blocks; ++b)
      if (reset[b]) std::fill(written[b].begin(), written[b].end(), false);
    std::vector<int64_t> slots;
    for (int64_t slot : candidates) {
      auto&& w = written[static_cast<size_t>(slot / bs)][static_cast<size_t>(slot % bs)];
      if (w) continue;
      w = true;
      slots.push_back(slot);
      if (rng() % 5 == 0) slots.push_back(-1);  // padding in between
    }
    const std::vector<int32_t> ids = random_picks(rng, g, slots.size());
    ASSERT_TRUE(by_step.update_step(ids, slots).is_ok());
    for (uint32_t l = 0; l < g.layers; ++l) {
      std::vector<int32_t> layer_ids;
      for (size_t t = 0; t < slots.size(); ++t) {
        auto p = token_picks(ids, g, t).subspan(size_t{l} * g.top_k, g.top_k);
        layer_ids.insert(layer_ids.end(), p.begin(), p.end());
      }
      const Status st = sut.update_layer(l, layer_ids, slots);
      ASSERT_TRUE(st.is_ok()) << st.to_string();
    }
    ASSERT_EQ(all_rows(sut), all_rows(by_step)) << "step " << s;
  }
}

TEST(BlockRowsTest, request_footprint_sums_the_rows_of_its_blocks) {
  BlockRows sut = make_rows(kSmall, 3, kSmallBlock);
  Step step = hand_step(0, 6, 4);
  ASSERT_TRUE(sut.update_step(step.ids, step.slots).is_ok());

  std::vector<int16_t> out(kSmall.cells(), -1);
  ASSERT_TRUE(sut.request_footprint(std::vector<int32_t>{1, 2}, out).is_ok());
  EXPECT_EQ(out, (std::vector<int16_t>{4, 3, 3, 2, 3, 3, 3, 3}));
  EXPECT_EQ(out, cold_footprint(kSmall, step.ids));

  ASSERT_TRUE(sut.request_footprint({}, out).is_ok());
  EXPECT_EQ(out, std::vector<int16_t>(kSmall.cells(), 0));
}

// The paper's claim: with prefix caching, the sum of the block rows equals the
// cold-prefill footprint exactly. Physical blocks start dirty (previous use),
// prefills are chunked at random points and batched with another request.
void check_prefix_hit_matches_cold_prefill(uint32_t bs, uint64_t seed) {
  SCOPED_TRACE("block_size " + std::to_string(bs) + " seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const Geometry& g = kQwen;
  const uint32_t num_blocks = 16;
  BlockRows sut = make_rows(g, num_blocks, bs);

  // Every block carries stale counts from an earlier request.
  {
    Request junk;
    junk.tokens = size_t{num_blocks} * bs;
    junk.ids = random_picks(rng, g, junk.tokens);
    junk.blocks.resize(num_blocks);
    std::iota(junk.blocks.begin(), junk.blocks.end(), 0);
    Step step = batched_step(rng, g, bs, {{&junk, {0, junk.tokens}}});
    ASSERT_TRUE(sut.update_step(step.ids, step.slots).is_ok());
  }
  std::vector<int32_t> free_blocks(num_blocks);
  std::iota(free_blocks.begin(), free_blocks.end(), 0);
  std::shuffle(free_blocks.begin(), free_blocks.end(), rng);

  Request a;
  a.tokens = bs + rng() % (5 * bs);
  a.ids = random_picks(rng, g, a.tokens);
  allocate(a, free_blocks, bs);
  for (auto chunk : random_chunks(rng, 0, a.tokens, 2 * bs)) {
    Step step = batched_step(rng, g, bs, {{&a, chunk}});
    ASSERT_TRUE(sut.update_step(step.ids, step.slots).is_ok());
  }

  // B hits the first m full blocks of A: same tokens, same gate decisions.
  const size_t m = 1 + rng() % (a.tokens / bs);
  const size_t cached = m * bs;
  Request b;
  b.tokens = cached + 1 + rng() % (3 * bs);
  b.ids.assign(a.ids.begin(), a.ids.begin() + static_cast<ptrdiff_t>(cached * g.layers * g.top_k));
  const auto extra = random_picks(rng, g, b.tokens - cached);
  b.ids.insert(b.ids.end(), extra.begin(), extra.end());
  b.blocks.assign(a.blocks.begin(), a.blocks.begin() + static_cast<ptrdiff_t>(m));
  allocate(b, free_blocks, bs);

  // C runs in the same steps as B, in its own blocks.
  Request c;
  c.tokens = 1 + rng() % (2 * bs);
  c.ids = random_picks(rng, g, c.tokens);
  allocate(c, free_blocks, bs);

  auto b_chunks = random_chunks(rng, cached, b.tokens, 2 * bs);
  auto c_chunks = random_chunks(rng, 0, c.tokens, bs);
  for (size_t s = 0; s < std::max(b_chunks.size(), c_chunks.size()); ++s) {
    std::vector<std::pair<const Request*, std::pair<size_t, size_t>>> parts;
    if (s < b_chunks.size()) parts.push_back({&b, b_chunks[s]});
    if (s < c_chunks.size()) parts.push_back({&c, c_chunks[s]});
    Step step = batched_step(rng, g, bs, parts);
    ASSERT_TRUE(sut.update_step(step.ids, step.slots).is_ok());
  }

  std::vector<int16_t> out(g.cells());
  for (const Request* r : {&a, &b, &c}) {
    ASSERT_TRUE(sut.request_footprint(r->blocks, out).is_ok());
    ASSERT_EQ(out, cold_footprint(g, r->ids));
  }
}

TEST(BlockRowsTest, prefix_hit_footprint_equals_cold_prefill_footprint) {
  for (uint32_t bs : {16u, 64u})
    for (uint64_t seed = 1; seed <= 12; ++seed) {
      check_prefix_hit_matches_cold_prefill(bs, seed);
      if (HasFatalFailure()) return;
    }
}

TEST(BlockRowsTest, invalid_steps_return_the_right_code_and_leave_rows_unchanged) {
  BlockRows sut = make_rows(kSmall, 3, kSmallBlock);
  Step seed_step = hand_step(0, 6, 4);
  ASSERT_TRUE(sut.update_step(seed_step.ids, seed_step.slots).is_ok());
  const auto before = all_rows(sut);

  // Each bad step also carries a valid token that resets block 0 and one that
  // resets block 2: a partial write would show.
  auto with_valid = [](std::vector<int32_t> bad_picks, int64_t bad_slot) {
    Step step;
    step.add(kHandPicks[0], 0);
    step.add(kHandPicks[1], 8);
    step.add(bad_picks, bad_slot);
    return step;
  };
  struct Case {
    const char* name;
    Step step;
    Errc code;
  };
  Step short_ids = with_valid({0, 1, 2, 3}, 1);
  short_ids.ids.pop_back();
  Step extra_slot = with_valid({0, 1, 2, 3}, 1);
  extra_slot.slots.push_back(2);
  std::vector<Case> cases = {
      {"expert ids shorter than T*L*k", short_ids, Errc::shape_mismatch},
      {"slot without picks", extra_slot, Errc::shape_mismatch},
      {"expert id == E", with_valid({0, 4, 2, 3}, 1), Errc::out_of_range},
      {"negative expert id", with_valid({0, 1, -1, 3}, 1), Errc::out_of_range},
      {"same expert twice in a layer", with_valid({0, 1, 2, 2}, 1), Errc::invalid_argument},
      {"slot == num_blocks * block_size", with_valid({0, 1, 2, 3}, 12), Errc::out_of_range},
      {"two tokens on one slot", with_valid({0, 1, 2, 3}, 8), Errc::invalid_argument},
  };
  for (const auto& c : cases) {
    const Status st = sut.update_step(c.step.ids, c.step.slots);
    EXPECT_EQ(st.code(), c.code) << c.name << ": " << st.to_string();
    EXPECT_FALSE(st.message().empty()) << c.name;
    EXPECT_EQ(all_rows(sut), before) << c.name;
  }

  // update_layer: bad layer, and ids sized [T][L][k] instead of [T][k].
  const std::vector<int64_t> slots = {0};
  EXPECT_EQ(sut.update_layer(2, std::vector<int32_t>{0, 1}, slots).code(), Errc::out_of_range);
  EXPECT_EQ(sut.update_layer(0, kHandPicks[0], slots).code(), Errc::shape_mismatch);
  EXPECT_EQ(sut.update_layer(1, std::vector<int32_t>{3, 3}, slots).code(), Errc::invalid_argument);
  EXPECT_EQ(all_rows(sut), before);

  // A default-constructed object has no rows to write.
  BlockRows empty;
  EXPECT_EQ(empty.update_step({}, {}).code(), Errc::state);
}

TEST(BlockRowsTest, rewriting_an_offset_without_reset_that_overfills_a_row_is_rejected) {
  BlockRows sut = make_rows(kSmall, 3, kSmallBlock);
  // Block 1 full, every token picking expert 0 in layer 0: that cell is 4.
  Step full;
  for (int64_t slot = 4; slot < 8; ++slot) full.add(std::vector<int32_t>{0, 1, 2, 3}, slot);
  ASSERT_TRUE(sut.update_step(full.ids, full.slots).is_ok());
  const auto before = all_rows(sut);

  // Offset 2 again, no offset 0 in the step: the engine forgot the reset.
  Step again;
  again.add(kHandPicks[4], 8);  // valid, resets block 2
  again.add(std::vector<int32_t>{0, 2, 1, 3}, 6);
  const Status st = sut.update_step(again.ids, again.slots);
  EXPECT_EQ(st.code(), Errc::out_of_range) << st.to_string();
  EXPECT_EQ(all_rows(sut), before);

  const Status layer_st = sut.update_layer(0, std::vector<int32_t>{1, 0}, std::vector<int64_t>{5});
  EXPECT_EQ(layer_st.code(), Errc::out_of_range) << layer_st.to_string();
  EXPECT_EQ(all_rows(sut), before);
}

TEST(BlockRowsTest, request_footprint_validates_blocks_and_leaves_out_untouched_on_error) {
  BlockRows sut = make_rows(kSmall, 3, kSmallBlock);
  Step step = hand_step(0, 6, 4);
  ASSERT_TRUE(sut.update_step(step.ids, step.slots).is_ok());
  std::vector<int16_t> out(kSmall.cells(), 77);
  EXPECT_EQ(sut.request_footprint(std::vector<int32_t>{1, 3}, out).code(), Errc::out_of_range);
  EXPECT_EQ(sut.request_footprint(std::vector<int32_t>{-1, 1}, out).code(), Errc::out_of_range);
  EXPECT_EQ(out, std::vector<int16_t>(kSmall.cells(), 77));
  std::vector<int16_t> short_out(kSmall.cells() - 1, 77);
  EXPECT_EQ(sut.request_footprint(std::vector<int32_t>{1}, short_out).code(), Errc::shape_mismatch);
  EXPECT_EQ(short_out, std::vector<int16_t>(kSmall.cells() - 1, 77));
}

TEST(BlockRowsTest, request_footprint_is_exact_up_to_32767_and_rejects_more) {
  // L=1, E=2, k=1: every token picks expert 0.
  const Geometry g{1, 2, 1};
  BlockRows sut = make_rows(g, 130, 255);
  Step step;
  const std::vector<int32_t> pick = {0};
  for (int64_t slot = 0; slot < 129 * 255; ++slot) step.add(pick, slot);
  ASSERT_TRUE(sut.update_step(step.ids, step.slots).is_ok());
  Step tail;  // block 129: 127 tokens, so 128 full blocks + it = 32767
  for (int64_t slot = 129 * 255; slot < 129 * 255 + 127; ++slot) tail.add(pick, slot);
  ASSERT_TRUE(sut.update_step(tail.ids, tail.slots).is_ok());

  std::vector<int32_t> table(128);
  std::iota(table.begin(), table.end(), 0);
  table.push_back(129);
  std::vector<int16_t> out(2, 5);
  ASSERT_TRUE(sut.request_footprint(table, out).is_ok());
  EXPECT_EQ(out, (std::vector<int16_t>{32767, 0}));

  Step one_more;  // 128 tokens in block 129: 32768
  one_more.add(pick, 129 * 255 + 127);
  ASSERT_TRUE(sut.update_step(one_more.ids, one_more.slots).is_ok());
  std::fill(out.begin(), out.end(), 5);
  EXPECT_EQ(sut.request_footprint(table, out).code(), Errc::out_of_range);
  EXPECT_EQ(out, (std::vector<int16_t>{5, 5}));
}

// ------------------------------------- BlockRows, flagging path (GPU semantics)

uint32_t accumulate_ok(BlockRows& sut, const Step& step, int32_t layer = -1) {
  auto flags = sut.accumulate(step.ids, step.slots, layer);
  EXPECT_TRUE(flags.is_ok()) << flags.status().to_string();
  return flags.is_ok() ? flags.value() : ~0u;
}

// Every row of the small geometry: 3 blocks of {layer 0 [4], layer 1 [4]}.
std::vector<uint8_t> small_rows(std::initializer_list<std::vector<uint8_t>> blocks) {
  std::vector<uint8_t> out;
  for (const auto& b : blocks) out.insert(out.end(), b.begin(), b.end());
  return out;
}

TEST(BlockRowsFlaggedTest, partial_blocks_accumulate_across_chunks_by_hand) {
  BlockRows sut = make_rows(kSmall, 3, kSmallBlock);
  // Chunk 1: t0, t1 at block 1 offsets 0, 1. Chunk 2: t2, t3 at offsets 2, 3
  // and t4 at block 2 offset 0.
  EXPECT_EQ(accumulate_ok(sut, hand_step(0, 2, 4)), 0u);
  EXPECT_EQ(
      all_rows(sut),
      small_rows({{0, 0, 0, 0, 0, 0, 0, 0}, {2, 1, 1, 0, 0, 1, 2, 1}, {0, 0, 0, 0, 0, 0, 0, 0}}));
  EXPECT_EQ(accumulate_ok(sut, hand_step(2, 3, 6)), 0u);
  EXPECT_EQ(
      all_rows(sut),
      small_rows({{0, 0, 0, 0, 0, 0, 0, 0}, {4, 2, 1, 1, 2, 1, 3, 2}, {0, 1, 1, 0, 1, 1, 0, 0}}));
}

TEST(BlockRowsFlaggedTest, block_reused_by_a_new_request_is_reset_by_its_offset_zero_token) {
  BlockRows sut = make_rows(kSmall, 3, kSmallBlock);
  EXPECT_EQ(accumulate_ok(sut, hand_step(0, 4, 4)), 0u);  // block 1 full: stale for the next user
  // The new owner writes offset 0 (t5) and offset 1 (t4) in one step, offset 1
  // listed first: the reset still comes before every add of the step.
  Step step;
  step.add(kHandPicks[4], 5);
  step.add(kHandPicks[5], 4);
  EXPECT_EQ(accumulate_ok(sut, step), 0u);
  EXPECT_EQ(row_of(sut, 1), (std::vector<uint8_t>{0, 1, 2, 1, 1, 2, 0, 1}));
}

TEST(BlockRowsFlaggedTest, padding_tokens_are_skipped_without_reading_their_picks) {
  BlockRows sut = make_rows(kSmall, 3, kSmallBlock);
  Step step = hand_step(0, 2, 0);
  step.add(std::vector<int32_t>{99, -7, 4, 1000}, -1);  // garbage picks of padding
  step.add(std::vector<int32_t>{0, 1, 2, 3}, std::numeric_limits<int64_t>::min());
  EXPECT_EQ(accumulate_ok(sut, step), 0u);
  EXPECT_EQ(
      all_rows(sut),
      small_rows({{2, 1, 1, 0, 0, 1, 2, 1}, {0, 0, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0, 0}}));
}

TEST(BlockRowsFlaggedTest, expert_id_out_of_range_is_flagged_and_skipped_never_wrapped) {
  BlockRows sut = make_rows(kSmall, 3, kSmallBlock);
  Step step;
  step.add(std::vector<int32_t>{0, 4, -1, 3}, 0);  // E = 4: ids 4 and -1 are bad
  EXPECT_EQ(accumulate_ok(sut, step), kRowErrExpertId);
  EXPECT_EQ(row_of(sut, 0), (std::vector<uint8_t>{1, 0, 0, 0, 0, 0, 0, 1}));

  // int64 ids are compared at full width: 2^32 is not expert 0.
  std::vector<int64_t> wide = {int64_t{1} << 32, 1, 2, (int64_t{1} << 40) + 3};
  std::vector<int64_t> slots = {8};
  auto flags = sut.accumulate(wide, slots);
  ASSERT_TRUE(flags.is_ok());
  EXPECT_EQ(flags.value(), kRowErrExpertId);
  EXPECT_EQ(row_of(sut, 2), (std::vector<uint8_t>{0, 1, 0, 0, 0, 0, 1, 0}));
}

TEST(BlockRowsFlaggedTest, slot_past_the_last_block_is_flagged_and_its_token_skipped) {
  BlockRows sut = make_rows(kSmall, 3, kSmallBlock);
  ASSERT_EQ(accumulate_ok(sut, hand_step(0, 4, 0)), 0u);
  const auto before = all_rows(sut);
  Step step;
  step.add(kHandPicks[5], 12);  // capacity 3 * 4 = 12; offset 0 of a block that does not exist
  step.add(kHandPicks[4], int64_t{1} << 40);
  EXPECT_EQ(accumulate_ok(sut, step), kRowErrSlot);
  EXPECT_EQ(all_rows(sut), before);
}

TEST(BlockRowsFlaggedTest, cell_past_block_size_saturates_and_is_flagged) {
  BlockRows sut = make_rows(kSmall, 3, kSmallBlock);
  Step full;
  for (int64_t slot = 4; slot < 8; ++slot) full.add(std::vector<int32_t>{0, 1, 2, 3}, slot);
  ASSERT_EQ(accumulate_ok(sut, full), 0u);
  ASSERT_EQ(row_of(sut, 1), (std::vector<uint8_t>{4, 4, 0, 0, 0, 0, 4, 4}));
  // Offset 1 written again without its block being reset: experts 0 (layer 0)
  // and 3 (layer 1) are already at block_size, experts 2 and 0 are not.
  Step again;
  again.add(std::vector<int32_t>{0, 2, 3, 0}, 5);
  EXPECT_EQ(accumulate_ok(sut, again), kRowErrBlockRow);
  EXPECT_EQ(row_of(sut, 1), (std::vector<uint8_t>{4, 4, 1, 0, 1, 0, 4, 4}));

  // A token picking one expert twice is counted twice (and caught once the
  // cell passes block_size).
  BlockRows dup = make_rows(Geometry{1, 4, 2}, 1, 2);
  Step twice;
  twice.add(std::vector<int32_t>{1, 1}, 0);
  EXPECT_EQ(accumulate_ok(dup, twice), 0u);
  EXPECT_EQ(row_of(dup, 0), (std::vector<uint8_t>{0, 2, 0, 0}));
  twice.slots = {1};
  EXPECT_EQ(accumulate_ok(dup, twice), kRowErrBlockRow);
  EXPECT_EQ(row_of(dup, 0), (std::vector<uint8_t>{0, 2, 0, 0}));
}

TEST(BlockRowsFlaggedTest, one_layer_resets_and_adds_only_that_layer) {
  BlockRows sut = make_rows(kSmall, 3, kSmallBlock);
  ASSERT_EQ(accumulate_ok(sut, hand_step(0, 4, 4)), 0u);
  Step layer1;
  layer1.add(std::vector<int32_t>{0, 3}, 4);  // offset 0: resets layer 1 of block 1 only
  layer1.add(std::vector<int32_t>{5, 3}, 5);  // expert 5 >= E
  EXPECT_EQ(accumulate_ok(sut, layer1, 1), kRowErrExpertId);
  EXPECT_EQ(row_of(sut, 1), (std::vector<uint8_t>{4, 2, 1, 1, 1, 0, 0, 2}));
}

TEST(BlockRowsFlaggedTest, agrees_with_the_validating_path_on_valid_batched_steps) {
  std::mt19937_64 rng(7);
  const Geometry& g = kQwen;
  const uint32_t bs = 16;
  const uint32_t num_blocks = 12;
  BlockRows validating = make_rows(g, num_blocks, bs);
  BlockRows sut = make_rows(g, num_blocks, bs);
  BlockRows wide = make_rows(g, num_blocks, bs);
  BlockRows per_layer = make_rows(g, num_blocks, bs);
  for (int round = 0; round < 3; ++round) {  // blocks reused by new requests each round
    std::vector<int32_t> free_blocks(num_blocks);
    std::iota(free_blocks.begin(), free_blocks.end(), 0);
    std::shuffle(free_blocks.begin(), free_blocks.end(), rng);
    Request a, b;
    a.tokens = 1 + rng() % (5 * bs);
    b.tokens = 1 + rng() % (5 * bs);
    a.ids = random_picks(rng, g, a.tokens);
    b.ids = random_picks(rng, g, b.tokens);
    allocate(a, free_blocks, bs);
    allocate(b, free_blocks, bs);
    auto a_chunks = random_chunks(rng, 0, a.tokens, 2 * bs);
    auto b_chunks = random_chunks(rng, 0, b.tokens, bs);
    for (size_t s = 0; s < std::max(a_chunks.size(), b_chunks.size()); ++s) {
      std::vector<std::pair<const Request*, std::pair<size_t, size_t>>> parts;
      if (s < a_chunks.size()) parts.push_back({&a, a_chunks[s]});
      if (s < b_chunks.size()) parts.push_back({&b, b_chunks[s]});
      Step step = batched_step(rng, g, bs, parts);
      ASSERT_TRUE(validating.update_step(step.ids, step.slots).is_ok());
      ASSERT_EQ(accumulate_ok(sut, step), 0u);
      std::vector<int64_t> ids64(step.ids.begin(), step.ids.end());
      auto flags = wide.accumulate(ids64, step.slots);
      ASSERT_TRUE(flags.is_ok());
      ASSERT_EQ(flags.value(), 0u);
      for (uint32_t l = 0; l < g.layers; ++l) {
        Step one;
        one.slots = step.slots;
        for (size_t t = 0; t < step.slots.size(); ++t) {
          const auto* p = step.ids.data() + (t * g.layers + l) * g.top_k;
          one.ids.insert(one.ids.end(), p, p + g.top_k);
        }
        ASSERT_EQ(accumulate_ok(per_layer, one, static_cast<int32_t>(l)), 0u);
      }
    }
    ASSERT_EQ(all_rows(sut), all_rows(validating));
    ASSERT_EQ(all_rows(wide), all_rows(validating));
    ASSERT_EQ(all_rows(per_layer), all_rows(validating));

    // Both requests at once through sum_requests equal their cold footprints.
    const uint32_t max_blocks = 8;
    std::vector<int32_t> table(2 * max_blocks, -1);  // entries past the count are ignored
    std::copy(a.blocks.begin(), a.blocks.end(), table.begin());
    std::copy(b.blocks.begin(), b.blocks.end(), table.begin() + max_blocks);
    std::vector<int32_t> counts = {static_cast<int32_t>(a.blocks.size()),
                                   static_cast<int32_t>(b.blocks.size())};
    std::vector<int16_t> out(2 * g.cells(), -1);
    auto flags = sut.sum_requests(table, max_blocks, counts, out);
    ASSERT_TRUE(flags.is_ok());
    EXPECT_EQ(flags.value(), 0u);
    const auto cold_a = cold_footprint(g, a.ids);
    const auto cold_b = cold_footprint(g, b.ids);
    EXPECT_TRUE(std::equal(cold_a.begin(), cold_a.end(), out.begin()));
    EXPECT_TRUE(std::equal(cold_b.begin(), cold_b.end(), out.begin() + g.cells()));
  }
}

TEST(BlockRowsFlaggedTest, prefix_hit_sum_equals_cold_prefill_sum) {
  std::mt19937_64 rng(11);
  const Geometry& g = kQwen;
  const uint32_t bs = 16;
  BlockRows sut = make_rows(g, 8, bs);
  Request a;
  a.tokens = 3 * bs + 5;
  a.ids = random_picks(rng, g, a.tokens);
  a.blocks = {6, 2, 5, 0};
  for (auto chunk : random_chunks(rng, 0, a.tokens, bs))
    ASSERT_EQ(accumulate_ok(sut, batched_step(rng, g, bs, {{&a, chunk}})), 0u);
  // B shares A's first two blocks (prefix hit) and prefills only its tail.
  Request b;
  b.tokens = 2 * bs + 9;
  b.ids.assign(a.ids.begin(), a.ids.begin() + 2 * bs * g.layers * g.top_k);
  const auto tail = random_picks(rng, g, 9);
  b.ids.insert(b.ids.end(), tail.begin(), tail.end());
  b.blocks = {6, 2, 7};
  ASSERT_EQ(accumulate_ok(sut, batched_step(rng, g, bs, {{&b, {2 * bs, b.tokens}}})), 0u);

  std::vector<int16_t> out(g.cells());
  std::vector<int32_t> count = {3};
  auto flags = sut.sum_requests(b.blocks, 3, count, out);
  ASSERT_TRUE(flags.is_ok());
  EXPECT_EQ(flags.value(), 0u);
  EXPECT_EQ(out, cold_footprint(g, b.ids));
}

TEST(BlockRowsFlaggedTest, request_sum_is_exact_to_32767_then_saturates_with_a_flag) {
  // One cell per block, each full at 255: 128 blocks = 32640, 129 = 32895.
  const Geometry g{1, 1, 1};
  BlockRows sut = make_rows(g, 129, 255);
  Step step;
  for (int64_t slot = 0; slot < 129 * 255; ++slot) step.add(std::vector<int32_t>{0}, slot);
  ASSERT_EQ(accumulate_ok(sut, step), 0u);
  std::vector<int32_t> table(2 * 129);
  std::iota(table.begin(), table.begin() + 129, 0);
  std::iota(table.begin() + 129, table.end(), 0);
  std::vector<int32_t> counts = {128, 129};
  std::vector<int16_t> out(2, -1);
  std::vector<uint32_t> per_request(2, 99);
  auto flags = sut.sum_requests(table, 129, counts, out, per_request);
  ASSERT_TRUE(flags.is_ok());
  EXPECT_EQ(flags.value(), kRowErrFootprint);
  EXPECT_EQ(out, (std::vector<int16_t>{32640, 32767}));
  EXPECT_EQ(per_request, (std::vector<uint32_t>{0, kRowErrFootprint}));
}

TEST(BlockRowsFlaggedTest, bad_block_ids_and_counts_are_flagged_per_request) {
  BlockRows sut = make_rows(kSmall, 3, kSmallBlock);
  ASSERT_EQ(accumulate_ok(sut, hand_step(0, 6, 4)), 0u);  // blocks 1 and 2
  const std::vector<int16_t> b1 = {4, 2, 1, 1, 2, 1, 3, 2};
  const std::vector<int16_t> b2 = {0, 1, 2, 1, 1, 2, 0, 1};
  // Requests: {1, 3 (bad)}, {-1 (bad), 2}, count -1, count 3 > max_blocks 2, {2, 1}.
  std::vector<int32_t> table = {1, 3, -1, 2, 1, 1, 2, 1, 2, 1};
  std::vector<int32_t> counts = {2, 2, -1, 3, 2};
  std::vector<int16_t> out(5 * kSmall.cells(), -1);
  std::vector<uint32_t> per_request(5, 99);
  auto flags = sut.sum_requests(table, 2, counts, out, per_request);
  ASSERT_TRUE(flags.is_ok());
  EXPECT_EQ(flags.value(), kRowErrBlockId);
  EXPECT_EQ(per_request, (std::vector<uint32_t>{kRowErrBlockId, kRowErrBlockId, kRowErrBlockId,
                                                kRowErrBlockId, 0}));
  auto request = [&](size_t r) {
    return std::vector<int16_t>(out.begin() + r * 8, out.begin() + (r + 1) * 8);
  };
  std::vector<int16_t> both(8);
  for (size_t c = 0; c < 8; ++c) both[c] = static_cast<int16_t>(b1[c] + b2[c]);
  EXPECT_EQ(request(0), b1);
  EXPECT_EQ(request(1), b2);
  EXPECT_EQ(request(2), std::vector<int16_t>(8, 0));  // clamped to 0 blocks
  EXPECT_EQ(request(3), both);                        // clamped to 2 blocks
  EXPECT_EQ(request(4), both);
}

TEST(BlockRowsFlaggedTest, bad_shapes_are_status_errors_and_change_nothing) {
  BlockRows sut = make_rows(kSmall, 3, kSmallBlock);
  ASSERT_EQ(accumulate_ok(sut, hand_step(0, 4, 0)), 0u);
  const auto before = all_rows(sut);
  Step step = hand_step(0, 2, 4);
  step.ids.pop_back();
  EXPECT_EQ(sut.accumulate(step.ids, step.slots).status().code(), Errc::shape_mismatch);
  Step layer;
  layer.add(std::vector<int32_t>{0, 1}, 4);
  EXPECT_EQ(sut.accumulate(layer.ids, layer.slots, 2).status().code(), Errc::out_of_range);
  EXPECT_EQ(sut.accumulate(layer.ids, layer.slots).status().code(), Errc::shape_mismatch);
  EXPECT_EQ(all_rows(sut), before);

  std::vector<int32_t> table = {0, 1};
  std::vector<int32_t> counts = {2};
  std::vector<int16_t> out(kSmall.cells());
  std::vector<int16_t> short_out(kSmall.cells() - 1);
  std::vector<uint32_t> flags(2);
  EXPECT_EQ(sut.sum_requests(table, 1, counts, out).status().code(), Errc::shape_mismatch);
  EXPECT_EQ(sut.sum_requests(table, 2, counts, short_out).status().code(), Errc::shape_mismatch);
  EXPECT_EQ(sut.sum_requests(table, 2, counts, out, flags).status().code(), Errc::shape_mismatch);
  EXPECT_EQ(sut.sum_requests({}, kMaxBlocksPerRequest + 1, {}, {}).status().code(),
            Errc::invalid_argument);
  EXPECT_TRUE(sut.sum_requests({}, 4, {}, {}).is_ok());  // no requests: nothing to do
}

}  // namespace
}  // namespace eldr
