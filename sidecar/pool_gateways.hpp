// The gateway protocol of one node of a pool (docs/design.md section 10):
// gateways without an eldrd of their own route through any node over NATS
// (eldr.<pool>.route), complete on eldr.<pool>.complete.<node>, cancel the
// routes they never heard the answer to (eldr.<pool>.cancel) and beat while
// they live (eldr.<pool>.gateway). Every request here belongs to the gateway
// that routed it (pool::GatewayLedger), and a node answers only on reply
// subjects under the inbox prefixes it accepts (pool::ReplyPolicy): no
// gateway can make it publish elsewhere, take over another's request or
// release one. Consumer thread only; answers go out through `publish`, so
// that the fuzzer and the tests drive it without NATS.
#pragma once

#include <cstdint>
#include <string>

#include "config.hpp"
#include "eldr/pool/gateway_ledger.hpp"
#include "eldr/pool/inbox.hpp"
#include "eldr/pool/nats_link.hpp"
#include "eldr/pool/recent_map.hpp"
#include "service.hpp"

namespace eldr::sidecar {

struct GatewayCounters {
  uint64_t routed = 0;             // routes booked here for gateways
  uint64_t cancelled = 0;          // released by their gateway's cancel
  uint64_t refused_cancelled = 0;  // refused: cancelled before they came
  uint64_t refused_owned = 0;      // refused: the id is another's in flight here
  uint64_t orphaned = 0;           // released: their gateway went silent or left
  uint64_t completes = 0;          // gateway completes that released a request
  uint64_t completes_refused = 0;  // gateway completes without the route's key
  uint64_t replies_refused = 0;    // requests whose reply subject this node will not answer on
  uint64_t malformed = 0;          // requests, completes, cancels, beats that do not decode
  uint64_t held = 0;               // gateway routes in flight here
  uint64_t gateways = 0;           // gateways followed
};

class PoolGateways {
 public:
  // reply_policy: the inbox prefixes this node answers under.
  PoolGateways(const PoolConfig& config, pool::ReplyPolicy reply_policy, std::string node,
               Service& service, pool::PublishFn publish);

  // eldr.<pool>.route: a RouteRequest (or the ring record of a gateway from
  // before it), routed here unless refused; answered with a RouteReply.
  void route(const pool::InboxMessage& in);
  // eldr.<pool>.complete.<node>: a gateway's RouteComplete (and, during a
  // rolling upgrade, a node's forward from before the forward subject).
  void complete(const pool::InboxMessage& in);
  // eldr.<pool>.cancel: a RouteCancel; released when routed here with its key.
  void cancel(const pool::InboxMessage& in);
  // eldr.<pool>.gateway: a GatewayBeat.
  void beat(const pool::InboxMessage& in);
  // The service released a request (the PoolPublisher's released()).
  void released(uint64_t router_key) { m_ledger.released(router_key); }
  // Every maintenance tick while connected: releases the routes of gateways
  // silent for gateway_timeout_ms. reconnected: this node was away from NATS
  // (their beats went unheard): every gateway gets a timeout from now.
  void maintain(uint64_t now_ns, bool reconnected);

  GatewayCounters counters() const;

 private:
  // Refuses a request whose reply subject is not one this node answers on:
  // counted, logged once per sender (its gateway id when it names one).
  void refuse_reply(std::string_view what, std::string_view reply, uint64_t sender);
  void answer(const pool::InboxMessage& in, std::span<const uint8_t> bytes);
  void release(const std::vector<pool::HeldRoute>& routes, uint64_t& counter);

  const PoolConfig& m_config;
  pool::ReplyPolicy m_replies;
  std::string m_node;
  Service& m_service;
  pool::PublishFn m_publish;
  pool::GatewayLedger m_ledger;
  GatewayCounters m_counts;
  pool::RecentMap<uint64_t, bool> m_logged_senders{1024};
  uint64_t m_refusals_logged = 0;
};

}  // namespace eldr::sidecar
