// Routing over NATS (schema/route_msg.fbs): the request is a RouteRequest,
// the reply a RouteReply, and the complete that goes to the node that routed
// it a RouteComplete; a route whose answer the gateway never heard is
// withdrawn by a RouteCancel to every node. The daemon decodes requests,
// completes, cancels and gateway beats and encodes replies; a pool handle
// (capi) does the reverse. Bytes in, checked values out: no NATS here.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "eldr/predictor.hpp"  // Prompt
#include "eldr/status.hpp"

namespace eldr::pool {

inline constexpr uint32_t kRouteRequestVersion = 1;  // the version this build reads and writes
inline constexpr const char* kRouteRequestIdentifier = "ELRQ";

// What a route request asks to route (the schema's RouteKind).
enum class RouteKind : uint8_t { footprint = 0, tokens = 1, text = 2 };

// A gateway's route request: a footprint or a whole prompt, with the
// gateway's identity (its handle's id) and its key of this route.
struct RouteRequest {
  std::string request_id;
  uint64_t route_key = 0;  // nonzero
  uint64_t gateway = 0;    // nonzero
  RouteKind kind = RouteKind::footprint;
  uint32_t layers = 0, experts = 0;  // footprint: counts [layers][experts]
  std::vector<int16_t> counts;
  std::vector<uint32_t> tokens;  // tokens: the prompt's ids
  std::string text;              // text: the prompt's bytes
  // tokens or text: a view of the prompt (valid while this request is).
  Prompt prompt() const {
    return kind == RouteKind::tokens ? Prompt::of_tokens(tokens) : Prompt::of_text(text);
  }
};

// A footprint's request, or a prompt's (the prompt is not checked here:
// the node's predictor does, and its limits are the caller's).
std::vector<uint8_t> encode_route_request(std::string_view request_id, uint64_t route_key,
                                          uint64_t gateway, uint32_t layers, uint32_t experts,
                                          std::span<const int16_t> counts);
std::vector<uint8_t> encode_route_request(std::string_view request_id, uint64_t route_key,
                                          uint64_t gateway, const Prompt& prompt);
// Whether `bytes` say they are a RouteRequest (its identifier), before
// decoding: a node tells it from the ring records of older gateways.
bool is_route_request(std::span<const uint8_t> bytes) noexcept;
// Verified (any alignment), then each field: the version (unsupported when
// another), a request id, a key and a gateway, one kind with its fields (a
// footprint's shape and counts >= 0: validate_footprint; a prompt's length
// within kMaxPromptTokens / kMaxPromptBytes). Corrupt when not a RouteRequest.
Result<RouteRequest> decode_route_request(std::span<const uint8_t> bytes);

struct RouteReply {
  int32_t status = 0;   // 0, or the Errc of the rejection
  std::string message;  // why, when status != 0
  std::string request_id;
  int32_t worker = -1;
  float similarity = 0.0f;
  uint32_t band_size = 0;
  uint32_t policy = 0;
  uint64_t table_epoch = 0;
  uint64_t completion_token = 0;  // what the RouteComplete presents
  std::string node;               // the node that routed it
  float confidence = 1.0f;        // routed from a prompt: how sure; 1 from older nodes
  bool acks_completes = false;    // the node answers a complete sent as a request
};

std::vector<uint8_t> encode_route_reply(const RouteReply& reply);
// Verified (any alignment); corrupt when the bytes are not a RouteReply. The
// fields are returned as sent: the caller checks them against its request.
Result<RouteReply> decode_route_reply(std::span<const uint8_t> bytes);

struct RouteComplete {
  std::string request_id;
  uint64_t completion_token = 0;
  uint64_t route_key = 0;  // a gateway's proof that the route is its own; 0: none
};

std::vector<uint8_t> encode_route_complete(std::string_view request_id, uint64_t token,
                                           uint64_t route_key = 0);
// Verified; corrupt when not a RouteComplete or without a request id or token.
Result<RouteComplete> decode_route_complete(std::span<const uint8_t> bytes);

// The NATS headers of a route request from a gateway before RouteRequest
// (the ring's record), each a 64-bit value in 16 hex digits: the route's key
// and the pool handle's id, which RouteRequest now carries itself. A request
// without them can be neither cancelled nor released with its gateway.
inline constexpr const char* kRouteKeyHeader = "Eldr-Route-Key";
inline constexpr const char* kGatewayHeader = "Eldr-Gateway";
std::string format_key(uint64_t key);
// The value, or 0 when `text` is not 1..16 hex digits or is zero.
uint64_t parse_key(std::string_view text) noexcept;

struct RouteCancel {
  std::string request_id;
  uint64_t route_key = 0;
};

std::vector<uint8_t> encode_route_cancel(std::string_view request_id, uint64_t route_key);
// Verified; corrupt when not a RouteCancel or without a request id or key.
Result<RouteCancel> decode_route_cancel(std::span<const uint8_t> bytes);

struct GatewayBeat {
  uint64_t gateway = 0;
  bool leaving = false;
};

std::vector<uint8_t> encode_gateway_beat(const GatewayBeat& beat);
// Verified; corrupt when not a GatewayBeat or without a gateway id.
Result<GatewayBeat> decode_gateway_beat(std::span<const uint8_t> bytes);

}  // namespace eldr::pool
