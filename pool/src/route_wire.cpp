#include "eldr/pool/route_wire.hpp"

#include <cstdio>
#include <cstring>

#include "eldr/footprint.hpp"
#include "eldr/pool/peer_wire.hpp"
#include "eldr/route_msg_generated.h"

namespace eldr::pool {

namespace {

std::string str_or_empty(const flatbuffers::String* s) { return s ? s->str() : std::string(); }

// The root table T of `bytes` (a RouteComplete, RouteCancel or GatewayBeat,
// which carry no file identifier) once verified, read from `aligned`, a
// copy this call makes; nullptr when the bytes are not one.
template <class T>
const T* verified_root(std::span<const uint8_t> bytes, std::vector<uint64_t>& aligned) {
  aligned = aligned_copy(bytes);
  const auto* data = reinterpret_cast<const uint8_t*>(aligned.data());
  flatbuffers::Verifier verifier(data, bytes.size());
  return bytes.size() >= 8 && verifier.VerifyBuffer<T>(nullptr) ? flatbuffers::GetRoot<T>(data)
                                                                : nullptr;
}

std::vector<uint8_t> finished(flatbuffers::FlatBufferBuilder& fbb) {
  return {fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize()};
}

}  // namespace

std::vector<uint8_t> encode_route_request(std::string_view request_id, uint64_t route_key,
                                          uint64_t gateway, uint32_t layers, uint32_t experts,
                                          std::span<const int16_t> counts) {
  flatbuffers::FlatBufferBuilder fbb(counts.size_bytes() + 128);
  const auto c = fbb.CreateVector(counts.data(), counts.size());
  const auto id = fbb.CreateString(request_id.data(), request_id.size());
  fb::RouteRequestBuilder b(fbb);
  b.add_version(kRouteRequestVersion);
  b.add_request_id(id);
  b.add_route_key(route_key);
  b.add_gateway(gateway);
  b.add_kind(fb::RouteKind::footprint);
  b.add_layers(layers);
  b.add_experts(experts);
  b.add_counts(c);
  fbb.Finish(b.Finish(), kRouteRequestIdentifier);
  return finished(fbb);
}

std::vector<uint8_t> encode_route_request(std::string_view request_id, uint64_t route_key,
                                          uint64_t gateway, const Prompt& prompt) {
  const bool tokens = prompt.kind == PromptKind::tokens;
  flatbuffers::FlatBufferBuilder fbb(tokens ? prompt.tokens.size_bytes() + 128
                                            : prompt.text.size() + 128);
  flatbuffers::Offset<flatbuffers::Vector<uint32_t>> ids;
  flatbuffers::Offset<flatbuffers::Vector<uint8_t>> text;
  if (tokens)
    ids = fbb.CreateVector(prompt.tokens.data(), prompt.tokens.size());
  else
    text =
        fbb.CreateVector(reinterpret_cast<const uint8_t*>(prompt.text.data()), prompt.text.size());
  const auto id = fbb.CreateString(request_id.data(), request_id.size());
  fb::RouteRequestBuilder b(fbb);
  b.add_version(kRouteRequestVersion);
  b.add_request_id(id);
  b.add_route_key(route_key);
  b.add_gateway(gateway);
  b.add_kind(tokens ? fb::RouteKind::tokens : fb::RouteKind::text);
  if (tokens)
    b.add_tokens(ids);
  else
    b.add_text(text);
  fbb.Finish(b.Finish(), kRouteRequestIdentifier);
  return finished(fbb);
}

bool is_route_request(std::span<const uint8_t> bytes) noexcept {
  return bytes.size() >= 8 && std::memcmp(bytes.data() + 4, kRouteRequestIdentifier, 4) == 0;
}

Result<RouteRequest> decode_route_request(std::span<const uint8_t> bytes) {
  const std::vector<uint64_t> aligned = aligned_copy(bytes);
  const auto* data = reinterpret_cast<const uint8_t*>(aligned.data());
  flatbuffers::Verifier::Options opts;
  opts.max_depth = 4;
  opts.max_tables = 4;
  flatbuffers::Verifier verifier(data, bytes.size(), opts);
  if (!is_route_request(bytes) || !verifier.VerifyBuffer<fb::RouteRequest>(kRouteRequestIdentifier))
    return Status{Errc::corrupt, "not a RouteRequest"};
  const fb::RouteRequest* m = flatbuffers::GetRoot<fb::RouteRequest>(data);
  if (m->version() != kRouteRequestVersion)
    return Status{Errc::unsupported, "a RouteRequest of version " + std::to_string(m->version()) +
                                         "; this node reads version " +
                                         std::to_string(kRouteRequestVersion)};
  if (m->request_id() == nullptr || m->route_key() == 0 || m->gateway() == 0)
    return Status{Errc::invalid_argument,
                  "a RouteRequest needs a request id, a route key and a gateway id"};
  RouteRequest r;
  r.request_id = m->request_id()->str();
  r.route_key = m->route_key();
  r.gateway = m->gateway();
  const fb::RouteKind kind = m->kind();
  if (kind == fb::RouteKind::footprint) {
    r.kind = RouteKind::footprint;
    r.layers = m->layers();
    r.experts = m->experts();
    if (m->counts() == nullptr || m->tokens() != nullptr || m->text() != nullptr)
      return Status{Errc::invalid_argument, "a footprint's RouteRequest needs counts alone"};
    r.counts.assign(m->counts()->begin(), m->counts()->end());
    ELDR_TRY(validate_footprint(Geometry{r.layers, r.experts, 0}, r.counts));
    return r;
  }
  if (kind == fb::RouteKind::tokens) {
    r.kind = RouteKind::tokens;
    if (m->tokens() == nullptr || m->text() != nullptr || m->counts() != nullptr)
      return Status{Errc::invalid_argument, "a token prompt's RouteRequest needs tokens alone"};
    if (m->tokens()->size() > kMaxPromptTokens)
      return Status{Errc::invalid_argument,
                    "the prompt has " + std::to_string(m->tokens()->size()) +
                        " tokens, more than " + std::to_string(kMaxPromptTokens)};
    r.tokens.assign(m->tokens()->begin(), m->tokens()->end());
    return r;
  }
  if (kind == fb::RouteKind::text) {
    r.kind = RouteKind::text;
    if (m->text() == nullptr || m->tokens() != nullptr || m->counts() != nullptr)
      return Status{Errc::invalid_argument, "a text prompt's RouteRequest needs text alone"};
    if (m->text()->size() > kMaxPromptBytes)
      return Status{Errc::invalid_argument, "the prompt has " + std::to_string(m->text()->size()) +
                                                " bytes, more than " +
                                                std::to_string(kMaxPromptBytes)};
    r.text.assign(reinterpret_cast<const char*>(m->text()->data()), m->text()->size());
    return r;
  }
  return Status{Errc::invalid_argument,
                "a RouteRequest of unknown kind " + std::to_string(static_cast<int>(kind))};
}

std::vector<uint8_t> encode_route_reply(const RouteReply& r) {
  flatbuffers::FlatBufferBuilder fbb(256);
  const auto message = fbb.CreateString(r.message);
  const auto id = fbb.CreateString(r.request_id);
  const auto node = fbb.CreateString(r.node);
  fb::FinishRouteReplyBuffer(
      fbb, fb::CreateRouteReply(fbb, r.status, message, id, r.worker, r.similarity, r.band_size,
                                r.policy, r.table_epoch, r.completion_token, node, r.confidence,
                                r.acks_completes));
  return {fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize()};
}

Result<RouteReply> decode_route_reply(std::span<const uint8_t> bytes) {
  const std::vector<uint64_t> aligned = aligned_copy(bytes);
  const auto* data = reinterpret_cast<const uint8_t*>(aligned.data());
  flatbuffers::Verifier verifier(data, bytes.size());
  if (bytes.size() < 8 || !fb::RouteReplyBufferHasIdentifier(data) ||
      !fb::VerifyRouteReplyBuffer(verifier))
    return Status{Errc::corrupt, "not a RouteReply"};
  const fb::RouteReply* m = fb::GetRouteReply(data);
  RouteReply r;
  r.status = m->status();
  r.message = str_or_empty(m->message());
  r.request_id = str_or_empty(m->request_id());
  r.worker = m->worker();
  r.similarity = m->similarity();
  r.band_size = m->band_size();
  r.policy = m->policy();
  r.table_epoch = m->table_epoch();
  r.completion_token = m->completion_token();
  r.node = str_or_empty(m->node());
  r.confidence = m->confidence();
  r.acks_completes = m->acks_completes();
  return r;
}

std::vector<uint8_t> encode_route_complete(std::string_view request_id, uint64_t token,
                                           uint64_t route_key) {
  flatbuffers::FlatBufferBuilder fbb(128);
  const auto id = fbb.CreateString(request_id.data(), request_id.size());
  fbb.Finish(fb::CreateRouteComplete(fbb, id, token, route_key));
  return finished(fbb);
}

Result<RouteComplete> decode_route_complete(std::span<const uint8_t> bytes) {
  std::vector<uint64_t> aligned;
  const auto* c = verified_root<fb::RouteComplete>(bytes, aligned);
  if (c == nullptr || c->request_id() == nullptr || c->completion_token() == 0)
    return Status{Errc::corrupt, "not a RouteComplete with a request id and a token"};
  return RouteComplete{c->request_id()->str(), c->completion_token(), c->route_key()};
}

std::string format_key(uint64_t key) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(key));
  return text;
}

