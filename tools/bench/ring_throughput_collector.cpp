// The collector of eldr bench ring-throughput: one thread per producer,
// looking up the decision of every id its producer reports pushed.
#include <algorithm>
#include <thread>

#include "ring_throughput.hpp"

namespace eldr::cli::ring_throughput {

namespace {

// Looks the decision up without blocking the daemon: no futex wait (the
// daemon would have to wake us per decision), short sleeps instead while it is
// not there yet. Errc::timeout once `patience` has passed.
Result<shm::DecisionIn> fetch_decision(shm::Client& c, const std::string& id,
                                       std::chrono::milliseconds patience) {
  const auto deadline = Clock::now() + patience;
  auto pause = std::chrono::microseconds(20);
  for (;;) {
    auto d = c.wait_decision(id, 0);
    if (d || d.status().code() != Errc::timeout || Clock::now() >= deadline) return d;
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(1));
  }
}

// A full ring is retried (the daemon drains it) for up to timeout_ms.
// The producer pushed the footprint, so the collector presents its token.
Status push_complete(shm::Client& c, const std::string& id, uint64_t token, uint32_t timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    Status s = c.push_complete(id, token);
    if (s || s.code() != Errc::ring_full || Clock::now() >= deadline) return s;
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

}  // namespace

// Every sequence number the producer reports pushed, in order. A decision not
// there within timeout_ms is missing; the daemon consumes a ring in order, so
// after a miss the ids behind it get a short patience until one is found
// again (a lost run costs 100 ms an id, not the whole timeout).
void collect(Producer& p, uint32_t index, const ThroughputArgs& a) {
  bool after_miss = false;
  for (uint64_t seq = 0;; ++seq) {
    while (seq >= p.last.pushed && !p.finished) read_reports(p, 100);
    if (seq >= p.last.pushed) break;
    const std::string id = request_id(a.run_tag, index, seq);
    auto d = fetch_decision(*p.collector, id,
                            after_miss ? kMissPatience : std::chrono::milliseconds(a.timeout_ms));
    after_miss = !d;
    if (!d) {
      ++p.missing;
      if (p.missing_examples.size() < 3)
        p.missing_examples.push_back(id + ": " + d.status().to_string());
    } else if (d->status != 0) {
      ++p.errors[d->status];
    } else {
      ++p.ok;
      if (a.complete) {
        if (Status s = push_complete(*p.collector, id, d->completion_token, a.timeout_ms); !s) {
          if (p.completes_failed++ == 0) p.complete_failure = id + ": " + s.to_string();
        }
      }
    }
    // Keep the pipe drained so a fast producer never blocks on it.
    if (seq % kReportEvery == 0 && !p.finished) read_reports(p, 0);
  }
  p.collected_at = Clock::now();
}

}  // namespace eldr::cli::ring_throughput
