// The per-client ring on private memory: framing, wrap, back-pressure,
// partial-write invisibility, the validator's protocol checks, payload
// decoding, and a two-thread producer/consumer stress (TSan-visible).
#include "eldr/shm/ring.hpp"

#include <gtest/gtest.h>

#include "eldr/shm/records.hpp"
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "eldr/footprint_msg_generated.h"

namespace eldr::shm::detail {
namespace {

constexpr uint32_t kCapacity = 1u << 16;
constexpr uint32_t kEpoch = 7;

// A ring in private memory, laid out as in the segment.
struct HeapRing {
  HeapRing() : control(new RingControl{}), data(kCapacity, 0) {}
  std::unique_ptr<RingControl> control;
  std::vector<uint8_t> data;
  RingWriter writer() { return RingWriter(control.get(), data.data(), kCapacity, kEpoch); }
  std::span<const uint8_t> image() const { return {data.data(), data.size()}; }
  uint64_t producer() const { return control->producer.load(std::memory_order_acquire); }
  RecordHeader header_at(uint64_t position) const {
    RecordHeader h;
    std::memcpy(&h, data.data() + (position & (kCapacity - 1)), sizeof(h));
    return h;
  }
  void patch_header(uint64_t position, const RecordHeader& h) {
    std::memcpy(data.data() + (position & (kCapacity - 1)), &h, sizeof(h));
  }
};

std::vector<uint8_t> bytes_of(uint64_t seed, size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>((seed * 131 + i * 7) & 0xff);
  return v;
}

std::vector<uint8_t> as_bytes(const PayloadBuffer& payload) {
  return {payload.begin(), payload.end()};
}

// The ring's first record fails its checksum and is skipped; the next one
// reads whole and holds `next`.
void expect_bad_checksum_then(const HeapRing& ring, const std::vector<uint8_t>& next) {
  RingCursor cursor;
  PayloadBuffer payload;
  ReadResult r = read_record(ring.image(), ring.producer(), kEpoch, cursor, payload);
  EXPECT_EQ(r.outcome, ReadOutcome::rejected);
  EXPECT_EQ(r.reason, RejectReason::bad_checksum);
  r = read_record(ring.image(), ring.producer(), kEpoch, cursor, payload);
  ASSERT_EQ(r.outcome, ReadOutcome::record);
  EXPECT_EQ(as_bytes(payload), next);
}

// Reads everything committed, consuming it; returns the payloads.
std::vector<std::vector<uint8_t>> drain(HeapRing& ring, RingCursor& cursor) {
  std::vector<std::vector<uint8_t>> out;
  PayloadBuffer payload;
  for (;;) {
    ReadResult r = read_record(ring.image(), ring.producer(), kEpoch, cursor, payload);
    if (r.outcome == ReadOutcome::empty) break;
    EXPECT_EQ(r.outcome, ReadOutcome::record) << r.why.to_string();
    if (r.outcome != ReadOutcome::record) break;
    out.push_back(as_bytes(payload));
    ring.control->consumer.store(cursor.consumer, std::memory_order_release);
  }
  return out;
}

TEST(shm_ring, records_come_out_in_order_with_their_payloads) {
  HeapRing ring;
  RingWriter sut = ring.writer();
  for (uint64_t i = 0; i < 5; ++i)
    ASSERT_TRUE(sut.push(RecordType::complete, 1, bytes_of(i, 10 + i)).is_ok());
  RingCursor cursor;
  auto got = drain(ring, cursor);
  ASSERT_EQ(got.size(), 5u);
  for (uint64_t i = 0; i < 5; ++i) EXPECT_EQ(got[i], bytes_of(i, 10 + i));
  EXPECT_EQ(cursor.expected_sequence, 5u);
  EXPECT_EQ(cursor.consumer, ring.producer());
}

TEST(shm_ring, a_record_that_would_cross_the_end_is_preceded_by_padding) {
  HeapRing ring;
  RingWriter sut = ring.writer();
  RingCursor cursor;
  const size_t payload = 1000;                       // span 1024: 64 of them fill the ring exactly
  const size_t first = 3000 - sizeof(RecordHeader);  // span 3008: misaligns the rest
  ASSERT_TRUE(sut.push(RecordType::complete, 1, bytes_of(99, first)).is_ok());
  ASSERT_EQ(drain(ring, cursor).size(), 1u);
  uint64_t i = 0;
  // Keep the ring half-drained so the writer wraps several times.
  for (; sut.position() < 3 * uint64_t{kCapacity}; ++i) {
    const uint64_t before = sut.position();
    ASSERT_TRUE(sut.push(RecordType::complete, 1, bytes_of(i, payload)).is_ok());
    const uint64_t tail = kCapacity - (before & (kCapacity - 1));
    if (tail < record_span(payload)) {
      const RecordHeader pad = ring.header_at(before);
      EXPECT_EQ(pad.type, static_cast<uint16_t>(RecordType::padding));
      EXPECT_EQ(pad.length, tail - sizeof(RecordHeader));
      EXPECT_EQ(sut.position(), before + tail + record_span(payload));
    }
    auto got = drain(ring, cursor);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0], bytes_of(i, payload));
  }
  EXPECT_EQ(cursor.expected_sequence, i + 1);
}

