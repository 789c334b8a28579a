// Host and Client in one process (separate mappings of one segment): creation
// and opening, compatibility refusals, registration over the socket, who maps
// what, records end to end, quarantine, slot reclaim, daemon restart and
// segment deletion, the doorbell, status.
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "eldr/shm.hpp"
#include "eldr/shm/layout.hpp"
#include "shm_test_support.hpp"

namespace eldr::shm {
namespace {

using eldr::testing::Pair;
using eldr::testing::RecordingHandler;
using eldr::testing::small_config;
using eldr::testing::TempDir;
using eldr::testing::unique_instance;

ClientOptions quick_options() {
  ClientOptions o;
  o.open_timeout = std::chrono::milliseconds(50);
  return o;
}

// The request ids of the completes handled so far, in order.
std::vector<std::string> completed(const RecordingHandler& handler) {
  std::vector<std::string> ids;
  for (const auto& c : handler.completes) ids.push_back(c.second);
  return ids;
}

// A writable view of a segment's first page, as a foreign or corrupt writer.
class HeaderPoke {
 public:
  explicit HeaderPoke(const std::string& instance) {
    m_fd = ::shm_open(segment_name(instance).c_str(), O_RDWR, 0);
    EXPECT_GE(m_fd, 0);
    m_map = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, m_fd, 0);
    EXPECT_NE(m_map, MAP_FAILED);
  }
  ~HeaderPoke() {
    ::munmap(m_map, 4096);
    ::close(m_fd);
  }
  detail::SegmentHeader& header() { return *static_cast<detail::SegmentHeader*>(m_map); }
  int fd() const { return m_fd; }

 private:
  int m_fd = -1;
  void* m_map = nullptr;
};

FootprintOut small_footprint(const std::string& id, const std::vector<int16_t>& counts) {
  FootprintOut f;
  f.request_id = id;
  f.layers = 2;
  f.experts = 4;
  f.counts = counts;
  f.prefill_end_ns = 42;
  return f;
}

TEST(shm_transport, a_client_registers_and_its_records_reach_the_handler) {
  TempDir dir("shm");
  auto host = Host::create(small_config(unique_instance("rt"), dir));
  ASSERT_TRUE(host.is_ok()) << host.status().to_string();
  auto sut = Client::open((*host)->config().instance, quick_options());
  ASSERT_TRUE(sut.is_ok()) << sut.status().to_string();
  EXPECT_EQ((*sut)->daemon_generation(), (*host)->generation());
  const std::vector<int16_t> counts{1, 0, 2, 0, 3, 0, 4, 0};
  ASSERT_TRUE((*sut)->push_footprint(small_footprint("r1", counts)).is_ok());
  ASSERT_TRUE((*sut)->push_complete("r1").is_ok());
  ASSERT_TRUE((*sut)->push_worker_report(3, 7, 0.25f).is_ok());
  ASSERT_TRUE((*sut)->push_worker_control(3, WorkerOp::drain).is_ok());
  ASSERT_TRUE((*sut)->push_complete("r2", 0xfeedface12345678ull).is_ok());
  RecordingHandler handler;
  EXPECT_EQ((*host)->poll(handler), 5u);
  // A complete carries its token (0: none, a schema-1 record) and the sender's pid.
  ASSERT_EQ(handler.complete_tokens, (std::vector<uint64_t>{0, 0xfeedface12345678ull}));
  EXPECT_EQ(handler.complete_pids, (std::vector<uint32_t>(2, static_cast<uint32_t>(::getpid()))));
  EXPECT_EQ(handler.footprints.at(0).client_pid, static_cast<uint32_t>(::getpid()));
  ASSERT_EQ(handler.footprints.size(), 1u);
  EXPECT_EQ(handler.footprints[0].request_id, "r1");
  EXPECT_EQ(handler.footprints[0].counts, counts);
  EXPECT_EQ(handler.footprints[0].client, (*sut)->slot());
  EXPECT_EQ(handler.footprints[0].prefill_end_ns, 42u);
  ASSERT_EQ(handler.completes.size(), 2u);
  EXPECT_EQ(handler.completes[0].second, "r1");
  ASSERT_EQ(handler.reports.size(), 1u);
  EXPECT_EQ(handler.reports[0].running, 7u);
  ASSERT_EQ(handler.controls.size(), 1u);
  EXPECT_EQ(handler.controls[0].op, WorkerOp::drain);
  EXPECT_TRUE(handler.rejections.empty());
  auto clients = (*host)->clients();
  ASSERT_EQ(clients.size(), 1u);
  EXPECT_EQ(clients[0].pid, static_cast<uint32_t>(::getpid()));
  EXPECT_EQ(clients[0].records, 5u);
  EXPECT_EQ(clients[0].ring_used, 0u);
}

TEST(shm_transport, a_worker_report_with_a_step_travels_as_schema_2_and_a_plain_one_as_1) {
  TempDir dir("shm");
  auto host = Host::create(small_config(unique_instance("rep"), dir));
  ASSERT_TRUE(host.is_ok()) << host.status().to_string();
  auto sut = Client::open((*host)->config().instance, quick_options());
  ASSERT_TRUE(sut.is_ok()) << sut.status().to_string();
  ASSERT_TRUE((*sut)->push_worker_report(WorkerReportRecord{3, 7, 0.25f, 9, 12.5f}).is_ok());
  ASSERT_TRUE((*sut)->push_worker_report(WorkerReportRecord{4, 1, 0.5f, 0, 0.0f}).is_ok());
  ASSERT_TRUE((*sut)->push_worker_report(5, 2, 0.75f).is_ok());
  EXPECT_EQ((*sut)->push_worker_report(WorkerReportRecord{3, 7, 0.25f, 9, -1.0f}).code(),
            Errc::out_of_range);
  RecordingHandler handler;
  EXPECT_EQ((*host)->poll(handler), 3u);
  ASSERT_EQ(handler.reports.size(), 3u);
  EXPECT_EQ(handler.reports[0].worker, 3u);
  EXPECT_EQ(handler.reports[0].running, 7u);
  EXPECT_EQ(handler.reports[0].batch_size, 9u);
  EXPECT_EQ(handler.reports[0].step_ms, 12.5f);
  EXPECT_EQ(handler.reports[1].batch_size, 0u);
  EXPECT_EQ(handler.reports[2].worker, 5u);
  EXPECT_EQ(handler.reports[2].kv_usage, 0.75f);
  EXPECT_TRUE(handler.rejections.empty());
}

TEST(shm_transport, invalid_input_is_refused_before_it_reaches_the_ring) {
  TempDir dir("shm");
  auto host = Host::create(small_config(unique_instance("inv"), dir));
  ASSERT_TRUE(host.is_ok());
  auto sut = Client::open((*host)->config().instance, quick_options());
  ASSERT_TRUE(sut.is_ok());
  EXPECT_EQ((*sut)->push_footprint(small_footprint("x", {1, 2, 3})).code(), Errc::shape_mismatch);
  EXPECT_EQ((*sut)->push_complete("").code(), Errc::invalid_argument);
  EXPECT_EQ((*sut)->push_worker_report(1, 1, 2.0f).code(), Errc::out_of_range);
  EXPECT_EQ((*sut)->push_worker_control(1, static_cast<WorkerOp>(0)).code(), Errc::out_of_range);
  RecordingHandler handler;
  EXPECT_EQ((*host)->poll(handler), 0u);
}

TEST(shm_transport, a_second_daemon_for_the_same_instance_is_refused) {
  TempDir dir("shm");
  const auto config = small_config(unique_instance("two"), dir);
  auto first = Host::create(config);
  ASSERT_TRUE(first.is_ok());
  auto sut = Host::create(config);
  EXPECT_EQ(sut.status().code(), Errc::state);
  // The first one is untouched.
  EXPECT_TRUE(Client::open(config.instance, quick_options()).is_ok());
}

TEST(shm_transport, a_crashed_daemons_leftover_segment_is_replaced) {
  TempDir dir("shm");
  const auto config = small_config(unique_instance("stale"), dir);
  const std::string name = segment_name(config.instance);
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, 4096), 0);
  ::close(fd);
  auto sut = Host::create(config);
  ASSERT_TRUE(sut.is_ok()) << sut.status().to_string();
  EXPECT_TRUE(Client::open(config.instance, quick_options()).is_ok());
}

