// The producer role of eldr bench ring-throughput: one process, one client,
// pushing its footprints flat out once the coordinator says go.
#include <unistd.h>

#include <cstdio>
#include <optional>
#include <thread>

#include "footprint_set.hpp"
#include "ring_throughput.hpp"

namespace eldr::cli::ring_throughput {

int run_producer(const ThroughputArgs& a) {
  const auto index = static_cast<uint32_t>(a.producer_index);
  ProducerReport r;
  const auto fail = [&](const Status& s) {
    r.kind = ProducerReport::failed;
    r.code = static_cast<int32_t>(s.code());
    write_all(kReportFd, &r, sizeof r);
    std::fprintf(stderr, "eldr bench ring-throughput: producer %u: %s\n", index,
                 s.to_string().c_str());
    return 1;
  };
  auto footprints = footprint_set(a.model, kSetSize, 1000 + index);
  if (!footprints) return fail(footprints.status());
  auto client = shm::Client::open(a.instance);
  if (!client) return fail(client.status());
  r.kind = ProducerReport::ready;
  if (!write_all(kReportFd, &r, sizeof r)) return 1;
  char go = 0;
  if (::read(STDIN_FILENO, &go, 1) != 1) return 1;  // the coordinator went away

  const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(a.seconds));
  const auto stall_limit = std::chrono::milliseconds(a.timeout_ms);
  std::string id;
  for (uint64_t seq = 0; a.count > 0 ? seq < a.count : Clock::now() < end; ++seq) {
    id = request_id(a.run_tag, index, seq);
    const shm::FootprintOut f = footprint_of(*footprints, seq, id);
    std::optional<Clock::time_point> full_since;
    for (;;) {
      Status s = (*client)->push_footprint(f);
      if (s) break;
      if (s.code() != Errc::ring_full) return fail(s);
      ++r.ring_full_retries;
      const auto now = Clock::now();
      if (!full_since) full_since = now;
      if (now - *full_since > stall_limit)
        return fail({Errc::timeout, "ring full for " + std::to_string(a.timeout_ms) +
                                        " ms: the daemon stopped draining it"});
      // Give the core to the daemon (on a small machine it shares ours).
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    ++r.pushed;
    if (r.pushed % kReportEvery == 0) {
      r.kind = ProducerReport::progress;
      if (!write_all(kReportFd, &r, sizeof r)) return 1;
    }
  }
  r.kind = ProducerReport::done;
  return write_all(kReportFd, &r, sizeof r) ? 0 : 1;
}

}  // namespace eldr::cli::ring_throughput