TEST(shm_ring, a_full_ring_refuses_with_ring_full_and_writes_nothing) {
  HeapRing ring;
  RingWriter sut = ring.writer();
  size_t pushed = 0;
  Status s;
  while ((s = sut.push(RecordType::complete, 1, bytes_of(pushed, 2000))).is_ok()) ++pushed;
  EXPECT_EQ(s.code(), Errc::ring_full);
  EXPECT_GT(pushed, 0u);
  const std::vector<uint8_t> before = ring.data;
  const uint64_t position = ring.producer();
  EXPECT_EQ(sut.push(RecordType::complete, 1, bytes_of(1, 2000)).code(), Errc::ring_full);
  EXPECT_EQ(ring.data, before);
  EXPECT_EQ(ring.producer(), position);
  // Consuming makes room again, and nothing was lost or reordered.
  RingCursor cursor;
  auto got = drain(ring, cursor);
  ASSERT_EQ(got.size(), pushed);
  for (size_t i = 0; i < pushed; ++i) EXPECT_EQ(got[i], bytes_of(i, 2000));
  EXPECT_TRUE(sut.push(RecordType::complete, 1, bytes_of(1, 2000)).is_ok());
}

TEST(shm_ring, the_largest_record_is_an_eighth_of_the_ring) {
  HeapRing ring;
  RingWriter sut = ring.writer();
  const size_t limit = max_payload(kCapacity);
  EXPECT_EQ(record_span(limit), kCapacity / 8);
  EXPECT_TRUE(sut.push(RecordType::complete, 1, bytes_of(1, limit)).is_ok());
  const uint64_t position = ring.producer();
  EXPECT_EQ(sut.push(RecordType::complete, 1, bytes_of(2, limit + 1)).code(), Errc::capacity);
  EXPECT_EQ(ring.producer(), position);
  RingCursor cursor;
  EXPECT_EQ(drain(ring, cursor).size(), 1u);
}

TEST(shm_ring, a_reserved_record_stays_invisible_until_committed) {
  HeapRing ring;
  RingWriter sut = ring.writer();
  auto r = sut.reserve(RecordType::complete, 1, 64);
  ASSERT_TRUE(r.is_ok());
  std::memset(r->payload, 0xab, 32);  // half written
  RingCursor cursor;
  PayloadBuffer payload;
  EXPECT_EQ(read_record(ring.image(), ring.producer(), kEpoch, cursor, payload).outcome,
            ReadOutcome::empty);
  std::memset(r->payload + 32, 0xcd, 32);
  sut.commit(*r);
  ReadResult got = read_record(ring.image(), ring.producer(), kEpoch, cursor, payload);
  ASSERT_EQ(got.outcome, ReadOutcome::record);
  EXPECT_EQ(payload[0], 0xab);
  EXPECT_EQ(payload[63], 0xcd);
}

