// The sidecar client through the C API against a live daemon end: an
// eldr::shm::Host in this process, driven by a small thread that polls the
// rings and publishes a decision per footprint (what eldrd does, minus the
// router). The client side runs inside libeldr.so.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "capi_test_support.hpp"
#include "eldr/eldr.h"
#include "eldr/eldr_prompt.h"
#include "eldr/shm.hpp"

namespace {

using namespace eldr::capi_test;
using namespace std::chrono_literals;

// Records what arrived; answers each footprint with worker = sum of its
// counts modulo 4 (so a test can tell the footprint reached the daemon
// intact), similarity 0.5, band 1, epoch 7, and rejects a footprint of
// kRejectedLayers layers as eldrd rejects one of the wrong geometry.
constexpr uint32_t kRejectedLayers = 5;
class RecordingHandler : public eldr::shm::RecordHandler {
 public:
  explicit RecordingHandler(eldr::shm::Host& host) : m_host(host) {}

  void on_footprint(const eldr::shm::FootprintIn& f) override {
    if (f.layers != kRejectedLayers) return answer(f);
    // What eldrd does with a footprint of another geometry than its table's.
    eldr::shm::DecisionIn d;
    d.status = static_cast<int32_t>(eldr::Errc::shape_mismatch);
    std::lock_guard lock(m_mutex);
    ++rejected;
    m_host.publish(f.request_id, d);
  }
  void answer(const eldr::shm::FootprintIn& f) {
    int64_t sum = 0;
    for (int16_t c : f.counts) sum += c;
    for (uint8_t c : f.block_rows) sum += c;
    eldr::shm::DecisionIn d;
    d.status = 0;
    d.worker = static_cast<int32_t>(sum % 4);
    d.similarity = 0.5f;
    d.band_size = 1;
    d.policy = 0;
    d.table_epoch = 7;
    d.latency_ns = 1234;
    std::lock_guard lock(m_mutex);
    footprints.push_back({std::string(f.request_id), f.layers, f.experts, f.counts.size(),
                          f.block_hashes.size(), f.prefill_end_ns});
    m_host.publish(f.request_id, d);
  }
  // A prompt: recorded; answered with worker = units kept % 4 and confidence
  // 0.25, or INVALID_ARGUMENT when empty (as eldrd's predictor would).
  void on_prompt(const eldr::shm::PromptIn& p) override {
    Prompt r;
    r.id = std::string(p.request_id);
    r.text = p.prompt.kind == eldr::PromptKind::text;
    r.tokens.assign(p.prompt.tokens.begin(), p.prompt.tokens.end());
    r.bytes = std::string(p.prompt.text);
    r.prompt_units = p.prompt_units;
    r.head_units = p.head_units;
    eldr::shm::DecisionIn d;
    d.status = p.units() == 0 ? static_cast<int32_t>(eldr::Errc::invalid_argument) : 0;
    d.worker = p.units() == 0 ? -1 : static_cast<int32_t>(p.units() % 4);
    d.confidence = 0.25f;
    std::lock_guard lock(m_mutex);
    prompts.push_back(r);
    m_host.publish(p.request_id, d);
  }
  void on_complete(uint32_t, std::string_view request_id) override {
    std::lock_guard lock(m_mutex);
    completes.emplace_back(request_id);
  }
  void on_worker_report(uint32_t, uint32_t worker, uint32_t running, float kv) override {
    std::lock_guard lock(m_mutex);
    reports.push_back({worker, running, kv});
  }
  void on_worker_report_ex(uint32_t, const eldr::shm::WorkerReportRecord& r) override {
    std::lock_guard lock(m_mutex);
    reports.push_back({r.worker, r.running, r.kv_usage, r.batch_size, r.step_ms});
  }
  void on_worker_control(uint32_t, uint32_t worker, eldr::shm::WorkerOp op) override {
    std::lock_guard lock(m_mutex);
    controls.push_back({worker, static_cast<uint32_t>(op)});
  }
  void on_rejected(uint32_t, eldr::shm::RejectReason, std::string_view request_id,
                   const eldr::Status& why) override {
    eldr::shm::DecisionIn d;
    d.status = static_cast<int32_t>(why.code());
    std::lock_guard lock(m_mutex);
    ++rejected;
    if (!request_id.empty()) m_host.publish(request_id, d);
  }

