// Multi-node mode without a broker: the peer wire format (every field checked,
// any byte string survives the decoder) and the peer bookkeeping (ordering,
// lost messages, snapshots, restarts, expiry) against a real router.
#include "eldr/pool/peer_wire.hpp"

#include <gtest/gtest.h>

#include <map>
#include <random>

#include "eldr/peer_msg_generated.h"
#include "eldr/pool/peer_view.hpp"
#include "test_tables.hpp"

namespace eldr::pool {
namespace {

using eldr::testing::axis_table;
using eldr::testing::layer0;

constexpr uint64_t kMs = 1'000'000;
const Geometry kGeometry{2, 4, 1};

Decoded decode(const std::vector<uint8_t>& bytes, std::string_view node = "a") {
  return decode_peer_message(bytes, kGeometry, node);
}

// ---- wire --------------------------------------------------------------------

TEST(PeerWire, every_kind_round_trips_with_its_header) {
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

TEST(PeerWire, bad_fields_are_refused_with_their_fault) {
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

TEST(PeerWire, a_body_type_without_its_body_is_refused) {
  flatbuffers::FlatBufferBuilder fbb;
  const auto node = fbb.CreateString("a");
  fb::PeerMsgBuilder b(fbb);
  b.add_version(kPoolWireVersion);
  b.add_node(node);
  b.add_incarnation(1);
  b.add_sequence(1);
  b.add_body_type(fb::Body::BookMsg);  // and no body
  fb::FinishPeerMsgBuffer(fbb, b.Finish());
  const std::vector<uint8_t> bytes(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
  EXPECT_EQ(decode(bytes).error.fault, WireFault::bad_field);
}

TEST(PeerWire, another_version_is_refused) {
  flatbuffers::FlatBufferBuilder fbb;
  const auto node = fbb.CreateString("a");
  const auto body = fb::CreateReleaseMsg(fbb, 1);
  fb::FinishPeerMsgBuffer(fbb, fb::CreatePeerMsg(fbb, kPoolWireVersion + 1, node, 1, 1, 1,
                                                 fb::Body::ReleaseMsg, body.Union()));
  const std::vector<uint8_t> bytes(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
  const Decoded d = decode(bytes);
  EXPECT_FALSE(d.ok);
  EXPECT_EQ(d.error.fault, WireFault::version);
  EXPECT_NE(d.error.message.find("version"), std::string::npos);
}

TEST(PeerWire, any_bytes_are_decoded_or_refused_never_a_crash) {
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

TEST(PeerWire, names_are_subject_tokens) {
  EXPECT_TRUE(validate_pool_name("node", "gpu-node_07").is_ok());
  EXPECT_FALSE(validate_pool_name("node", "").is_ok());
  EXPECT_FALSE(validate_pool_name("node", "a.b").is_ok());
  EXPECT_FALSE(validate_pool_name("node", "a*").is_ok());
  EXPECT_FALSE(validate_pool_name("node", std::string(65, 'a')).is_ok());
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

}  // namespace
}  // namespace eldr::pool