TEST(shm_ring, a_wrong_sequence_is_a_violation_that_keeps_the_cursor) {
  HeapRing ring;
  RingWriter sut = ring.writer();
  ASSERT_TRUE(sut.push(RecordType::complete, 1, bytes_of(1, 8)).is_ok());
  RecordHeader h = ring.header_at(0);
  h.sequence = 5;
  ring.patch_header(0, h);
  RingCursor cursor;
  PayloadBuffer payload;
  ReadResult r = read_record(ring.image(), ring.producer(), kEpoch, cursor, payload);
  EXPECT_EQ(r.outcome, ReadOutcome::violation);
  EXPECT_EQ(r.reason, RejectReason::bad_header);
  EXPECT_NE(r.why.message().find("sequence 5, expected 0"), std::string::npos);
  EXPECT_EQ(cursor.consumer, 0u);
}

// Found by ring_fuzz: the padding before a bad record was consumed.
TEST(shm_ring, a_violation_after_padding_leaves_the_cursor_before_the_padding) {
  HeapRing ring;
  RingWriter sut = ring.writer();
  RingCursor cursor;
  const size_t payload = max_payload(kCapacity) - 200;  // leaves a tail under one record
  while (sut.position() + record_span(payload) <= kCapacity)
    ASSERT_TRUE(sut.push(RecordType::complete, 1, bytes_of(1, payload)).is_ok());
  drain(ring, cursor);
  const uint64_t before_wrap = cursor.consumer;
  ASSERT_TRUE(sut.push(RecordType::complete, 1, bytes_of(2, payload)).is_ok());
  ASSERT_EQ(ring.header_at(before_wrap).type, static_cast<uint16_t>(RecordType::padding));
  RecordHeader h = ring.header_at(0);
  h.sequence += 3;
  ring.patch_header(0, h);
  PayloadBuffer out;
  EXPECT_EQ(read_record(ring.image(), ring.producer(), kEpoch, cursor, out).outcome,
            ReadOutcome::violation);
  EXPECT_EQ(cursor.consumer, before_wrap);
}

TEST(shm_ring, a_record_of_another_epoch_is_a_violation) {
  HeapRing ring;
  RingWriter stale(ring.control.get(), ring.data.data(), kCapacity, kEpoch - 1);
  ASSERT_TRUE(stale.push(RecordType::complete, 1, bytes_of(1, 8)).is_ok());
  RingCursor cursor;
  PayloadBuffer payload;
  ReadResult r = read_record(ring.image(), ring.producer(), kEpoch, cursor, payload);
  EXPECT_EQ(r.outcome, ReadOutcome::violation);
  EXPECT_NE(r.why.message().find("epoch"), std::string::npos);
}

TEST(shm_ring, a_bad_checksum_rejects_one_record_and_the_next_still_reads) {
  HeapRing ring;
  RingWriter sut = ring.writer();
  ASSERT_TRUE(sut.push(RecordType::complete, 1, bytes_of(1, 40)).is_ok());
  ASSERT_TRUE(sut.push(RecordType::complete, 1, bytes_of(2, 40)).is_ok());
  ring.data[sizeof(RecordHeader) + 3] ^= 0x40;  // flip a payload bit of record 0
  expect_bad_checksum_then(ring, bytes_of(2, 40));
}

TEST(shm_ring, the_checksum_is_the_low_half_of_xxh3_and_the_old_xxh32_one_is_rejected) {
  HeapRing ring;
  RingWriter sut = ring.writer();
  const std::vector<uint8_t> body = bytes_of(3, 8000);  // past XXH3's short-input paths
  ASSERT_TRUE(sut.push(RecordType::complete, 1, body).is_ok());
  ASSERT_TRUE(sut.push(RecordType::complete, 1, body).is_ok());
  const RecordHeader first = ring.header_at(0);
  EXPECT_EQ(first.checksum, static_cast<uint32_t>(XXH3_64bits(body.data(), body.size())));
  EXPECT_EQ(first.flags, 0u);
  // A producer of the earlier scheme (XXH32) is refused at the segment by the
  // layout hash; were its record read anyway, it would not pass as valid.
  RecordHeader old = first;
  old.checksum = XXH32(body.data(), body.size(), 0);
  ring.patch_header(0, old);
  expect_bad_checksum_then(ring, body);
}

