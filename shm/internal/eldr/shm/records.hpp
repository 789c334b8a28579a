// The records a producer ring carries: their schema versions, the fixed
// payloads, the FlatBuffers footprint message (shm/schema/footprint_msg.fbs)
// with its verifier and semantic checks (decode_record, the daemon's side)
// and its encoder (FootprintEncoder, the producer's side). Every payload is
// untrusted: decode_record reads only a private copy (ring.hpp).
#pragma once

#include <flatbuffers/flatbuffers.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "eldr/shm.hpp"
#include "eldr/shm/layout.hpp"
#include "eldr/status.hpp"

namespace eldr::shm::detail {

inline constexpr uint16_t kFootprintSchema = 1;
// Completes: schema 2 = CompleteMsgHead (the completion token), then the id;
// schema 1 = the id alone (no token), still read.
inline constexpr uint16_t kCompleteSchema = 2;
inline constexpr uint16_t kCompleteSchemaV1 = 1;
// Worker reports: schema 1 = WorkerReportMsg; schema 2 appends
// WorkerReportMsg2's fields. The daemon reads both; a producer sends 1 when
// it has nothing of 2 to say, so older daemons keep reading it.
inline constexpr uint16_t kWorkerReportSchema = 2;
inline constexpr uint16_t kWorkerReportSchemaV1 = 1;
inline constexpr uint16_t kWorkerControlSchema = 1;
// Prompts (format 2.2): schema 1 = PromptMsg (shm/schema/prompt_msg.fbs).
inline constexpr uint16_t kPromptSchema = 1;
uint16_t current_schema(RecordType type) noexcept;

// Fixed payloads (little-endian POD).
struct WorkerReportMsg {
  uint32_t worker;
  uint32_t running;
  float kv_usage;
  uint32_t reserved;
};
// Schema 2: schema 1's 16 bytes, then the engine's decode step.
struct WorkerReportMsg2 {
  WorkerReportMsg v1;
  uint32_t batch_size;  // requests in the last decode step; 0 = not reported
  float step_ms;        // that step's duration; 0 = not reported
  uint64_t reserved;    // 0
};
struct CompleteMsgHead {
  uint64_t completion_token;  // 0 = none
};
struct WorkerControlMsg {
  uint32_t worker;
  uint32_t op;  // WorkerOp
};
static_assert(sizeof(WorkerReportMsg) == 16 && sizeof(WorkerReportMsg2) == 32 &&
              offsetof(WorkerReportMsg2, batch_size) == 16 && sizeof(WorkerControlMsg) == 8);

// A validated payload. Spans point into the payload buffer it was decoded from.
struct DecodedRecord {
  RecordType type = RecordType::padding;
  FootprintIn footprint;          // type footprint
  std::string_view request_id;    // footprint and complete
  uint64_t completion_token = 0;  // complete schema 2
  uint32_t worker = 0;            // worker_report / worker_control
  uint32_t running = 0;
  float kv_usage = 0.0f;
  uint32_t batch_size = 0;  // worker_report schema 2
  float step_ms = 0.0f;
  WorkerOp op = WorkerOp::add;
  PromptIn prompt;  // type prompt
};

// Verifies a payload of `type` (FlatBuffers verifier, then semantic checks).
// On failure `request_id` is set when the payload carried a readable one.
Status decode_record(RecordType type, uint16_t schema, std::span<const uint8_t> payload,
                     DecodedRecord& out);

// The producer side of decode_record: footprint payloads built in a reused
// FlatBuffers builder that holds only the message's small parts. Each bulk
// array (counts, block hashes, row flags, block rows) is left as a hole in it
// (CreateUninitializedVector), and write_to() fills the holes straight from
// the caller's memory: one copy of a 12 KiB footprint into the ring instead of
// three (into the builder, out of it, into the ring). Not thread-safe.
class FootprintEncoder {
 public:
  FootprintEncoder();
  // Validates the footprint (validate_footprint_message), then lays it out.
  // Its arrays must stay valid and unchanged until write_to().
  Status encode(const FootprintOut& footprint);
  // A dense footprint whose counts another writer fills in place (the GPU
  // hand-off): the message has a hole of layers * experts int16 at
  // counts_offset() (8-byte aligned within the message), which write_to()
  // leaves untouched. Validates the id and the shape.
  Status encode_dense_skeleton(std::string_view request_id, uint32_t layers, uint32_t experts,
                               uint64_t prefill_end_ns);
  size_t counts_offset() const noexcept { return m_counts_offset; }
  size_t size() const noexcept { return m_builder.GetSize(); }
  // Writes the size() bytes of the message to dst (a skeleton's counts hole
  // excepted).
  void write_to(uint8_t* dst) const noexcept;

 private:
  struct Hole {
    size_t offset = 0;                // in the finished message
    const uint8_t* source = nullptr;  // null: filled by another writer
    size_t bytes = 0;
  };
  // An empty message: what a refused footprint leaves, never the previous one.
  void clear() noexcept;
  // Lays out a validated footprint; its counts come from counts_source
  // (null for a skeleton) and number counts_cells.
  void lay_out(const FootprintOut& footprint, const int16_t* counts_source, size_t counts_cells);
  flatbuffers::FlatBufferBuilder m_builder;
  std::array<Hole, 4> m_holes{};  // ascending offsets
  size_t m_hole_count = 0;
  size_t m_counts_offset = 0;
};

// The payload of one prompt record (a PromptMsg) of at most max_bytes:
// the whole prompt when it fits, else its head (three quarters of what fits)
// and its tail (the rest; a text keeps whole code points). The request id is
// checked; the prompt itself is the daemon's to judge (any length, any
// value). capacity: max_bytes cannot hold the id and one unit. *cut (when
// given): whether it was cut. `fbb` is reused.
Status encode_prompt(const PromptOut& prompt, size_t max_bytes, flatbuffers::FlatBufferBuilder& fbb,
                     bool* cut = nullptr);
// The prompt payload, uncut, in a fresh vector (the route request over NATS, tests).
Status encode_prompt(const PromptOut& prompt, std::vector<uint8_t>& out);

// The payload of one footprint, in a fresh vector (tests, tools).
Status encode_footprint(const FootprintOut& footprint, std::vector<uint8_t>& out);
Status validate_footprint_message(const FootprintOut& footprint);

}  // namespace eldr::shm::detail
