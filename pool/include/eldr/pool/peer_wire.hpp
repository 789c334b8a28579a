// The messages eldrd nodes of one pool exchange (schema/peer_msg.fbs):
// subjects, names, encoding and a decoder that trusts nothing. No NATS here:
// this is bytes in, checked values out, so it is tested and fuzzed alone.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "eldr/demand_code.hpp"
#include "eldr/geometry.hpp"
#include "eldr/status.hpp"

namespace eldr::pool {

inline constexpr uint32_t kPoolWireVersion = 1;
inline constexpr size_t kMaxPoolName = 64;

// Node and pool names become NATS subject tokens: 1..64 of [A-Za-z0-9_-].
Status validate_pool_name(std::string_view what, std::string_view name);
// eldr.<pool>.node.<node>, and the wildcard every node subscribes to.
std::string node_subject(std::string_view pool, std::string_view node);
std::string pool_nodes_subject(std::string_view pool);
// Route over NATS: requests to eldr.<pool>.route, a gateway's completes to
// eldr.<pool>.complete.<node> (schema/route_msg.fbs).
std::string route_subject(std::string_view pool);
std::string complete_subject(std::string_view pool, std::string_view node);
// eldr.<pool>.forward.<node>: a RouteComplete one node forwards to the node
// its token names: an engine completes through its own node, whatever node
// decided. Only nodes may publish here, so the token alone releases (a
// gateway's complete on complete.<node> must also present the route's key).
std::string forward_subject(std::string_view pool, std::string_view node);
// eldr.<pool>.complete: a forward for whichever node routed the request
// (every node listens), when its token names no single peer.
std::string complete_any_subject(std::string_view pool);
// eldr.<pool>.cancel: a gateway's RouteCancel of a route it never heard the
// answer to (every node listens; the one that routed it releases it).
std::string cancel_subject(std::string_view pool);
// eldr.<pool>.gateway: the pool handles' beats (every node listens).
std::string gateway_subject(std::string_view pool);
// eldr.<pool>.ack.<node>: the reply subject of the completes a node forwards
// to the node its token names; that node answers there with the token (8 bytes),
// and the forwarder sends again until it does (a complete lost with a
// server would hold the request in flight at its node for good).
std::string ack_subject(std::string_view pool, std::string_view node);
// eldr.<pool>.sample.<node>: full bookings sent to the node that holds the
// pool's refit lease, a few a second from each node, so that its refit
// window holds the pool's traffic while bookings are compact.
std::string sample_subject(std::string_view pool, std::string_view node);

// Completion tokens of a pool node name the node (so that a complete that
// reaches another node goes to this one alone, not to the whole pool): the
// top byte kTokenMagic, then the node's 24-bit tag, then 32 bits of the
// node's keyed hash. Tokens without the magic (nodes before it, a node
// alone) are sent to every node.
inline constexpr uint64_t kTokenMagic = 0xe7;
uint32_t node_tag(std::string_view node) noexcept;  // 24 bits
uint64_t tagged_token(uint32_t tag, uint64_t hash) noexcept;
// The tag a token carries, if it carries one.
std::optional<uint32_t> token_tag(uint64_t token) noexcept;

enum class PeerKind : uint8_t { book = 0, release = 1, load = 2, snapshot = 3 };
const char* peer_kind_name(PeerKind kind) noexcept;

// Why a message was dropped (a metric label each).
enum class WireFault : uint8_t {
  not_a_message = 0,  // not a verifiable PeerMsg
  version = 1,        // another kPoolWireVersion
  bad_field = 2,      // a field out of its range (name, key, worker, counts, arrays)
  shape = 3,          // a footprint of another geometry (or cost cells) than this node's
  subject = 4,        // the node named inside is not the one of the subject
};
inline constexpr size_t kWireFaults = 5;
const char* wire_fault_name(WireFault fault) noexcept;

// PeerMsg.features: what a node does beyond its wire version.
inline constexpr uint32_t kFeatureForwardSubject = 1;  // reads eldr.<pool>.forward.<node>
inline constexpr uint32_t kPeerFeatures = kFeatureForwardSubject;  // this build's

struct PeerHeader {
  std::string node;
  uint64_t incarnation = 0;
  uint64_t sequence = 0;
  uint64_t sent_ns = 0;   // CLOCK_REALTIME
  uint32_t features = 0;  // kFeature* bits; 0 from nodes before them
};

struct PeerLoad {
  int32_t worker = -1;
  uint32_t running = 0;
  float kv_usage = 0.0f;
  uint32_t batch_size = 0;
  float step_ms = 0.0f;
};

struct PeerMessage {
  PeerHeader head;
  PeerKind kind = PeerKind::book;
  uint64_t key = 0;                                // book, release
  int32_t worker = -1;                             // book
  std::vector<uint8_t> demand;                     // book, compact: a code per cost cell
  std::vector<int16_t> counts;                     // book, full: [L][E] of the geometry
  PeerLoad load;                                   // load
  std::vector<std::pair<uint64_t, int32_t>> held;  // snapshot: key, worker
};

struct DecodeError {
  WireFault fault;
  std::string message;
};

// Decodes and checks one message. `geometry` and `cells`: the table's and the
// router's (a booking must match them); `subject_node`: the node token of the
// subject it came on (empty: not checked).
struct Decoded {
  bool ok = false;
  PeerMessage message;
  DecodeError error{WireFault::not_a_message, {}};
};
Decoded decode_peer_message(std::span<const uint8_t> bytes, const Geometry& geometry,
                            const CostCells& cells, std::string_view subject_node);

// Encodes messages of one sender: the header fields are its own, the
// sequence counts up from 1.
class PeerEncoder {
 public:
  PeerEncoder(std::string node, uint64_t incarnation) noexcept
      : m_node(std::move(node)), m_incarnation(incarnation) {}
  // A compact booking: the request's demand codes (Router::demand_codes).
  std::vector<uint8_t> book(uint64_t key, int32_t worker, const Geometry& geometry,
                            const CostCells& cells, std::span<const uint8_t> demand);
  // A full one: its footprint (what nodes before compact bookings read).
  std::vector<uint8_t> book(uint64_t key, int32_t worker, const Geometry& geometry,
                            std::span<const int16_t> counts);
  std::vector<uint8_t> release(uint64_t key);
  std::vector<uint8_t> load(const PeerLoad& load);
  std::vector<uint8_t> snapshot(std::span<const std::pair<uint64_t, int32_t>> held);
  uint64_t sequence() const noexcept { return m_sequence; }  // the last one sent
  const std::string& node() const noexcept { return m_node; }
  uint64_t incarnation() const noexcept { return m_incarnation; }
  // Bytes of a snapshot of n requests (what the server's max_payload must hold).
  static size_t snapshot_bytes(size_t n) noexcept { return 1024 + n * 12; }

 private:
  std::string m_node;
  uint64_t m_incarnation;
  uint64_t m_sequence = 0;
};

uint64_t realtime_ns() noexcept;

// A copy of `bytes` whose start is 8-aligned: the FlatBuffers verifier checks
// alignment relative to the buffer, and a client library's buffer need not be.
std::vector<uint64_t> aligned_copy(std::span<const uint8_t> bytes);

}  // namespace eldr::pool
