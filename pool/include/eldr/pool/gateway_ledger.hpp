// The requests gateways routed through one node over NATS, and whose each
// one is. A gateway's identity is its pool handle's random id, and each route
// carries a random key of its own; both travel only on subjects a gateway may
// publish to and not read (docs/design.md section 10), so another gateway's
// credentials cannot learn them. Hence:
//  - a route of an id in flight here for another gateway, or for one of the
//    node's own engines, is refused (admit: owned); a gateway routing its own
//    id again retries it;
//  - a complete on the gateways' subject releases a route only with its key
//    (may_complete), a cancel only with its key (cancel), and a gateway's
//    leaving beat or silence only its own routes (beat, expire).
// The ledger only says what to release (HeldRoute: the id and its token);
// the service releases it, and every release, however it came, reaches
// released(), the one place an entry leaves. Bounded by what is in flight,
// the gateways followed and the cancels kept. No NATS, no daemon.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "eldr/pool/recent_map.hpp"

namespace eldr::pool {

// One gateway route held at a node.
struct GatewayRoute {
  uint64_t gateway = 0;     // the owner (its pool handle's id); 0: a gateway before ids
  uint64_t route_key = 0;   // the gateway's key of this route; 0: none
  uint64_t token = 0;       // the completion token it was answered with
  uint64_t router_key = 0;  // the node's key of the request (what released() names)
  // Routed by a RouteRequest: a complete on the gateways' subject must
  // present route_key. Routes of gateways from before are released by
  // their token alone, as they always were.
  bool proven = false;
};

// What the service releases: a request id and the token it holds.
struct HeldRoute {
  std::string request_id;
  uint64_t token = 0;
};

class GatewayLedger {
 public:
  explicit GatewayLedger(size_t max_gateways = size_t{1} << 16,
                         size_t max_cancelled = size_t{1} << 12);

  enum class Admission : uint8_t {
    ok,         // route it (a new id, or the gateway's own again: a retry)
    cancelled,  // its gateway cancelled it before it came (the cancel is used up)
    owned,      // the id is in flight here for another gateway or an engine
  };
  // Gateway `gateway`'s route of `request_id` with `route_key`. in_flight:
  // the node holds the id (the service's request map), maybe for an engine.
  Admission admit(std::string_view request_id, uint64_t gateway, uint64_t route_key,
                  bool in_flight);
  // The route was booked: kept until released(route.router_key). Its gateway
  // counts as heard (up to max_gateways followed; past that, a new gateway's
  // routes stay until completed).
  void add(std::string_view request_id, const GatewayRoute& route, uint64_t now_ns);
  // The request left the node's router, however it ended.
  void released(uint64_t router_key);
  const GatewayRoute* find(std::string_view request_id) const;

  // A cancel: the route to release when `request_id` is held here with
  // `route_key`. Otherwise the key is kept (the newest max_cancelled), so
  // that its route is refused if it comes after its cancel.
  std::optional<HeldRoute> cancel(std::string_view request_id, uint64_t route_key);
  // Whether a complete on the gateways' subject, presenting `route_key`, may
  // release `request_id` (its token is the service's to check): a proven
  // route only with its key.
  bool may_complete(std::string_view request_id, uint64_t route_key) const;

  // A beat of `gateway`: alive; leaving: the routes to release now (it is
  // forgotten). Beats of gateways without routes here are ignored.
  std::vector<HeldRoute> beat(uint64_t gateway, bool leaving, uint64_t now_ns);
  // The gateways not heard for timeout_ns, each with the routes to release
  // (they are forgotten).
  struct Silent {
    uint64_t gateway = 0;
    std::vector<HeldRoute> routes;
  };
  std::vector<Silent> expire(uint64_t now_ns, uint64_t timeout_ns);
  // Every gateway counts as heard now (the node itself was away from NATS:
  // their beats went unheard).
  void heard_all(uint64_t now_ns);

  size_t held() const noexcept { return m_routes.size(); }
  size_t gateways() const noexcept { return m_heard.size(); }

 private:
  std::vector<HeldRoute> routes_of(uint64_t gateway) const;

  std::unordered_map<std::string, GatewayRoute> m_routes;  // by request id
  std::unordered_map<uint64_t, std::string> m_ids;         // request id by router key
  std::unordered_map<uint64_t, uint64_t> m_heard;          // gateway -> last heard (ns)
  RecentMap<uint64_t, bool> m_cancelled;                   // keys cancelled before their route
  size_t m_max_gateways;
};

}  // namespace eldr::pool
