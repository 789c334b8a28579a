// The gateway routes a node holds and whose each is: admission, proofs,
// cancels, beats and silence, and one release rule, against a model.
#include "eldr/pool/gateway_ledger.hpp"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>

namespace eldr::pool {
namespace {

constexpr uint64_t kS = 1'000'000'000;

TEST(GatewayLedger, an_id_is_its_gateways_until_released) {
  GatewayLedger l;
  EXPECT_EQ(l.admit("r", 7, 70, false), GatewayLedger::Admission::ok);
  l.add("r", {7, 70, 700, 1, true}, 0);
  EXPECT_EQ(l.admit("r", 8, 80, true), GatewayLedger::Admission::owned);
  EXPECT_EQ(l.admit("r", 0, 0, true), GatewayLedger::Admission::owned);  // a keyless old gateway
  EXPECT_EQ(l.admit("r", 7, 71, true), GatewayLedger::Admission::ok);    // its own: a retry
  // Held but not in the ledger: an engine's.
  EXPECT_EQ(l.admit("e", 7, 72, true), GatewayLedger::Admission::owned);
  l.released(1);
  EXPECT_EQ(l.find("r"), nullptr);
  EXPECT_EQ(l.admit("r", 8, 81, false), GatewayLedger::Admission::ok);
}

TEST(GatewayLedger, a_proven_route_completes_with_its_key_an_old_one_with_its_token) {
  GatewayLedger l;
  l.add("new", {7, 70, 700, 1, true}, 0);
  l.add("old", {9, 90, 900, 2, false}, 0);
  EXPECT_FALSE(l.may_complete("new", 0));
  EXPECT_FALSE(l.may_complete("new", 71));
  EXPECT_TRUE(l.may_complete("new", 70));
  EXPECT_TRUE(l.may_complete("old", 0));
  EXPECT_TRUE(l.may_complete("unknown", 0));  // not a gateway's: the token decides
}

TEST(GatewayLedger, a_cancel_needs_the_key_and_one_that_comes_first_refuses_its_route) {
  GatewayLedger l;
  l.add("r", {7, 70, 700, 1, true}, 0);
  EXPECT_FALSE(l.cancel("r", 71));
  EXPECT_FALSE(l.cancel("x", 70));
  const auto held = l.cancel("r", 70);
  ASSERT_TRUE(held);
  EXPECT_EQ(held->request_id, "r");
  EXPECT_EQ(held->token, 700u);
  // Its route had not come yet: refused when it does, once.
  EXPECT_FALSE(l.cancel("s", 80));
  EXPECT_EQ(l.admit("s", 8, 80, false), GatewayLedger::Admission::cancelled);
  EXPECT_EQ(l.admit("s", 8, 80, false), GatewayLedger::Admission::ok);
}

TEST(GatewayLedger, a_gateway_that_leaves_or_falls_silent_takes_only_its_own_routes) {
  GatewayLedger l;
  l.add("a1", {7, 1, 11, 1, true}, 0);
  l.add("a2", {7, 2, 12, 2, true}, 0);
  l.add("b1", {8, 3, 13, 3, true}, 0);
  l.add("k1", {0, 0, 14, 4, false}, 0);  // no gateway id: never followed
  EXPECT_EQ(l.gateways(), 2u);
  EXPECT_TRUE(l.beat(9, true, kS).empty());  // not followed here
  const auto left = l.beat(8, true, kS);
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].request_id, "b1");
  EXPECT_EQ(l.gateways(), 1u);
  EXPECT_TRUE(l.beat(7, false, 5 * kS).empty());
  EXPECT_TRUE(l.expire(14 * kS, 10 * kS).empty());
  l.heard_all(20 * kS);  // the node was away: a timeout from now
  EXPECT_TRUE(l.expire(29 * kS, 10 * kS).empty());
  const auto silent = l.expire(31 * kS, 10 * kS);
  ASSERT_EQ(silent.size(), 1u);
  EXPECT_EQ(silent[0].gateway, 7u);
  EXPECT_EQ(silent[0].routes.size(), 2u);
  EXPECT_EQ(l.gateways(), 0u);
  EXPECT_EQ(l.held(), 4u);  // until the service releases them
  for (uint64_t key = 1; key <= 4; ++key) l.released(key);
  EXPECT_EQ(l.held(), 0u);
}

// Random routes, retries, completes, cancels and leavings of a few gateways
// against a model of who holds what: no step lets one gateway take over,
// complete, cancel or orphan another's request.
TEST(GatewayLedger, no_gateway_touches_anothers_request_through_random_steps) {
  GatewayLedger l;
  struct Held {
    uint64_t gateway, key, token, router_key;
  };
  std::map<std::string, Held> model;  // what the node holds, every route a gateway's
  std::mt19937_64 rng(11);
  uint64_t next_router_key = 1, next_key = 1;
  const auto release = [&](const std::string& id) {
    l.released(model.at(id).router_key);
    model.erase(id);
  };
  for (int step = 0; step < 20000; ++step) {
    const uint64_t gateway = 1 + rng() % 3;
    const std::string id = "r" + std::to_string(rng() % 12);
    const auto it = model.find(id);
    switch (rng() % 4) {
      case 0: {  // a route
        const uint64_t key = next_key++;
        const auto a = l.admit(id, gateway, key, it != model.end());
        if (it != model.end() && it->second.gateway != gateway) {
          ASSERT_EQ(a, GatewayLedger::Admission::owned) << step;
          break;
        }
        ASSERT_EQ(a, GatewayLedger::Admission::ok) << step;
        if (it != model.end()) release(id);  // the service's retry releases first
        model[id] = {gateway, key, key * 10, next_router_key++};
        l.add(id, {gateway, key, key * 10, model[id].router_key, true}, 0);
        break;
      }
      case 1: {  // a complete presenting some key
        if (it == model.end()) break;
        const uint64_t key = rng() % 2 ? it->second.key : (uint64_t{1} << 63 | rng());
        ASSERT_EQ(l.may_complete(id, key), key == it->second.key) << step;
        if (key == it->second.key && it->second.gateway == gateway) release(id);
        break;
      }
      case 2: {  // a cancel with a guessed or the real key
        if (it == model.end()) break;
        const bool real = it->second.gateway == gateway && rng() % 2;
        const auto held = l.cancel(id, real ? it->second.key : (uint64_t{1} << 63 | rng()));
        ASSERT_EQ(held.has_value(), real) << step;
        if (held) {
          EXPECT_EQ(held->token, it->second.token);
          release(id);
        }
        break;
      }
      case 3: {  // a gateway leaves: exactly its own
        for (const HeldRoute& r : l.beat(gateway, true, 0)) {
          ASSERT_EQ(model.at(r.request_id).gateway, gateway) << step;
          release(r.request_id);
        }
        for (const auto& [rid, h] : model) ASSERT_NE(h.gateway, gateway) << step;
        break;
      }
    }
    ASSERT_EQ(l.held(), model.size()) << step;
  }
}

}  // namespace
}  // namespace eldr::pool
