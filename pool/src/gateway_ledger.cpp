#include "eldr/pool/gateway_ledger.hpp"

namespace eldr::pool {

GatewayLedger::GatewayLedger(size_t max_gateways, size_t max_cancelled)
    : m_cancelled(max_cancelled), m_max_gateways(max_gateways) {}

GatewayLedger::Admission GatewayLedger::admit(std::string_view request_id, uint64_t gateway,
                                              uint64_t route_key, bool in_flight) {
  if (route_key != 0 && m_cancelled.take(route_key)) return Admission::cancelled;
  if (!in_flight) return Admission::ok;
  // Held: a retry only by the gateway it belongs to. Not in the ledger, it
  // is an engine's (every route over NATS is in it).
  const auto it = m_routes.find(std::string(request_id));
  return it != m_routes.end() && it->second.gateway == gateway ? Admission::ok : Admission::owned;
}

void GatewayLedger::add(std::string_view request_id, const GatewayRoute& route, uint64_t now_ns) {
  auto [it, fresh] = m_routes.try_emplace(std::string(request_id), route);
  if (!fresh) {  // a retry the service did not release first: its old key goes
    m_ids.erase(it->second.router_key);
    it->second = route;
  }
  m_ids.insert_or_assign(route.router_key, it->first);
  if (route.gateway != 0 && (m_heard.size() < m_max_gateways || m_heard.contains(route.gateway)))
    m_heard.insert_or_assign(route.gateway, now_ns);
}

void GatewayLedger::released(uint64_t router_key) {
  const auto it = m_ids.find(router_key);
  if (it == m_ids.end()) return;
  m_routes.erase(it->second);
  m_ids.erase(it);
}

const GatewayRoute* GatewayLedger::find(std::string_view request_id) const {
  const auto it = m_routes.find(std::string(request_id));
  return it == m_routes.end() ? nullptr : &it->second;
}

std::optional<HeldRoute> GatewayLedger::cancel(std::string_view request_id, uint64_t route_key) {
  if (route_key == 0) return std::nullopt;
  if (const GatewayRoute* r = find(request_id); r != nullptr && r->route_key == route_key)
    return HeldRoute{std::string(request_id), r->token};
  m_cancelled.put(route_key, true);
  return std::nullopt;
}

bool GatewayLedger::may_complete(std::string_view request_id, uint64_t route_key) const {
  const GatewayRoute* r = find(request_id);
  return r == nullptr || !r->proven || r->route_key == route_key;
}

std::vector<HeldRoute> GatewayLedger::routes_of(uint64_t gateway) const {
  std::vector<HeldRoute> out;
  for (const auto& [id, r] : m_routes)
    if (r.gateway == gateway) out.push_back({id, r.token});
  return out;
}

std::vector<HeldRoute> GatewayLedger::beat(uint64_t gateway, bool leaving, uint64_t now_ns) {
  const auto it = m_heard.find(gateway);
  if (it == m_heard.end()) return {};
  if (!leaving) {
    it->second = now_ns;
    return {};
  }
  m_heard.erase(it);
  return routes_of(gateway);
}

std::vector<GatewayLedger::Silent> GatewayLedger::expire(uint64_t now_ns, uint64_t timeout_ns) {
  std::vector<Silent> out;
  for (const auto& [gateway, heard_ns] : m_heard)
    if (now_ns > heard_ns + timeout_ns) out.push_back({gateway, {}});
  for (Silent& s : out) {
    m_heard.erase(s.gateway);
    s.routes = routes_of(s.gateway);
  }
  return out;
}

void GatewayLedger::heard_all(uint64_t now_ns) {
  for (auto& [gateway, heard_ns] : m_heard) heard_ns = now_ns;
}

}  // namespace eldr::pool
