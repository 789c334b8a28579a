// Shared helpers of the shared-memory transport tests: unique instance
// names, small segment configurations and a handler that records everything.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "eldr/shm.hpp"
#include "temp_dir.hpp"

namespace eldr::testing {

// Unique per process and call: parallel ctest runs never share a segment.
inline std::string unique_instance(const std::string& tag) {
  static std::atomic<int> counter{0};
  return "t" + std::to_string(::getpid()) + "-" + tag + "-" + std::to_string(counter++);
}

inline shm::SegmentConfig small_config(const std::string& instance, const TempDir& dir) {
  shm::SegmentConfig c;
  c.instance = instance;
  c.max_clients = 4;
  c.ring_bytes = 1u << 16;
  c.decision_slots = 64;
  c.max_workers = 8;
  c.mode = 0600;
  c.lock_dir = dir.path().string();
  return c;
}

// A daemon end and one client on a private instance of a small segment.
struct Pair {
  Pair(const TempDir& dir, const std::string& tag, shm::ClientOptions options = {}) {
    auto h = shm::Host::create(small_config(unique_instance(tag), dir));
    EXPECT_TRUE(h.is_ok()) << h.status().to_string();
    if (!h) return;
    host = std::move(*h);
    options.open_timeout = std::chrono::milliseconds(200);
    auto c = shm::Client::open(host->config().instance, options);
    EXPECT_TRUE(c.is_ok()) << c.status().to_string();
    if (c) client = std::move(*c);
  }
  bool ready() const { return host != nullptr && client != nullptr; }
  std::unique_ptr<shm::Host> host;
  std::unique_ptr<shm::Client> client;
};

struct RecordedFootprint {
  uint32_t client = 0;
  std::string request_id;
  uint32_t layers = 0, experts = 0;
  std::vector<int16_t> counts;
  std::vector<uint64_t> block_hashes;
  std::vector<uint8_t> row_present, block_rows;
  uint64_t prefill_end_ns = 0;
  uint32_t client_pid = 0;
};

struct Rejection {
  uint32_t client;
  shm::RejectReason reason;
  std::string request_id;
  Status why;
};

class RecordingHandler : public shm::RecordHandler {
 public:
  void on_footprint(const shm::FootprintIn& f) override {
    footprints.push_back({f.client,
                          std::string(f.request_id),
                          f.layers,
                          f.experts,
                          {f.counts.begin(), f.counts.end()},
                          {f.block_hashes.begin(), f.block_hashes.end()},
                          {f.row_present.begin(), f.row_present.end()},
                          {f.block_rows.begin(), f.block_rows.end()},
                          f.prefill_end_ns,
                          f.client_pid});
  }
  void on_complete(uint32_t client, std::string_view id) override {
    completes.emplace_back(client, std::string(id));
  }
  void on_complete_ex(const shm::CompleteIn& c) override {
    on_complete(c.client, c.request_id);
    complete_tokens.push_back(c.completion_token);
    complete_pids.push_back(c.client_pid);
  }
  void on_worker_report(uint32_t client, uint32_t worker, uint32_t running,
                        float kv_usage) override {
    reports.push_back({client, worker, running, kv_usage});
  }
  void on_worker_report_ex(uint32_t client, const shm::WorkerReportRecord& r) override {
    reports.push_back({client, r.worker, r.running, r.kv_usage, r.batch_size, r.step_ms});
  }
  void on_worker_control(uint32_t client, uint32_t worker, shm::WorkerOp op) override {
    controls.push_back({client, worker, op});
  }
  void on_rejected(uint32_t client, shm::RejectReason reason, std::string_view id,
                   const Status& why) override {
    rejections.push_back({client, reason, std::string(id), why});
  }

  struct Report {
    uint32_t client, worker, running;
    float kv_usage;
    uint32_t batch_size = 0;  // schema-2 reports
    float step_ms = 0.0f;
  };
  struct Control {
    uint32_t client, worker;
    shm::WorkerOp op;
  };
  std::vector<RecordedFootprint> footprints;
  std::vector<std::pair<uint32_t, std::string>> completes;
  std::vector<uint64_t> complete_tokens;
  std::vector<uint32_t> complete_pids;
  std::vector<Report> reports;
  std::vector<Control> controls;
  std::vector<Rejection> rejections;
};

}  // namespace eldr::testing