TEST(shm_transport, opening_without_a_daemon_is_no_daemon) {
  auto sut = Client::open(unique_instance("none"), quick_options());
  EXPECT_EQ(sut.status().code(), Errc::no_daemon);
  EXPECT_EQ(Client::open("bad/name", quick_options()).status().code(), Errc::invalid_argument);
  EXPECT_EQ(read_snapshot(unique_instance("none")).status().code(), Errc::no_daemon);
}

TEST(shm_transport, foreign_or_damaged_segments_are_refused_with_distinct_errors) {
  TempDir dir("shm");
  const auto config = small_config(unique_instance("compat"), dir);
  auto host = Host::create(config);
  ASSERT_TRUE(host.is_ok());
  HeaderPoke poke(config.instance);
  auto expect_refusal = [&](Errc code, const std::string& words) {
    auto sut = Client::open(config.instance, quick_options());
    ASSERT_FALSE(sut.is_ok());
    EXPECT_EQ(sut.status().code(), code) << sut.status().to_string();
    EXPECT_NE(sut.status().message().find(words), std::string::npos) << sut.status().to_string();
  };
  detail::SegmentHeader& h = poke.header();
  h.magic[0] = 'X';
  expect_refusal(Errc::incompatible, "magic");
  h.magic[0] = 'E';
  h.format_major = kFormatMajor + 1;
  expect_refusal(Errc::incompatible, "major");
  h.format_major = kFormatMajor;
  h.layout_hash ^= 1;
  expect_refusal(Errc::incompatible, "layout hash");
  h.layout_hash ^= 1;
  ASSERT_TRUE(Client::open(config.instance, quick_options()).is_ok());
  ASSERT_EQ(::ftruncate(poke.fd(), static_cast<off_t>(h.segment_size - 4096)), 0);
  expect_refusal(Errc::corrupt, "short file");
}

TEST(shm_transport, a_protocol_violation_quarantines_only_that_client) {
  TempDir dir("shm");
  const auto config = small_config(unique_instance("quar"), dir);
  auto host = Host::create(config);
  ASSERT_TRUE(host.is_ok());
  auto options = quick_options();
  options.reattach = false;
  auto bad = Client::open(config.instance, options);
  auto good = Client::open(config.instance, options);
  ASSERT_TRUE(bad.is_ok() && good.is_ok());
  ASSERT_TRUE((*bad)->push_complete("a").is_ok());
  // Scribble the bad client's producer position (unaligned, beyond capacity).
  auto claim = (*bad)->claim(RecordType::complete, 4);
  ASSERT_TRUE(claim.is_ok());
  reinterpret_cast<std::atomic<uint64_t>*>(claim->commit_word)->store(12345);
  ASSERT_TRUE((*good)->push_complete("b").is_ok());
  RecordingHandler handler;
  (*host)->poll(handler);
  ASSERT_EQ(handler.rejections.size(), 1u);
  EXPECT_EQ(handler.rejections[0].client, (*bad)->slot());
  EXPECT_NE(handler.rejections[0].why.message().find("quarantined"), std::string::npos);
  ASSERT_EQ(handler.completes.size(), 1u);  // "a" was unreadable behind the garbage position
  EXPECT_EQ(handler.completes[0].second, "b");
  for (const ClientInfo& c : (*host)->clients()) EXPECT_EQ(c.quarantined, c.slot == (*bad)->slot());
  // The quarantined client learns of it on its next call; the other flows on.
  EXPECT_EQ((*bad)->push_complete("c").code(), Errc::no_daemon);
  ASSERT_TRUE((*good)->push_complete("d").is_ok());
  (*host)->poll(handler);
  EXPECT_EQ(handler.completes.back().second, "d");
}

