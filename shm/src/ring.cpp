#include "eldr/shm/ring.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "eldr/internal/vector_kernels.hpp"

namespace eldr::shm::detail {

static_assert(std::endian::native == std::endian::little,
              "the ring's record headers are read in place: little-endian only");

uint32_t record_checksum(const uint8_t* payload, size_t length) noexcept {
  // XXH3 runs several times faster than XXH32 on footprint-sized payloads
  // (vectorised); its low 32 bits detect corruption as well as XXH32 does.
  return static_cast<uint32_t>(kernels::xxh3_64(payload, length));
}

bool valid_ring_capacity(uint64_t capacity) noexcept {
  return capacity >= kMinRingBytes && capacity <= kMaxRingBytes && (capacity & (capacity - 1)) == 0;
}

// ---- producer -------------------------------------------------------------------

RingWriter::RingWriter(RingControl* control, uint8_t* data, uint32_t capacity, uint32_t epoch)
    : m_control(control), m_data(data), m_capacity(capacity), m_epoch(epoch) {
  m_position = control->producer.load(std::memory_order_relaxed);
  m_cached_consumer = control->consumer.load(std::memory_order_acquire);
}

uint64_t* RingWriter::commit_word() const noexcept {
  return reinterpret_cast<uint64_t*>(&m_control->producer);
}

Result<RingWriter::Reservation> RingWriter::reserve(RecordType type, uint16_t schema,
                                                    size_t length) {
  if (type == RecordType::padding)
    return Status{Errc::invalid_argument, "padding records are written by the ring itself"};
  if (length > max_payload(m_capacity))
    return Status{Errc::capacity, "record payload of " + std::to_string(length) +
                                      " bytes exceeds the ring's limit of " +
                                      std::to_string(max_payload(m_capacity)) + " (ring of " +
                                      std::to_string(m_capacity) + " bytes / 8)"};
  const uint64_t span = record_span(length);
  const uint64_t index = m_position & (m_capacity - 1);
  const uint64_t tail = m_capacity - index;
  const uint64_t pad = span > tail ? tail : 0;
  const uint64_t need = pad + span;
  if (m_position + need - m_cached_consumer > m_capacity) {
    m_cached_consumer = m_control->consumer.load(std::memory_order_acquire);
    if (m_position + need - m_cached_consumer > m_capacity)
      return Status{Errc::ring_full,
                    "ring full (" + std::to_string(m_position - m_cached_consumer) + " of " +
                        std::to_string(m_capacity) + " bytes unread): retry later"};
  }
  if (pad != 0) {
    RecordHeader padding{};
    padding.length = static_cast<uint32_t>(tail - sizeof(RecordHeader));
    padding.type = static_cast<uint16_t>(RecordType::padding);
    padding.epoch = m_epoch;
    std::memcpy(m_data + index, &padding, sizeof(padding));
  }
  auto* header = reinterpret_cast<RecordHeader*>(m_data + ((m_position + pad) & (m_capacity - 1)));
  RecordHeader h{};
  h.length = static_cast<uint32_t>(length);
  h.type = static_cast<uint16_t>(type);
  h.schema = schema;
  h.sequence = m_sequence;
  h.epoch = m_epoch;
  h.flags = kRecordNoChecksum;  // until commit() checksums the payload
  std::memcpy(header, &h, sizeof(h));
  Reservation r;
  r.header = header;
  r.payload = reinterpret_cast<uint8_t*>(header) + sizeof(RecordHeader);
  r.length = static_cast<uint32_t>(length);
  r.start_position = m_position;
  r.commit_position = m_position + need;
  r.sequence = m_sequence;
  m_position = r.commit_position;
  ++m_sequence;
  return r;
}

void RingWriter::commit(const Reservation& reservation) {
  const uint32_t checksum = record_checksum(reservation.payload, reservation.length);
  std::memcpy(&reservation.header->checksum, &checksum, sizeof(checksum));
  const uint32_t flags = 0;
  std::memcpy(&reservation.header->flags, &flags, sizeof(flags));
  m_control->producer.store(reservation.commit_position, std::memory_order_release);
}

void RingWriter::rollback(const Reservation& reservation) {
  m_position = reservation.start_position;
  m_sequence = reservation.sequence;
}

Status RingWriter::push(RecordType type, uint16_t schema, std::span<const uint8_t> payload) {
  return push_with(type, schema, payload.size(),
                   [&](uint8_t* to) { kernels::copy_bytes(to, payload.data(), payload.size()); });
}

// ---- consumer -------------------------------------------------------------------

namespace {

ReadResult violation(RejectReason reason, std::string message) {
  ReadResult r;
  r.outcome = ReadOutcome::violation;
  r.reason = reason;
  r.why = Status{Errc::corrupt, std::move(message)};
  return r;
}

bool known_type(uint16_t type) {
  return type >= static_cast<uint16_t>(RecordType::footprint) &&
         type <= static_cast<uint16_t>(RecordType::prompt);
}

}  // namespace

Status check_positions(uint64_t producer, uint64_t consumer, uint64_t capacity) {
  if (producer < consumer)
    return {Errc::corrupt, "producer position " + std::to_string(producer) +
                               " is behind the consumer's " + std::to_string(consumer)};
  if (producer - consumer > capacity)
    return {Errc::corrupt, "producer position " + std::to_string(producer) + " is " +
                               std::to_string(producer - consumer) +
                               " bytes ahead of the consumer, more than the ring's " +
                               std::to_string(capacity)};
  if (producer % kRecordAlign != 0)
    return {Errc::corrupt, "producer position " + std::to_string(producer) + " is not " +
                               std::to_string(kRecordAlign) + "-byte aligned"};
  return Status::ok();
}

namespace {

ReadResult read_one(std::span<const uint8_t> ring, uint64_t producer, uint32_t epoch,
                    RingCursor& cursor, PayloadBuffer& payload) {
  const uint64_t capacity = ring.size();
  // At most one padding record precedes a record (never one at index 0).
  for (int step = 0; step < 2; ++step) {
    if (producer == cursor.consumer) return {};
    if (Status s = check_positions(producer, cursor.consumer, capacity); !s)
      return violation(RejectReason::bad_header, s.message());
    const uint64_t available = producer - cursor.consumer;
    const uint64_t index = cursor.consumer & (capacity - 1);
    const uint64_t tail = capacity - index;
    RecordHeader h;  // read once, from a private copy
    std::memcpy(&h, ring.data() + index, sizeof(h));
    if (h.type == static_cast<uint16_t>(RecordType::padding)) {
      if (index == 0 || h.length != tail - sizeof(RecordHeader))
        return violation(RejectReason::bad_header, "padding record of " + std::to_string(h.length) +
                                                       " bytes at ring offset " +
                                                       std::to_string(index) +
                                                       " does not end at the ring's end");
      if (available <= tail)
        return violation(RejectReason::bad_header,
                         "padding record committed without the record that follows it");
      cursor.consumer += tail;
      continue;
    }
    if (!known_type(h.type))
      return violation(RejectReason::bad_header, "unknown record type " + std::to_string(h.type));
    if (h.length > max_payload(capacity))
      return violation(RejectReason::too_large, "record of " + std::to_string(h.length) +
                                                    " bytes exceeds the limit of " +
                                                    std::to_string(max_payload(capacity)));
    const uint64_t span = record_span(h.length);
    if (span > tail)
      return violation(RejectReason::bad_header,
                       "record of " + std::to_string(h.length) + " bytes crosses the ring's end");
    if (span > available)
      return violation(RejectReason::bad_header,
                       "record of " + std::to_string(h.length) + " bytes is longer than the " +
                           std::to_string(available) + " committed bytes");
    if (h.sequence != cursor.expected_sequence)
      return violation(RejectReason::bad_header, "sequence " + std::to_string(h.sequence) +
                                                     ", expected " +
                                                     std::to_string(cursor.expected_sequence));
    if (h.epoch != epoch)
      return violation(RejectReason::bad_header, "record epoch " + std::to_string(h.epoch) +
                                                     ", the slot's epoch is " +
                                                     std::to_string(epoch));
    if ((h.flags & ~kRecordNoChecksum) != 0)
      return violation(RejectReason::bad_header, "unknown record flags " + std::to_string(h.flags));

    payload.resize(h.length);
    kernels::copy_bytes(payload.data(), ring.data() + index + sizeof(RecordHeader), h.length);
    cursor.consumer += span;
    ++cursor.expected_sequence;
    ReadResult r;
    r.type = static_cast<RecordType>(h.type);
    r.schema = h.schema;
    r.sequence = h.sequence;
    r.outcome = ReadOutcome::record;
    if ((h.flags & kRecordNoChecksum) == 0) {
      const uint32_t actual = record_checksum(payload.data(), payload.size());
      if (actual != h.checksum) {
        r.outcome = ReadOutcome::rejected;
        r.reason = RejectReason::bad_checksum;
        r.why = Status{Errc::corrupt,
                       "record " + std::to_string(h.sequence) + ": payload checksum mismatch"};
      }
    }
    return r;
  }
  return violation(RejectReason::bad_header, "two padding records in a row");
}

}  // namespace

ReadResult read_record(std::span<const uint8_t> ring, uint64_t producer, uint32_t epoch,
                       RingCursor& cursor, PayloadBuffer& payload) {
  const RingCursor start = cursor;
  ReadResult r = read_one(ring, producer, epoch, cursor, payload);
  // A violation after a skipped padding record leaves no trace either.
  if (r.outcome == ReadOutcome::violation) cursor = start;
  return r;
}

}  // namespace eldr::shm::detail
