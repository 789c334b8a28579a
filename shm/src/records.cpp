#include "eldr/shm/records.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "eldr/footprint.hpp"
#include "eldr/footprint_msg_generated.h"
#include "eldr/geometry.hpp"
#include "eldr/internal/vector_kernels.hpp"
#include "eldr/prompt_msg_generated.h"

namespace eldr::shm::detail {

static_assert(std::endian::native == std::endian::little,
              "FlatBuffers payloads are read in place: little-endian only");

uint16_t current_schema(RecordType type) noexcept {
  switch (type) {
    case RecordType::footprint:
      return kFootprintSchema;
    case RecordType::complete:
      return kCompleteSchema;
    case RecordType::worker_report:
      return kWorkerReportSchema;
    case RecordType::worker_control:
      return kWorkerControlSchema;
    case RecordType::prompt:
      return kPromptSchema;
    case RecordType::padding:
      break;
  }
  return 0;
}

namespace {

template <class T>
std::span<const T> as_span(const flatbuffers::Vector<T>* v) {
  if (v == nullptr) return {};
  return {v->data(), v->size()};
}

Status check_schema(RecordType type, uint16_t schema) {
  if (schema == current_schema(type)) return Status::ok();
  if (type == RecordType::worker_report && schema == kWorkerReportSchemaV1) return Status::ok();
  if (type == RecordType::complete && schema == kCompleteSchemaV1) return Status::ok();
  return {Errc::unsupported, "record schema " + std::to_string(schema) +
                                 " (this build reads schema " +
                                 std::to_string(current_schema(type)) + ")"};
}

// Shape and range of a footprint, dense or block form (shared by both ends).
Status check_footprint_fields(uint32_t layers, uint32_t experts, std::span<const int16_t> counts,
                              std::span<const uint64_t> block_hashes,
                              std::span<const uint8_t> row_present,
                              std::span<const uint8_t> block_rows) {
  const Geometry geometry{layers, experts, 0};
  ELDR_TRY(geometry.validate());
  const bool dense = !counts.empty();
  const bool blocks = !block_hashes.empty();
  if (dense == blocks)
    return {Errc::invalid_argument,
            dense ? "footprint carries both dense counts and block rows"
                  : "footprint carries neither dense counts nor block hashes"};
  if (dense) {
    if (!row_present.empty() || !block_rows.empty())
      return {Errc::invalid_argument, "dense footprint with block rows"};
    return validate_footprint(geometry, counts);
  }
  uint64_t present = block_hashes.size();
  if (!row_present.empty()) {
    if (row_present.size() != block_hashes.size())
      return {Errc::shape_mismatch, "row_present has " + std::to_string(row_present.size()) +
                                        " entries for " + std::to_string(block_hashes.size()) +
                                        " blocks"};
    present = 0;
    for (uint8_t p : row_present) {
      if (p > 1)
        return {Errc::out_of_range, "row_present entry " + std::to_string(p) + " is not 0 or 1"};
      present += p;
    }
  }
  if (block_rows.size() != present * geometry.cells())
    return {Errc::shape_mismatch, "block rows hold " + std::to_string(block_rows.size()) +
                                      " bytes, " + std::to_string(present) + " present rows of " +
                                      geometry.to_string() + " need " +
                                      std::to_string(present * geometry.cells())};
  return Status::ok();
}

Status bad_size(const char* what, size_t got, size_t want) {
  return {Errc::corrupt, std::string(what) + " payload of " + std::to_string(got) +
                             " bytes, expected " + std::to_string(want)};
}

// Framing only: the prompt's values (ids, UTF-8, length) are the predictor's to judge.
Status decode_prompt(std::span<const uint8_t> payload, DecodedRecord& out) {
  if (reinterpret_cast<uintptr_t>(payload.data()) % alignof(uint64_t) != 0)
    return {Errc::internal, "prompt payload buffer is not 8-byte aligned"};
  if (payload.size() < 8 || !fb::PromptMsgBufferHasIdentifier(payload.data()))
    return {Errc::corrupt, "prompt payload is not a PromptMsg (identifier \"" +
                               std::string(fb::PromptMsgIdentifier()) + "\")"};
  flatbuffers::Verifier::Options opts;
  opts.max_depth = 4;
  opts.max_tables = 4;
  flatbuffers::Verifier verifier(payload.data(), payload.size(), opts);
  if (!fb::VerifyPromptMsgBuffer(verifier))
    return {Errc::corrupt, "prompt payload failed FlatBuffers verification"};
  const fb::PromptMsg* msg = fb::GetPromptMsg(payload.data());
  if (msg->request_id() == nullptr) return {Errc::invalid_argument, "prompt without a request id"};
  const std::string_view id(msg->request_id()->data(), msg->request_id()->size());
  ELDR_TRY(validate_request_id(id));
  out.request_id = id;
  PromptIn& p = out.prompt;
  p.request_id = id;
  if (msg->kind() > static_cast<uint8_t>(PromptKind::text))
    return {Errc::invalid_argument, "unknown prompt kind " + std::to_string(msg->kind())};
  const auto tokens = as_span(msg->tokens());
  const auto text = as_span(msg->text());
  if (msg->kind() == static_cast<uint8_t>(PromptKind::tokens)) {
    if (!text.empty()) return {Errc::invalid_argument, "a token prompt carries text"};
    p.prompt = Prompt::of_tokens(tokens);
  } else {
    if (!tokens.empty()) return {Errc::invalid_argument, "a text prompt carries tokens"};
    p.prompt = Prompt::of_text({reinterpret_cast<const char*>(text.data()), text.size()});
  }
  p.prompt_units = msg->prompt_units();
  p.head_units = msg->head_units();
  const uint64_t units = p.units();
  if (p.prompt_units < units || p.head_units > units ||
      (p.prompt_units == units && p.head_units != units))
    return {Errc::corrupt, "prompt of " + std::to_string(p.prompt_units) + " units keeps " +
                               std::to_string(units) + " with a head of " +
                               std::to_string(p.head_units)};
  return Status::ok();
}

}  // namespace

Status decode_record(RecordType type, uint16_t schema, std::span<const uint8_t> payload,
                     DecodedRecord& out) {
  out = DecodedRecord{};
  out.type = type;
  ELDR_TRY(check_schema(type, schema));
  switch (type) {
    case RecordType::footprint: {
      // The verifier's alignment checks are relative to the buffer: it must be 8-aligned.
      if (reinterpret_cast<uintptr_t>(payload.data()) % alignof(uint64_t) != 0)
        return {Errc::internal, "footprint payload buffer is not 8-byte aligned"};
      if (payload.size() < 8 || !fb::FootprintMsgBufferHasIdentifier(payload.data()))
        return {Errc::corrupt, "footprint payload is not a FootprintMsg (identifier \"" +
                                   std::string(fb::FootprintMsgIdentifier()) + "\")"};
      flatbuffers::Verifier::Options opts;
      opts.max_depth = 4;
      opts.max_tables = 4;
      flatbuffers::Verifier verifier(payload.data(), payload.size(), opts);
      if (!fb::VerifyFootprintMsgBuffer(verifier))
        return {Errc::corrupt, "footprint payload failed FlatBuffers verification"};
      const fb::FootprintMsg* msg = fb::GetFootprintMsg(payload.data());
      if (msg->request_id() == nullptr)
        return {Errc::invalid_argument, "footprint without a request id"};
      const std::string_view id(msg->request_id()->data(), msg->request_id()->size());
      ELDR_TRY(validate_request_id(id));
      out.request_id = id;
      FootprintIn& f = out.footprint;
      f.request_id = id;
      f.layers = msg->layers();
      f.experts = msg->experts();
      f.counts = as_span(msg->counts());
      f.block_hashes = as_span(msg->block_hashes());
      f.row_present = as_span(msg->row_present());
      f.block_rows = as_span(msg->block_rows());
      f.prefill_end_ns = msg->prefill_end_ns();
      return check_footprint_fields(f.layers, f.experts, f.counts, f.block_hashes, f.row_present,
                                    f.block_rows);
    }
    case RecordType::complete: {
      size_t head = 0;
      if (schema == kCompleteSchema) {
        CompleteMsgHead h;
        if (payload.size() < sizeof(h)) return bad_size("complete", payload.size(), sizeof(h) + 1);
        std::memcpy(&h, payload.data(), sizeof(h));
        out.completion_token = h.completion_token;
        head = sizeof(h);
      }
      const std::string_view id(reinterpret_cast<const char*>(payload.data()) + head,
                                payload.size() - head);
      ELDR_TRY(validate_request_id(id));
      out.request_id = id;
      return Status::ok();
    }
    case RecordType::worker_report: {
      WorkerReportMsg2 m{};
      const size_t want = schema == kWorkerReportSchemaV1 ? sizeof(m.v1) : sizeof(m);
      if (payload.size() != want) return bad_size("worker report", payload.size(), want);
      std::memcpy(&m, payload.data(), want);
      if (m.v1.worker > uint32_t{std::numeric_limits<int32_t>::max()})
        return {Errc::out_of_range, "worker id " + std::to_string(m.v1.worker) + " out of range"};
      if (!std::isfinite(m.v1.kv_usage) || m.v1.kv_usage < 0.0f || m.v1.kv_usage > 1.0f)
        return {Errc::out_of_range,
                "kv_usage " + std::to_string(m.v1.kv_usage) + " is not a fraction in [0, 1]"};
      if (!std::isfinite(m.step_ms) || m.step_ms < 0.0f)
        return {Errc::out_of_range,
                "step_ms " + std::to_string(m.step_ms) + " is not a finite duration >= 0"};
      out.worker = m.v1.worker;
      out.running = m.v1.running;
      out.kv_usage = m.v1.kv_usage;
      out.batch_size = m.batch_size;
      out.step_ms = m.step_ms;
      return Status::ok();
    }
    case RecordType::worker_control: {
      WorkerControlMsg m;
      if (payload.size() != sizeof(m)) return bad_size("worker control", payload.size(), sizeof(m));
      std::memcpy(&m, payload.data(), sizeof(m));
      if (m.worker > uint32_t{std::numeric_limits<int32_t>::max()})
        return {Errc::out_of_range, "worker id " + std::to_string(m.worker) + " out of range"};
      if (m.op < static_cast<uint32_t>(WorkerOp::add) ||
          m.op > static_cast<uint32_t>(WorkerOp::remove))
        return {Errc::out_of_range, "unknown worker op " + std::to_string(m.op)};
      out.worker = m.worker;
      out.op = static_cast<WorkerOp>(m.op);
      return Status::ok();
    }
    case RecordType::prompt:
      return decode_prompt(payload, out);
    case RecordType::padding:
      break;
  }
  return {Errc::internal, "decode_record: unexpected record type"};
}

Status validate_footprint_message(const FootprintOut& f) {
  ELDR_TRY(validate_request_id(f.request_id));
  return check_footprint_fields(f.layers, f.experts, f.counts, f.block_hashes, f.row_present,
                                f.block_rows);
}

FootprintEncoder::FootprintEncoder() : m_builder(1024) {}

void FootprintEncoder::clear() noexcept {
  m_builder.Clear();
  m_hole_count = 0;
  m_counts_offset = 0;
}

Status FootprintEncoder::encode(const FootprintOut& f) {
  clear();
  ELDR_TRY(validate_footprint_message(f));
  lay_out(f, f.counts.data(), f.counts.size());
  return Status::ok();
}

Status FootprintEncoder::encode_dense_skeleton(std::string_view request_id, uint32_t layers,
                                               uint32_t experts, uint64_t prefill_end_ns) {
  clear();
  ELDR_TRY(validate_request_id(request_id));
  ELDR_TRY((Geometry{layers, experts, 0}.validate()));
  FootprintOut f;
  f.request_id = request_id;
  f.layers = layers;
  f.experts = experts;
  f.prefill_end_ns = prefill_end_ns;
  lay_out(f, nullptr, size_t{layers} * experts);
  return Status::ok();
}

void FootprintEncoder::lay_out(const FootprintOut& f, const int16_t* counts_source,
                               size_t counts_cells) {
  auto& fbb = m_builder;
  // Holes are measured from the buffer's end: the builder grows downwards,
  // so that distance survives its reallocations and the final prefix.
  size_t from_end[4] = {};
  const auto hole = [&](const void* source, size_t n, size_t element) {
    uint8_t* at = nullptr;
    const flatbuffers::uoffset_t vec = fbb.CreateUninitializedVector(n, element, &at);
    from_end[m_hole_count] =
        fbb.GetSize() - static_cast<size_t>(at - fbb.GetCurrentBufferPointer());
    m_holes[m_hole_count++] = {0, static_cast<const uint8_t*>(source), n * element};
    return vec;
  };
  // Built first, the biggest array ends the message; then the small ones.
  // Counts start 8-byte aligned (the message is in the ring), so a GPU
  // filling them writes whole words.
  flatbuffers::Offset<flatbuffers::Vector<int16_t>> counts;
  flatbuffers::Offset<flatbuffers::Vector<uint64_t>> hashes;
  flatbuffers::Offset<flatbuffers::Vector<uint8_t>> present, rows;
  size_t counts_from_end = 0;
  if (counts_cells != 0) {
    fbb.ForceVectorAlignment(counts_cells, sizeof(int16_t), 8);
    counts.o = hole(counts_source, counts_cells, sizeof(int16_t));
    counts_from_end = from_end[m_hole_count - 1];
  }
  if (!f.block_rows.empty()) rows.o = hole(f.block_rows.data(), f.block_rows.size(), 1);
  if (!f.block_hashes.empty())
    hashes.o = hole(f.block_hashes.data(), f.block_hashes.size(), sizeof(uint64_t));
  if (!f.row_present.empty()) present.o = hole(f.row_present.data(), f.row_present.size(), 1);
  const auto id = fbb.CreateString(f.request_id.data(), f.request_id.size());
  const auto msg = fb::CreateFootprintMsg(fbb, id, f.layers, f.experts, counts, hashes, present,
                                          rows, f.prefill_end_ns);
  fb::FinishFootprintMsgBuffer(fbb, msg);
  for (size_t i = 0; i < m_hole_count; ++i) m_holes[i].offset = fbb.GetSize() - from_end[i];
  std::sort(m_holes.begin(), m_holes.begin() + static_cast<ptrdiff_t>(m_hole_count),
            [](const Hole& a, const Hole& b) { return a.offset < b.offset; });
  m_counts_offset = counts_cells != 0 ? fbb.GetSize() - counts_from_end : 0;
}

void FootprintEncoder::write_to(uint8_t* dst) const noexcept {
  const uint8_t* built = m_builder.GetBufferPointer();
  size_t at = 0;  // the builder's bytes between holes, then each hole from its source
  for (size_t i = 0; i < m_hole_count; ++i) {
    const Hole& h = m_holes[i];
    kernels::copy_bytes(dst + at, built + at, h.offset - at);
    if (h.source != nullptr) kernels::copy_bytes(dst + h.offset, h.source, h.bytes);
    at = h.offset + h.bytes;
  }
  kernels::copy_bytes(dst + at, built + at, size() - at);
}

namespace {

// A cut text keeps whole code points: the head ends and the tail starts on
// a code point's first byte (within 3 bytes; invalid text is cut anywhere).
bool continuation(const char* s, size_t i) {
  return (static_cast<unsigned char>(s[i]) & 0xc0) == 0x80;
}

}  // namespace

Status encode_prompt(const PromptOut& p, size_t max_bytes, flatbuffers::FlatBufferBuilder& fbb,
                     bool* cut) {
  fbb.Clear();
  if (cut != nullptr) *cut = false;
  ELDR_TRY(validate_request_id(p.request_id));
  const bool tokens = p.prompt.kind == PromptKind::tokens;
  if (p.prompt.kind != PromptKind::tokens && p.prompt.kind != PromptKind::text)
    return {Errc::invalid_argument, "unknown prompt kind"};
  const size_t unit = tokens ? sizeof(uint32_t) : 1;
  const size_t n = tokens ? p.prompt.tokens.size() : p.prompt.text.size();
  if (n > UINT32_MAX) return {Errc::invalid_argument, "a prompt of more than 2^32 units"};
  // The message's own bytes around the units (tables, vtable, id, padding)
  // stay well under this.
  const size_t overhead = 256 + p.request_id.size();
  if (max_bytes < overhead + 4 * unit)
    return {Errc::capacity, "a prompt record of at most " + std::to_string(max_bytes) +
                                " bytes cannot hold a prompt"};
  const size_t fit = max_bytes == SIZE_MAX ? n : (max_bytes - overhead) / unit;
  size_t head = n, tail_from = n;  // units [0, head) and [tail_from, n)
  if (n > fit) {
    head = fit / 4 * 3;
    tail_from = n - (fit - head);
    if (!tokens) {
      const char* t = p.prompt.text.data();
      for (int k = 0; k < 3 && head > 0 && continuation(t, head); ++k) --head;
      for (int k = 0; k < 3 && tail_from < n && continuation(t, tail_from); ++k) ++tail_from;
    }
    if (cut != nullptr) *cut = true;
  }
  const size_t kept = head + (n - tail_from);
  uint8_t* at = nullptr;
  fbb.ForceVectorAlignment(kept, unit, 8);
  const flatbuffers::uoffset_t units = fbb.CreateUninitializedVector(kept, unit, &at);
  const auto* source = tokens ? reinterpret_cast<const uint8_t*>(p.prompt.tokens.data())
                              : reinterpret_cast<const uint8_t*>(p.prompt.text.data());
  if (head != 0) std::memcpy(at, source, head * unit);
  if (n != tail_from)
    std::memcpy(at + head * unit, source + tail_from * unit, (n - tail_from) * unit);
  const auto id = fbb.CreateString(p.request_id.data(), p.request_id.size());
  fb::PromptMsgBuilder b(fbb);
  b.add_prompt_units(n);
  b.add_request_id(id);
  if (tokens)
    b.add_tokens(flatbuffers::Offset<flatbuffers::Vector<uint32_t>>(units));
  else
    b.add_text(flatbuffers::Offset<flatbuffers::Vector<uint8_t>>(units));
  b.add_head_units(static_cast<uint32_t>(head));
  b.add_kind(static_cast<uint8_t>(p.prompt.kind));
  fb::FinishPromptMsgBuffer(fbb, b.Finish());
  if (fbb.GetSize() > max_bytes)
    return {Errc::internal, "prompt record of " + std::to_string(fbb.GetSize()) +
                                " bytes exceeds its " + std::to_string(max_bytes)};
  return Status::ok();
}

Status encode_prompt(const PromptOut& prompt, std::vector<uint8_t>& out) {
  flatbuffers::FlatBufferBuilder fbb(1024);
  ELDR_TRY(encode_prompt(prompt, SIZE_MAX, fbb));
  out.assign(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
  return Status::ok();
}

Status encode_footprint(const FootprintOut& f, std::vector<uint8_t>& out) {
  FootprintEncoder encoder;
  ELDR_TRY(encoder.encode(f));
  out.resize(encoder.size());
  encoder.write_to(out.data());
  return Status::ok();
}

}  // namespace eldr::shm::detail