TEST(shm_ring, a_flipped_bit_anywhere_in_a_long_payload_is_caught) {
  const std::vector<uint8_t> body = bytes_of(5, 8000);
  for (size_t offset : {size_t{0}, size_t{255}, size_t{6000}, body.size() - 1}) {
    SCOPED_TRACE("payload byte " + std::to_string(offset));
    HeapRing ring;
    RingWriter sut = ring.writer();
    ASSERT_TRUE(sut.push(RecordType::complete, 1, body).is_ok());
    ring.data[sizeof(RecordHeader) + offset] ^= 0x01;
    RingCursor cursor;
    PayloadBuffer payload;
    const ReadResult r = read_record(ring.image(), ring.producer(), kEpoch, cursor, payload);
    EXPECT_EQ(r.outcome, ReadOutcome::rejected);
    EXPECT_EQ(r.reason, RejectReason::bad_checksum);
  }
}

TEST(shm_ring, impossible_positions_and_lengths_are_violations) {
  HeapRing ring;
  RingWriter sut = ring.writer();
  ASSERT_TRUE(sut.push(RecordType::complete, 1, bytes_of(1, 40)).is_ok());
  PayloadBuffer payload;
  const uint64_t good = ring.producer();
  for (uint64_t producer : {good + 1, uint64_t{kCapacity} + 32, uint64_t{1} << 63}) {
    RingCursor cursor;
    EXPECT_EQ(read_record(ring.image(), producer, kEpoch, cursor, payload).outcome,
              ReadOutcome::violation)
        << producer;
  }
  RingCursor ahead{64, 0};  // producer behind the consumer
  EXPECT_EQ(read_record(ring.image(), good, kEpoch, ahead, payload).outcome,
            ReadOutcome::violation);
  RecordHeader h = ring.header_at(0);
  h.length = 1000;  // longer than what was committed
  ring.patch_header(0, h);
  RingCursor cursor;
  EXPECT_EQ(read_record(ring.image(), good, kEpoch, cursor, payload).outcome,
            ReadOutcome::violation);
  h.length = kCapacity;  // larger than any record
  ring.patch_header(0, h);
  ReadResult r = read_record(ring.image(), good, kEpoch, cursor, payload);
  EXPECT_EQ(r.outcome, ReadOutcome::violation);
  EXPECT_EQ(r.reason, RejectReason::too_large);
  h.length = 40;
  h.type = 77;
  ring.patch_header(0, h);
  EXPECT_EQ(read_record(ring.image(), good, kEpoch, cursor, payload).outcome,
            ReadOutcome::violation);
}

TEST(shm_ring, arbitrary_bytes_and_positions_never_crash_the_reader) {
  const uint32_t seed = 20261130;
  std::mt19937_64 rng(seed);
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::vector<uint8_t> image(kCapacity);
  PayloadBuffer payload;
  for (int round = 0; round < 200; ++round) {
    for (size_t i = 0; i < image.size(); i += 8) {
      const uint64_t word = rng();
      std::memcpy(image.data() + i, &word, 8);
    }
    // Plausible-looking headers now and then, so the deeper checks run too.
    for (int k = 0; k < 8; ++k) {
      RecordHeader h{};
      h.length = static_cast<uint32_t>(rng() % 4096);
      h.type = static_cast<uint16_t>(rng() % 6);
      h.sequence = rng() % 3;
      h.epoch = kEpoch;
      h.flags = static_cast<uint32_t>(rng() % 2);
      std::memcpy(image.data() + (rng() % (kCapacity / 32)) * 32, &h, sizeof(h));
    }
    RingCursor cursor{(rng() % 4) * 32, 0};
    const uint64_t producer = (round % 3 == 0) ? rng() : cursor.consumer + (rng() % kCapacity);
    for (int steps = 0; steps < 64; ++steps) {
      const RingCursor before = cursor;
      ReadResult r = read_record(image, producer, kEpoch, cursor, payload);
      if (r.outcome == ReadOutcome::empty || r.outcome == ReadOutcome::violation) {
        EXPECT_EQ(cursor.consumer, before.consumer);
        break;
      }
      EXPECT_GT(cursor.consumer, before.consumer);
      EXPECT_LE(cursor.consumer, producer);
      DecodedRecord d;
      (void)decode_record(r.type, r.schema, payload, d);
    }
  }
}