// A client that keeps breaking the protocol and registering again must not
// hold the slots of others: a quarantined ring has nothing left to read, so
// its slot is free the moment its client hangs up, and a registration that
// finds no free slot makes the consumer's next poll look for hang-ups (not
// its next 100 ms maintenance).
TEST(shm_transport, a_client_quarantined_again_and_again_leaves_slots_for_others) {
  TempDir dir("shm");
  auto config = small_config(unique_instance("churn"), dir);
  config.max_clients = 2;
  auto host = Host::create(config);
  ASSERT_TRUE(host.is_ok());
  auto options = quick_options();
  options.reattach = false;
  auto honest = Client::open(config.instance, options);
  ASSERT_TRUE(honest.is_ok());
  // The consumer polls and never runs maintain().
  RecordingHandler handler;
  std::atomic<bool> stop{false};
  std::thread consumer([&] {
    while (!stop.load()) {
      (*host)->poll(handler);
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  });
  auto patient = options;
  patient.open_timeout = std::chrono::milliseconds(5000);
  int opened = 0;
  for (int round = 0; round < 20; ++round) {
    auto churner = Client::open(config.instance, patient);
    if (!churner) {
      ADD_FAILURE() << round << ": " << churner.status().to_string();
      break;
    }
    ++opened;
    auto claim = (*churner)->claim(RecordType::complete, 4);
    ASSERT_TRUE(claim.is_ok());
    reinterpret_cast<std::atomic<uint64_t>*>(claim->commit_word)->store(12345);
    // Quarantined once the consumer has read the garbage position.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    auto quarantined = [&] {
      auto snapshot = read_snapshot(config.instance);
      return snapshot && snapshot->clients_quarantined == uint64_t(round) + 1;
    };
    while (!quarantined() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    churner->reset();  // hangs up
  }
  ASSERT_TRUE((*honest)->push_complete("still-here").is_ok());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    auto snapshot = read_snapshot(config.instance);
    if (snapshot && snapshot->clients_quarantined == 20 &&
        std::any_of(snapshot->clients.begin(), snapshot->clients.end(), [&](const ClientInfo& c) {
          return c.slot == (*honest)->slot() && c.records == 1;
        }))
      break;
  }
  stop.store(true);
  consumer.join();
  EXPECT_EQ(opened, 20);
  EXPECT_EQ((*host)->counters().clients_quarantined, 20u);
  ASSERT_FALSE(handler.completes.empty());
  EXPECT_EQ(handler.completes.back().second, "still-here");
  // The churners' slots came back without a maintain(): the 19 whose
  // successor found no free slot; maintain() reports them and frees the last.
  EXPECT_EQ((*host)->maintain().size(), 20u);
  EXPECT_EQ((*host)->clients().size(), 1u);
}

TEST(shm_transport, a_closed_clients_records_are_drained_then_its_slot_reclaimed) {
  TempDir dir("shm");
  const auto config = small_config(unique_instance("reclaim"), dir);
  auto host = Host::create(config);
  ASSERT_TRUE(host.is_ok());
  uint32_t slot = 0;
  {
    auto sut = Client::open(config.instance, quick_options());
    ASSERT_TRUE(sut.is_ok());
    slot = (*sut)->slot();
    for (int i = 0; i < 3; ++i) ASSERT_TRUE((*sut)->push_complete("c" + std::to_string(i)).is_ok());
    EXPECT_TRUE((*host)->maintain().empty());  // alive: lock held
  }
  // Gone with records unread: maintain() waits for the drain.
  EXPECT_TRUE((*host)->maintain().empty());
  RecordingHandler handler;
  EXPECT_EQ((*host)->poll(handler), 3u);
  EXPECT_EQ((*host)->maintain(), std::vector<uint32_t>{slot});
  EXPECT_TRUE((*host)->clients().empty());
  // The slot is offered again, with a new epoch.
  auto next = Client::open(config.instance, quick_options());
  ASSERT_TRUE(next.is_ok());
  EXPECT_EQ((*next)->slot(), slot);
  ASSERT_TRUE((*next)->push_complete("again").is_ok());
  EXPECT_EQ((*host)->poll(handler), 1u);
  EXPECT_EQ(handler.completes.back().second, "again");
  EXPECT_EQ((*host)->clients().at(0).epoch, 2u);
}

// An exited client's slot is free only once the daemon's maintenance has
// reclaimed it (every 100 ms in eldrd): open waits for that, within its
// open_timeout, but not for slots that live clients hold.
TEST(shm_transport, all_slots_taken_is_capacity_and_open_waits_only_for_exited_clients_slots) {
  TempDir dir("shm");
  auto config = small_config(unique_instance("full"), dir);
  config.max_clients = 2;
  auto host = Host::create(config);
  ASSERT_TRUE(host.is_ok());
  auto a = Client::open(config.instance, quick_options());
  auto b = Client::open(config.instance, quick_options());
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  EXPECT_NE((*a)->slot(), (*b)->slot());
  ClientOptions patient = quick_options();
  patient.open_timeout = std::chrono::milliseconds(10'000);
  // Held by live clients: capacity at once, not after the 10 s.
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(Client::open(config.instance, patient).status().code(), Errc::capacity);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));

  b.value().reset();  // exited, its slot not reclaimed yet
  const Status refused = Client::open(config.instance, quick_options()).status();
  EXPECT_EQ(refused.code(), Errc::capacity);
  EXPECT_NE(refused.message().find("1 by exited clients"), std::string::npos) << refused.message();
  std::thread daemon([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    (*host)->maintain();
  });
  auto reopened = Client::open(config.instance, patient);
  daemon.join();
  EXPECT_TRUE(reopened.is_ok()) << reopened.status().to_string();
}