  struct Footprint {
    std::string id;
    uint32_t layers, experts;
    size_t cells, blocks;
    uint64_t prefill_end_ns;
  };
  struct Report {
    uint32_t worker, running;
    float kv;
    uint32_t batch_size = 0;
    float step_ms = 0.0f;
  };
  struct Control {
    uint32_t worker, op;
  };
  struct Prompt {
    std::string id;
    bool text = false;
    std::vector<uint32_t> tokens;
    std::string bytes;
    uint64_t prompt_units = 0;
    uint32_t head_units = 0;
  };
  template <class F>
  auto read(F f) {
    std::lock_guard lock(m_mutex);
    return f(*this);
  }
  std::vector<Footprint> footprints;
  std::vector<std::string> completes;
  std::vector<Report> reports;
  std::vector<Control> controls;
  std::vector<Prompt> prompts;
  int rejected = 0;

 private:
  eldr::shm::Host& m_host;
  std::mutex m_mutex;
};

// The daemon end: Host + polling thread (paused on request, to fill a ring).
class Daemon {
 public:
  explicit Daemon(const std::string& instance, uint32_t ring_bytes = 1u << 20) {
    eldr::shm::SegmentConfig config;
    config.instance = instance;
    config.max_clients = 4;
    config.ring_bytes = ring_bytes;
    config.decision_slots = 1024;
    config.max_workers = 8;
    auto host = eldr::shm::Host::create(config);
    EXPECT_TRUE(host) << host.status().to_string();
    if (!host) return;
    m_host = std::move(*host);
    handler = std::make_unique<RecordingHandler>(*m_host);
    m_thread = std::thread([this] { run(); });
  }
  ~Daemon() {
    m_stop.store(true);
    if (m_thread.joinable()) m_thread.join();
  }
  bool ok() const { return m_host != nullptr; }
  void pause(bool paused) { m_paused.store(paused); }
  // Waits (bounded) until pred(handler) holds; the watchdog of a lost record.
  template <class P>
  bool eventually(P pred) {
    for (int i = 0; i < 5000; ++i) {
      if (handler->read(pred)) return true;
      std::this_thread::sleep_for(1ms);
    }
    return false;
  }
  std::unique_ptr<RecordingHandler> handler;

 private:
  void run() {
    auto last_maintain = std::chrono::steady_clock::now();
    while (!m_stop.load()) {
      if (m_paused.load()) {
        std::this_thread::sleep_for(1ms);
        continue;
      }
      if (m_host->poll(*handler) == 0) m_host->wait_for_work(1000us);
      if (std::chrono::steady_clock::now() - last_maintain > 100ms) {
        m_host->maintain();
        last_maintain = std::chrono::steady_clock::now();
      }
    }
  }
  std::unique_ptr<eldr::shm::Host> m_host;
  std::thread m_thread;
  std::atomic<bool> m_stop{false};
  std::atomic<bool> m_paused{false};
};

std::string unique_instance() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = "capi-" + std::to_string(::getpid()) + "-" + info->name();
  if (name.size() > 60) name.resize(60);
  return name;
}

ClientPtr open_client(const std::string& instance) {
  eldr_client_t* client = nullptr;
  const eldr_status_t s = eldr_client_open(instance.c_str(), nullptr, &client);
  EXPECT_EQ(s, ELDR_OK) << eldr_last_error_message();
  return ClientPtr(client);
}

TEST(capi_client, open_without_a_daemon_is_no_daemon) {
  eldr_client_options_t options = ELDR_CLIENT_OPTIONS_INIT;
  options.open_timeout_ms = 0;
  eldr_client_t* sentinel = reinterpret_cast<eldr_client_t*>(uintptr_t{0x1});
  eldr_client_t* out = sentinel;
  EXPECT_EQ(eldr_client_open(unique_instance().c_str(), &options, &out), ELDR_E_NO_DAEMON);
  EXPECT_TRUE(message_names("eldr_client_open"));
  EXPECT_EQ(out, sentinel);
}

