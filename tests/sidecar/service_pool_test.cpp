// The service in a pool of nodes without a broker: what it publishes, twins
// of the peers' picks, completes for requests another node routed.
#include <gtest/gtest.h>

#include "eldr/pool/peer_wire.hpp"
#include "log.hpp"
#include "service.hpp"
#include "test_tables.hpp"

namespace eldr::sidecar {
namespace {

using namespace eldr::pool;
using eldr::testing::axis_table;
using eldr::testing::layer0;

constexpr uint64_t kMs = 1'000'000;

// ---- the service's hooks ----------------------------------------------------------

struct RecordingPublisher final : PoolPublisher {
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
  uint32_t node_tag() const noexcept override { return 0xabcdef; }
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
  // In a pool the token names this node, so other nodes send its completes here.
  EXPECT_EQ(pool::token_tag(token), 0xabcdefu);
  EXPECT_NE(sink.tokens.at("r1") & 0xffffffffu, 0u);
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
