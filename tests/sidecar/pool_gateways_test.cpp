// The gateway protocol of a node without a broker: PoolGateways over a real
// service, its answers captured. What a gateway's credentials can make a
// node do: answer only on inboxes, book and release only the gateway's own
// requests.
#include "pool_gateways.hpp"

#include <gtest/gtest.h>

#include <map>

#include "eldr/pool/route_wire.hpp"
#include "eldr/shm/records.hpp"
#include "log.hpp"
#include "pool_completes.hpp"
#include "test_tables.hpp"

namespace eldr::sidecar {
namespace {

using namespace eldr::pool;
using eldr::testing::axis_table;

struct Sent {
  std::string subject, reply;
  std::vector<uint8_t> bytes;
};

// The node as PoolNode wires it: the service's releases reach the gateways.
struct Wiring final : PoolPublisher {
  PoolGateways* gateways = nullptr;
  void booked(uint64_t, int32_t, std::span<const int16_t>) override {}
  void released(uint64_t key) override {
    if (gateways) gateways->released(key);
  }
  void reported(const PeerLoad&) override {}
  void forward_complete(std::string_view, uint64_t) override {}
  uint32_t node_tag() const noexcept override { return 0x123456; }
};

struct Segment final : DecisionSink {
  std::map<std::string, shm::DecisionIn> decisions;
  void publish(std::string_view id, const shm::DecisionIn& d) override {
    decisions[std::string(id)] = d;
  }
};

class GatewaysTest : public ::testing::Test {
 protected:
  GatewaysTest() {
    set_log_level(LogLevel::error);
    ServiceOptions o;
    o.router.policy = Policy::eldr;
    o.router.tau = 0.0f;
    o.router.max_inflight = 1024;
    auto s =
        Service::create(std::make_shared<const ClusterTable>(axis_table()), o, segment, metrics);
    EXPECT_TRUE(s.is_ok());
    service = std::move(*s);
    config.name = "p";
    config.gateway_timeout_ms = 2000;
    sut = std::make_unique<PoolGateways>(config, ReplyPolicy{}, "a", *service, publish);
    wiring.gateways = sut.get();
    service->join_pool(&wiring);
  }
  ~GatewaysTest() override { service->join_pool(nullptr); }

  static std::vector<int16_t> one_cell(int cell) {
    std::vector<int16_t> counts(8, 0);
    counts[static_cast<size_t>(cell)] = 5;
    return counts;
  }
  InboxMessage route_msg(const std::string& id, uint64_t gateway, uint64_t key,
                         const std::string& reply = "_INBOX.gw.1") {
    const auto counts = one_cell(2);
    return {route_subject("p"), reply, encode_route_request(id, key, gateway, 2, 4, counts)};
  }
  // Routes; the RouteReply it was answered with (nullopt: no answer).
  std::optional<RouteReply> route(const std::string& id, uint64_t gateway, uint64_t key,
                                  const std::string& reply = "_INBOX.gw.1") {
    const size_t before = sent.size();
    sut->route(route_msg(id, gateway, key, reply));
    if (sent.size() == before) return std::nullopt;
    EXPECT_EQ(sent.size(), before + 1);
    EXPECT_EQ(sent.back().subject, reply);
    auto r = decode_route_reply(sent.back().bytes);
    EXPECT_TRUE(r.is_ok());
    return r ? std::optional<RouteReply>(*r) : std::nullopt;
  }
  void complete(const std::string& id, uint64_t token, uint64_t key,
                const std::string& reply = "_INBOX.gw.2") {
    sut->complete({complete_subject("p", "a"), reply, encode_route_complete(id, token, key)});
  }
  size_t in_flight() const { return service->requests_in_flight(); }