TEST(shm_transport, a_client_follows_a_restarted_daemon) {
  TempDir dir("shm");
  const auto config = small_config(unique_instance("restart"), dir);
  auto host = Host::create(config);
  ASSERT_TRUE(host.is_ok());
  auto sut = Client::open(config.instance, quick_options());
  ASSERT_TRUE(sut.is_ok());
  const uint64_t first_generation = (*sut)->daemon_generation();
  host = Status{Errc::state, "stopped"};  // ~Host: DRAINING, unlink
  EXPECT_EQ((*sut)->push_complete("lost").code(), Errc::no_daemon);
  auto restarted = Host::create(config);
  ASSERT_TRUE(restarted.is_ok()) << restarted.status().to_string();
  ASSERT_TRUE((*sut)->push_complete("after").is_ok());
  EXPECT_EQ((*sut)->reattachments(), 1u);
  EXPECT_EQ((*sut)->daemon_generation(), (*restarted)->generation());
  EXPECT_NE((*sut)->daemon_generation(), first_generation);
  RecordingHandler handler;
  EXPECT_EQ((*restarted)->poll(handler), 1u);
  EXPECT_EQ(handler.completes.at(0).second, "after");
}

TEST(shm_transport, without_reattach_a_restarted_daemon_is_no_daemon) {
  TempDir dir("shm");
  const auto config = small_config(unique_instance("noreattach"), dir);
  auto host = Host::create(config);
  ASSERT_TRUE(host.is_ok());
  auto options = quick_options();
  options.reattach = false;
  auto sut = Client::open(config.instance, options);
  ASSERT_TRUE(sut.is_ok());
  host = Status{Errc::state, "stopped"};
  auto restarted = Host::create(config);
  ASSERT_TRUE(restarted.is_ok());
  EXPECT_EQ((*sut)->push_complete("x").code(), Errc::no_daemon);
  EXPECT_EQ((*sut)->reattachments(), 0u);
}

TEST(shm_transport, a_segment_unlinked_under_the_daemon_is_recreated) {
  TempDir dir("shm");
  const auto config = small_config(unique_instance("unlink"), dir);
  auto host = Host::create(config);
  ASSERT_TRUE(host.is_ok());
  auto sut = Client::open(config.instance, quick_options());
  ASSERT_TRUE(sut.is_ok());
  const uint64_t before = (*host)->generation();
  ASSERT_EQ(::shm_unlink(segment_name(config.instance).c_str()), 0);
  (*host)->maintain();
  EXPECT_NE((*host)->generation(), before);
  ASSERT_TRUE((*sut)->push_complete("moved").is_ok());
  EXPECT_EQ((*sut)->reattachments(), 1u);
  RecordingHandler handler;
  EXPECT_EQ((*host)->poll(handler), 1u);
  auto snapshot = read_snapshot(config.instance);
  ASSERT_TRUE(snapshot.is_ok());
  EXPECT_EQ(snapshot->generation, (*host)->generation());
}

TEST(shm_transport, a_stale_heartbeat_means_no_daemon) {
  TempDir dir("shm");
  const auto config = small_config(unique_instance("stale_hb"), dir);
  auto host = Host::create(config);
  ASSERT_TRUE(host.is_ok());
  auto options = quick_options();
  options.daemon_stale = std::chrono::milliseconds(30);
  options.reattach = false;
  auto sut = Client::open(config.instance, options);
  ASSERT_TRUE(sut.is_ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  Status s = (*sut)->push_complete("late");
  EXPECT_EQ(s.code(), Errc::no_daemon);
  EXPECT_NE(s.message().find("heartbeat"), std::string::npos);
}

TEST(shm_transport, the_doorbell_wakes_a_sleeping_daemon) {
  TempDir dir("shm");
  const auto config = small_config(unique_instance("bell"), dir);
  auto host = Host::create(config);
  ASSERT_TRUE(host.is_ok());
  auto sut = Client::open(config.instance, quick_options());
  ASSERT_TRUE(sut.is_ok());
  // Nothing to do: returns after the timeout.
  (*host)->wait_for_work(std::chrono::microseconds(1000));
  std::thread producer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_TRUE((*sut)->push_complete("ding").is_ok());
  });
  RecordingHandler handler;
  // A generous timeout: a lost doorbell shows up as a missing record, not a hang.
  for (int i = 0; i < 100 && handler.completes.empty(); ++i) {
    (*host)->wait_for_work(std::chrono::seconds(10));
    (*host)->poll(handler);
  }
  producer.join();
  ASSERT_EQ(handler.completes.size(), 1u);
}