TEST(capi_client, open_rejects_bad_arguments) {
  eldr_client_t* out = nullptr;
  EXPECT_EQ(eldr_client_open(nullptr, nullptr, &out), ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_client_open("x", nullptr, nullptr), ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_client_open("", nullptr, &out), ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_client_open("bad/name", nullptr, &out), ELDR_E_INVALID_ARGUMENT);
  const std::string long_name(200, 'a');
  EXPECT_EQ(eldr_client_open(long_name.c_str(), nullptr, &out), ELDR_E_INVALID_ARGUMENT);
  eldr_client_options_t options = ELDR_CLIENT_OPTIONS_INIT;
  options.version = 0;
  EXPECT_EQ(eldr_client_open("x", &options, &out), ELDR_E_INVALID_ARGUMENT);
  options.version = ELDR_CLIENT_OPTIONS_VERSION + 1;
  EXPECT_EQ(eldr_client_open("x", &options, &out), ELDR_E_UNSUPPORTED);
  EXPECT_EQ(out, nullptr);
}

TEST(capi_client, every_call_rejects_a_null_client) {
  const auto counts = domain_footprint(0);
  eldr_decision_t d = ELDR_DECISION_INIT;
  const uint64_t hash = 1;
  const uint8_t row[kCells] = {};
  EXPECT_EQ(eldr_client_push(nullptr, "r", counts.data(), kLayers, kExperts),
            ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_client_push_blocks(nullptr, "r", &hash, nullptr, row, 1, kLayers, kExperts),
            ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_client_wait(nullptr, "r", 0, &d), ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_client_route(nullptr, "r", counts.data(), kLayers, kExperts, 0, &d),
            ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_client_complete(nullptr, "r", 7), ELDR_E_INVALID_ARGUMENT);
  EXPECT_TRUE(message_names("eldr_client_complete"));
  eldr_worker_report_t report = ELDR_WORKER_REPORT_INIT;
  EXPECT_EQ(eldr_client_report(nullptr, &report), ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_client_add_worker(nullptr, 0), ELDR_E_INVALID_ARGUMENT);
  EXPECT_TRUE(message_names("eldr_client_add_worker"));
  EXPECT_EQ(eldr_client_drain_worker(nullptr, 0), ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_client_remove_worker(nullptr, 0), ELDR_E_INVALID_ARGUMENT);
  EXPECT_TRUE(message_names("eldr_client_remove_worker"));
  const uint32_t tokens[] = {1, 2};
  EXPECT_EQ(eldr_client_push_tokens(nullptr, "r", tokens, 2), ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_client_push_text(nullptr, "r", "a", 1), ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_client_route_tokens(nullptr, "r", tokens, 2, 0, &d), ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_client_route_text(nullptr, "r", "a", 1, 0, &d), ELDR_E_INVALID_ARGUMENT);
  EXPECT_TRUE(message_names("eldr_client_route_text"));
  EXPECT_EQ(d.worker, -1);
}

class capi_client_live : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(daemon.ok());
    sut = open_client(instance);
    ASSERT_TRUE(sut);
  }
  std::string instance = unique_instance();
  Daemon daemon{instance};
  ClientPtr sut;
};

TEST_F(capi_client_live, push_then_wait_finds_the_decision) {
  const auto counts = domain_footprint(1);
  int64_t sum = 0;
  for (int16_t c : counts) sum += c;
  ASSERT_EQ(eldr_client_push(sut.get(), "req-1", counts.data(), kLayers, kExperts), ELDR_OK)
      << eldr_last_error_message();
  eldr_decision_t d = ELDR_DECISION_INIT;
  ASSERT_EQ(eldr_client_wait(sut.get(), "req-1", 5000, &d), ELDR_OK) << eldr_last_error_message();
  EXPECT_EQ(d.version, static_cast<uint32_t>(ELDR_DECISION_VERSION));
  EXPECT_EQ(d.worker, sum % 4);
  EXPECT_FLOAT_EQ(d.similarity, 0.5f);
  EXPECT_EQ(d.band_size, 1u);
  EXPECT_EQ(d.table_epoch, 7u);
  EXPECT_EQ(d.status, ELDR_OK);
  EXPECT_EQ(d.latency_ns, 1234u);
  const auto seen = daemon.handler->read([](auto& h) { return h.footprints; });
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].id, "req-1");
  EXPECT_EQ(seen[0].layers, kLayers);
  EXPECT_EQ(seen[0].experts, kExperts);
  EXPECT_EQ(seen[0].cells, kCells);
  EXPECT_GT(seen[0].prefill_end_ns, 0u);  // stamped by the client
}

