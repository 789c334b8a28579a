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
const CostCells kCells = cost_cells_of(kGeometry, RouterOptions{}.cost_cells);

Decoded decode(const std::vector<uint8_t>& bytes, std::string_view node = "a") {
  return decode_peer_message(bytes, kGeometry, kCells, node);
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

TEST(PeerWire, a_compact_booking_carries_every_code) {
  // Every length up to a few groups of four, every code value.
  for (uint32_t n = 1; n <= 13; ++n) {
    const Geometry g{n, 1, 1};
    const CostCells cells{1, n, 1};
    std::vector<uint8_t> codes(n);
    for (uint32_t i = 0; i < n; ++i) codes[i] = static_cast<uint8_t>((i * 37 + n) % kDemandCodes);
    codes[0] = kDemandCodes - 1;
    PeerEncoder e("a", 1);
    const Decoded d = decode_peer_message(e.book(9, 3, g, cells, codes), g, cells, "a");
    ASSERT_TRUE(d.ok) << d.error.message;
    EXPECT_EQ(d.message.demand, codes) << n;
    EXPECT_TRUE(d.message.counts.empty());
    EXPECT_EQ(d.message.worker, 3);
  }
}

// A booking's bytes at the two model shapes, with the longest node name a
// pool allows: its codes (a byte per cost cell) and at most 256 bytes more.
TEST(PeerWire, a_compact_booking_is_its_codes_and_a_header) {
  PeerEncoder e(std::string(kMaxPoolName, 'n'), ~uint64_t{0});
  for (const auto& [g, limit] : {std::pair{Geometry{48, 128, 8}, size_t{1024 + 256}},
                                 std::pair{Geometry{61, 384, 8}, size_t{2048}}}) {
    const CostCells cells = cost_cells_of(g, RouterOptions{}.cost_cells);
    const std::vector<uint8_t> codes(cells.count(), kDemandCodes - 1);
    const auto bytes = e.book(~uint64_t{0}, INT32_MAX, g, cells, codes);
    EXPECT_LE(bytes.size(), limit) << g.to_string();
    const std::vector<int16_t> counts(g.cells(), 1);
    EXPECT_GT(e.book(1, 1, g, counts).size(), 2 * g.cells());  // what it replaces
    const Decoded d = decode_peer_message(bytes, g, cells, std::string(kMaxPoolName, 'n'));
    ASSERT_TRUE(d.ok) << d.error.message;
    EXPECT_EQ(d.message.demand, codes);
  }
}

TEST(PeerWire, a_compact_booking_of_other_cost_cells_is_refused) {
  const Geometry g{48, 128, 8};
  const CostCells cells = cost_cells_of(g, 1024), fewer = cost_cells_of(g, 512);
  ASSERT_NE(cells.stride, fewer.stride);
  PeerEncoder e("a", 1);
  const std::vector<uint8_t> codes(fewer.count(), 1);
  const Decoded d = decode_peer_message(e.book(1, 1, g, fewer, codes), g, cells, "a");
  ASSERT_FALSE(d.ok);
  EXPECT_EQ(d.error.fault, WireFault::shape);
  EXPECT_NE(d.error.message.find("cost_cells"), std::string::npos) << d.error.message;
  // The same stride, a code short: the demand's length is wrong.
  const std::vector<uint8_t> short_codes(cells.count() - 4, 1);
  const Decoded s = decode_peer_message(e.book(2, 1, g, cells, short_codes), g, cells, "a");
  ASSERT_FALSE(s.ok);
  EXPECT_EQ(s.error.fault, WireFault::bad_field);
}

TEST(PeerWire, a_tagged_token_names_its_node_and_is_never_zero) {
  const uint32_t tag = node_tag("gpu-node-17");
  EXPECT_LT(tag, 1u << 24);
  EXPECT_NE(tag, node_tag("gpu-node-18"));
  const uint64_t t = tagged_token(tag, 0x1234567800000000ull);  // low 32 bits 0
  EXPECT_EQ(token_tag(t), tag);
  EXPECT_NE(t & 0xffffffffu, 0u);
  EXPECT_EQ(token_tag(tagged_token(tag, 0xdeadbeefull)), tag);
  EXPECT_EQ(token_tag(0x1234), std::nullopt);  // a node alone, or before tags
  EXPECT_EQ(token_tag(0), std::nullopt);
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
    const Decoded d = decode(bytes, node);
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

// A compact booking and a full one of the same request leave the same batch
// at the receiving node; only the full one reaches the refit window.
TEST(PeerViewBatches, a_compact_booking_builds_the_batch_a_full_one_builds) {
  const auto table = std::make_shared<const ClusterTable>(axis_table());
  auto compact_router = Router::create(table).value();
  auto full_router = Router::create(table).value();
  size_t refit_footprints = 0;
  PeerViewOptions vo;
  vo.self = "me";
  PeerView compact(*compact_router, kGeometry, vo, nullptr);
  PeerView full(*full_router, kGeometry, vo, nullptr);
  compact.on_booked_footprint([&](std::span<const int16_t>) { ++refit_footprints; });
  PeerEncoder a("a", 1), b("a", 1);
  std::vector<uint8_t> codes(kCells.count());
  const uint64_t now = 1000 * kMs;
  const auto apply = [&](PeerView& view, const std::vector<uint8_t>& bytes) {
    const Decoded d = decode(bytes);
    ASSERT_TRUE(d.ok) << d.error.message;
    view.apply(d.message, now, d.message.head.sent_ns);
  };
  for (uint64_t key = 1; key <= 6; ++key) {
    const auto f = layer0({int16_t(key % 3), 4, int16_t(key), 1});
    ASSERT_TRUE(compact_router->demand_codes(f, codes).is_ok());
    apply(compact, a.book(key, 100 + int32_t(key % 2), kGeometry, kCells, codes));
    apply(full, b.book(key, 100 + int32_t(key % 2), kGeometry, f));
  }
  apply(compact, a.release(3));
  apply(full, b.release(3));
  const auto cw = compact_router->workers(), fw = full_router->workers();
  for (size_t i = 0; i < cw.size(); ++i) {
    EXPECT_EQ(cw[i].inflight, fw[i].inflight);
    EXPECT_EQ(cw[i].batch_experts, fw[i].batch_experts) << cw[i].id;
  }
  EXPECT_GT(cw[0].batch_experts, 0.0);
  EXPECT_EQ(refit_footprints, 0u);
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
