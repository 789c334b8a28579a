// Process plumbing of eldr bench ring-throughput: the report and go pipes,
// spawning and reaping producers, and a process's CPU time from /proc.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "ring_throughput.hpp"

extern char** environ;

namespace eldr::cli::ring_throughput {

bool write_all(int fd, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

void read_reports(Producer& p, int timeout_ms) {
  pollfd pfd{p.report_fd, POLLIN, 0};
  const int ready = ::poll(&pfd, 1, timeout_ms);
  if (ready <= 0) return;
  char buffer[sizeof(ProducerReport) * 64];
  const ssize_t n = ::read(p.report_fd, buffer, sizeof buffer);
  if (n < 0 && errno == EINTR) return;
  if (n <= 0) {
    p.finished = true;  // the producer exited (its last report, if any, is in)
    return;
  }
  p.report_bytes.append(buffer, static_cast<size_t>(n));
  size_t used = 0;
  for (; p.report_bytes.size() - used >= sizeof(ProducerReport); used += sizeof(ProducerReport)) {
    std::memcpy(&p.last, p.report_bytes.data() + used, sizeof(ProducerReport));
    if (p.last.kind == ProducerReport::done || p.last.kind == ProducerReport::failed)
      p.finished = true;
  }
  p.report_bytes.erase(0, used);
}

Producers::~Producers() {
  for (Producer& p : list) {
    close_fd(p.go_fd);
    close_fd(p.report_fd);
    if (p.pid > 0) {
      ::kill(p.pid, SIGKILL);  // only on an early return: reap() clears pid
      ::waitpid(p.pid, nullptr, 0);
    }
  }
}

Status Producers::spawn(const ThroughputArgs& a, uint32_t index) {
  char self[PATH_MAX];
  const ssize_t len = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) return {Errc::io, std::string("readlink /proc/self/exe: ") + std::strerror(errno)};
  self[len] = '\0';
  int report[2], go[2];
  if (::pipe2(report, O_CLOEXEC) != 0) return {Errc::io, std::string("pipe: ") + strerror(errno)};
  if (::pipe2(go, O_CLOEXEC) != 0) {
    ::close(report[0]);
    ::close(report[1]);
    return {Errc::io, std::string("pipe: ") + std::strerror(errno)};
  }
  Producer& p = list.emplace_back();
  p.report_fd = report[0];
  p.go_fd = go[1];
  std::vector<std::string> args = {self,
                                   "bench",
                                   "ring-throughput",
                                   "--instance",
                                   a.instance,
                                   "--model",
                                   a.model,
                                   "--count",
                                   std::to_string(a.count),
                                   "--seconds",
                                   std::to_string(a.seconds),
                                   "--timeout-ms",
                                   std::to_string(a.timeout_ms),
                                   "--producer-index",
                                   std::to_string(index),
                                   "--run-tag",
                                   a.run_tag};
  std::vector<char*> argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, report[1], kReportFd);  // dup2 clears CLOEXEC
  posix_spawn_file_actions_adddup2(&actions, go[0], STDIN_FILENO);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t defaults;  // the coordinator ignores SIGPIPE; the producer should not inherit that
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF);
  const int rc = ::posix_spawn(&p.pid, self, &actions, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(report[1]);
  ::close(go[0]);
  if (rc != 0) {
    p.pid = -1;
    return {Errc::io, std::string("cannot start a producer: ") + std::strerror(rc)};
  }
  return Status::ok();
}

void Producers::reap() {
  for (Producer& p : list) {
    if (p.pid <= 0) continue;
    int status = 0;
    if (::waitpid(p.pid, &status, 0) == p.pid)
      p.exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    p.pid = -1;
  }
}

std::optional<double> cpu_seconds(uint32_t pid) {
  std::FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/stat").c_str(), "r");
  if (f == nullptr) return std::nullopt;
  char line[1024];
  const bool read = std::fgets(line, sizeof line, f) != nullptr;
  std::fclose(f);
  if (!read) return std::nullopt;
  // The command name (field 2) may hold spaces and ')': fields resume after the last ')'.
  const char* rest = std::strrchr(line, ')');
  unsigned long long utime = 0, stime = 0;
  if (rest == nullptr ||
      std::sscanf(rest + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime,
                  &stime) != 2)
    return std::nullopt;
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

}  // namespace eldr::cli::ring_throughput
