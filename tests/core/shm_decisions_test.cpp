// The decision table end to end (Host publishes, Client looks up and waits):
// lookup, overwrite, probe-run eviction, bounded waits, wake-ups from another
// thread, the lost-wake-up regression and waiters released by a stopping daemon.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <future>
#include <random>
#include <thread>

#include "eldr/shm.hpp"
#include "shm_test_support.hpp"

namespace eldr::shm {
namespace {

using eldr::testing::small_config;
using eldr::testing::TempDir;
using eldr::testing::unique_instance;

struct Pair {
  Pair(const TempDir& dir, const std::string& tag, ClientOptions options = {}) {
    auto h = Host::create(small_config(unique_instance(tag), dir));
    EXPECT_TRUE(h.is_ok()) << h.status().to_string();
    host = std::move(*h);
    options.open_timeout = std::chrono::milliseconds(200);
    auto c = Client::open(host->config().instance, options);
    EXPECT_TRUE(c.is_ok()) << c.status().to_string();
    client = std::move(*c);
  }
  std::unique_ptr<Host> host;
  std::unique_ptr<Client> client;
};

DecisionIn decision(int32_t worker, float similarity = 0.5f) {
  DecisionIn d;
  d.worker = worker;
  d.similarity = similarity;
  d.band_size = 3;
  d.policy = 1;
  d.table_epoch = 9;
  d.latency_ns = 1234;
  return d;
}

TEST(shm_decisions, a_published_decision_is_found_with_all_its_fields) {
  TempDir dir("shm");
  Pair p(dir, "pub");
  p.host->publish("req-a", decision(4, 0.75f));
  auto sut = p.client->wait_decision("req-a", 0);
  ASSERT_TRUE(sut.is_ok()) << sut.status().to_string();
  EXPECT_EQ(sut->worker, 4);
  EXPECT_FLOAT_EQ(sut->similarity, 0.75f);
  EXPECT_EQ(sut->band_size, 3u);
  EXPECT_EQ(sut->policy, 1u);
  EXPECT_EQ(sut->table_epoch, 9u);
  EXPECT_EQ(sut->latency_ns, 1234u);
  EXPECT_EQ(sut->status, 0);
  EXPECT_EQ(p.client->wait_decision("req-b", 0).status().code(), Errc::timeout);
  EXPECT_EQ(p.client->wait_decision("", 0).status().code(), Errc::invalid_argument);
}

TEST(shm_decisions, publishing_again_overwrites_the_same_cell) {
  TempDir dir("shm");
  Pair p(dir, "over");
  DecisionIn rejected = decision(-1);
  rejected.status = static_cast<int32_t>(Errc::no_worker);
  p.host->publish("req", rejected);
  p.host->publish("req", decision(2));
  auto sut = p.client->wait_decision("req", 0);
  ASSERT_TRUE(sut.is_ok());
  EXPECT_EQ(sut->worker, 2);
  EXPECT_EQ(sut->status, 0);
}

// Ids whose home cell in a 64-slot table is the same.
std::vector<std::string> colliding_ids(size_t n) {
  std::vector<std::string> out;
  uint64_t home = UINT64_MAX;
  for (int i = 0; out.size() < n; ++i) {
    std::string id = "collide-" + std::to_string(i);
    const uint64_t h = XXH3_64bits(id.data(), id.size()) & 63;
    if (home == UINT64_MAX) home = h;
    if (h == home) out.push_back(id);
  }
  return out;
}

TEST(shm_decisions, a_full_probe_run_evicts_its_oldest_decision) {
  TempDir dir("shm");
  Pair p(dir, "evict");
  const auto ids = colliding_ids(9);
  for (size_t i = 0; i < 8; ++i) p.host->publish(ids[i], decision(int32_t(i)));
  for (size_t i = 0; i < 8; ++i) {
    auto d = p.client->wait_decision(ids[i], 0);
    ASSERT_TRUE(d.is_ok()) << ids[i];
    EXPECT_EQ(d->worker, int32_t(i));
  }
  // Refreshing ids[0] makes ids[1] the oldest.
  p.host->publish(ids[0], decision(100));
  p.host->publish(ids[8], decision(8));
  EXPECT_EQ(p.client->wait_decision(ids[1], 0).status().code(), Errc::timeout);
  EXPECT_EQ(p.client->wait_decision(ids[0], 0)->worker, 100);
  EXPECT_EQ(p.client->wait_decision(ids[8], 0)->worker, 8);
  for (size_t i = 2; i < 8; ++i) EXPECT_TRUE(p.client->wait_decision(ids[i], 0).is_ok());
}

TEST(shm_decisions, a_wait_for_a_missing_decision_times_out) {
  TempDir dir("shm");
  Pair p(dir, "timeout");
  auto sut = p.client->wait_decision("never", 30);
  EXPECT_EQ(sut.status().code(), Errc::timeout);
}

TEST(shm_decisions, a_waiter_is_woken_by_a_publish_from_another_thread) {
  TempDir dir("shm");
  ClientOptions options;
  options.liveness_interval = std::chrono::seconds(30);  // only a wake-up ends the sleep
  Pair p(dir, "wake", options);
  std::thread publisher([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    p.host->publish("late", decision(6));
  });
  auto sut = p.client->wait_decision("late", 60000);
  publisher.join();
  ASSERT_TRUE(sut.is_ok()) << sut.status().to_string();
  EXPECT_EQ(sut->worker, 6);
}

// Publishes racing the waiter's look-then-sleep window. With the liveness
// re-check pushed out to 30 s, a lost wake-up leaves the waiter asleep: the
// watchdog reports it (then publishes again to release it).
TEST(shm_decisions, publishes_racing_the_wait_are_never_lost) {
  TempDir dir("shm");
  ClientOptions options;
  options.liveness_interval = std::chrono::seconds(30);
  Pair p(dir, "lost", options);
  std::mt19937 rng(11);
  int lost = 0;
  for (int i = 0; i < 300; ++i) {
    const std::string id = "race-" + std::to_string(i);
    const int spin = static_cast<int>(rng() % 2000);
    auto waiter =
        std::async(std::launch::async, [&] { return p.client->wait_decision(id, 60000); });
    std::atomic<int> sink{0};
    for (int k = 0; k < spin; ++k) sink.fetch_add(1, std::memory_order_relaxed);
    p.host->publish(id, decision(i));
    if (waiter.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
      ++lost;
      p.host->publish(id, decision(i));
    }
    auto got = waiter.get();
    ASSERT_TRUE(got.is_ok()) << got.status().to_string();
    EXPECT_EQ(got->worker, i);
  }
  EXPECT_EQ(lost, 0);
}

TEST(shm_decisions, a_stopping_daemon_releases_its_waiters) {
  TempDir dir("shm");
  ClientOptions options;
  options.reattach = false;
  options.liveness_interval = std::chrono::seconds(30);
  Pair p(dir, "drain", options);
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    p.host.reset();
  });
  auto sut = p.client->wait_decision("pending", 60000);
  stopper.join();
  EXPECT_EQ(sut.status().code(), Errc::no_daemon);
}

}  // namespace
}  // namespace eldr::shm
