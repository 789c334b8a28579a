// libFuzzer target: arbitrary bytes as a hostile producer's ring, run through
// the daemon's record reader and payload validator (the code eldrd runs on
// every client's shared-memory ring). Input: a 32-byte preamble (producer
// position, consumer position, epoch, expected sequence), then the ring image,
// zero-padded or cut to a power-of-two capacity. Every input must end in
// "empty" or "violation" without crashing, and the cursor may only move
// forward, never past the producer position.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "eldr/shm/records.hpp"
#include "eldr/shm/ring.hpp"

namespace {

struct Preamble {
  uint64_t producer;
  uint64_t consumer;
  uint32_t epoch;
  uint32_t reserved;
  uint64_t expected_sequence;
};
static_assert(sizeof(Preamble) == 32);

template <class T>
bool inside(std::span<const T> s, std::span<const uint8_t> buffer) {
  if (s.empty()) return true;
  const auto* begin = reinterpret_cast<const uint8_t*>(s.data());
  return begin >= buffer.data() && begin + s.size_bytes() <= buffer.data() + buffer.size();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace eldr::shm::detail;
  if (size < sizeof(Preamble)) return 0;
  Preamble p;
  std::memcpy(&p, data, sizeof(p));
  const size_t body = size - sizeof(Preamble);
  size_t capacity = 1024;  // smallest ring whose records (cap / 8) hold a header
  while (capacity < body && capacity < (1u << 16)) capacity <<= 1;
  std::vector<uint8_t> ring(capacity, 0);
  std::memcpy(ring.data(), data + sizeof(Preamble), std::min(body, capacity));

  // The daemon's own cursor is always record-aligned.
  RingCursor cursor{p.consumer & ~uint64_t{kRecordAlign - 1}, p.expected_sequence};
  PayloadBuffer payload;
  for (int step = 0; step < 512; ++step) {
    const RingCursor before = cursor;
    const ReadResult r = read_record(ring, p.producer, p.epoch, cursor, payload);
    if (r.outcome == ReadOutcome::empty || r.outcome == ReadOutcome::violation) {
      if (cursor.consumer != before.consumer) std::abort();
      if (r.outcome == ReadOutcome::violation && r.why.is_ok()) std::abort();
      break;
    }
    if (cursor.consumer <= before.consumer || cursor.consumer > p.producer) std::abort();
    if (r.outcome != ReadOutcome::record) continue;
    DecodedRecord d;
    if (decode_record(r.type, r.schema, payload, d).is_ok() &&
        r.type == eldr::shm::RecordType::footprint) {
      const eldr::shm::FootprintIn& f = d.footprint;
      if (!inside(f.counts, payload) || !inside(f.block_hashes, payload) ||
          !inside(f.row_present, payload) || !inside(f.block_rows, payload))
        std::abort();
      if (!f.counts.empty() && f.counts.size() != size_t{f.layers} * f.experts) std::abort();
    }
  }
  return 0;
}