uint64_t parse_key(std::string_view text) noexcept {
  if (text.empty() || text.size() > 16) return 0;
  uint64_t key = 0;
  for (const char c : text) {
    const int digit = c >= '0' && c <= '9'   ? c - '0'
                      : c >= 'a' && c <= 'f' ? c - 'a' + 10
                      : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                             : -1;
    if (digit < 0) return 0;
    key = key << 4 | static_cast<uint64_t>(digit);
  }
  return key;
}

std::vector<uint8_t> encode_route_cancel(std::string_view request_id, uint64_t route_key) {
  flatbuffers::FlatBufferBuilder fbb(128);
  const auto id = fbb.CreateString(request_id.data(), request_id.size());
  fbb.Finish(fb::CreateRouteCancel(fbb, id, route_key));
  return {fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize()};
}

Result<RouteCancel> decode_route_cancel(std::span<const uint8_t> bytes) {
  std::vector<uint64_t> aligned;
  const auto* c = verified_root<fb::RouteCancel>(bytes, aligned);
  if (c == nullptr || c->request_id() == nullptr || c->route_key() == 0)
    return Status{Errc::corrupt, "not a RouteCancel with a request id and a key"};
  return RouteCancel{c->request_id()->str(), c->route_key()};
}

std::vector<uint8_t> encode_gateway_beat(const GatewayBeat& beat) {
  flatbuffers::FlatBufferBuilder fbb(64);
  fbb.Finish(fb::CreateGatewayBeat(fbb, beat.gateway, beat.leaving));
  return {fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize()};
}

Result<GatewayBeat> decode_gateway_beat(std::span<const uint8_t> bytes) {
  std::vector<uint64_t> aligned;
  const auto* b = verified_root<fb::GatewayBeat>(bytes, aligned);
  if (b == nullptr || b->gateway() == 0)
    return Status{Errc::corrupt, "not a GatewayBeat with a gateway id"};
  return GatewayBeat{b->gateway(), b->leaving()};
}

}  // namespace eldr::pool