TEST_F(capi_client_live, wait_for_an_unknown_request_times_out_and_leaves_out_alone) {
  eldr_decision_t d = ELDR_DECISION_INIT;
  EXPECT_EQ(eldr_client_wait(sut.get(), "never-pushed", 20, &d), ELDR_E_TIMEOUT);
  EXPECT_TRUE(message_names("eldr_client_wait"));
  EXPECT_EQ(eldr_client_wait(sut.get(), "never-pushed", 0, &d), ELDR_E_TIMEOUT);
  EXPECT_EQ(d.worker, -1);
}

TEST_F(capi_client_live, route_pushes_and_waits_and_any_client_can_wait) {
  const auto counts = domain_footprint(0, 2);
  eldr_decision_t d = ELDR_DECISION_INIT;
  ASSERT_EQ(eldr_client_route(sut.get(), "req-route", counts.data(), kLayers, kExperts, 5000, &d),
            ELDR_OK)
      << eldr_last_error_message();
  EXPECT_GE(d.worker, 0);
  // A gateway with its own handle sees the same decision.
  ClientPtr gateway = open_client(instance);
  eldr_decision_t g = ELDR_DECISION_INIT;
  ASSERT_EQ(eldr_client_wait(gateway.get(), "req-route", 0, &g), ELDR_OK);
  EXPECT_EQ(g.worker, d.worker);
}

TEST_F(capi_client_live, route_returns_the_daemons_status_for_a_rejected_footprint) {
  const std::vector<int16_t> counts(size_t{kRejectedLayers} * kExperts, 1);
  eldr_decision_t d = ELDR_DECISION_INIT;
  EXPECT_EQ(eldr_client_route(sut.get(), "req-rejected", counts.data(), kRejectedLayers, kExperts,
                              5000, &d),
            ELDR_E_SHAPE_MISMATCH);
  EXPECT_TRUE(message_names("eldr_client_route"));
  EXPECT_NE(std::string(eldr_last_error_message()).find("rejected request 'req-rejected'"),
            std::string::npos)
      << eldr_last_error_message();
  // out is filled all the same: the daemon's decision, with its status.
  EXPECT_EQ(d.status, ELDR_E_SHAPE_MISMATCH);
  EXPECT_EQ(d.worker, -1);
  // Waiting for the same decision is not an error: a gateway reads its status.
  eldr_decision_t g = ELDR_DECISION_INIT;
  ASSERT_EQ(eldr_client_wait(sut.get(), "req-rejected", 0, &g), ELDR_OK);
  EXPECT_EQ(g.status, ELDR_E_SHAPE_MISMATCH);
  // An accepted footprint still routes with ELDR_OK.
  const auto ok = domain_footprint(1);
  ASSERT_EQ(eldr_client_route(sut.get(), "req-accepted", ok.data(), kLayers, kExperts, 5000, &d),
            ELDR_OK)
      << eldr_last_error_message();
  EXPECT_EQ(d.status, ELDR_OK);
}

TEST_F(capi_client_live, push_blocks_carries_hashes_and_present_rows) {
  const uint64_t hashes[3] = {11, 22, 33};
  const uint8_t present[3] = {1, 0, 7};  // any nonzero means present
  std::vector<uint8_t> rows(2 * kCells, 1);
  ASSERT_EQ(eldr_client_push_blocks(sut.get(), "req-blocks", hashes, present, rows.data(), 3,
                                    kLayers, kExperts),
            ELDR_OK)
      << eldr_last_error_message();
  ASSERT_TRUE(daemon.eventually([](auto& h) { return h.footprints.size() + h.rejected >= 1; }));
  const auto seen = daemon.handler->read([](auto& h) { return h.footprints; });
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].blocks, 3u);
  EXPECT_EQ(seen[0].cells, 0u);
}

