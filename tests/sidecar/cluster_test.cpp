// Cluster mode without a broker: the wire format (every field checked, any
// byte string survives the decoder), the peer bookkeeping (ordering, lost
// messages, snapshots, restarts, expiry) against a real router, and the
// service's hooks (what it publishes, twins of the peers' picks).
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "cluster_wire.hpp"
#include "eldr/cluster_msg_generated.h"
#include "log.hpp"
#include "peer_view.hpp"
#include "service.hpp"
#include "test_tables.hpp"

namespace eldr::sidecar {
namespace {

using eldr::testing::axis_table;
using eldr::testing::layer0;

constexpr uint64_t kMs = 1'000'000;
const Geometry kGeometry{2, 4, 1};

Decoded decode(const std::vector<uint8_t>& bytes, std::string_view node = "a") {
  return decode_peer_message(bytes, kGeometry, node);
}

// ---- wire --------------------------------------------------------------------

TEST(ClusterWire, every_kind_round_trips_with_its_header) {
  PeerEncoder e("a", 77);
  const auto counts = layer0({1, 0, 3, 0});
  const Decoded b = decode(e.book(5, 101, kGeometry, counts));
  ASSERT_TRUE(b.ok) << b.error.message;
  EXPECT_EQ(b.message.kind, PeerKind::book);
  EXPECT_EQ(b.message.head.node, "a");
  EXPECT_EQ(b.message.head.incarnation, 77u);
  EXPECT_EQ(b.message.head.sequence, 1u);
  EXPECT_GT(b.message.head.sent_ns, 0u);
  EXPECT_EQ(b.message.key, 5u);
  EXPECT_EQ(b.message.worker, 101);
  EXPECT_EQ(b.message.counts, counts);
  const Decoded r = decode(e.release(5));
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(r.message.kind, PeerKind::release);
  EXPECT_EQ(r.message.head.sequence, 2u);
  const Decoded l = decode(e.load({102, 7, 0.5f, 9, 12.5f}));
  ASSERT_TRUE(l.ok);
  EXPECT_EQ(l.message.load.worker, 102);
  EXPECT_EQ(l.message.load.running, 7u);
  EXPECT_EQ(l.message.load.batch_size, 9u);
  EXPECT_FLOAT_EQ(l.message.load.step_ms, 12.5f);
  const std::vector<std::pair<uint64_t, int32_t>> held = {{1, 100}, {9, 103}};
  const Decoded s = decode(e.snapshot(held));
  ASSERT_TRUE(s.ok);
  EXPECT_EQ(s.message.held, held);
  EXPECT_EQ(e.sequence(), 4u);
}

TEST(ClusterWire, bad_fields_are_refused_with_their_fault) {
  PeerEncoder e("a", 1);
  EXPECT_EQ(decode(e.book(1, 100, kGeometry, layer0({1})), "b").error.fault, WireFault::subject);
  EXPECT_EQ(decode(e.book(1, -1, kGeometry, layer0({1}))).error.fault, WireFault::bad_field);
  EXPECT_EQ(decode(e.book(1, 100, kGeometry, layer0({-1, 2}))).error.fault, WireFault::bad_field);
  const std::vector<int16_t> short_counts(5, 1);
  EXPECT_EQ(decode(e.book(1, 100, kGeometry, short_counts)).error.fault, WireFault::bad_field);
  const Geometry other{3, 4, 1};
  const std::vector<int16_t> other_counts(12, 1);
  EXPECT_EQ(decode(e.book(1, 100, other, other_counts)).error.fault, WireFault::shape);
  EXPECT_EQ(decode(e.load({100, 1, 1.5f, 0, 0})).error.fault, WireFault::bad_field);
  EXPECT_EQ(decode(e.load({100, 1, std::nanf(""), 0, 0})).error.fault, WireFault::bad_field);
  EXPECT_EQ(decode(e.snapshot(std::vector<std::pair<uint64_t, int32_t>>{{1, -5}})).error.fault,
            WireFault::bad_field);
  PeerEncoder bad_name("a.b", 1);  // a dot would be a subject separator
  EXPECT_EQ(decode(bad_name.release(1), "").error.fault, WireFault::bad_field);
  PeerEncoder no_incarnation("a", 0);
  EXPECT_EQ(decode(no_incarnation.release(1)).error.fault, WireFault::bad_field);
}

TEST(ClusterWire, a_body_type_without_its_body_is_refused) {
  flatbuffers::FlatBufferBuilder fbb;
  const auto node = fbb.CreateString("a");
  fb::ClusterMsgBuilder b(fbb);
  b.add_version(kClusterWireVersion);
  b.add_node(node);
  b.add_incarnation(1);
  b.add_sequence(1);
  b.add_body_type(fb::Body::BookMsg);  // and no body
  fb::FinishClusterMsgBuffer(fbb, b.Finish());
  const std::vector<uint8_t> bytes(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
  EXPECT_EQ(decode(bytes).error.fault, WireFault::bad_field);
}

TEST(ClusterWire, another_version_is_refused) {
  flatbuffers::FlatBufferBuilder fbb;
  const auto node = fbb.CreateString("a");
  const auto body = fb::CreateReleaseMsg(fbb, 1);
  fb::FinishClusterMsgBuffer(fbb, fb::CreateClusterMsg(fbb, kClusterWireVersion + 1, node, 1, 1, 1,
                                                       fb::Body::ReleaseMsg, body.Union()));
  const std::vector<uint8_t> bytes(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
  const Decoded d = decode(bytes);
  EXPECT_FALSE(d.ok);
  EXPECT_EQ(d.error.fault, WireFault::version);
  EXPECT_NE(d.error.message.find("version"), std::string::npos);
}

TEST(ClusterWire, any_bytes_are_decoded_or_refused_never_a_crash) {
  PeerEncoder e("a", 3);
  const auto good = e.book(1, 100, kGeometry, layer0({1, 2, 3, 4}));
  std::mt19937 rng(7);
  size_t refused = 0;
  for (int round = 0; round < 20000; ++round) {
    std::vector<uint8_t> bytes = good;
    // Truncate, flip bytes, or both; and sometimes pure noise.
    if (round % 7 == 0) bytes.resize(rng() % (good.size() + 1));
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips && !bytes.empty(); ++f)
      bytes[rng() % bytes.size()] ^= 1u << (rng() % 8);
    if (round % 11 == 0) {
      bytes.resize(rng() % 256);
      for (auto& b : bytes) b = static_cast<uint8_t>(rng());
    }
    const Decoded d = decode(bytes);
    refused += !d.ok;
    if (d.ok && d.message.kind == PeerKind::book) {
      EXPECT_EQ(d.message.counts.size(), kGeometry.cells());
      for (int16_t c : d.message.counts) {
        EXPECT_GE(c, 0);
      }
    }
  }
  EXPECT_GT(refused, 10000u);
}

TEST(ClusterWire, names_are_subject_tokens) {
  EXPECT_TRUE(validate_cluster_name("node", "gpu-node_07").is_ok());
  EXPECT_FALSE(validate_cluster_name("node", "").is_ok());
  EXPECT_FALSE(validate_cluster_name("node", "a.b").is_ok());
  EXPECT_FALSE(validate_cluster_name("node", "a*").is_ok());
  EXPECT_FALSE(validate_cluster_name("node", std::string(65, 'a')).is_ok());
  EXPECT_EQ(node_subject("p", "n"), "eldr.p.node.n");
  EXPECT_EQ(pool_nodes_subject("p"), "eldr.p.node.*");
}

// ---- peer view ------------------------------------------------------------------

class PeerViewTest : public ::testing::Test {
 protected:
  PeerViewTest() {
    RouterOptions o;
    o.policy = Policy::jsq;
    auto r = Router::create(std::make_shared<const ClusterTable>(axis_table()), o);
    EXPECT_TRUE(r.is_ok());
    router = std::move(*r);
    PeerViewOptions vo;
    vo.self = "me";
    vo.peer_timeout_ns = 3000 * kMs;
    vo.max_bookings = 8;
    view.emplace(*router, kGeometry, vo, [this](const PeerLoad& l) { loads.push_back(l); });
  }
  int64_t inflight(int32_t worker) const {
    for (const auto& w : router->workers())
      if (w.id == worker) return w.inflight;
    return -1;
  }
  void apply(const std::vector<uint8_t>& bytes, std::string_view node) {
    const Decoded d = decode_peer_message(bytes, kGeometry, node);
    ASSERT_TRUE(d.ok) << d.error.message;
    // Each message arrives exactly 5 ms after it was sent.
    view->apply(d.message, now, d.message.head.sent_ns + 5 * kMs);
  }

  std::unique_ptr<Router> router;
  std::optional<PeerView> view;
  std::vector<PeerLoad> loads;
  uint64_t now = 1000 * kMs;
};

TEST_F(PeerViewTest, a_peers_booking_counts_until_its_release) {
  PeerEncoder a("a", 1);
  apply(a.book(1, 101, kGeometry, layer0({0, 4})), "a");
  apply(a.book(2, 101, kGeometry, layer0({0, 4})), "a");
  EXPECT_EQ(inflight(101), 2);
  EXPECT_EQ(view->bookings(), 2u);
  apply(a.release(1), "a");
  EXPECT_EQ(inflight(101), 1);
  apply(a.release(1), "a");  // again: unknown, nothing changes
  EXPECT_EQ(inflight(101), 1);
  EXPECT_EQ(view->counters().unknown_release, 1u);
  ASSERT_EQ(view->info(now).size(), 1u);
  EXPECT_EQ(view->info(now)[0].node, "a");
  EXPECT_EQ(view->info(now)[0].bookings, 1u);
  EXPECT_NEAR(view->view_age_ms(), 5.0, 1e-6);
  EXPECT_EQ(view->bookings_by_worker().at(101), 1u);
}

TEST_F(PeerViewTest, our_own_messages_and_stale_sequences_change_nothing) {
  PeerEncoder me("me", 1);
  apply(me.book(1, 100, kGeometry, layer0({1})), "me");
  EXPECT_EQ(inflight(100), 0);
  EXPECT_EQ(view->peers(), 0u);
  PeerEncoder a("a", 1);
  const auto first = a.book(1, 100, kGeometry, layer0({1}));
  apply(first, "a");
  apply(first, "a");  // replayed
  EXPECT_EQ(inflight(100), 1);
  EXPECT_EQ(view->counters().stale, 1u);
}

TEST_F(PeerViewTest, a_snapshot_repairs_lost_bookings_and_lost_releases) {
  PeerEncoder a("a", 1);
  apply(a.book(1, 100, kGeometry, layer0({1})), "a");
  (void)a.book(2, 102, kGeometry, layer0({0, 0, 1}));  // lost on the way
  (void)a.release(1);                                  // lost too
  apply(a.snapshot(std::vector<std::pair<uint64_t, int32_t>>{{2, 102}}), "a");
  EXPECT_EQ(view->counters().lost, 2u);
  EXPECT_EQ(view->counters().repaired, 2u);
  EXPECT_EQ(inflight(100), 0);
  EXPECT_EQ(inflight(102), 1);
  apply(a.release(2), "a");
  EXPECT_EQ(inflight(102), 0);
  EXPECT_EQ(view->bookings(), 0u);
}

TEST_F(PeerViewTest, a_restarted_peer_starts_afresh_and_a_silent_one_expires) {
  PeerEncoder a("a", 1);
  apply(a.book(1, 100, kGeometry, layer0({1})), "a");
  PeerEncoder a2("a", 2);  // the same node, started again
  apply(a2.book(1, 103, kGeometry, layer0({0, 0, 0, 1})), "a");
  EXPECT_EQ(inflight(100), 0);
  EXPECT_EQ(inflight(103), 1);
  EXPECT_EQ(view->counters().restarts, 1u);
  PeerEncoder b("b", 9);
  apply(b.book(1, 103, kGeometry, layer0({0, 0, 0, 1})), "b");
  EXPECT_EQ(inflight(103), 2);
  now += 2000 * kMs;
  apply(b.load({103, 4, 0.25f, 0, 0}), "b");  // b is alive, a falls silent
  EXPECT_TRUE(view->expire(now).empty());
  now += 1500 * kMs;
  EXPECT_EQ(view->expire(now), std::vector<std::string>{"a"});
  EXPECT_EQ(inflight(103), 1);
  EXPECT_EQ(view->peers(), 1u);
  ASSERT_EQ(loads.size(), 1u);
  EXPECT_EQ(loads[0].worker, 103);
}

TEST_F(PeerViewTest, bookings_past_the_bound_or_of_unknown_workers_are_refused) {
  PeerEncoder a("a", 1);
  apply(a.book(1, 999, kGeometry, layer0({1})), "a");  // no such worker here
  EXPECT_EQ(view->counters().refused, 1u);
  for (uint64_t k = 10; k < 20; ++k) apply(a.book(k, 100, kGeometry, layer0({1})), "a");
  EXPECT_EQ(view->bookings(), 8u);  // max_bookings
  EXPECT_EQ(inflight(100), 8);
  EXPECT_EQ(view->counters().refused, 3u);
  view.reset();  // everything it booked leaves the router
  EXPECT_EQ(inflight(100), 0);
}

// ---- the service's hooks ----------------------------------------------------------

struct RecordingPublisher final : ClusterPublisher {
  std::vector<std::pair<uint64_t, int32_t>> booked_;
  std::vector<uint64_t> released_;
  std::vector<PeerLoad> reported_;
  void booked(uint64_t key, int32_t worker, std::span<const int16_t>) override {
    booked_.emplace_back(key, worker);
  }
  void released(uint64_t key) override { released_.push_back(key); }
  void reported(const PeerLoad& load) override { reported_.push_back(load); }
  std::vector<std::pair<std::string, uint64_t>> forwarded_;
  void forward_complete(std::string_view request_id, uint64_t token) override {
    forwarded_.emplace_back(std::string(request_id), token);
  }
};

struct TokenSink final : DecisionSink {
  std::map<std::string, uint64_t> tokens;
  void publish(std::string_view id, const shm::DecisionIn& d) override {
    tokens[std::string(id)] = d.completion_token;
  }
};

class ServiceInPool : public ::testing::Test {
 protected:
  ServiceInPool() {
    set_log_level(LogLevel::error);
    ServiceOptions o;
    o.router.policy = Policy::eldr;
    o.router.tau = 0.0f;
    o.router.max_inflight = 1024;
    auto s = Service::create(std::make_shared<const ClusterTable>(axis_table()), o, sink, metrics,
                             [this] { return now; });
    EXPECT_TRUE(s.is_ok());
    sut = std::move(*s);
    sut->join_pool(&publisher);
  }
  void push_top(const std::string& id, int cell) {
    std::vector<int16_t> c(8, 0);
    c[static_cast<size_t>(cell)] = 5;
    shm::FootprintIn f;
    f.client = 1;
    f.client_pid = 42;
    f.request_id = id;
    f.layers = 2;
    f.experts = 4;
    f.counts = c;
    sut->on_footprint(f);
  }
  int64_t inflight(int32_t worker) const {
    for (const auto& w : sut->router().workers())
      if (w.id == worker) return w.inflight;
    return -1;
  }

  uint64_t now = 1000 * kMs;
  TokenSink sink;
  Metrics metrics{256};
  RecordingPublisher publisher;
  std::unique_ptr<Service> sut;
};

TEST_F(ServiceInPool, routes_completes_and_reports_reach_the_pool) {
  push_top("r1", 1);
  push_top("r2", 2);
  ASSERT_EQ(publisher.booked_.size(), 2u);
  EXPECT_EQ(publisher.booked_[0].second, 101);
  EXPECT_EQ(publisher.booked_[1].second, 102);
  EXPECT_EQ(sut->local_requests(), publisher.booked_);
  sut->on_complete_ex({1, 42, "r1", 0});
  ASSERT_EQ(publisher.released_.size(), 1u);
  EXPECT_EQ(publisher.released_[0], publisher.booked_[0].first);
  push_top("r2", 3);  // a retry releases the first pick, then books anew
  EXPECT_EQ(publisher.released_.size(), 2u);
  EXPECT_EQ(publisher.booked_.back().second, 103);
  sut->on_worker_report_ex(1, {100, 3, 0.5f, 0, 0.0f});
  ASSERT_EQ(publisher.reported_.size(), 1u);
  EXPECT_EQ(publisher.reported_[0].running, 3u);
  // A peer's report applies like ours and is not published again.
  sut->apply_peer_load({101, 6, 0.1f, 0, 0.0f});
  EXPECT_EQ(inflight(101), 6);
  EXPECT_EQ(publisher.reported_.size(), 1u);
  const auto rows = sut->maintain();
  for (const auto& r : rows) {
    if (r.worker == 103) {
      EXPECT_EQ(r.inflight_local, 1u);
    }
    if (r.worker == 101) {
      EXPECT_EQ(r.inflight_local, 0u);
      EXPECT_EQ(r.inflight, 6u);
    }
  }
}

TEST_F(ServiceInPool, completes_this_node_cannot_match_go_to_the_pool_where_only_the_token_counts) {
  push_top("r1", 1);
  const uint64_t token = sink.tokens.at("r1");
  ASSERT_NE(token, 0u);
  // A decode engine completing, through us, a request another node routed.
  sut->on_complete_ex({1, 99, "elsewhere", 12345});
  // Ids need not be unique across nodes: a known id with another token too.
  sut->on_complete_ex({1, 99, "r1", token + 1});
  ASSERT_EQ(publisher.forwarded_.size(), 2u);
  EXPECT_EQ(publisher.forwarded_[0], std::make_pair(std::string("elsewhere"), uint64_t{12345}));
  EXPECT_EQ(publisher.forwarded_[1].second, token + 1);
  EXPECT_EQ(inflight(101), 1);  // r1 untouched
  EXPECT_TRUE(publisher.released_.empty());
  // Without a token (only the pusher may complete), or from NATS already: never forwarded.
  sut->on_complete_ex({1, 99, "elsewhere", 0});
  sut->on_complete_ex({kRemoteClient, 0, "elsewhere", 777});
  EXPECT_EQ(publisher.forwarded_.size(), 2u);
  EXPECT_EQ(metrics.complete_unknown(), 2u);
  // The pool's forwards: only this node's token releases, once.
  EXPECT_FALSE(sut->complete_for_pool("r1", token + 1));
  EXPECT_FALSE(sut->complete_for_pool("r1", 0));
  EXPECT_FALSE(sut->complete_for_pool("nope", token));
  EXPECT_EQ(inflight(101), 1);
  EXPECT_TRUE(sut->complete_for_pool("r1", token));
  EXPECT_EQ(inflight(101), 0);
  ASSERT_EQ(publisher.released_.size(), 1u);
  EXPECT_FALSE(sut->complete_for_pool("r1", token));
}

TEST_F(ServiceInPool, each_route_books_a_twin_per_peer_until_the_view_catches_up) {
  sut->anticipate_peers(2, 50.0);
  push_top("r1", 1);
  EXPECT_EQ(inflight(101), 3);  // ours + one twin for each of 2 peers
  EXPECT_EQ(sut->twins_pending(), 2u);
  now += 60 * kMs;
  push_top("r2", 2);  // routing releases the twins that are due first
  EXPECT_EQ(inflight(101), 1);
  EXPECT_EQ(inflight(102), 3);
  sut->anticipate_peers(0, 0.0);
  now += 60 * kMs;
  push_top("r3", 3);
  EXPECT_EQ(inflight(102), 1);
  EXPECT_EQ(inflight(103), 1);
  EXPECT_EQ(sut->twins_pending(), 0u);
}

}  // namespace
}  // namespace eldr::sidecar
