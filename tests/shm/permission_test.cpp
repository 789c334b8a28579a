// Permissions across users (format 2): the daemon's segment is mode 0440
// and its registration socket 0660, both with the daemon's group or a
// configured one; the lock file is the daemon's alone (0600). A process
// outside that group is refused with Errc::permission and a message naming
// what it could not open, never a crash or a generic error; a member of the
// group attaches and pushes, yet cannot open the segment or the lock file
// for writing, and the daemon knows its pid from the kernel (SO_PEERCRED).
//
// The client runs in a forked child that drops to an unprivileged uid
// (nobody) with chosen supplementary groups, so the test needs root; as any
// other user it is skipped.
#include <fcntl.h>
#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "eldr/shm.hpp"
#include "shm_test_support.hpp"

namespace eldr::shm {
namespace {

using eldr::testing::RecordingHandler;
using eldr::testing::small_config;
using eldr::testing::TempDir;
using eldr::testing::unique_instance;

constexpr uid_t kUnprivilegedUid = 65534;  // nobody
constexpr gid_t kUnprivilegedGid = 65534;  // nogroup
constexpr const char* kSegmentGroup = "users";

// What the child saw, sent back through a pipe as one block.
struct ChildReport {
  int32_t setup_errno = 0;       // dropping privileges failed
  int32_t segment_errno = 0;     // opening the segment read-only
  int32_t segment_rw_errno = 0;  // ... and for writing
  int32_t lock_errno = 0;        // the lock file, for writing
  int32_t pid = 0;
  int32_t open_code = 0;  // Errc of Client::open
  int32_t push_code = 0;  // Errc of push_footprint (when open succeeded)
  char open_message[512] = {};
};

int open_errno(const std::string& path, int flags = O_RDWR) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) return errno;
  ::close(fd);
  return 0;
}

// Drops to nobody with `groups` as supplementary groups, then tries the
// segment and lock file directly and through Client::open (and a push).
ChildReport attach_as_unprivileged(const std::string& instance, const std::string& lock_path,
                                   const std::vector<gid_t>& groups) {
  ChildReport r;
  if (::setgroups(groups.size(), groups.data()) != 0 ||
      ::setresgid(kUnprivilegedGid, kUnprivilegedGid, kUnprivilegedGid) != 0 ||
      ::setresuid(kUnprivilegedUid, kUnprivilegedUid, kUnprivilegedUid) != 0) {
    r.setup_errno = errno;
    return r;
  }
  r.pid = ::getpid();
  r.segment_errno = open_errno("/dev/shm" + segment_name(instance), O_RDONLY);
  r.segment_rw_errno = open_errno("/dev/shm" + segment_name(instance), O_RDWR);
  r.lock_errno = open_errno(lock_path);
  ClientOptions options;
  options.open_timeout = std::chrono::milliseconds(500);
  auto client = Client::open(instance, options);
  r.open_code = static_cast<int32_t>(client.status().code());
  std::snprintf(r.open_message, sizeof r.open_message, "%s", client.status().to_string().c_str());
  if (client) {
    const std::vector<int16_t> counts(8, 1);
    FootprintOut f;
    f.request_id = "from-nobody";
    f.layers = 2;
    f.experts = 4;
    f.counts = counts;
    r.push_code = static_cast<int32_t>((*client)->push_footprint(f).code());
  }
  return r;
}

