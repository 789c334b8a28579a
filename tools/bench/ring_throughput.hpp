// eldr bench ring-throughput: sustained footprint throughput through a running
// eldrd, with an exact account of every request.
//
// N producer processes (this binary re-executed with posix_spawn, so no
// process inherits another's shared-memory client) each register their own
// client and push footprints as fast as their ring takes them; a full ring is
// retried and counted, never dropped. Request ids encode the run, the producer
// and its sequence number. One collector thread per producer, with a client of
// its own, fetches the decisions of that producer in push order while it
// pushes (the decision table is bounded: a collector that fell far behind
// would see the oldest evicted) and accounts for every sequence number:
// decided ok, explicit error (by code), or missing.
//
// A producer tells its collector how far it got through a pipe (fixed-size
// reports, each one atomic write): only ids known to be pushed are looked for.
//
// ring_throughput_process.cpp: pipes, spawning and reaping producers, /proc.
// ring_throughput_producer.cpp: the producer role.
// ring_throughput_collector.cpp: a producer's collector.
// ring_throughput_command.cpp: the coordinator and the command's options.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <climits>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "eldr/shm.hpp"
#include "eldr/status.hpp"

namespace eldr::cli::ring_throughput {

using Clock = std::chrono::steady_clock;

constexpr int kReportFd = 3;           // a producer's end of its report pipe
constexpr uint64_t kReportEvery = 64;  // pushes between progress reports
constexpr uint32_t kSetSize = 256;     // distinct footprints per producer, cycled
constexpr auto kMissPatience = std::chrono::milliseconds(100);  // after a miss, see collect()

struct ThroughputArgs {
  std::string instance = "default", model = "qwen3-30b-a3b";
  uint32_t producers = 2;
  uint64_t count = 0;  // footprints per producer; 0 = push for `seconds`
  double seconds = 5.0;
  uint32_t timeout_ms = 2000;  // per decision; also the longest tolerated ring-full stall
  bool complete = false;       // collectors send complete per decision, as engines do
  bool json = false;
  // Producer role (set by the coordinator when it re-executes this binary).
  int32_t producer_index = -1;
  std::string run_tag;
};

// What a producer writes to its report pipe; one write() each (< PIPE_BUF:
// never interleaved or torn).
struct ProducerReport {
  enum Kind : uint32_t { ready = 1, progress = 2, done = 3, failed = 4 };
  uint32_t kind = 0;
  int32_t code = 0;  // Errc of a failure
  uint64_t pushed = 0;
  uint64_t ring_full_retries = 0;
};
static_assert(sizeof(ProducerReport) <= PIPE_BUF);

inline std::string request_id(const std::string& run_tag, uint32_t producer, uint64_t seq) {
  return "tp-" + run_tag + "-" + std::to_string(producer) + "-" + std::to_string(seq);
}

// One spawned producer, its pipes, and what its collector found.
struct Producer {
  pid_t pid = -1;
  int report_fd = -1;  // read end
  int go_fd = -1;      // write end (the producer's stdin)
  std::unique_ptr<shm::Client> collector;
  // Reports read so far.
  ProducerReport last;
  bool finished = false;  // done, failed, or the pipe closed
  std::string report_bytes;
  // The account.
  uint64_t ok = 0, missing = 0;
  std::map<int32_t, uint64_t> errors;  // by code
  std::vector<std::string> missing_examples;
  uint64_t completes_failed = 0;
  std::string complete_failure;
  Clock::time_point collected_at;
  int exit_status = -1;
};

// The spawned producers; the destructor kills and reaps any not reaped yet
// (an early return of the coordinator).
class Producers {
 public:
  ~Producers();
  // Starts producer `index` (this binary in the producer role) with its pipes.
  Status spawn(const ThroughputArgs& a, uint32_t index);
  // Waits for every producer and records its exit status.
  void reap();

  std::vector<Producer> list;
};

// ---- process plumbing (ring_throughput_process.cpp) ----

bool write_all(int fd, const void* data, size_t n);
void close_fd(int& fd);
// Reads whatever reports arrived within timeout_ms; marks the producer
// finished on done/failed or end of file.
void read_reports(Producer& p, int timeout_ms);
// CPU seconds (user + system) a process has used so far; nullopt when its
// /proc entry is not readable (another pid namespace).
std::optional<double> cpu_seconds(uint32_t pid);

// ---- roles ----

// The producer role: exit code of the process (ring_throughput_producer.cpp).
int run_producer(const ThroughputArgs& a);
// The collector of producer `index`, run on its own thread until the producer
// finished and every id it pushed is accounted for (ring_throughput_collector.cpp).
void collect(Producer& p, uint32_t index, const ThroughputArgs& a);

}  // namespace eldr::cli::ring_throughput