// ---- payloads -------------------------------------------------------------------

// Views `counts` (and `id`): both must outlive the footprint.
FootprintOut dense_footprint(const std::vector<int16_t>& counts, std::string_view id = "req-1",
                             uint32_t layers = 2, uint32_t experts = 4,
                             uint64_t prefill_end_ns = 1234) {
  FootprintOut f;
  f.request_id = id;
  f.layers = layers;
  f.experts = experts;
  f.counts = counts;
  f.prefill_end_ns = prefill_end_ns;
  return f;
}

TEST(shm_ring, a_footprint_survives_encode_and_decode) {
  const std::vector<int16_t> counts{1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<uint8_t> bytes;
  ASSERT_TRUE(encode_footprint(dense_footprint(counts), bytes).is_ok());
  DecodedRecord sut;
  ASSERT_TRUE(decode_record(RecordType::footprint, kFootprintSchema, bytes, sut).is_ok());
  EXPECT_EQ(sut.footprint.request_id, "req-1");
  EXPECT_EQ(sut.footprint.layers, 2u);
  EXPECT_EQ(std::vector<int16_t>(sut.footprint.counts.begin(), sut.footprint.counts.end()), counts);
  EXPECT_EQ(sut.footprint.prefill_end_ns, 1234u);
}

// A complete: schema 1 is the id alone (no token); schema 2 an 8-byte token,
// then the id. A schema-2 payload too short for its token, or with an empty
// or oversized id after it, is refused with a message, never read past.
TEST(shm_ring, complete_records_carry_their_token_and_refuse_malformed_payloads) {
  const auto payload = [](uint64_t token, std::string_view id) {
    std::vector<uint8_t> b(sizeof(token) + id.size());
    std::memcpy(b.data(), &token, sizeof(token));
    std::memcpy(b.data() + sizeof(token), id.data(), id.size());
    return b;
  };
  DecodedRecord sut;
  const std::vector<uint8_t> good = payload(0x1122334455667788ull, "req-9");
  ASSERT_TRUE(decode_record(RecordType::complete, kCompleteSchema, good, sut).is_ok());
  EXPECT_EQ(sut.request_id, "req-9");
  EXPECT_EQ(sut.completion_token, 0x1122334455667788ull);
  DecodedRecord v1;
  const std::string_view id = "req-9";
  ASSERT_TRUE(decode_record(RecordType::complete, kCompleteSchemaV1,
                            {reinterpret_cast<const uint8_t*>(id.data()), id.size()}, v1)
                  .is_ok());
  EXPECT_EQ(v1.request_id, "req-9");
  EXPECT_EQ(v1.completion_token, 0u);
  const std::vector<uint8_t> short_head(5, 1);
  DecodedRecord bad;
  Status s = decode_record(RecordType::complete, kCompleteSchema, short_head, bad);
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("complete"), std::string::npos) << s.to_string();
  EXPECT_FALSE(decode_record(RecordType::complete, kCompleteSchema, payload(7, ""), bad).is_ok());
  EXPECT_EQ(decode_record(RecordType::complete, kCompleteSchema,
                          payload(7, std::string(kMaxRequestId + 1, 'x')), bad)
                .code(),
            Errc::invalid_argument);
  EXPECT_EQ(decode_record(RecordType::complete, 3, good, bad).code(), Errc::unsupported);
}