TEST(shm_transport, two_phase_claims_commit_in_order_and_block_cpu_pushes_while_pending) {
  TempDir dir("shm");
  Pair e(dir, "claim");
  ASSERT_TRUE(e.ready());
  auto first = e.client->claim(RecordType::complete, 5);
  auto second = e.client->claim(RecordType::complete, 3);
  ASSERT_TRUE(first.is_ok() && second.is_ok());
  EXPECT_LT(first->commit_position, second->commit_position);
  std::memcpy(first->payload.data(), "abcde", 5);
  std::memcpy(second->payload.data(), "xyz", 3);
  RecordingHandler handler;
  EXPECT_EQ(e.host->poll(handler), 0u);  // claimed is not committed
  // Committing the second first would publish the first with it.
  EXPECT_EQ(e.client->commit(*second).code(), Errc::state);
  // A CPU record would publish the pending claims too.
  EXPECT_EQ(e.client->push_complete("cpu").code(), Errc::state);
  ASSERT_TRUE(e.client->commit(*first).is_ok());
  EXPECT_EQ(e.client->commit(*first).code(), Errc::state);
  EXPECT_EQ(e.host->poll(handler), 1u);
  ASSERT_TRUE(e.client->commit(*second).is_ok());
  ASSERT_TRUE(e.client->push_complete("cpu").is_ok());
  EXPECT_EQ(e.host->poll(handler), 2u);
  EXPECT_EQ(completed(handler), (std::vector<std::string>{"abcde", "xyz", "cpu"}));
  EXPECT_TRUE(handler.rejections.empty());
}

// The GPU path: claims made back to back without waiting, one store of the
// last commit position publishes them all (unchecksummed), and the client
// settles them on its next call.
TEST(shm_transport, an_external_writer_publishes_several_pending_claims_with_one_store) {
  TempDir dir("shm");
  Pair e(dir, "extclaim");
  ASSERT_TRUE(e.ready());
  std::vector<Client::Claim> claims;
  for (const char* text : {"one", "two", "three"}) {
    auto c = e.client->claim(RecordType::complete, std::strlen(text));
    ASSERT_TRUE(c.is_ok()) << c.status().to_string();
    std::memcpy(c->payload.data(), text, std::strlen(text));
    claims.push_back(*c);
  }
  RecordingHandler handler;
  EXPECT_EQ(e.host->poll(handler), 0u);
  reinterpret_cast<std::atomic<uint64_t>*>(claims.back().commit_word)
      ->store(claims.back().commit_position, std::memory_order_release);
  EXPECT_EQ(e.host->poll(handler), 3u);
  // Settled: the CPU path flows again, and a committed claim is not pending.
  ASSERT_TRUE(e.client->push_complete("four").is_ok());
  EXPECT_EQ(e.client->abort(claims[0]).code(), Errc::state);
  EXPECT_EQ(e.host->poll(handler), 1u);
  EXPECT_EQ(completed(handler), (std::vector<std::string>{"one", "two", "three", "four"}));
  EXPECT_TRUE(handler.rejections.empty());
}

TEST(shm_transport, abort_drops_the_claim_and_every_later_one_and_the_ring_stays_in_sequence) {
  TempDir dir("shm");
  Pair e(dir, "abort");
  ASSERT_TRUE(e.ready());
  auto kept = e.client->claim(RecordType::complete, 4);
  auto dropped = e.client->claim(RecordType::complete, 600);
  auto later = e.client->claim(RecordType::complete, 7);
  ASSERT_TRUE(kept.is_ok() && dropped.is_ok() && later.is_ok());
  // Another client's claim is not pending here: neither aborted nor committed.
  auto other = Client::open(e.host->config().instance, quick_options());
  ASSERT_TRUE(other.is_ok()) << other.status().to_string();
  EXPECT_EQ((*other)->abort(*kept).code(), Errc::state);
  EXPECT_EQ((*other)->commit(*kept).code(), Errc::state);
  std::memcpy(kept->payload.data(), "kept", 4);
  std::memset(dropped->payload.data(), 'D', 600);
  ASSERT_TRUE(e.client->abort(*dropped).is_ok());
  EXPECT_EQ(e.client->abort(*dropped).code(), Errc::state);
  EXPECT_EQ(e.client->commit(*later).code(), Errc::state);  // went with `dropped`
  // The next claim takes the aborted one's place and sequence number.
  auto next = e.client->claim(RecordType::complete, 4);
  ASSERT_TRUE(next.is_ok());
  EXPECT_EQ(next->payload.data(), dropped->payload.data());
  std::memcpy(next->payload.data(), "next", 4);
  ASSERT_TRUE(e.client->commit(*kept).is_ok());
  ASSERT_TRUE(e.client->commit(*next).is_ok());
  RecordingHandler handler;
  EXPECT_EQ(e.host->poll(handler), 2u);
  EXPECT_EQ(completed(handler), (std::vector<std::string>{"kept", "next"}));
  EXPECT_TRUE(handler.rejections.empty());  // no gap in the sequence numbers
}

// Pending claims count against the ring: they are never handed out twice.
TEST(shm_transport, pending_claims_fill_the_ring_until_ring_full) {
  TempDir dir("shm");
  Pair e(dir, "claimfull");
  ASSERT_TRUE(e.ready());
  const size_t payload = e.host->config().ring_bytes / 16;
  std::vector<Client::Claim> claims;
  Status refused;
  for (int i = 0; i < 64; ++i) {
    auto c = e.client->claim(RecordType::complete, payload);
    if (!c) {
      refused = c.status();
      break;
    }
    claims.push_back(*c);
  }
  EXPECT_EQ(refused.code(), Errc::ring_full);
  EXPECT_EQ(claims.size(), 15u);  // 16 records of ring/16 bytes plus headers do not fit
  for (size_t i = 1; i < claims.size(); ++i)
    EXPECT_GE(claims[i].commit_position - claims[i - 1].commit_position, payload);
  EXPECT_LE(claims.back().commit_position, e.host->config().ring_bytes);
  ASSERT_TRUE(e.client->abort(claims.front()).is_ok());
  EXPECT_TRUE(e.client->claim(RecordType::complete, payload).is_ok());
}

