// Worker health driven directly against a router: load reports, control
// records and the expiry tick, with explicit timestamps.
#include "worker_health.hpp"

#include <gtest/gtest.h>

#include "log.hpp"
#include "test_tables.hpp"

namespace eldr::sidecar {
namespace {

using eldr::testing::axis_table;

constexpr uint64_t kMs = 1'000'000;

class WorkerHealthTest : public ::testing::Test {
 protected:
  WorkerHealthTest() {
    set_log_level(LogLevel::error);
    auto r = Router::create(std::make_shared<const ClusterTable>(axis_table()));
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    router = std::move(*r);
  }
  WorkerState state(int32_t worker) const {
    for (const auto& w : router->workers())
      if (w.id == worker) return w.state;
    return WorkerState::removed;
  }
  bool rendered(const std::string& line) const {
    return metrics.render().find(line) != std::string::npos;
  }

  std::unique_ptr<Router> router;
  Metrics metrics{64};
};

TEST_F(WorkerHealthTest, a_silent_worker_is_drained_once_and_rejoins_on_its_next_report) {
  WorkerHealth sut(*router, metrics, 100);
  sut.on_report(102, 3, 0.25f, 0);
  sut.expire(100 * kMs);  // exactly the timeout: not yet
  EXPECT_EQ(state(102), WorkerState::active);
  sut.expire(101 * kMs);
  EXPECT_EQ(state(102), WorkerState::draining);
  ASSERT_NE(sut.find(102), nullptr);
  EXPECT_TRUE(sut.find(102)->stale);
  EXPECT_EQ(sut.find(102)->running, 3u);
  EXPECT_FLOAT_EQ(sut.find(102)->kv_usage, 0.25f);
  sut.expire(500 * kMs);  // still stale: not counted again
  EXPECT_TRUE(rendered("eldr_worker_stale_total 1")) << metrics.render();

  sut.on_report(102, 0, 0.1f, 600 * kMs);
  EXPECT_EQ(state(102), WorkerState::active);
  EXPECT_FALSE(sut.find(102)->stale);
  EXPECT_EQ(sut.find(102)->last_report_ns, 600 * kMs);
}

TEST_F(WorkerHealthTest, workers_that_never_reported_and_a_zero_timeout_never_expire) {
  WorkerHealth sut(*router, metrics, 100);
  sut.expire(10'000 * kMs);
  for (int32_t w = 100; w < 104; ++w) EXPECT_EQ(state(w), WorkerState::active) << w;
  EXPECT_EQ(sut.find(100), nullptr);

  WorkerHealth forever(*router, metrics, 0);
  forever.on_report(101, 1, 0.0f, 0);
  forever.expire(10'000 * kMs);
  EXPECT_EQ(state(101), WorkerState::active);
  EXPECT_FALSE(forever.find(101)->stale);
  EXPECT_TRUE(rendered("eldr_worker_stale_total 0")) << metrics.render();
}

TEST_F(WorkerHealthTest, an_admin_drain_outlasts_reports_and_a_stale_add_waits_for_a_report) {
  WorkerHealth sut(*router, metrics, 100);
  sut.on_control(102, shm::WorkerOp::drain);
  EXPECT_EQ(state(102), WorkerState::draining);
  ASSERT_NE(sut.find(102), nullptr);
  EXPECT_TRUE(sut.find(102)->admin_drained);
  sut.on_report(102, 1, 0.0f, 0);
  EXPECT_EQ(state(102), WorkerState::draining);
  sut.expire(200 * kMs);
  EXPECT_TRUE(sut.find(102)->stale);
  sut.on_report(102, 1, 0.0f, 300 * kMs);  // reports again: the admin drain holds
  EXPECT_EQ(state(102), WorkerState::draining);

  sut.expire(500 * kMs);
  sut.on_control(102, shm::WorkerOp::add);  // stale: back only with its next report
  EXPECT_FALSE(sut.find(102)->admin_drained);
  EXPECT_EQ(state(102), WorkerState::draining);
  sut.on_report(102, 1, 0.0f, 600 * kMs);
  EXPECT_EQ(state(102), WorkerState::active);

  sut.on_control(102, shm::WorkerOp::remove);
  EXPECT_EQ(state(102), WorkerState::removed);
  EXPECT_EQ(sut.find(102), nullptr);
}

TEST_F(WorkerHealthTest, a_control_the_router_refuses_leaves_no_entry) {
  WorkerHealth sut(*router, metrics, 100);
  sut.on_control(999, shm::WorkerOp::drain);
  sut.on_control(998, shm::WorkerOp::remove);
  EXPECT_EQ(sut.find(999), nullptr);
  EXPECT_EQ(sut.find(998), nullptr);
  sut.on_control(100, static_cast<shm::WorkerOp>(200));  // unknown op: ignored
  EXPECT_EQ(state(100), WorkerState::active);
  EXPECT_EQ(sut.find(100), nullptr);
}

}  // namespace
}  // namespace eldr::sidecar