// The encoder leaves the bulk arrays as holes in its builder and fills them
// from the caller's memory: its bytes must decode to exactly the footprint,
// whatever shape the previous message in the same (reused) builder had.
TEST(shm_ring, a_reused_encoder_writes_each_message_whole) {
  std::mt19937 rng(5);
  FootprintEncoder sut;
  for (int round = 0; round < 40; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const uint32_t layers = 1 + rng() % 5, experts = 1 + rng() % 37;  // odd sizes: padding
    const std::string id(1 + rng() % 120, static_cast<char>('a' + round % 26));
    std::vector<int16_t> counts(size_t{layers} * experts);
    for (auto& c : counts) c = static_cast<int16_t>(rng() % 300);
    std::vector<uint64_t> hashes(1 + rng() % 6);
    for (auto& h : hashes) h = (uint64_t{rng()} << 32) | rng();
    std::vector<uint8_t> present(hashes.size());
    size_t rows_present = 0;
    for (auto& p : present) rows_present += (p = static_cast<uint8_t>(rng() % 2));
    std::vector<uint8_t> rows(rows_present * layers * experts);
    for (auto& r : rows) r = static_cast<uint8_t>(rng());
    FootprintOut f;
    f.request_id = id;
    f.layers = layers;
    f.experts = experts;
    f.prefill_end_ns = rng();
    const bool dense = round % 2 == 0;
    if (dense) {
      f.counts = counts;
    } else {
      f.block_hashes = hashes;
      if (round % 4 == 1)
        f.row_present = present;
      else
        rows.resize(hashes.size() * layers * experts, 7);
      f.block_rows = rows;
    }
    ASSERT_TRUE(sut.encode(f).is_ok());
    std::vector<uint8_t> bytes(sut.size() + 64, 0xee);  // poisoned, with a tail to stay untouched
    sut.write_to(bytes.data());
    EXPECT_TRUE(std::all_of(bytes.end() - 64, bytes.end(), [](uint8_t b) { return b == 0xee; }));
    bytes.resize(sut.size());
    DecodedRecord got;
    ASSERT_TRUE(decode_record(RecordType::footprint, kFootprintSchema, bytes, got).is_ok());
    EXPECT_EQ(got.footprint.request_id, id);
    EXPECT_EQ(got.footprint.layers, layers);
    EXPECT_EQ(got.footprint.experts, experts);
    EXPECT_EQ(got.footprint.prefill_end_ns, f.prefill_end_ns);
    const auto same = [](auto a, auto b) {
      return std::equal(a.begin(), a.end(), b.begin(), b.end());
    };
    EXPECT_TRUE(same(got.footprint.counts, f.counts));
    EXPECT_TRUE(same(got.footprint.block_hashes, f.block_hashes));
    EXPECT_TRUE(same(got.footprint.row_present, f.row_present));
    EXPECT_TRUE(same(got.footprint.block_rows, f.block_rows));
  }
}

// The GPU hand-off's message: everything but the counts comes from the
// encoder; the counts hole is left as it was, 8-byte aligned, and once
// filled the bytes equal the CPU encoding of the same footprint.
TEST(shm_ring, a_dense_skeleton_leaves_only_the_counts_to_fill) {
  std::mt19937 rng(11);
  FootprintEncoder sut, cpu;
  for (int round = 0; round < 20; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const uint32_t layers = 1 + rng() % 6, experts = 1 + rng() % 41;
    const std::string id(1 + rng() % 120, static_cast<char>('A' + round % 26));
    const uint64_t ns = rng();
    ASSERT_TRUE(sut.encode_dense_skeleton(id, layers, experts, ns).is_ok());
    const size_t hole = sut.counts_offset(), cells = size_t{layers} * experts;
    EXPECT_EQ(hole % 8, 0u);
    ASSERT_LE(hole + cells * sizeof(int16_t), sut.size());
    std::vector<uint8_t> bytes(sut.size(), 0xee);
    sut.write_to(bytes.data());
    EXPECT_TRUE(std::all_of(bytes.begin() + static_cast<ptrdiff_t>(hole),
                            bytes.begin() + static_cast<ptrdiff_t>(hole + 2 * cells),
                            [](uint8_t b) { return b == 0xee; }))
        << "the counts hole was written";
    std::vector<int16_t> counts(cells);
    for (auto& c : counts) c = static_cast<int16_t>(rng() % 1000);
    std::memcpy(bytes.data() + hole, counts.data(), 2 * cells);
    ASSERT_TRUE(cpu.encode(dense_footprint(counts, id, layers, experts, ns)).is_ok());
    std::vector<uint8_t> want(cpu.size());
    cpu.write_to(want.data());
    EXPECT_EQ(bytes, want);
    DecodedRecord got;
    ASSERT_TRUE(decode_record(RecordType::footprint, kFootprintSchema, bytes, got).is_ok());
    EXPECT_EQ(got.footprint.request_id, id);
    EXPECT_TRUE(std::equal(got.footprint.counts.begin(), got.footprint.counts.end(), counts.begin(),
                           counts.end()));
  }
  EXPECT_EQ(sut.encode_dense_skeleton("", 2, 4, 0).code(), Errc::invalid_argument);
  EXPECT_FALSE(sut.encode_dense_skeleton("id", 0, 4, 0).is_ok());
  EXPECT_FALSE(sut.encode_dense_skeleton("id", 2, 0, 0).is_ok());
}