// A GPU writer page-locks Claim::ring, not the whole segment: it holds the
// payload and the commit word wherever the ring has wrapped, and it is no
// other client's ring.
TEST(shm_transport, a_claims_ring_is_whole_pages_holding_the_claim_and_no_other_clients_ring) {
  TempDir dir("shm");
  Pair e(dir, "claimring");
  ASSERT_TRUE(e.ready());
  auto other = Client::open(e.host->config().instance, quick_options());
  ASSERT_TRUE(other.is_ok()) << other.status().to_string();
  auto theirs = (*other)->claim(RecordType::complete, 8);
  ASSERT_TRUE(theirs.is_ok());
  const auto holds = [](std::span<uint8_t> ring, const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    return b >= ring.data() && b + n <= ring.data() + ring.size();
  };
  const size_t ring_bytes = e.host->config().ring_bytes;
  const size_t payload = ring_bytes / 10;
  RecordingHandler handler;
  for (int i = 0; i < 25; ++i) {  // wraps the ring twice
    auto c = e.client->claim(RecordType::complete, payload);
    ASSERT_TRUE(c.is_ok()) << c.status().to_string();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(c->ring.data()) % 4096, 0u);
    EXPECT_EQ(c->ring.size(), 4096 + ring_bytes);  // the positions' page, then the data
    EXPECT_TRUE(holds(c->ring, c->payload.data(), c->payload.size())) << i;
    EXPECT_TRUE(holds(c->ring, c->commit_word, sizeof(uint64_t))) << i;
    EXPECT_FALSE(holds(c->ring, theirs->payload.data(), 1));
    EXPECT_FALSE(holds(c->ring, theirs->commit_word, 1));
    EXPECT_TRUE(c->ring.data() + c->ring.size() <= theirs->ring.data() ||
                theirs->ring.data() + theirs->ring.size() <= c->ring.data());
    std::memset(c->payload.data(), 'r', c->payload.size());
    ASSERT_TRUE(e.client->commit(*c).is_ok());
    EXPECT_EQ(e.host->poll(handler), 1u);
  }
}

// A writer that commits without the client (the GPU) rings the doorbell
// through the callable, which works after the client is gone.
TEST(shm_transport, the_doorbell_callable_wakes_a_sleeping_daemon_after_an_external_commit) {
  TempDir dir("shm");
  Pair e(dir, "extbell");
  ASSERT_TRUE(e.ready());
  auto c = e.client->claim(RecordType::complete, 3);
  ASSERT_TRUE(c.is_ok());
  std::memcpy(c->payload.data(), "gpu", 3);
  std::function<void()> ring = e.client->doorbell();
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the daemon is asleep by now
    reinterpret_cast<std::atomic<uint64_t>*>(c->commit_word)
        ->store(c->commit_position, std::memory_order_release);
    e.client.reset();  // the closure keeps the segment mapped
    ring();
  });
  const auto start = std::chrono::steady_clock::now();
  e.host->wait_for_work(std::chrono::seconds(20));
  const auto waited = std::chrono::steady_clock::now() - start;
  writer.join();
  // Without the doorbell the wait would last its whole 20 s.
  EXPECT_LT(waited, std::chrono::seconds(10));
  RecordingHandler handler;
  e.host->poll(handler);
  EXPECT_EQ(completed(handler), std::vector<std::string>{"gpu"});
  // The closed client's slot stays locked while the callable lives: a late
  // commit can never land in a ring the daemon gave to another client.
  EXPECT_TRUE(e.host->maintain().empty());
  ring = nullptr;
  EXPECT_EQ(e.host->maintain().size(), 1u);
}

TEST(shm_transport, the_snapshot_shows_clients_workers_and_state) {
  TempDir dir("shm");
  const auto config = small_config(unique_instance("snap"), dir);
  auto host = Host::create(config);
  ASSERT_TRUE(host.is_ok());
  auto sut = Client::open(config.instance, quick_options());
  ASSERT_TRUE(sut.is_ok());
  ASSERT_TRUE((*sut)->push_complete("pending").is_ok());
  std::vector<Host::WorkerRow> rows(2);
  rows[0].worker = 0;
  rows[0].running = 3;
  rows[1].worker = 1;
  rows[1].kv_usage = 0.5f;
  rows[1].routed = 99;
  (*host)->publish_workers(rows, 17);
  (*host)->publish("pending", DecisionIn{});
  (*host)->maintain();  // publishes each ring's fill level
  auto snapshot = read_snapshot(config.instance);
  ASSERT_TRUE(snapshot.is_ok()) << snapshot.status().to_string();
  EXPECT_EQ(snapshot->state, "ready");
  EXPECT_EQ(snapshot->format_major, kFormatMajor);
  EXPECT_EQ(snapshot->generation, (*host)->generation());
  EXPECT_EQ(snapshot->daemon_pid, static_cast<uint32_t>(::getpid()));
  EXPECT_EQ(snapshot->table_epoch, 17u);
  EXPECT_EQ(snapshot->decisions_published, 1u);
  ASSERT_EQ(snapshot->clients.size(), 1u);
  EXPECT_GT(snapshot->clients[0].ring_used, 0u);
  EXPECT_EQ(snapshot->clients[0].pid, static_cast<uint32_t>(::getpid()));
  EXPECT_EQ(snapshot->clients[0].uid, static_cast<uint32_t>(::geteuid()));
  ASSERT_EQ(snapshot->workers.size(), 2u);
  EXPECT_EQ(snapshot->workers[0].running, 3u);
  EXPECT_EQ(snapshot->workers[1].routed, 99u);
  EXPECT_EQ(snapshot->format_minor, kFormatMinor);
  EXPECT_FALSE(snapshot->router.has_value());  // not published yet

  // The router's state and each worker's batch footprint.
  rows[1].batch_experts = 5.5f;
  Host::RouterRow router;
  router.policy = 7;
  router.t0_ms = 2.5;
  router.tseq_ms = 0.04;
  router.alpha_us = 1.5;
  router.max_batch = 32;
  router.step_samples = 11;
  router.completes_unknown = 3;
  router.untracked = 2;
  (*host)->publish_workers(rows, 18, router);
  snapshot = read_snapshot(config.instance);
  ASSERT_TRUE(snapshot.is_ok()) << snapshot.status().to_string();
  EXPECT_EQ(snapshot->table_epoch, 18u);
  ASSERT_EQ(snapshot->workers.size(), 2u);
  EXPECT_EQ(snapshot->workers[1].batch_experts, 5.5f);
  ASSERT_TRUE(snapshot->router.has_value());
  EXPECT_EQ(snapshot->router->policy, 7u);
  EXPECT_EQ(snapshot->router->t0_ms, 2.5);
  EXPECT_EQ(snapshot->router->tseq_ms, 0.04);
  EXPECT_EQ(snapshot->router->alpha_us, 1.5);
  EXPECT_EQ(snapshot->router->max_batch, 32u);
  EXPECT_EQ(snapshot->router->step_samples, 11u);
  EXPECT_EQ(snapshot->router->completes_unknown, 3u);
  EXPECT_EQ(snapshot->router->untracked, 2u);
}