TEST_F(capi_client_live, push_blocks_rejects_bad_arguments) {
  const uint64_t hashes[2] = {1, 2};
  std::vector<uint8_t> rows(2 * kCells, 1);
  EXPECT_EQ(
      eldr_client_push_blocks(sut.get(), "r", hashes, nullptr, rows.data(), 0, kLayers, kExperts),
      ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(
      eldr_client_push_blocks(sut.get(), "r", nullptr, nullptr, rows.data(), 2, kLayers, kExperts),
      ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_client_push_blocks(sut.get(), "r", hashes, nullptr, nullptr, 2, kLayers, kExperts),
            ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_client_push_blocks(sut.get(), "r", hashes, nullptr, rows.data(), 2, 0, kExperts),
            ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(
      eldr_client_push_blocks(sut.get(), "", hashes, nullptr, rows.data(), 2, kLayers, kExperts),
      ELDR_E_INVALID_ARGUMENT);
  // No row present: rows may be NULL (every block is looked up by hash).
  const uint8_t none[2] = {0, 0};
  EXPECT_EQ(eldr_client_push_blocks(sut.get(), "r-hash-only", hashes, none, nullptr, 2, kLayers,
                                    kExperts),
            ELDR_OK)
      << eldr_last_error_message();
}

TEST_F(capi_client_live, complete_report_and_control_reach_the_daemon) {
  ASSERT_EQ(eldr_client_complete(sut.get(), "req-done", 0), ELDR_OK);
  eldr_worker_report_t report = ELDR_WORKER_REPORT_INIT;
  report.worker = 3;
  report.running = 17;
  report.kv_usage = 0.25f;
  ASSERT_EQ(eldr_client_report(sut.get(), &report), ELDR_OK);
  ASSERT_EQ(eldr_client_drain_worker(sut.get(), 2), ELDR_OK);
  ASSERT_TRUE(daemon.eventually(
      [](auto& h) { return !h.completes.empty() && !h.reports.empty() && !h.controls.empty(); }));
  daemon.handler->read([](auto& h) {
    EXPECT_EQ(h.completes[0], "req-done");
    EXPECT_EQ(h.reports[0].worker, 3u);
    EXPECT_EQ(h.reports[0].running, 17u);
    EXPECT_FLOAT_EQ(h.reports[0].kv, 0.25f);
    EXPECT_EQ(h.controls[0].worker, 2u);
    EXPECT_EQ(h.controls[0].op, static_cast<uint32_t>(eldr::shm::WorkerOp::drain));
    return 0;
  });
}

TEST_F(capi_client_live, an_extended_report_carries_batch_size_and_step_time) {
  eldr_worker_report_t report = ELDR_WORKER_REPORT_INIT;
  report.worker = 4;
  report.running = 9;
  report.kv_usage = 0.5f;
  report.batch_size = 12;
  report.step_ms = 6.25f;
  ASSERT_EQ(eldr_client_report(sut.get(), &report), ELDR_OK) << eldr_last_error_message();
  eldr_worker_report_t plain = ELDR_WORKER_REPORT_INIT;  // no step: the schema-1 record
  plain.worker = 5;
  plain.running = 2;
  ASSERT_EQ(eldr_client_report(sut.get(), &plain), ELDR_OK) << eldr_last_error_message();
  ASSERT_TRUE(daemon.eventually([](auto& h) { return h.reports.size() >= 2; }));
  daemon.handler->read([](auto& h) {
    EXPECT_EQ(h.reports[0].worker, 4u);
    EXPECT_EQ(h.reports[0].running, 9u);
    EXPECT_FLOAT_EQ(h.reports[0].kv, 0.5f);
    EXPECT_EQ(h.reports[0].batch_size, 12u);
    EXPECT_FLOAT_EQ(h.reports[0].step_ms, 6.25f);
    EXPECT_EQ(h.reports[1].worker, 5u);
    EXPECT_EQ(h.reports[1].batch_size, 0u);
    EXPECT_EQ(h.reports[1].step_ms, 0.0f);
    return 0;
  });
  // Bad arguments never reach the ring.
  EXPECT_EQ(eldr_client_report(sut.get(), nullptr), ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_client_report(nullptr, &report), ELDR_E_INVALID_ARGUMENT);
  eldr_worker_report_t bad = report;
  bad.version = 0;
  EXPECT_EQ(eldr_client_report(sut.get(), &bad), ELDR_E_INVALID_ARGUMENT);
  bad.version = ELDR_WORKER_REPORT_VERSION + 1;
  EXPECT_EQ(eldr_client_report(sut.get(), &bad), ELDR_E_UNSUPPORTED);
  for (float step : {-1.0f, NAN, INFINITY}) {
    bad = report;
    bad.step_ms = step;
    EXPECT_EQ(eldr_client_report(sut.get(), &bad), ELDR_E_INVALID_ARGUMENT) << step;
  }
  bad = report;
  bad.kv_usage = 1.5f;
  EXPECT_EQ(eldr_client_report(sut.get(), &bad), ELDR_E_INVALID_ARGUMENT);
  bad = report;
  bad.worker = 0x80000000u;
  EXPECT_EQ(eldr_client_report(sut.get(), &bad), ELDR_E_INVALID_ARGUMENT);
}

TEST_F(capi_client_live, bad_values_are_rejected_before_the_ring) {
  const auto counts = domain_footprint(0);
  std::vector<int16_t> negative = counts;
  negative[1] = -1;
  EXPECT_EQ(eldr_client_push(sut.get(), "r", negative.data(), kLayers, kExperts),
            ELDR_E_OUT_OF_RANGE);
  EXPECT_EQ(eldr_client_push(sut.get(), "r", nullptr, kLayers, kExperts), ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_client_push(sut.get(), "r", counts.data(), 0, kExperts), ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_client_push(sut.get(), "r", counts.data(), kLayers, UINT32_MAX),
            ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_client_push(sut.get(), nullptr, counts.data(), kLayers, kExperts),
            ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_client_push(sut.get(), "", counts.data(), kLayers, kExperts),
            ELDR_E_INVALID_ARGUMENT);
  const std::string too_long(129, 'x');
  EXPECT_EQ(eldr_client_push(sut.get(), too_long.c_str(), counts.data(), kLayers, kExperts),
            ELDR_E_INVALID_ARGUMENT);
  EXPECT_NE(std::string(eldr_last_error_message()).find("128"), std::string::npos);
  const std::string longest(128, 'x');
  EXPECT_EQ(eldr_client_push(sut.get(), longest.c_str(), counts.data(), kLayers, kExperts), ELDR_OK)
      << eldr_last_error_message();
  EXPECT_EQ(eldr_client_complete(sut.get(), nullptr, 0), ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_client_complete(sut.get(), "", 7), ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_client_complete(sut.get(), (longest + "x").c_str(), 7), ELDR_E_INVALID_ARGUMENT);
  for (float kv : {1.5f, -0.1f, NAN}) {
    eldr_worker_report_t bad = ELDR_WORKER_REPORT_INIT;
    bad.kv_usage = kv;
    EXPECT_EQ(eldr_client_report(sut.get(), &bad), ELDR_E_INVALID_ARGUMENT) << kv;
  }
  eldr_worker_report_t negative_worker = ELDR_WORKER_REPORT_INIT;
  negative_worker.worker = -1;
  EXPECT_EQ(eldr_client_report(sut.get(), &negative_worker), ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_client_add_worker(sut.get(), -1), ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_client_drain_worker(sut.get(), INT32_MIN), ELDR_E_INVALID_ARGUMENT);
  eldr_decision_t d = ELDR_DECISION_INIT;
  d.version = 0;
  EXPECT_EQ(eldr_client_wait(sut.get(), "r", 0, &d), ELDR_E_INVALID_ARGUMENT);
  d.version = ELDR_DECISION_VERSION + 1;
  EXPECT_EQ(eldr_client_wait(sut.get(), "r", 0, &d), ELDR_E_UNSUPPORTED);
  EXPECT_EQ(eldr_client_route(sut.get(), "r2", counts.data(), kLayers, kExperts, 0, &d),
            ELDR_E_UNSUPPORTED);
  EXPECT_EQ(eldr_client_wait(sut.get(), "r", 0, nullptr), ELDR_E_INVALID_ARGUMENT);
  // Nothing above reached the daemon except the one valid push.
  ASSERT_TRUE(daemon.eventually([](auto& h) { return h.footprints.size() >= 1; }));
  std::this_thread::sleep_for(20ms);
  daemon.handler->read([](auto& h) {
    EXPECT_EQ(h.footprints.size(), 1u);
    EXPECT_TRUE(h.completes.empty());
    EXPECT_TRUE(h.reports.empty());
    EXPECT_TRUE(h.controls.empty());
    return 0;
  });
}

TEST(capi_client, a_full_ring_says_ring_full_and_drains_afterwards) {
  const std::string instance = unique_instance();
  Daemon daemon(instance, 64u * 1024);  // the smallest ring
  ASSERT_TRUE(daemon.ok());
  ClientPtr sut = open_client(instance);
  ASSERT_TRUE(sut);
  daemon.pause(true);
  // 4 x 512 int16 = 4 KiB per record: ring/8 allows it, a few fill the ring.
  constexpr uint32_t L = 4, E = 512;
  std::vector<int16_t> counts(L * E, 1);
  eldr_status_t s = ELDR_OK;
  int pushed = 0;
  for (; pushed < 1000; ++pushed) {
    s = eldr_client_push(sut.get(), ("full-" + std::to_string(pushed)).c_str(), counts.data(), L,
                         E);
    if (s != ELDR_OK) break;
  }
  EXPECT_EQ(s, ELDR_E_RING_FULL) << eldr_last_error_message();
  EXPECT_GT(pushed, 0);
  EXPECT_LT(pushed, 1000);
  // A record larger than the ring allows is a capacity error, not ring-full.
  std::vector<int16_t> huge(64 * 512, 1);  // 64 KiB of counts
  EXPECT_EQ(eldr_client_push(sut.get(), "huge", huge.data(), 64, 512), ELDR_E_CAPACITY);
  daemon.pause(false);
  ASSERT_TRUE(daemon.eventually(
      [&](auto& h) { return h.footprints.size() == static_cast<size_t>(pushed); }));
  EXPECT_EQ(eldr_client_push(sut.get(), "after", counts.data(), L, E), ELDR_OK)
      << eldr_last_error_message();
}

TEST(capi_client, calls_after_the_daemon_left_say_no_daemon) {
  const std::string instance = unique_instance();
  auto daemon = std::make_unique<Daemon>(instance);
  ASSERT_TRUE(daemon->ok());
  eldr_client_options_t options = ELDR_CLIENT_OPTIONS_INIT;
  options.open_timeout_ms = 0;
  options.reattach = 0;
  eldr_client_t* client = nullptr;
  ASSERT_EQ(eldr_client_open(instance.c_str(), &options, &client), ELDR_OK)
      << eldr_last_error_message();
  ClientPtr sut(client);
  daemon.reset();  // the daemon stops: segment DRAINING, then unlinked
  const auto counts = domain_footprint(0);
  EXPECT_EQ(eldr_client_push(sut.get(), "late", counts.data(), kLayers, kExperts),
            ELDR_E_NO_DAEMON);
  EXPECT_TRUE(message_names("eldr_client_push"));
  eldr_decision_t d = ELDR_DECISION_INIT;
  EXPECT_EQ(eldr_client_wait(sut.get(), "late", 0, &d), ELDR_E_NO_DAEMON);
}

// ---- prompts ----------------------------------------------------------------------

TEST_F(capi_client_live, route_tokens_and_text_carry_the_prompt_and_the_confidence) {
  const std::vector<uint32_t> tokens{5, 6, 7, 1048575, 9, 10, 11, 12, 13, 14};
  eldr_decision_t d = ELDR_DECISION_INIT;
  ASSERT_EQ(eldr_client_route_tokens(sut.get(), "p-tokens", tokens.data(), tokens.size(), 5000, &d),
            ELDR_OK)
      << eldr_last_error_message();
  EXPECT_EQ(d.worker, 2);  // 10 % 4
  EXPECT_NEAR(d.confidence, 0.25f, 1.0f / 65535);
  const std::string text = "h\xc3\xa9llo w\xc3\xb6rld";
  ASSERT_EQ(eldr_client_push_text(sut.get(), "p-text", text.data(), text.size()), ELDR_OK)
      << eldr_last_error_message();
  ASSERT_EQ(eldr_client_wait(sut.get(), "p-text", 5000, &d), ELDR_OK);
  EXPECT_EQ(d.worker, static_cast<int32_t>(text.size() % 4));
  const auto seen = daemon.handler->read([](auto& h) { return h.prompts; });
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_FALSE(seen[0].text);
  EXPECT_EQ(seen[0].tokens, tokens);  // the daemon judges the ids, not the client
  EXPECT_EQ(seen[0].prompt_units, tokens.size());
  EXPECT_EQ(seen[0].head_units, tokens.size());
  EXPECT_TRUE(seen[1].text);
  EXPECT_EQ(seen[1].bytes, text);
  // A footprint's decision still says 1.
  const auto counts = domain_footprint(1);
  ASSERT_EQ(eldr_client_route(sut.get(), "fp", counts.data(), kLayers, kExperts, 5000, &d),
            ELDR_OK);
  EXPECT_EQ(d.confidence, 1.0f);
}

TEST_F(capi_client_live, route_tokens_returns_the_daemons_verdict_and_checks_its_arguments) {
  eldr_decision_t d = ELDR_DECISION_INIT;
  // An empty prompt reaches the daemon, whose rejection is the call's result.
  EXPECT_EQ(eldr_client_route_tokens(sut.get(), "empty", nullptr, 0, 5000, &d),
            ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(d.status, ELDR_E_INVALID_ARGUMENT);
  EXPECT_TRUE(daemon.eventually([](auto& h) { return h.prompts.size() == 1; }));
  // NULL with a length never leaves the process.
  EXPECT_EQ(eldr_client_push_tokens(sut.get(), "null", nullptr, 3), ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_client_push_text(sut.get(), "null", nullptr, 3), ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(eldr_client_push_text(sut.get(), nullptr, "a", 1), ELDR_E_INVALID_ARGUMENT);
  const uint32_t one = 1;
  EXPECT_EQ(eldr_client_route_tokens(sut.get(), "no-out", &one, 1, 0, nullptr),
            ELDR_E_INVALID_ARGUMENT);
  EXPECT_EQ(daemon.handler->read([](auto& h) { return h.prompts.size(); }), 1u);
}

// A 64 KiB ring takes records of 8 KiB: a longer prompt keeps its head
// (three quarters) and its tail, and a text whole code points.
TEST(capi_client, a_prompt_longer_than_a_record_is_cut_to_its_head_and_tail) {
  const std::string instance = unique_instance();
  Daemon daemon(instance, 1u << 16);
  ASSERT_TRUE(daemon.ok());
  ClientPtr sut = open_client(instance);
  ASSERT_TRUE(sut);
  std::vector<uint32_t> tokens(20000);
  for (uint32_t i = 0; i < tokens.size(); ++i) tokens[i] = i;
  ASSERT_EQ(eldr_client_push_tokens(sut.get(), "long", tokens.data(), tokens.size()), ELDR_OK)
      << eldr_last_error_message();
  std::string text;
  while (text.size() < 30000) text += "\xc3\xa9";  // 2-byte code points
  text += "x";                                     // the tail's cut falls inside a code point
  ASSERT_EQ(eldr_client_push_text(sut.get(), "long-text", text.data(), text.size()), ELDR_OK);
  ASSERT_TRUE(daemon.eventually([](auto& h) { return h.prompts.size() == 2; }));
  const auto seen = daemon.handler->read([](auto& h) { return h.prompts; });
  const auto& t = seen[0];
  EXPECT_EQ(t.prompt_units, tokens.size());
  ASSERT_GT(t.tokens.size(), 1000u);
  ASSERT_LT(t.tokens.size(), 2048u);  // 8 KiB of ids at most
  EXPECT_NEAR(static_cast<double>(t.head_units), 0.75 * static_cast<double>(t.tokens.size()), 4.0);
  for (uint32_t i = 0; i < t.head_units; ++i) ASSERT_EQ(t.tokens[i], i);
  const size_t tail = t.tokens.size() - t.head_units;
  for (size_t i = 0; i < tail; ++i) ASSERT_EQ(t.tokens[t.head_units + i], tokens.size() - tail + i);
  const auto& x = seen[1];
  EXPECT_EQ(x.prompt_units, text.size());
  ASSERT_LT(x.bytes.size(), 8192u);
  EXPECT_EQ(x.head_units % 2, 0u);  // whole code points
  EXPECT_EQ(x.bytes.substr(0, x.head_units), text.substr(0, x.head_units));
  const std::string kept_tail = x.bytes.substr(x.head_units);
  EXPECT_EQ(kept_tail, text.substr(text.size() - kept_tail.size()));
  EXPECT_EQ(static_cast<unsigned char>(kept_tail[0]), 0xc3u);  // starts on a code point
}

}  // namespace
