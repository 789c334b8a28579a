// Routing over NATS (schema/route_msg.fbs): the request is the ring's
// FootprintMsg or PromptMsg (shm), the reply a RouteReply, and the complete that goes to
// the node that routed it a RouteComplete; a route whose answer the gateway
// never heard is withdrawn by a RouteCancel to every node. The daemon encodes
// replies and decodes completes, cancels and gateway beats; a pool handle
// (capi) does the reverse. Bytes in, checked values out: no NATS here.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "eldr/status.hpp"

namespace eldr::pool {

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
};

std::vector<uint8_t> encode_route_complete(std::string_view request_id, uint64_t token);
// Verified; corrupt when not a RouteComplete or without a request id or token.
Result<RouteComplete> decode_route_complete(std::span<const uint8_t> bytes);

// The NATS headers of a gateway's route request, each a 64-bit value in 16
// hex digits: a random key of the gateway's own for this route, which its
// RouteCancel presents, and the id of the pool handle that sent it, which
// beats (GatewayBeat) while it lives. A request without them (a client from
// before) can be neither cancelled nor released with its gateway.
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