TEST(shm_transport, bad_configurations_are_refused) {
  TempDir dir("shm");
  auto config = small_config(unique_instance("cfg"), dir);
  config.ring_bytes = 100000;
  EXPECT_EQ(Host::create(config).status().code(), Errc::invalid_argument);
  config = small_config(unique_instance("cfg"), dir);
  config.decision_slots = 100;
  EXPECT_EQ(Host::create(config).status().code(), Errc::invalid_argument);
  config = small_config(unique_instance("cfg"), dir);
  config.group = "no-such-group-eldr";
  EXPECT_EQ(Host::create(config).status().code(), Errc::permission);
  config = small_config("", dir);
  EXPECT_EQ(Host::create(config).status().code(), Errc::invalid_argument);
}

// A full /dev/shm fails at creation with out_of_memory, never SIGBUS later.
// The segment (decisions and rows; the rings are memfds of their own) is far
// smaller than this machine's /dev/shm, so the test makes a small one: a
// forked child mounts a 1 MiB tmpfs over /dev/shm in a mount namespace of
// its own (needs root; skipped otherwise).
TEST(shm_transport, a_segment_larger_than_dev_shm_fails_at_creation_with_out_of_memory) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to mount a small /dev/shm in a namespace";
  TempDir dir("shm");
  const std::string instance = unique_instance("huge");
  const std::string lock_dir = dir.path().string();
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int code = 0;
    if (::unshare(CLONE_NEWNS) != 0 ||
        ::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=1m") != 0)
      ::_exit(10);
    SegmentConfig config;
    config.instance = instance;
    config.lock_dir = lock_dir;
    config.decision_slots = 1u << 16;  // 12 MiB of decisions
    auto sut = Host::create(config);
    if (sut.is_ok())
      code = 1;
    else if (sut.status().code() != Errc::out_of_memory)
      code = 2;
    else if (sut.status().message().find("/dev/shm") == std::string::npos)
      code = 3;
    // Nothing is left behind: a daemon that fits starts right after.
    config.decision_slots = 64;
    config.max_clients = 2;
    config.max_workers = 4;
    if (code == 0 && !Host::create(config).is_ok()) code = 4;
    ::_exit(code);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 10) GTEST_SKIP() << "cannot mount a tmpfs in a new mount namespace";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: created anyway, 2: another error, 3: no hint, "
                                       "4: a fitting daemon could not start after";
}

