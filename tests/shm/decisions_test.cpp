// The decision table end to end (Host publishes, Client looks up and waits):
// lookup, overwrite, two-run placement and eviction, retention in a full
// table, bounded waits, wake-ups from another thread, the lost-wake-up
// regression and waiters released by a stopping daemon.
#define XXH_INLINE_ALL
#include "eldr/shm/decisions.hpp"

#include <xxhash.h>

#include <algorithm>
#include <future>
#include <optional>
#include <random>
#include <thread>

#include "eldr/shm.hpp"
#include "shm_test_support.hpp"

namespace eldr::shm {
namespace {

using eldr::testing::Pair;
using eldr::testing::small_config;
using eldr::testing::TempDir;
using eldr::testing::unique_instance;

// The resolution of a cell's publish time (format 2.2: microseconds, with
// the confidence in the same word).
constexpr uint64_t kTick = 1000;

DecisionIn decision(int32_t worker, float similarity = 0.5f) {
  DecisionIn d;
  d.worker = worker;
  d.similarity = similarity;
  d.band_size = 3;
  d.policy = 1;
  d.table_epoch = 9;
  d.latency_ns = 1234;
  d.completion_token = 0x8000000000000001ull + uint64_t(worker);
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
  EXPECT_EQ(sut->completion_token, 0x8000000000000005ull);
  EXPECT_EQ(sut->status, 0);
  // The latency word saturates (4.3 s) rather than wrapping.
  DecisionIn slow = decision(2);
  slow.latency_ns = 10'000'000'000ull;
  p.host->publish("req-slow", slow);
  EXPECT_EQ(p.client->wait_decision("req-slow", 0)->latency_ns, UINT32_MAX);
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

// A request id's two probe runs in a table of `slots` cells (the layout's
// placement: the homes are the two halves of the id's XXH3 hash).
struct Runs {
  uint32_t first = 0;
  uint32_t second = 0;
};
Runs runs_of(const std::string& id, uint32_t slots) {
  const uint64_t h = XXH3_64bits(id.data(), id.size());
  return {static_cast<uint32_t>(h) & (slots - 1), static_cast<uint32_t>(h >> 32) & (slots - 1)};
}
bool runs_overlap(uint32_t a, uint32_t b, uint32_t slots) {
  const uint32_t d = (a - b) & (slots - 1);
  return d < 8 || slots - d < 8;
}

// Ids of a 64-slot table whose first runs start at the same cell; with
// `same_second`, their second runs too. Every id's second run is disjoint
// from the first.
std::vector<std::string> colliding_ids(size_t n, bool same_second) {
  std::vector<std::string> out;
  std::optional<Runs> shared;
  for (int i = 0; out.size() < n; ++i) {
    std::string id = "collide-" + std::to_string(i);
    const Runs r = runs_of(id, 64);
    if (runs_overlap(r.first, r.second, 64)) continue;
    if (!shared) shared = r;
    if (r.first == shared->first && (!same_second || r.second == shared->second)) out.push_back(id);
  }
  return out;
}

TEST(shm_decisions, a_full_first_run_sends_the_next_decision_to_the_second_run) {
  TempDir dir("shm");
  Pair p(dir, "second");
  // Nine ids share their first run: the ninth finds it full and must not
  // evict the oldest while its second run is empty (one run of eight cells
  // used to evict it: the soak's lost decisions).
  const auto ids = colliding_ids(9, false);
  for (size_t i = 0; i < ids.size(); ++i) p.host->publish(ids[i], decision(int32_t(i)));
  for (size_t i = 0; i < ids.size(); ++i) {
    auto sut = p.client->wait_decision(ids[i], 0);
    ASSERT_TRUE(sut.is_ok()) << ids[i] << ": " << sut.status().to_string();
    EXPECT_EQ(sut->worker, int32_t(i));
  }
}

TEST(shm_decisions, a_full_candidate_set_evicts_its_oldest_decision) {
  TempDir dir("shm");
  Pair p(dir, "evict");
  // Seventeen ids with the same two runs: sixteen fill both, the last evicts.
  const auto ids = colliding_ids(17, true);
  for (size_t i = 0; i < 16; ++i) p.host->publish(ids[i], decision(int32_t(i)));
  for (size_t i = 0; i < 16; ++i) {
    auto d = p.client->wait_decision(ids[i], 0);
    ASSERT_TRUE(d.is_ok()) << ids[i];
    EXPECT_EQ(d->worker, int32_t(i));
  }
  // Refreshing ids[0] makes ids[1] the oldest.
  p.host->publish(ids[0], decision(100));
  p.host->publish(ids[16], decision(16));
  EXPECT_EQ(p.client->wait_decision(ids[1], 0).status().code(), Errc::timeout);
  EXPECT_EQ(p.client->wait_decision(ids[0], 0)->worker, 100);
  EXPECT_EQ(p.client->wait_decision(ids[16], 0)->worker, 16);
  for (size_t i = 2; i < 16; ++i) EXPECT_TRUE(p.client->wait_decision(ids[i], 0).is_ok());
}

// The soak's lost decisions, deterministically: a gateway trailing the
// daemon by 30% of the table's size must still find every decision once the
// table is full and every publish evicts. The single eight-cell run lost a
// few such decisions per 40,000 (its youngest eviction was 7.5% of the table).
TEST(shm_decisions, every_decision_outlives_the_next_30_percent_of_a_full_table) {
  TempDir dir("shm");
  auto config = small_config(unique_instance("retain"), dir);
  config.decision_slots = 4096;
  auto host = Host::create(config);
  ASSERT_TRUE(host.is_ok()) << host.status().to_string();
  ClientOptions options;
  options.open_timeout = std::chrono::milliseconds(200);
  auto sut = Client::open(config.instance, options);
  ASSERT_TRUE(sut.is_ok()) << sut.status().to_string();
  constexpr int kPublishes = 40'000;
  constexpr int kLag = 4096 * 3 / 10;
  std::vector<std::string> lost;
  for (int i = 0; i < kPublishes; ++i) {
    (*host)->publish("retain-" + std::to_string(i), decision(i % 16));
    if (i % 1024 == 0) (*host)->maintain();  // heartbeat: the client checks it
    if (i < kLag) continue;
    const std::string trailing = "retain-" + std::to_string(i - kLag);
    if (!(*sut)->wait_decision(trailing, 0).is_ok()) lost.push_back(trailing);
  }
  EXPECT_TRUE(lost.empty()) << lost.size() << " decisions evicted within " << kLag
                            << " publishes, first " << lost.front();
}

// The id hash in a cell only filters probes: a cell whose hash matches but
// whose id differs (a collision, forged here) is neither returned for the id
// nor overwritten as the id's own cell.
TEST(shm_decisions, a_hash_collision_is_told_apart_by_the_id) {
  constexpr uint32_t kSlots = 8;  // every id's two runs cover every cell
  std::vector<detail::DecisionCell> cells(kSlots);
  for (uint32_t i = 0; i < kSlots; ++i)
    detail::publish_decision(cells.data(), kSlots, "old-" + std::to_string(i), decision(10 + i),
                             kTick * (100 + i));
  detail::publish_decision(cells.data(), kSlots, "other-id", decision(1),
                           kTick * 1000);  // evicts old-0
  const uint64_t mine = XXH3_64bits("mine", 4);
  constexpr size_t kHashWord = offsetof(detail::DecisionPayload, id_hash) / 8;
  int forged = 0;
  for (auto& cell : cells) {
    const uint64_t length_word = cell.words[0].load();
    if (static_cast<uint16_t>(length_word) != 8) continue;  // the only 8-byte id
    cell.words[kHashWord].store(mine);
    ++forged;
  }
  ASSERT_EQ(forged, 1);
  EXPECT_FALSE(detail::lookup_decision(cells.data(), kSlots, "mine").has_value());
  detail::publish_decision(cells.data(), kSlots, "mine", decision(2),
                           kTick * 2000);  // evicts old-1
  const auto still_forged = std::count_if(cells.begin(), cells.end(), [&](const auto& cell) {
    return cell.words[kHashWord].load() == mine && static_cast<uint16_t>(cell.words[0].load()) == 8;
  });
  EXPECT_EQ(still_forged, 1);  // "other-id" kept its cell
  const auto sut = detail::lookup_decision(cells.data(), kSlots, "mine");
  ASSERT_TRUE(sut.has_value());
  EXPECT_EQ(sut->worker, 2);
  EXPECT_FALSE(detail::lookup_decision(cells.data(), kSlots, "old-1").has_value());
}

// A publish that has to overwrite another request's decision says so, with
// that decision's publish time (the daemon turns it into an age metric); one
// into an empty cell or the id's own cell overwrites nothing.
TEST(shm_decisions, a_publish_reports_the_decision_it_evicted) {
  constexpr uint32_t kSlots = 8;  // every id's two runs cover every cell
  std::vector<detail::DecisionCell> cells(kSlots);
  for (uint32_t i = 0; i < kSlots; ++i)
    EXPECT_FALSE(detail::publish_decision(cells.data(), kSlots, "old-" + std::to_string(i),
                                          decision(1), kTick * (100 + i))
                     .has_value());
  EXPECT_FALSE(detail::publish_decision(cells.data(), kSlots, "old-0", decision(2), kTick * 500));
  const auto sut = detail::publish_decision(cells.data(), kSlots, "new", decision(3), kTick * 1000);
  ASSERT_TRUE(sut.has_value());
  EXPECT_EQ(*sut, kTick * 101);  // old-1: old-0 was republished at 500
}

// Through the host: the age of what a full table pushed out.
TEST(shm_decisions, the_host_reports_the_age_of_an_evicted_decision) {
  TempDir dir("shm");
  Pair p(dir, "evict");
  const uint32_t slots = p.host->config().decision_slots;
  int evictions = 0;
  for (uint32_t i = 0; i < 4 * slots; ++i) {
    const auto age = p.host->publish("r" + std::to_string(i), decision(1));
    if (!age) continue;
    ++evictions;
    EXPECT_LT(*age, uint64_t{60'000'000'000});  // published during this test
  }
  EXPECT_GT(evictions, static_cast<int>(2 * slots));  // once full, nearly every publish evicts
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

// Format 2.2: the confidence of a prompt's decision rides in the cell, in
// 1/65535 steps; a reader of a 2.1 daemon's cells takes 1.
TEST(shm_decisions, a_decision_carries_its_confidence) {
  constexpr uint32_t kSlots = 64;
  std::vector<detail::DecisionCell> cells(kSlots);
  for (float c : {0.0f, 0.3f, 1.0f, 2.0f, -1.0f}) {
    DecisionIn d = decision(1);
    d.confidence = c;
    detail::publish_decision(cells.data(), kSlots, "c", d, 123456789);
    const auto got = detail::lookup_decision(cells.data(), kSlots, "c");
    ASSERT_TRUE(got.has_value());
    EXPECT_NEAR(got->confidence, std::clamp(c, 0.0f, 1.0f), 1.0f / 65535) << c;
    const auto old = detail::lookup_decision(cells.data(), kSlots, "c", false);
    ASSERT_TRUE(old.has_value());
    EXPECT_EQ(old->confidence, 1.0f);
  }
}

}  // namespace
}  // namespace eldr::shm
