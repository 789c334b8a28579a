// Real processes: a producer SIGKILLed in the middle of a write is reaped and
// its slot reclaimed while another producer flows on without loss; a daemon
// SIGKILLed and restarted is followed by an existing client.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <map>
#include <thread>

#include "eldr/shm.hpp"
#include "shm_test_support.hpp"

namespace eldr::shm {
namespace {

using eldr::testing::RecordingHandler;
using eldr::testing::small_config;
using eldr::testing::TempDir;
using eldr::testing::unique_instance;

// Pushes with retry on back-pressure; false on any other error.
bool push_retrying(Client& client, const std::string& id) {
  for (;;) {
    Status s = client.push_complete(id);
    if (s.is_ok()) return true;
    if (s.code() != Errc::ring_full) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

// Runs body in a child process; the child exits with body's return code.
template <class Body>
pid_t spawn(Body body) {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(body());
  return pid;
}

int exit_code(pid_t pid) {
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

struct Pipe {
  Pipe() { EXPECT_EQ(::pipe(fds), 0); }
  ~Pipe() {
    ::close(fds[0]);
    ::close(fds[1]);
  }
  void signal() const { EXPECT_EQ(::write(fds[1], "x", 1), 1); }
  bool wait_readable(int timeout_ms) const {
    fd_set set;
    FD_ZERO(&set);
    FD_SET(fds[0], &set);
    timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    if (::select(fds[0] + 1, &set, nullptr, nullptr, &tv) != 1) return false;
    char c;
    return ::read(fds[0], &c, 1) == 1;
  }
  int fds[2] = {-1, -1};
};

TEST(shm_process, a_producer_killed_mid_write_is_reaped_while_another_flows_on) {
  TempDir dir("shm");
  const auto config = small_config(unique_instance("kill"), dir);
  auto host = Host::create(config);
  ASSERT_TRUE(host.is_ok());
  constexpr int kVictimRecords = 40, kFirstBurst = 3000, kSecondBurst = 2000;
  Pipe victim_ready, survivor_go;

  const pid_t victim = spawn([&] {
    auto c = Client::open(config.instance);
    if (!c) return 2;
    for (int i = 0; i < kVictimRecords; ++i)
      if (!push_retrying(**c, "A-" + std::to_string(i))) return 3;
    // Half a record, never committed: the kill lands in the middle of a write.
    auto claim = (*c)->claim(RecordType::complete, 64);
    if (!claim) return 4;
    std::memset(claim->payload.data(), 'Z', 32);
    victim_ready.signal();
    for (;;) ::pause();
  });
  const pid_t survivor = spawn([&] {
    auto c = Client::open(config.instance);
    if (!c) return 2;
    int i = 0;
    for (; i < kFirstBurst; ++i)
      if (!push_retrying(**c, "B-" + std::to_string(i))) return 3;
    if (!survivor_go.wait_readable(20000)) return 5;  // after the victim's slot is reclaimed
    for (; i < kFirstBurst + kSecondBurst; ++i)
      if (!push_retrying(**c, "B-" + std::to_string(i))) return 3;
    return 0;
  });

  RecordingHandler handler;
  bool killed = false, reclaimed = false;
  std::map<std::string, int> next;  // per producer prefix: next expected number
  std::map<uint32_t, std::string> prefix_of_slot;
  uint32_t victim_slot = UINT32_MAX;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    (*host)->poll(handler);
    for (const auto& [slot, id] : handler.completes) {
      const std::string prefix = id.substr(0, 1);
      ASSERT_EQ(id, prefix + "-" + std::to_string(next[prefix])) << "lost or reordered";
      ++next[prefix];
      prefix_of_slot[slot] = prefix;
      if (prefix == "A") victim_slot = slot;
    }
    handler.completes.clear();
    // Kill while the survivor is registered and flowing.
    if (!killed && next["B"] > 100 && victim_ready.wait_readable(0)) {
      ASSERT_EQ(::kill(victim, SIGKILL), 0);
      EXPECT_EQ(exit_code(victim), 128 + SIGKILL);
      killed = true;
    }
    if (killed && !reclaimed) {
      for (uint32_t slot : (*host)->maintain())
        if (slot == victim_slot) {
          reclaimed = true;
          survivor_go.signal();
        }
    }
    if (reclaimed && next["B"] == kFirstBurst + kSecondBurst) break;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  EXPECT_TRUE(killed);
  EXPECT_TRUE(reclaimed);
  EXPECT_EQ(next["A"], kVictimRecords);
  EXPECT_EQ(next["B"], kFirstBurst + kSecondBurst);
  EXPECT_TRUE(handler.rejections.empty());
  if (!reclaimed) survivor_go.signal();
  EXPECT_EQ(exit_code(survivor), 0);
  // Only the survivor is left registered, its ring drained.
  auto clients = (*host)->clients();
  for (const ClientInfo& c : clients) EXPECT_NE(c.slot, victim_slot);
}

TEST(shm_process, a_client_follows_a_daemon_that_was_killed_and_restarted) {
  TempDir dir("shm");
  const auto config = small_config(unique_instance("daemon"), dir);
  Pipe daemon_ready;
  const pid_t daemon = spawn([&] {
    auto host = Host::create(config);
    if (!host) return 2;
    daemon_ready.signal();
    RecordingHandler sink;
    for (;;) {
      (*host)->poll(sink);
      (*host)->maintain();
      sink.completes.clear();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  ASSERT_TRUE(daemon_ready.wait_readable(20000));
  ClientOptions options;
  options.daemon_stale = std::chrono::milliseconds(200);
  auto sut = Client::open(config.instance, options);
  ASSERT_TRUE(sut.is_ok()) << sut.status().to_string();
  const uint64_t first_generation = (*sut)->daemon_generation();
  ASSERT_TRUE((*sut)->push_complete("before").is_ok());

  ASSERT_EQ(::kill(daemon, SIGKILL), 0);
  EXPECT_EQ(exit_code(daemon), 128 + SIGKILL);
  // The kernel released the dead daemon's lock: a new one starts at once and
  // replaces the leftover segment.
  auto restarted = Host::create(config);
  ASSERT_TRUE(restarted.is_ok()) << restarted.status().to_string();
  // Records pushed before the client notices are lost with the dead daemon
  // (as are those it had not read yet); the call that notices re-attaches
  // and lands in the new segment.
  int pushes = 0;
  std::string last;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while ((*sut)->reattachments() == 0 && std::chrono::steady_clock::now() < deadline) {
    last = "after-" + std::to_string(pushes++);
    Status s = (*sut)->push_complete(last);
    EXPECT_TRUE(s.is_ok() || s.code() == Errc::no_daemon) << s.to_string();
    (*restarted)->maintain();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ((*sut)->reattachments(), 1u);
  EXPECT_NE((*sut)->daemon_generation(), first_generation);
  EXPECT_EQ((*sut)->daemon_generation(), (*restarted)->generation());
  RecordingHandler handler;
  EXPECT_EQ((*restarted)->poll(handler), 1u);
  EXPECT_EQ(handler.completes.at(0).second, last);
}

}  // namespace
}  // namespace eldr::shm