// Per-writer memory: the segment is the daemon's alone (mode r--, mapped
// read-only by clients), and each client's ring is a sealed memfd only that
// client and the daemon map. Read from this process's own mappings.
TEST(shm_transport, clients_map_the_daemons_segment_read_only_and_only_their_own_ring) {
  TempDir dir("shm");
  auto config = small_config(unique_instance("ro"), dir);
  config.mode = 0660;
  auto host = Host::create(config);
  ASSERT_TRUE(host.is_ok());
  struct stat st {};
  ASSERT_EQ(::stat(("/dev/shm" + segment_name(config.instance)).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0440u);
  ASSERT_EQ(::stat((config.lock_dir + "/eldr-v2-" + config.instance + ".sock").c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  ASSERT_EQ(::stat((config.lock_dir + "/eldr-v2-" + config.instance + ".lock").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  auto mappings = [&](const std::string& needle) {
    std::vector<std::string> perms;
    std::ifstream maps("/proc/self/maps");
    for (std::string line; std::getline(maps, line);)
      if (line.find(needle) != std::string::npos)
        perms.push_back(line.substr(line.find(' ') + 1, 4));
    return perms;
  };
  const std::string segment = "/dev/shm" + segment_name(config.instance);
  EXPECT_EQ(mappings(segment), std::vector<std::string>{"rw-s"});  // the daemon's only
  auto a = Client::open(config.instance, quick_options());
  auto b = Client::open(config.instance, quick_options());
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  auto perms = mappings(segment);
  std::sort(perms.begin(), perms.end());
  EXPECT_EQ(perms, (std::vector<std::string>{"r--s", "r--s", "rw-s"}));
  // Two rings, each mapped twice (its client and the daemon); no ring fd
  // stays open in either side (nothing to find in /proc/<pid>/fd). The
  // daemon's registrar closes its copy just after the welcome, which the
  // client may read first: "stays" is within a second.
  EXPECT_EQ(mappings("/memfd:eldr-ring").size(), 4u);
  auto open_ring_fds = [] {
    std::vector<std::string> found;
    for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
      std::error_code ec;
      const auto target = std::filesystem::read_symlink(entry.path(), ec).string();
      if (target.find("eldr-ring") != std::string::npos) found.push_back(target);
    }
    return found;
  };
  const auto fd_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (!open_ring_fds().empty() && std::chrono::steady_clock::now() < fd_deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(open_ring_fds(), std::vector<std::string>{});
  // A claim's ring is all a client can write: its own ring memory.
  auto claim = (*a)->claim(RecordType::complete, 8);
  ASSERT_TRUE(claim.is_ok());
  const auto* ring = claim->ring.data();
  bool in_a_ring_mapping = false;
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    uintptr_t lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) != 2) continue;
    if (reinterpret_cast<uintptr_t>(ring) >= lo && reinterpret_cast<uintptr_t>(ring) < hi)
      in_a_ring_mapping = line.find("/memfd:eldr-ring") != std::string::npos;
  }
  EXPECT_TRUE(in_a_ring_mapping);
  ASSERT_TRUE((*a)->abort(*claim).is_ok());
}

// What travels over the socket before a ring is handed out is checked: a
// client of another format or layout is refused naming both versions, a
// peer that says anything else is refused, and each refusal is counted.
TEST(shm_transport, hellos_of_another_version_or_garbage_are_refused_and_counted) {
  TempDir dir("shm");
  const auto config = small_config(unique_instance("hello"), dir);
  auto host = Host::create(config);
  ASSERT_TRUE(host.is_ok());
  const std::string path = config.lock_dir + "/eldr-v2-" + config.instance + ".sock";
  // The path is longer than a sockaddr_un holds: reach it through its directory.
  const int dir_fd = ::open(config.lock_dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(dir_fd, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof a.sun_path, "/proc/self/fd/%d/%s", dir_fd,
                path.substr(path.rfind('/') + 1).c_str());
  auto answer = [&](const void* hello, size_t size) {
    detail::WelcomeMsg w{};
    const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << std::strerror(errno);
    EXPECT_EQ(::send(fd, hello, size, MSG_NOSIGNAL), static_cast<ssize_t>(size));
    pollfd p{fd, POLLIN, 0};
    EXPECT_EQ(::poll(&p, 1, 2000), 1);
    EXPECT_EQ(::recv(fd, &w, sizeof w, 0), static_cast<ssize_t>(sizeof w));
    ::close(fd);
    w.message[sizeof w.message - 1] = '\0';
    return w;
  };
  detail::HelloMsg hello{};
  std::memcpy(hello.magic, detail::kHelloMagic, sizeof hello.magic);
  hello.format_major = 1;
  hello.layout_hash = detail::kLayoutHash;
  auto w = answer(&hello, sizeof hello);
  EXPECT_EQ(w.status, static_cast<int32_t>(Errc::incompatible));
  EXPECT_NE(std::string(w.message).find("format version 1, this eldrd speaks version 2"),
            std::string::npos)
      << w.message;
  hello.format_major = kFormatMajor;
  hello.layout_hash ^= 1;
  w = answer(&hello, sizeof hello);
  EXPECT_EQ(w.status, static_cast<int32_t>(Errc::incompatible));
  EXPECT_NE(std::string(w.message).find("layout hash"), std::string::npos) << w.message;
  const char garbage[] = "GET / HTTP/1.1\r\n\r\n";
  w = answer(garbage, sizeof garbage);
  EXPECT_EQ(w.status, static_cast<int32_t>(Errc::incompatible));
  EXPECT_NE(std::string(w.message).find("not an eldr hello"), std::string::npos) << w.message;
  auto snapshot = read_snapshot(config.instance);
  ASSERT_TRUE(snapshot.is_ok());
  EXPECT_EQ(snapshot->registrations_refused, 3u);
  EXPECT_TRUE(snapshot->clients.empty());
  // A peer that connects and never says hello holds nothing: a real client
  // registers next to it.
  const int silent = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  ASSERT_EQ(::connect(silent, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  EXPECT_TRUE(Client::open(config.instance, quick_options()).is_ok());
  ::close(silent);
  ::close(dir_fd);
}

// A client of format 1 looks for /eldr-v1-<instance>: the daemon leaves a
// page there saying format 2, so such a client fails with "segment format
// major version 2, this build reads version 1" (Errc::incompatible) rather
// than a bare "no daemon". The page is removed with the daemon.
TEST(shm_transport, a_format_1_client_finds_a_page_naming_format_2) {
  TempDir dir("shm");
  const auto config = small_config(unique_instance("tomb"), dir);
  const std::string v1 = "/eldr-v1-" + config.instance;
  {
    auto host = Host::create(config);
    ASSERT_TRUE(host.is_ok());
    const int fd = ::shm_open(v1.c_str(), O_RDWR, 0);  // as a format-1 client opens it
    ASSERT_GE(fd, 0) << std::strerror(errno);
    void* page = ::mmap(nullptr, 4096, PROT_READ, MAP_SHARED, fd, 0);
    ASSERT_NE(page, MAP_FAILED);
    const auto* h = static_cast<const detail::SegmentHeader*>(page);
    EXPECT_EQ(std::memcmp(h->magic, detail::kMagic, sizeof detail::kMagic), 0);
    EXPECT_EQ(h->format_major, 2u);  // at offset 8 in every format
    ::munmap(page, 4096);
    ::close(fd);
  }
  EXPECT_LT(::shm_open(v1.c_str(), O_RDONLY, 0), 0);
  // A name a format-1 daemon holds is left alone.
  const int theirs = ::shm_open(v1.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(theirs, 0);
  ASSERT_EQ(::ftruncate(theirs, 4096), 0);
  {
    auto host = Host::create(config);
    ASSERT_TRUE(host.is_ok());
  }
  struct stat st {};
  EXPECT_EQ(::fstat(theirs, &st), 0);
  EXPECT_EQ(st.st_nlink, 1u);  // still there
  ::close(theirs);
  ::shm_unlink(v1.c_str());
}

}  // namespace
}  // namespace eldr::shm