TEST(shm_ring, block_form_footprints_are_checked_for_consistency) {
  const std::vector<uint64_t> hashes{11, 22, 33};
  const std::vector<uint8_t> present{1, 0, 1};
  std::vector<uint8_t> rows(2 * 8, 1);
  FootprintOut f;
  f.request_id = "blocks";
  f.layers = 2;
  f.experts = 4;
  f.block_hashes = hashes;
  f.row_present = present;
  f.block_rows = rows;
  std::vector<uint8_t> bytes;
  ASSERT_TRUE(encode_footprint(f, bytes).is_ok());
  DecodedRecord sut;
  ASSERT_TRUE(decode_record(RecordType::footprint, kFootprintSchema, bytes, sut).is_ok());
  EXPECT_EQ(sut.footprint.block_rows.size(), 16u);
  rows.resize(24);  // three rows for two present blocks
  f.block_rows = rows;
  EXPECT_EQ(encode_footprint(f, bytes).code(), Errc::shape_mismatch);
}

TEST(shm_ring, malformed_footprint_payloads_are_rejected_with_a_reason) {
  std::vector<int16_t> counts{1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<uint8_t> bytes;
  ASSERT_TRUE(encode_footprint(dense_footprint(counts), bytes).is_ok());
  DecodedRecord sut;
  // Truncated, wrong identifier, wrong schema number.
  std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + bytes.size() / 2);
  EXPECT_FALSE(decode_record(RecordType::footprint, kFootprintSchema, cut, sut).is_ok());
  std::vector<uint8_t> renamed = bytes;
  renamed[4] = 'X';
  EXPECT_EQ(decode_record(RecordType::footprint, kFootprintSchema, renamed, sut).code(),
            Errc::corrupt);
  EXPECT_EQ(decode_record(RecordType::footprint, 9, bytes, sut).code(), Errc::unsupported);
  // Semantically wrong: the producer-side encoder refuses these, so build the
  // bytes by hand as a hostile producer would.
  counts[3] = -1;
  flatbuffers::FlatBufferBuilder fbb;
  auto id = fbb.CreateString("neg");
  auto cv = fbb.CreateVector(counts);
  fb::FinishFootprintMsgBuffer(fbb, fb::CreateFootprintMsg(fbb, id, 2, 4, cv));
  std::vector<uint8_t> negative(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
  Status s = decode_record(RecordType::footprint, kFootprintSchema, negative, sut);
  EXPECT_EQ(s.code(), Errc::out_of_range);
  EXPECT_EQ(sut.request_id, "neg");  // readable: the daemon can answer it with an error
  EXPECT_EQ(encode_footprint(dense_footprint(counts), bytes).code(), Errc::out_of_range);
  const std::vector<int16_t> good{1, 2, 3, 4, 5, 6, 7, 8};  // outlives bad_id's view of it
  FootprintOut bad_id = dense_footprint(good);
  bad_id.request_id = std::string_view("a\0b", 3);
  EXPECT_EQ(encode_footprint(bad_id, bytes).code(), Errc::invalid_argument);
  bad_id.request_id = "";
  EXPECT_EQ(encode_footprint(bad_id, bytes).code(), Errc::invalid_argument);
}

TEST(shm_ring, fixed_payloads_are_range_checked) {
  DecodedRecord sut;
  WorkerReportMsg report{3, 5, std::numeric_limits<float>::quiet_NaN(), 0};
  std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(&report), sizeof(report));
  EXPECT_EQ(decode_record(RecordType::worker_report, 1, bytes, sut).code(), Errc::out_of_range);
  report.kv_usage = 0.5f;
  EXPECT_TRUE(decode_record(RecordType::worker_report, 1, bytes, sut).is_ok());
  EXPECT_EQ(sut.running, 5u);
  EXPECT_EQ(decode_record(RecordType::worker_report, 1, bytes.first(8), sut).code(), Errc::corrupt);
  // Schema 2 appends batch_size and step_ms; schema 1 (16 bytes) stays readable.
  WorkerReportMsg2 report2{{3, 5, 0.5f, 0}, 12, 7.5f, 0};
  std::span<const uint8_t> bytes2(reinterpret_cast<const uint8_t*>(&report2), sizeof(report2));
  ASSERT_TRUE(decode_record(RecordType::worker_report, 2, bytes2, sut).is_ok());
  EXPECT_EQ(sut.running, 5u);
  EXPECT_EQ(sut.batch_size, 12u);
  EXPECT_EQ(sut.step_ms, 7.5f);
  ASSERT_TRUE(decode_record(RecordType::worker_report, 1, bytes, sut).is_ok());
  EXPECT_EQ(sut.batch_size, 0u);
  EXPECT_EQ(sut.step_ms, 0.0f);
  EXPECT_EQ(decode_record(RecordType::worker_report, 2, bytes, sut).code(), Errc::corrupt);
  EXPECT_EQ(decode_record(RecordType::worker_report, 1, bytes2, sut).code(), Errc::corrupt);
  EXPECT_EQ(decode_record(RecordType::worker_report, 3, bytes2, sut).code(), Errc::unsupported);
  for (float bad :
       {-1.0f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    report2.step_ms = bad;
    EXPECT_EQ(decode_record(RecordType::worker_report, 2, bytes2, sut).code(), Errc::out_of_range);
  }
  WorkerControlMsg control{4, 9};
  std::span<const uint8_t> cbytes(reinterpret_cast<const uint8_t*>(&control), sizeof(control));
  EXPECT_EQ(decode_record(RecordType::worker_control, 1, cbytes, sut).code(), Errc::out_of_range);
  control.op = static_cast<uint32_t>(WorkerOp::drain);
  ASSERT_TRUE(decode_record(RecordType::worker_control, 1, cbytes, sut).is_ok());
  EXPECT_EQ(sut.op, WorkerOp::drain);
  const std::string long_id(kMaxRequestId + 1, 'x');
  EXPECT_EQ(decode_record(RecordType::complete, 1,
                          {reinterpret_cast<const uint8_t*>(long_id.data()), long_id.size()}, sut)
                .code(),
            Errc::invalid_argument);
}

// ---- concurrency ------------------------------------------------------------------

TEST(shm_ring, a_producer_and_a_consumer_thread_agree_on_every_record) {
  HeapRing ring;
  constexpr uint64_t kRecords = 20000;
  std::thread producer([&] {
    RingWriter w = ring.writer();
    std::mt19937 rng(5);
    for (uint64_t i = 0; i < kRecords;) {
      const size_t n = 8 + rng() % 600;
      std::vector<uint8_t> p = bytes_of(i, n);
      std::memcpy(p.data(), &i, sizeof(i));
      Status s = w.push(RecordType::complete, 1, p);
      if (s.is_ok()) {
        ++i;
      } else {
        ASSERT_EQ(s.code(), Errc::ring_full);
        std::this_thread::yield();
      }
    }
  });
  RingCursor cursor;
  PayloadBuffer payload;
  uint64_t received = 0;
  while (received < kRecords) {
    ReadResult r = read_record(ring.image(), ring.producer(), kEpoch, cursor, payload);
    if (r.outcome == ReadOutcome::empty) {
      std::this_thread::yield();
      continue;
    }
    ASSERT_EQ(r.outcome, ReadOutcome::record) << r.why.to_string();
    ASSERT_EQ(r.sequence, received);
    uint64_t tag = 0;
    std::memcpy(&tag, payload.data(), sizeof(tag));
    ASSERT_EQ(tag, received);
    std::vector<uint8_t> expected = bytes_of(received, payload.size());
    std::memcpy(expected.data(), &tag, sizeof(tag));
    ASSERT_EQ(as_bytes(payload), expected);
    ring.control->consumer.store(cursor.consumer, std::memory_order_release);
    ++received;
  }
  producer.join();
}

}  // namespace
}  // namespace eldr::shm::detail
