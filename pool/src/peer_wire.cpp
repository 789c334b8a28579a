#include "eldr/pool/peer_wire.hpp"

#include <time.h>
#include <xxhash.h>

#include <cstring>

#include "eldr/peer_msg_generated.h"

namespace eldr::pool {

namespace {

bool name_char(char c) noexcept {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

bool is_name(std::string_view name) noexcept {
  if (name.empty() || name.size() > kMaxPoolName) return false;
  for (char c : name)
    if (!name_char(c)) return false;
  return true;
}

Decoded fail(WireFault fault, std::string message) {
  Decoded d;
  d.error = {fault, std::move(message)};
  return d;
}

// The worker ids the router accepts.
bool worker_ok(int32_t worker) noexcept { return worker >= 0; }

}  // namespace

Status validate_pool_name(std::string_view what, std::string_view name) {
  if (is_name(name)) return Status::ok();
  return {Errc::invalid_argument, std::string(what) + " '" + std::string(name) + "' must be 1.." +
                                      std::to_string(kMaxPoolName) +
                                      " characters of [A-Za-z0-9_-] (it is a NATS subject token)"};
}

std::string node_subject(std::string_view pool, std::string_view node) {
  return "eldr." + std::string(pool) + ".node." + std::string(node);
}

std::string pool_nodes_subject(std::string_view pool) {
  return "eldr." + std::string(pool) + ".node.*";
}

std::string route_subject(std::string_view pool) { return "eldr." + std::string(pool) + ".route"; }

std::string complete_subject(std::string_view pool, std::string_view node) {
  return "eldr." + std::string(pool) + ".complete." + std::string(node);
}

std::string forward_subject(std::string_view pool, std::string_view node) {
  return "eldr." + std::string(pool) + ".forward." + std::string(node);
}

std::string ack_subject(std::string_view pool, std::string_view node) {
  return "eldr." + std::string(pool) + ".ack." + std::string(node);
}

std::string complete_any_subject(std::string_view pool) {
  return "eldr." + std::string(pool) + ".complete";
}

std::string cancel_subject(std::string_view pool) {
  return "eldr." + std::string(pool) + ".cancel";
}

std::string gateway_subject(std::string_view pool) {
  return "eldr." + std::string(pool) + ".gateway";
}

uint32_t node_tag(std::string_view node) noexcept {
  return static_cast<uint32_t>(XXH3_64bits(node.data(), node.size()) & 0xffffff);
}

uint64_t tagged_token(uint32_t tag, uint64_t hash) noexcept {
  // The low 32 bits never 0, so no token is 0 ("no token").
  const uint64_t low = (hash & 0xffffffffu) != 0 ? hash & 0xffffffffu : 1;
  return kTokenMagic << 56 | uint64_t{tag & 0xffffffu} << 32 | low;
}

std::optional<uint32_t> token_tag(uint64_t token) noexcept {
  if (token >> 56 != kTokenMagic) return std::nullopt;
  return static_cast<uint32_t>(token >> 32 & 0xffffff);
}

std::string sample_subject(std::string_view pool, std::string_view node) {
  return "eldr." + std::string(pool) + ".sample." + std::string(node);
}

const char* peer_kind_name(PeerKind kind) noexcept {
  switch (kind) {
    case PeerKind::book:
      return "book";
    case PeerKind::release:
      return "release";
    case PeerKind::load:
      return "load";
    case PeerKind::snapshot:
      return "snapshot";
  }
  return "?";
}

const char* wire_fault_name(WireFault fault) noexcept {
  switch (fault) {
    case WireFault::not_a_message:
      return "not_a_message";
    case WireFault::version:
      return "version";
    case WireFault::bad_field:
      return "bad_field";
    case WireFault::shape:
      return "shape";
    case WireFault::subject:
      return "subject";
  }
  return "?";
}

uint64_t realtime_ns() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

std::vector<uint64_t> aligned_copy(std::span<const uint8_t> bytes) {
  std::vector<uint64_t> out((bytes.size() + 7) / 8);
  if (!bytes.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

Decoded decode_peer_message(std::span<const uint8_t> bytes, const Geometry& geometry,
                            const CostCells& cells, std::string_view subject_node) {
  if (bytes.size() < 8 || bytes.size() > (size_t{64} << 20))
    return fail(WireFault::not_a_message,
                "message of " + std::to_string(bytes.size()) + " bytes is no PeerMsg");
  const std::vector<uint64_t> aligned = aligned_copy(bytes);
  const auto* data = reinterpret_cast<const uint8_t*>(aligned.data());
  if (!fb::PeerMsgBufferHasIdentifier(data))
    return fail(WireFault::not_a_message,
                "no PeerMsg identifier \"" + std::string(fb::PeerMsgIdentifier()) + "\"");
  flatbuffers::Verifier::Options opts;
  opts.max_depth = 4;
  opts.max_tables = 8;
  flatbuffers::Verifier verifier(data, bytes.size(), opts);
  if (!fb::VerifyPeerMsgBuffer(verifier))
    return fail(WireFault::not_a_message, "PeerMsg failed FlatBuffers verification");
  const fb::PeerMsg* m = fb::GetPeerMsg(data);
  if (m->version() != kPoolWireVersion)
    return fail(WireFault::version, "PeerMsg version " + std::to_string(m->version()) +
                                        ", this node speaks " + std::to_string(kPoolWireVersion));
  Decoded d;
  PeerMessage& out = d.message;
  if (m->node() == nullptr) return fail(WireFault::bad_field, "PeerMsg without a node name");
  out.head.node.assign(m->node()->data(), m->node()->size());
  if (!is_name(out.head.node))
    return fail(WireFault::bad_field, "node name is not a subject token");
  if (!subject_node.empty() && subject_node != out.head.node)
    return fail(WireFault::subject, "message of node '" + out.head.node +
                                        "' on the subject of node '" + std::string(subject_node) +
                                        "'");
  out.head.incarnation = m->incarnation();
  out.head.sequence = m->sequence();
  out.head.sent_ns = m->sent_ns();
  out.head.features = m->features();
  if (out.head.incarnation == 0 || out.head.sequence == 0)
    return fail(WireFault::bad_field, "incarnation and sequence must be nonzero");
  // A union's type may come without its value: the verifier lets that pass.
  if (m->body() == nullptr) return fail(WireFault::bad_field, "PeerMsg without a body");
  switch (m->body_type()) {
    case fb::Body::BookMsg: {
      const fb::BookMsg* b = m->body_as_BookMsg();
      out.kind = PeerKind::book;
      out.key = b->key();
      out.worker = b->worker();
      if (!worker_ok(out.worker)) return fail(WireFault::bad_field, "booking of a negative worker");
      if (b->layers() != geometry.layers || b->experts() != geometry.experts)
        return fail(WireFault::shape, "booking footprint is " + std::to_string(b->layers()) + "x" +
                                          std::to_string(b->experts()) + ", the table is " +
                                          geometry.to_string());
      if (const auto* demand = b->demand()) {
        if (b->cost_stride() != cells.stride)
          return fail(WireFault::shape, "booking reads every " + std::to_string(b->cost_stride()) +
                                            "th layer, this node every " +
                                            std::to_string(cells.stride) +
                                            "th (the same cost_cells on every node)");
        // A byte a code, every byte a code: only the count can be wrong.
        static_assert(kDemandCodes == 256, "a demand code is a byte on the wire");
        if (demand->size() != cells.count())
          return fail(WireFault::bad_field, "booking demand has " + std::to_string(demand->size()) +
                                                " codes, this node reads " +
                                                std::to_string(cells.count()) + " cost cells");
        out.demand.assign(demand->begin(), demand->end());
        break;
      }
      const auto* counts = b->counts();
      if (counts == nullptr || counts->size() != geometry.cells())
        return fail(WireFault::bad_field,
                    "booking footprint has " + std::to_string(counts ? counts->size() : 0) +
                        " counts, the table needs " + std::to_string(geometry.cells()));
      out.counts.assign(counts->begin(), counts->end());
      for (int16_t c : out.counts)
        if (c < 0) return fail(WireFault::bad_field, "booking footprint has a negative count");
      break;
    }
    case fb::Body::ReleaseMsg:
      out.kind = PeerKind::release;
      out.key = m->body_as_ReleaseMsg()->key();
      break;
    case fb::Body::LoadMsg: {
      const fb::LoadMsg* l = m->body_as_LoadMsg();
      out.kind = PeerKind::load;
      out.load = {l->worker(), l->running(), l->kv_usage(), l->batch_size(), l->step_ms()};
      if (!worker_ok(out.load.worker))
        return fail(WireFault::bad_field, "load report of a negative worker");
      if (!(out.load.kv_usage >= 0.0f && out.load.kv_usage <= 1.0f))
        return fail(WireFault::bad_field, "load report kv_usage outside [0, 1]");
      break;
    }
    case fb::Body::SnapshotMsg: {
      const fb::SnapshotMsg* s = m->body_as_SnapshotMsg();
      out.kind = PeerKind::snapshot;
      const size_t n = s->keys() ? s->keys()->size() : 0;
      if ((s->workers() ? s->workers()->size() : 0) != n)
        return fail(WireFault::bad_field, "snapshot keys and workers differ in length");
      out.held.reserve(n);
      for (size_t i = 0; i < n; ++i) {
        const int32_t w = s->workers()->Get(static_cast<flatbuffers::uoffset_t>(i));
        if (!worker_ok(w)) return fail(WireFault::bad_field, "snapshot names a negative worker");
        out.held.emplace_back(s->keys()->Get(static_cast<flatbuffers::uoffset_t>(i)), w);
      }
      break;
    }
    default:
      return fail(WireFault::bad_field, "PeerMsg without a known body");
  }
  d.ok = true;
  return d;
}

namespace {

template <class Body>
std::vector<uint8_t> finish(flatbuffers::FlatBufferBuilder& fbb, const PeerEncoder& e,
                            uint64_t sequence, fb::Body type, flatbuffers::Offset<Body> body) {
  const auto node = fbb.CreateString(e.node());
  const auto msg = fb::CreatePeerMsg(fbb, kPoolWireVersion, node, e.incarnation(), sequence,
                                     realtime_ns(), type, body.Union(), kPeerFeatures);
  fb::FinishPeerMsgBuffer(fbb, msg);
  return {fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize()};
}

}  // namespace

std::vector<uint8_t> PeerEncoder::book(uint64_t key, int32_t worker, const Geometry& geometry,
                                       const CostCells& cells, std::span<const uint8_t> demand) {
  flatbuffers::FlatBufferBuilder fbb(256 + demand.size());
  const auto d = fbb.CreateVector(demand.data(), demand.size());
  const auto b =
      fb::CreateBookMsg(fbb, key, worker, geometry.layers, geometry.experts, 0, cells.stride, d);
  return finish(fbb, *this, ++m_sequence, fb::Body::BookMsg, b);
}

std::vector<uint8_t> PeerEncoder::book(uint64_t key, int32_t worker, const Geometry& geometry,
                                       std::span<const int16_t> counts) {
  flatbuffers::FlatBufferBuilder fbb(256 + counts.size() * 2);
  const auto c = fbb.CreateVector(counts.data(), counts.size());
  const auto b = fb::CreateBookMsg(fbb, key, worker, geometry.layers, geometry.experts, c);
  return finish(fbb, *this, ++m_sequence, fb::Body::BookMsg, b);
}

std::vector<uint8_t> PeerEncoder::release(uint64_t key) {
  flatbuffers::FlatBufferBuilder fbb(128);
  return finish(fbb, *this, ++m_sequence, fb::Body::ReleaseMsg, fb::CreateReleaseMsg(fbb, key));
}

std::vector<uint8_t> PeerEncoder::load(const PeerLoad& l) {
  flatbuffers::FlatBufferBuilder fbb(128);
  const auto b = fb::CreateLoadMsg(fbb, l.worker, l.running, l.kv_usage, l.batch_size, l.step_ms);
  return finish(fbb, *this, ++m_sequence, fb::Body::LoadMsg, b);
}

std::vector<uint8_t> PeerEncoder::snapshot(std::span<const std::pair<uint64_t, int32_t>> held) {
  flatbuffers::FlatBufferBuilder fbb(snapshot_bytes(held.size()));
  std::vector<uint64_t> keys;
  std::vector<int32_t> workers;
  keys.reserve(held.size());
  workers.reserve(held.size());
  for (const auto& [k, w] : held) {
    keys.push_back(k);
    workers.push_back(w);
  }
  const auto kv = fbb.CreateVector(keys);
  const auto wv = fbb.CreateVector(workers);
  return finish(fbb, *this, ++m_sequence, fb::Body::SnapshotMsg,
                fb::CreateSnapshotMsg(fbb, kv, wv));
}

}  // namespace eldr::pool