  Segment segment;
  Metrics metrics{256};
  std::unique_ptr<Service> service;
  PoolConfig config;
  std::vector<Sent> sent;
  PublishFn publish = [this](std::string_view subject, std::span<const uint8_t> data,
                             std::string_view reply) {
    sent.push_back({std::string(subject), std::string(reply), {data.begin(), data.end()}});
    return Status::ok();
  };
  Wiring wiring;
  std::unique_ptr<PoolGateways> sut;
};

TEST_F(GatewaysTest, a_route_is_answered_on_its_inbox_only_and_not_in_the_segment) {
  const auto r = route("r1", 7, 70);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 0);
  EXPECT_EQ(r->worker, 102);
  EXPECT_EQ(r->node, "a");
  EXPECT_EQ(in_flight(), 1u);
  // The engines' segment holds no decision a gateway made.
  EXPECT_TRUE(segment.decisions.empty());
  EXPECT_EQ(sut->counters().held, 1u);
  EXPECT_EQ(sut->counters().gateways, 1u);
}

TEST_F(GatewaysTest,
       a_route_asking_for_its_answer_anywhere_but_an_inbox_is_neither_routed_nor_answered) {
  for (const std::string reply :
       {"$KV.eldr_p.table", "$JS.API.STREAM.CREATE.KV_eldr_p", "eldr.p.node.b", "eldr.p.ack.b",
        "_INBOX", "_INBOXES.x", "_INBOX..x", "_INBOX.*", "_INBOX.>", "_INBOX.a b", "x._INBOX.y"}) {
    EXPECT_FALSE(route("r-" + reply, 7, 70, reply)) << reply;
  }
  EXPECT_TRUE(sent.empty());
  EXPECT_EQ(in_flight(), 0u);
  EXPECT_EQ(sut->counters().replies_refused, 11u);
  // A publish (no reply subject) is malformed: nobody would hear the decision.
  sut->route(route_msg("r-publish", 7, 70, ""));
  EXPECT_TRUE(sent.empty());
  EXPECT_EQ(sut->counters().malformed, 1u);
  EXPECT_EQ(in_flight(), 0u);
  // Other prefixes, when the node is told to answer there.
  auto policy = ReplyPolicy::create({"_GW_A", "_INBOX.gw"});
  ASSERT_TRUE(policy.is_ok());
  sut = std::make_unique<PoolGateways>(config, *policy, "a", *service, publish);
  wiring.gateways = sut.get();
  EXPECT_TRUE(route("r2", 7, 71, "_GW_A.x"));
  EXPECT_TRUE(route("r3", 7, 72, "_INBOX.gw.x"));
  EXPECT_FALSE(route("r4", 7, 73, "_INBOX.other.x"));
  EXPECT_EQ(in_flight(), 2u);
}

TEST_F(GatewaysTest, an_id_in_flight_for_another_gateway_or_an_engine_is_refused_not_taken_over) {
  const auto mine = route("r1", 7, 70);
  ASSERT_TRUE(mine && mine->status == 0);
  // Another gateway, the same id: refused, and the first request untouched.
  const auto theirs = route("r1", 8, 80);
  ASSERT_TRUE(theirs);
  EXPECT_EQ(theirs->status, static_cast<int32_t>(Errc::state));
  EXPECT_NE(theirs->message.find("in flight"), std::string::npos) << theirs->message;
  EXPECT_EQ(in_flight(), 1u);
  EXPECT_EQ(sut->counters().refused_owned, 1u);
  // Its leaving releases nothing of the first's.
  sut->beat({gateway_subject("p"), "", encode_gateway_beat({8, true})});
  EXPECT_EQ(in_flight(), 1u);
  // An engine's request (its ring) is no gateway's either.
  const auto counts = one_cell(1);
  shm::FootprintIn f;
  f.client = 1;
  f.client_pid = 42;
  f.request_id = "e1";
  f.layers = 2;
  f.experts = 4;
  f.counts = counts;
  service->on_footprint(f);
  ASSERT_EQ(in_flight(), 2u);
  const auto over_engine = route("e1", 7, 71);
  ASSERT_TRUE(over_engine);
  EXPECT_EQ(over_engine->status, static_cast<int32_t>(Errc::state));
  EXPECT_EQ(segment.decisions.at("e1").worker, 101);  // the engine's decision stands
  // The owner may route its own id again (a retry): one request, a new token.
  const auto again = route("r1", 7, 72);
  ASSERT_TRUE(again && again->status == 0);
  EXPECT_NE(again->completion_token, mine->completion_token);
  EXPECT_EQ(in_flight(), 2u);
  complete("r1", again->completion_token, 72);
  EXPECT_EQ(in_flight(), 1u);
  EXPECT_EQ(sut->counters().held, 0u);
}

TEST_F(GatewaysTest, a_gateways_complete_releases_its_route_only_with_the_routes_key) {
  const auto r = route("r1", 7, 70);
  ASSERT_TRUE(r && r->status == 0);
  sent.clear();
  // The token alone (read off a reply, leaked by an engine): nothing.
  complete("r1", r->completion_token, 0);
  complete("r1", r->completion_token, 71);
  EXPECT_EQ(in_flight(), 1u);
  EXPECT_EQ(sut->counters().completes_refused, 2u);
  EXPECT_TRUE(sent.empty());  // not answered: the gateway's complete would time out
  // The key without the token: nothing either (the service checks it).
  complete("r1", r->completion_token + 1, 70);
  EXPECT_EQ(in_flight(), 1u);
  // Both: released, and answered on the gateway's inbox only.
  complete("r1", r->completion_token, 70, "$KV.eldr_p.table");
  EXPECT_EQ(in_flight(), 0u);
  EXPECT_EQ(sut->counters().completes, 1u);
  EXPECT_EQ(sut->counters().replies_refused, 1u);
  for (const Sent& s : sent) EXPECT_TRUE(s.subject.starts_with("_INBOX.")) << s.subject;
}

TEST_F(GatewaysTest, a_route_from_a_gateway_before_route_requests_completes_with_its_token) {
  // The ring's FootprintMsg with the key and gateway in headers.
  const auto counts = one_cell(3);
  shm::FootprintOut f;
  f.request_id = "old-1";
  f.layers = 2;
  f.experts = 4;
  f.counts = counts;
  std::vector<uint8_t> bytes;
  ASSERT_TRUE(shm::detail::encode_footprint(f, bytes).is_ok());
  InboxMessage in{route_subject("p"), "_INBOX.old.1", bytes, format_key(90), format_key(9)};
  sut->route(in);
  ASSERT_EQ(sent.size(), 1u);
  const auto r = decode_route_reply(sent.back().bytes);
  ASSERT_TRUE(r && r->status == 0) << (r ? r->message : "");
  EXPECT_EQ(r->worker, 103);
  // Its id is its own all the same.
  EXPECT_EQ(route("old-1", 7, 70)->status, static_cast<int32_t>(Errc::state));
  complete("old-1", r->completion_token, 0);
  EXPECT_EQ(in_flight(), 0u);
  // A malformed header is refused as malformed.
  in.route_key = "not-hex";
  sut->route(in);
  EXPECT_EQ(decode_route_reply(sent.back().bytes)->status,
            static_cast<int32_t>(Errc::invalid_argument));
  EXPECT_EQ(in_flight(), 0u);
}

TEST_F(GatewaysTest, cancels_beats_and_silence_release_only_the_gateways_own_routes) {
  for (int i = 0; i < 3; ++i) ASSERT_EQ(route("a" + std::to_string(i), 7, 70 + i)->status, 0);
  for (int i = 0; i < 2; ++i) ASSERT_EQ(route("b" + std::to_string(i), 8, 80 + i)->status, 0);
  ASSERT_EQ(in_flight(), 5u);
  // A cancel with another's key, or the right key for another id: nothing.
  sut->cancel({cancel_subject("p"), "", encode_route_cancel("a0", 80)});
  sut->cancel({cancel_subject("p"), "", encode_route_cancel("b0", 70)});
  EXPECT_EQ(in_flight(), 5u);
  sut->cancel({cancel_subject("p"), "", encode_route_cancel("a0", 70)});
  EXPECT_EQ(in_flight(), 4u);
  EXPECT_EQ(sut->counters().cancelled, 1u);
  // A cancel that comes before its route: the route is refused.
  sut->cancel({cancel_subject("p"), "", encode_route_cancel("a9", 79)});
  EXPECT_EQ(route("a9", 7, 79)->status, static_cast<int32_t>(Errc::state));
  EXPECT_EQ(sut->counters().refused_cancelled, 1u);
  // Gateway 8 leaves: its two go, gateway 7's stay.
  sut->beat({gateway_subject("p"), "", encode_gateway_beat({8, true})});
  EXPECT_EQ(in_flight(), 2u);
  EXPECT_EQ(sut->counters().orphaned, 2u);
  // Gateway 7 beats; then falls silent past the timeout.
  const uint64_t now = monotonic_ns();
  sut->beat({gateway_subject("p"), "", encode_gateway_beat({7, false})});
  sut->maintain(now + 1'000'000'000, false);
  EXPECT_EQ(in_flight(), 2u);
  sut->maintain(now + 3'000'000'000, false);
  EXPECT_EQ(in_flight(), 0u);
  EXPECT_EQ(sut->counters().held, 0u);
  EXPECT_EQ(sut->counters().gateways, 0u);
}

TEST_F(GatewaysTest, a_forward_from_a_node_releases_a_gateways_route_by_its_token) {
  // The decode engine completes through its own node, which has only the
  // token: nodes forward on eldr.<pool>.forward.<node>, where gateways may
  // not publish.
  const auto r = route("r1", 7, 70);
  ASSERT_TRUE(r && r->status == 0);
  PoolCompletes completes("p", "a", 0x123456, *service, publish);
  sent.clear();
  completes.forwarded({forward_subject("p", "a"), "eldr.p.ack.b",
                       encode_route_complete("r1", r->completion_token)});
  EXPECT_EQ(in_flight(), 0u);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].subject, "eldr.p.ack.b");  // answered on the forwarder's ack subject
  // Anywhere else: not answered.
  completes.forwarded({forward_subject("p", "a"), "$KV.eldr_p.table",
                       encode_route_complete("r1", r->completion_token)});
  EXPECT_EQ(sent.size(), 1u);
}

}  // namespace
}  // namespace eldr::sidecar