class shm_permission : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0)
      GTEST_SKIP() << "needs root: the client side drops to uid " << kUnprivilegedUid
                   << " in a child process (running as uid " << ::geteuid() << ")";
    // The unprivileged child must reach the socket and lock file: only their own modes decide.
    std::filesystem::permissions(dir.path(), std::filesystem::perms(0755));
  }

  // Creates the segment with `group` (empty: the creator's group).
  void create_host(const std::string& group) {
    config = small_config(unique_instance("perm"), dir);
    config.mode = 0660;
    config.group = group;
    auto h = Host::create(config);
    ASSERT_TRUE(h.is_ok()) << h.status().to_string();
    host = std::move(*h);
  }

  std::string lock_path() const {
    return config.lock_dir + "/eldr-v" + std::to_string(kFormatMajor) + "-" + config.instance +
           ".lock";
  }
  std::string socket_path() const {
    return config.lock_dir + "/eldr-v" + std::to_string(kFormatMajor) + "-" + config.instance +
           ".sock";
  }

  // Runs attach_as_unprivileged in a forked child; the parent keeps the
  // daemon side alive (heartbeat, polling) meanwhile.
  ChildReport run_child(const std::vector<gid_t>& groups) {
    int fds[2];
    EXPECT_EQ(::pipe(fds), 0);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(fds[0]);
      const ChildReport r = attach_as_unprivileged(config.instance, lock_path(), groups);
      const bool sent = ::write(fds[1], &r, sizeof r) == static_cast<ssize_t>(sizeof r);
      ::_exit(sent ? 0 : 1);
    }
    ::close(fds[1]);
    ChildReport r;
    size_t got = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (got < sizeof r && std::chrono::steady_clock::now() < deadline) {
      host->maintain();
      host->poll(handler);
      fd_set set;
      FD_ZERO(&set);
      FD_SET(fds[0], &set);
      timeval tv{0, 10'000};
      if (::select(fds[0] + 1, &set, nullptr, nullptr, &tv) != 1) continue;
      const ssize_t n = ::read(fds[0], reinterpret_cast<char*>(&r) + got, sizeof r - got);
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    ::close(fds[0]);
    int status = 0;
    EXPECT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
    EXPECT_EQ(got, sizeof r) << "the child sent no report";
    EXPECT_EQ(r.setup_errno, 0) << "dropping privileges: " << std::strerror(r.setup_errno);
    return r;
  }

  static gid_t group_id(const char* name) {
    const group* g = ::getgrnam(name);
    return g != nullptr ? g->gr_gid : static_cast<gid_t>(-1);
  }

  void expect_mode_and_group(const std::string& path, uint32_t mode, gid_t gid) {
    struct stat st {};
    ASSERT_EQ(::stat(path.c_str(), &st), 0) << path << ": " << std::strerror(errno);
    EXPECT_EQ(st.st_mode & 0777, mode) << path;
    EXPECT_EQ(st.st_gid, gid) << path;
  }
  void expect_modes(gid_t gid) {
    expect_mode_and_group("/dev/shm" + segment_name(config.instance), 0440, gid);
    expect_mode_and_group(socket_path(), 0660, gid);
    expect_mode_and_group(lock_path(), 0600, ::getegid());
  }

  void expect_refused(const ChildReport& r) {
    EXPECT_EQ(r.segment_errno, EACCES);
    EXPECT_EQ(r.segment_rw_errno, EACCES);
    EXPECT_EQ(r.lock_errno, EACCES);
    EXPECT_EQ(static_cast<Errc>(r.open_code), Errc::permission) << r.open_message;
    const std::string message = r.open_message;
    EXPECT_NE(message.find(segment_name(config.instance)), std::string::npos) << message;
    EXPECT_NE(message.find("Permission denied"), std::string::npos) << message;
  }

  TempDir dir{"shm_perm"};
  SegmentConfig config;
  std::unique_ptr<Host> host;
  RecordingHandler handler;
};

TEST_F(shm_permission, the_daemons_own_group_refuses_a_process_outside_it) {
  create_host("");
  expect_modes(::getegid());
  ASSERT_NE(::getegid(), kUnprivilegedGid);
  const ChildReport r = run_child({});
  expect_refused(r);
  EXPECT_TRUE(host->clients().empty());
}

TEST_F(shm_permission, a_configured_group_refuses_a_process_outside_it) {
  const gid_t gid = group_id(kSegmentGroup);
  if (gid == static_cast<gid_t>(-1)) GTEST_SKIP() << "no group \"" << kSegmentGroup << "\"";
  create_host(kSegmentGroup);
  expect_modes(gid);
  const ChildReport r = run_child({});  // nobody, nogroup, no supplementary group
  expect_refused(r);
  EXPECT_TRUE(host->clients().empty());
}

TEST_F(shm_permission, a_member_of_the_configured_group_attaches_and_pushes) {
  const gid_t gid = group_id(kSegmentGroup);
  if (gid == static_cast<gid_t>(-1)) GTEST_SKIP() << "no group \"" << kSegmentGroup << "\"";
  create_host(kSegmentGroup);
  const ChildReport r = run_child({gid});  // nobody, with the segment's group as a supplementary
  EXPECT_EQ(r.segment_errno, 0) << std::strerror(r.segment_errno);
  EXPECT_EQ(r.segment_rw_errno, EACCES) << "a client may read the daemon's segment, never write it";
  EXPECT_EQ(r.lock_errno, EACCES) << "the lock file is the daemon's alone";
  ASSERT_EQ(static_cast<Errc>(r.open_code), Errc::ok) << r.open_message;
  EXPECT_EQ(static_cast<Errc>(r.push_code), Errc::ok);
  // The child may exit before its record is read: the daemon still consumes it.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (handler.footprints.empty() && std::chrono::steady_clock::now() < deadline) {
    host->poll(handler);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(handler.footprints.size(), 1u);
  EXPECT_EQ(handler.footprints[0].request_id, "from-nobody");
  EXPECT_EQ(handler.footprints[0].counts, std::vector<int16_t>(8, 1));
  EXPECT_EQ(handler.footprints[0].client_pid, static_cast<uint32_t>(r.pid));
  EXPECT_TRUE(handler.rejections.empty());
}

}  // namespace
}  // namespace eldr::shm
