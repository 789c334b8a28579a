// One client's single-producer byte ring: the producer's writer and the
// daemon's record reader. It frames, checksums and bound-checks records and
// knows nothing of what they carry (records.hpp decodes the payloads). The
// reader is a pure function of a ring image (bytes + positions), so the fuzzer
// can feed it arbitrary bytes.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "eldr/shm.hpp"
#include "eldr/shm/layout.hpp"
#include "eldr/status.hpp"

namespace eldr::shm::detail {

// Bytes a record of `payload` bytes takes in the ring (header + payload, aligned).
constexpr uint64_t record_span(uint64_t payload) {
  return align_up(sizeof(RecordHeader) + payload, kRecordAlign);
}
// Largest payload a ring of `capacity` bytes takes: one record <= capacity / 8.
constexpr uint64_t max_payload(uint64_t capacity) { return capacity / 8 - sizeof(RecordHeader); }
bool valid_ring_capacity(uint64_t capacity) noexcept;
// RecordHeader::checksum of a payload (scheme kRecordChecksumScheme).
uint32_t record_checksum(const uint8_t* payload, size_t length) noexcept;

// The producer's end. Not thread-safe: a ring has exactly one producer.
class RingWriter {
 public:
  RingWriter() = default;
  // Starts at the ring's current producer position with sequence 0.
  RingWriter(RingControl* control, uint8_t* data, uint32_t capacity, uint32_t epoch);

  struct Reservation {
    uint8_t* payload = nullptr;
    uint32_t length = 0;
    RecordHeader* header = nullptr;
    uint64_t start_position = 0;   // where the record (or its padding) begins
    uint64_t commit_position = 0;  // the producer position that publishes it
    uint64_t sequence = 0;
  };
  // Writes the record header (and a padding record first if the record would
  // cross the ring's end) and returns where the payload goes. Reservations
  // follow one another: several may be outstanding, and storing a later one's
  // commit_position publishes every earlier one too. Nothing is visible to
  // the consumer until then. capacity: record larger than the ring allows;
  // ring_full: no room now (nothing written).
  Result<Reservation> reserve(RecordType type, uint16_t schema, size_t length);
  // CPU path: checksums the payload, then stores the producer position
  // (release). A writer that publishes the position itself (the GPU) stores
  // commit_position to commit_word() and leaves the record unchecksummed.
  void commit(const Reservation& reservation);
  // Takes back `reservation` and every later one, none of which may have
  // been published: the next reservation starts where it started.
  void rollback(const Reservation& reservation);
  // reserve(), fill(payload) writes exactly `length` bytes, commit().
  template <class Fill>
  Status push_with(RecordType type, uint16_t schema, size_t length, Fill&& fill) {
    auto r = reserve(type, schema, length);
    if (!r) return r.status();
    fill(r->payload);
    commit(*r);
    return Status::ok();
  }
  Status push(RecordType type, uint16_t schema, std::span<const uint8_t> payload);

  uint64_t position() const noexcept { return m_position; }
  uint64_t next_sequence() const noexcept { return m_sequence; }
  uint64_t* commit_word() const noexcept;

 private:
  RingControl* m_control = nullptr;
  uint8_t* m_data = nullptr;
  uint32_t m_capacity = 0;
  uint32_t m_epoch = 0;
  uint64_t m_position = 0;         // end of the last reservation
  uint64_t m_cached_consumer = 0;  // last consumer position seen
  uint64_t m_sequence = 0;         // next record's sequence
};

// ---- the daemon's side: reading ----------------------------------------------------

struct RingCursor {
  uint64_t consumer = 0;           // next byte to read
  uint64_t expected_sequence = 0;  // next record's sequence
};

enum class ReadOutcome {
  empty,      // nothing committed past the cursor
  record,     // a record was copied out and its checksum holds; cursor advanced
  rejected,   // framing fine, payload checksum wrong; cursor advanced
  violation,  // producer broke the protocol (positions, header); cursor unchanged
};

struct ReadResult {
  ReadOutcome outcome = ReadOutcome::empty;
  RecordType type = RecordType::padding;
  uint16_t schema = 0;
  uint64_t sequence = 0;
  RejectReason reason = RejectReason::bad_header;
  Status why;
};

// The reader's private copy of a payload. resize() leaves new bytes
// uninitialised (read_record overwrites all of them): a 12 KiB footprint after
// a 20-byte complete costs no memset.
template <class T>
struct UninitialisedAllocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = UninitialisedAllocator<U>;
  };
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};
using PayloadBuffer = std::vector<uint8_t, UninitialisedAllocator<uint8_t>>;

// Checks that a producer position is possible at all for this cursor.
Status check_positions(uint64_t producer, uint64_t consumer, uint64_t capacity);

// Reads the record at cursor.consumer from `ring` (capacity bytes, a power of
// two) given the producer position already loaded (acquire) by the caller.
// Reads every header field once from a private copy, bound-checks it, skips
// padding, copies the payload into `payload` and verifies its checksum. The
// ring may be concurrently scribbled on: only the copies are trusted.
ReadResult read_record(std::span<const uint8_t> ring, uint64_t producer, uint32_t epoch,
                       RingCursor& cursor, PayloadBuffer& payload);

}  // namespace eldr::shm::detail
