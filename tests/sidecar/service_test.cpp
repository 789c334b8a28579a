// The routing service driven directly through its RecordHandler interface:
// no segment, a recording decision sink and a manual clock.
#include "service.hpp"

#include <gtest/gtest.h>

#include <list>
#include <map>
#include <random>
#include <unordered_map>

#include "log.hpp"
#include "temp_dir.hpp"
#include "test_tables.hpp"

namespace eldr::sidecar {
namespace {

using eldr::testing::axis_table;
using eldr::testing::layer0;

constexpr uint64_t kMs = 1'000'000;

struct RecordingSink final : DecisionSink {
  std::vector<std::pair<std::string, shm::DecisionIn>> published;
  void publish(std::string_view request_id, const shm::DecisionIn& d) override {
    published.emplace_back(std::string(request_id), d);
  }
  const shm::DecisionIn& last(const std::string& id) const {
    for (auto it = published.rbegin(); it != published.rend(); ++it)
      if (it->first == id) return it->second;
    ADD_FAILURE() << "no decision for " << id;
    static shm::DecisionIn none;
    return none;
  }
  size_t count(const std::string& id) const {
    size_t n = 0;
    for (const auto& p : published) n += p.first == id;
    return n;
  }
};

class ServiceTest : public ::testing::Test {
 protected:
  ServiceTest() { set_log_level(LogLevel::error); }
  // The service's mechanics are checked with the locality band (eldr): its
  // picks follow the footprint alone. eldr_cost, the daemon's default, has
  // tests of its own here and end to end.
  static ServiceOptions locality() {
    ServiceOptions o;
    o.router.policy = Policy::eldr;
    return o;
  }
  void make(ServiceOptions o = locality(), ClusterTable table = axis_table()) {
    if (o.router.tau < 0) o.router.tau = 0.0f;  // band of one: the top worker, deterministic
    auto s = Service::create(std::make_shared<const ClusterTable>(std::move(table)), o, sink,
                             metrics, [this] { return now; });
    ASSERT_TRUE(s.is_ok()) << s.status().to_string();
    sut = std::move(*s);
  }
  // A dense footprint whose top worker is 100 + cell.
  void push(const std::string& id, std::vector<int16_t> counts, uint32_t layers = 2,
            uint32_t experts = 4) {
    shm::FootprintIn f;
    f.client = 1;
    f.request_id = id;
    f.layers = layers;
    f.experts = experts;
    f.counts = counts;
    f.seen_ns = now;
    sut->on_footprint(f);
  }
  void push_top(const std::string& id, int cell) {
    std::vector<int16_t> c(8, 0);
    c[static_cast<size_t>(cell)] = 5;
    push(id, c);
  }
  int64_t inflight(int32_t worker) const {
    for (const auto& w : sut->router().workers())
      if (w.id == worker) return w.inflight;
    ADD_FAILURE() << "no worker " << worker;
    return -1;
  }
  WorkerState state(int32_t worker) const {
    for (const auto& w : sut->router().workers())
      if (w.id == worker) return w.state;
    return WorkerState::removed;
  }

  uint64_t now = 1000 * kMs;
  RecordingSink sink;
  Metrics metrics{256};
  std::unique_ptr<Service> sut;
};

TEST_F(ServiceTest, routes_a_dense_footprint_and_publishes_its_decision) {
  make();
  shm::FootprintIn f;
  const auto counts = layer0({0, 0, 5, 0});
  f.request_id = "r1";
  f.layers = 2;
  f.experts = 4;
  f.counts = counts;
  f.seen_ns = now - 7000;
  sut->on_footprint(f);
  const auto& d = sink.last("r1");
  EXPECT_EQ(d.status, 0);
  EXPECT_EQ(d.worker, 102);
  EXPECT_FLOAT_EQ(d.similarity, 1.0f);
  EXPECT_EQ(d.band_size, 1u);
  EXPECT_EQ(d.policy, static_cast<uint32_t>(Policy::eldr));
  EXPECT_EQ(d.table_epoch, sut->table_epoch());
  EXPECT_EQ(d.latency_ns, 7000u);
  EXPECT_EQ(inflight(102), 1);
  EXPECT_EQ(metrics.latency_count(), 1u);
}

TEST_F(ServiceTest, a_footprint_of_another_geometry_gets_an_error_decision) {
  make();
  push("wrong", std::vector<int16_t>(12, 1), 3, 4);
  EXPECT_EQ(sink.last("wrong").status, static_cast<int32_t>(Errc::shape_mismatch));
  EXPECT_EQ(sink.last("wrong").worker, -1);
  EXPECT_EQ(metrics.rejected(Rejection::shape_mismatch), 1u);
}

TEST_F(ServiceTest, negative_counts_and_empty_footprints_get_error_decisions) {
  make();
  push("negative", layer0({0, -1, 5, 0}));
  EXPECT_EQ(sink.last("negative").status, static_cast<int32_t>(Errc::out_of_range));
  shm::FootprintIn empty;
  empty.request_id = "empty";
  empty.layers = 2;
  empty.experts = 4;
  sut->on_footprint(empty);
  EXPECT_EQ(sink.last("empty").status, static_cast<int32_t>(Errc::invalid_argument));
  EXPECT_EQ(metrics.rejected(Rejection::bad_footprint), 2u);
  EXPECT_EQ(sut->requests_in_flight(), 0u);
}

TEST_F(ServiceTest, block_form_rows_are_cached_so_later_requests_may_send_hashes_only) {
  make();
  const std::vector<uint64_t> hashes = {11, 12};
  std::vector<uint8_t> rows(16, 0);
  rows[3] = 4;      // block 11: layer 0 expert 3
  rows[8 + 3] = 2;  // block 12: layer 0 expert 3
  shm::FootprintIn first;
  first.request_id = "with-rows";
  first.layers = 2;
  first.experts = 4;
  first.block_hashes = hashes;
  first.block_rows = rows;
  sut->on_footprint(first);
  EXPECT_EQ(sink.last("with-rows").worker, 103);

  const std::vector<uint8_t> none = {0, 0};
  shm::FootprintIn second = first;
  second.request_id = "hash-only";
  second.row_present = none;
  second.block_rows = {};
  sut->on_footprint(second);
  EXPECT_EQ(sink.last("hash-only").status, 0);
  EXPECT_EQ(sink.last("hash-only").worker, 103);

  const std::vector<uint64_t> unknown = {11, 99};
  second.request_id = "unknown-block";
  second.block_hashes = unknown;
  sut->on_footprint(second);
  EXPECT_EQ(sink.last("unknown-block").status, static_cast<int32_t>(Errc::not_found));
  EXPECT_EQ(metrics.rejected(Rejection::unknown_block), 1u);

  second.request_id = "lying-rows";
  second.block_hashes = hashes;
  second.row_present = {};  // claims two rows, carries none
  sut->on_footprint(second);
  EXPECT_EQ(sink.last("lying-rows").status, static_cast<int32_t>(Errc::shape_mismatch));
  EXPECT_EQ(metrics.rejected(Rejection::bad_footprint), 1u);
}

TEST_F(ServiceTest, complete_releases_in_flight_and_never_goes_negative) {
  make();
  push_top("a", 1);
  push_top("b", 1);
  EXPECT_EQ(inflight(101), 2);
  sut->on_complete(1, "a");
  EXPECT_EQ(inflight(101), 1);
  sut->on_complete(1, "a");  // twice
  sut->on_complete(1, "never-routed");
  EXPECT_EQ(inflight(101), 1);
  EXPECT_EQ(metrics.complete_unknown(), 2u);
  // A load report lowered the count below what the map holds: the count
  // stays at zero, and the request (known by its id) still leaves the
  // router's records.
  sut->on_worker_report(1, 101, 0, 0.5f);
  sut->on_complete(1, "b");
  EXPECT_EQ(inflight(101), 0);
  EXPECT_EQ(metrics.complete_unknown(), 2u);
  EXPECT_EQ(sut->requests_in_flight(), 0u);
  for (const auto& w : sut->router().workers()) EXPECT_EQ(w.tracked, 0u) << w.id;
  EXPECT_EQ(sut->router().stats().completes_unknown, 0u);
}

// The completion token: in the decision, nonzero, distinct per request; a
// complete presenting it is accepted from anyone, one without it only from
// the pushing process; everything else is refused and changes nothing.
TEST_F(ServiceTest, completes_need_the_token_unless_they_come_from_the_pusher) {
  make();
  push_top("a", 1);
  push_top("b", 1);
  push_top("c", 1);
  const uint64_t ta = sink.last("a").completion_token, tb = sink.last("b").completion_token;
  EXPECT_NE(ta, 0u);
  EXPECT_NE(ta, tb);
  EXPECT_EQ(inflight(101), 3);
  sut->on_complete_ex({2, 4242, "a", 0});       // another process, no token
  sut->on_complete_ex({2, 4242, "a", ta ^ 1});  // a wrong token
  sut->on_complete_ex({2, 4242, "a", tb});      // another request's token
  EXPECT_EQ(inflight(101), 3);
  EXPECT_EQ(metrics.complete_refused(), 3u);
  EXPECT_EQ(metrics.complete_unknown(), 0u);
  EXPECT_EQ(sut->requests_in_flight(), 3u);
  sut->on_complete_ex({2, 4242, "a", ta});  // the token: accepted from anyone
  EXPECT_EQ(inflight(101), 2);
  sut->on_complete_ex({1, 0, "b", 0});  // the pusher (pid 0 in these tests) needs none
  EXPECT_EQ(inflight(101), 1);
  sut->on_complete_ex({2, 4242, "a", ta});  // done already: unknown, not refused
  EXPECT_EQ(metrics.complete_unknown(), 1u);
  EXPECT_EQ(metrics.complete_refused(), 3u);
  // A rejected request gets no token.
  push("bad-shape", std::vector<int16_t>(3, 1));
  EXPECT_EQ(sink.last("bad-shape").completion_token, 0u);
}

TEST_F(ServiceTest, completes_take_the_request_by_its_id_out_of_its_workers_batch) {
  ServiceOptions o = locality();
  o.router.policy = Policy::eldr_cost;
  make(o);
  push("a", layer0({5, 0, 0, 0}));
  const int32_t worker = sink.last("a").worker;
  EXPECT_EQ(sink.last("a").policy, static_cast<uint32_t>(Policy::eldr_cost));
  const auto experts = [&](int32_t id) {
    for (const auto& w : sut->router().workers())
      if (w.id == id) return w.batch_experts;
    return -1.0;
  };
  const double one = experts(worker);
  EXPECT_GT(one, 0.0);
  // A retry of "a" releases its first pick by id: nothing leaks.
  push("a", layer0({5, 0, 0, 0}));
  EXPECT_EQ(sut->requests_in_flight(), 1u);
  EXPECT_EQ(metrics.rerouted(), 1u);
  const int32_t again = sink.last("a").worker;
  EXPECT_DOUBLE_EQ(experts(again), one);
  sut->on_complete(1, "a");
  EXPECT_EQ(experts(again), 0.0);
  EXPECT_EQ(inflight(again), 0);
  sut->on_complete(1, "a");
  EXPECT_EQ(metrics.complete_unknown(), 1u);
  const auto st = sut->router().stats();
  EXPECT_EQ(st.untracked, 0u);
  EXPECT_EQ(st.completes_unknown, 0u);  // the map caught the repeat
  sut->maintain();
  EXPECT_EQ(sut->router_row().policy, static_cast<uint32_t>(Policy::eldr_cost));
  EXPECT_EQ(sut->router_row().completes_unknown, 1u);
}

TEST_F(ServiceTest, step_reports_set_the_batch_and_feed_the_fit_and_bad_values_are_counted) {
  ServiceOptions o = locality();
  o.router.policy = Policy::eldr_cost;
  make(o);
  push_top("a", 1);
  const int32_t worker = sink.last("a").worker;
  for (int i = 0; i < 5; ++i)
    sut->on_worker_report_ex(1, {static_cast<uint32_t>(worker), 1, 0.5f, 7, 4.0f});
  EXPECT_EQ(inflight(worker), 7);
  EXPECT_EQ(sut->router().stats().step_samples, 5u);
  // batch_size 0: running sets the load, as a plain report does.
  sut->on_worker_report_ex(1, {static_cast<uint32_t>(worker), 2, 0.5f, 0, 0.0f});
  EXPECT_EQ(inflight(worker), 2);
  // A step time without its batch size, or beyond any decode step: dropped, counted.
  sut->on_worker_report_ex(1, {static_cast<uint32_t>(worker), 3, 0.5f, 0, 5.0f});
  EXPECT_EQ(inflight(worker), 3);
  sut->on_worker_report_ex(1, {static_cast<uint32_t>(worker), 3, 0.5f, 4, 20000.0f});
  EXPECT_EQ(inflight(worker), 4);
  EXPECT_EQ(metrics.report_bad_value(), 2u);
  EXPECT_EQ(sut->router().stats().step_samples, 5u);
  sut->on_worker_report_ex(1, {999, 1, 0.5f, 4, 3.0f});
  EXPECT_EQ(metrics.report_unknown_worker(), 1u);
  sut->maintain();
  EXPECT_EQ(sut->router_row().step_samples, 5u);
  const std::string text = metrics.render();
  for (const char* family :
       {"eldr_router_policy{policy=\"eldr_cost\"} 1", "eldr_step_samples_total 5",
        "eldr_report_bad_value_total 2", "eldr_step_cost{constant=\"t0_ms\"}"})
    EXPECT_NE(text.find(family), std::string::npos) << family << "\n" << text;
}

TEST_F(ServiceTest, a_worker_whose_reports_stop_leaves_routing_and_returns_when_they_resume) {
  ServiceOptions o = locality();
  o.worker_report_timeout_ms = 100;
  make(o);
  sut->on_worker_report(1, 102, 3, 0.25f);
  now += 50 * kMs;
  (void)sut->maintain();
  EXPECT_EQ(state(102), WorkerState::active);
  now += 60 * kMs;  // 110 ms since the report
  auto rows = sut->maintain();
  EXPECT_EQ(state(102), WorkerState::draining);
  const auto row = std::find_if(rows.begin(), rows.end(), [](auto& r) { return r.worker == 102; });
  ASSERT_NE(row, rows.end());
  EXPECT_EQ(row->healthy, 0);
  EXPECT_EQ(row->running, 3u);
  push_top("while-stale", 2);
  EXPECT_NE(sink.last("while-stale").worker, 102);
  EXPECT_EQ(sink.last("while-stale").status, 0);

  sut->on_worker_report(1, 102, 0, 0.1f);
  EXPECT_EQ(state(102), WorkerState::active);
  push_top("after", 2);
  EXPECT_EQ(sink.last("after").worker, 102);
  // Workers that never reported are never expired.
  now += 10'000 * kMs;
  sut->on_worker_report(1, 102, 0, 0.1f);
  (void)sut->maintain();
  EXPECT_EQ(state(100), WorkerState::active);
}

TEST_F(ServiceTest, an_admin_drain_is_not_undone_by_a_load_report) {
  ServiceOptions o = locality();
  o.worker_report_timeout_ms = 100;
  make(o);
  sut->on_worker_control(1, 102, shm::WorkerOp::drain);
  EXPECT_EQ(state(102), WorkerState::draining);
  sut->on_worker_report(1, 102, 1, 0.0f);
  EXPECT_EQ(state(102), WorkerState::draining);
  now += 200 * kMs;
  (void)sut->maintain();  // stale as well
  sut->on_worker_report(1, 102, 1, 0.0f);
  EXPECT_EQ(state(102), WorkerState::draining);
  sut->on_worker_control(1, 102, shm::WorkerOp::add);
  EXPECT_EQ(state(102), WorkerState::active);
  sut->on_worker_control(1, 102, shm::WorkerOp::remove);
  EXPECT_EQ(state(102), WorkerState::removed);
  sut->on_worker_report(1, 102, 1, 0.0f);  // a removed worker's report is unknown
  EXPECT_EQ(state(102), WorkerState::removed);
}

TEST_F(ServiceTest, with_every_worker_drained_a_request_gets_a_no_worker_decision) {
  make();
  for (uint32_t w = 100; w < 104; ++w) sut->on_worker_control(1, w, shm::WorkerOp::drain);
  push_top("nowhere", 0);
  EXPECT_EQ(sink.last("nowhere").status, static_cast<int32_t>(Errc::no_worker));
  EXPECT_EQ(metrics.rejected(Rejection::no_worker), 1u);
}

TEST_F(ServiceTest, reload_swaps_the_table_and_a_bad_file_keeps_the_old_one_routing) {
  make();
  eldr::testing::TempDir dir("eldrd");
  ClusterTable next = axis_table();
  std::swap(next.worker_ids[0], next.worker_ids[2]);  // cell 2 now belongs to worker 100
  ASSERT_TRUE(save_table(next, dir.file("next.eldr")).is_ok());
  const uint64_t epoch = sut->table_epoch();
  push_top("before", 2);
  EXPECT_EQ(sink.last("before").worker, 102);
  ASSERT_TRUE(sut->reload(dir.file("next.eldr")).is_ok());
  EXPECT_EQ(sut->table_epoch(), epoch + 1);
  push_top("after", 2);
  EXPECT_EQ(sink.last("after").worker, 100);
  EXPECT_EQ(sink.last("after").table_epoch, epoch + 1);

  EXPECT_FALSE(sut->reload(dir.file("missing.eldr")).is_ok());
  ClusterTable other = axis_table();
  other.geometry = {3, 4, 1};
  other.layer_mask = {0, 1, 2};
  other.idf.assign(12, 1.0f);
  other.centroids.assign(4 * 12, 0.0f);
  for (uint32_t c = 0; c < 4; ++c) other.centroids[c * 12 + c] = 1.0f;
  ASSERT_TRUE(save_table(other, dir.file("other.eldr")).is_ok());
  EXPECT_EQ(sut->reload(dir.file("other.eldr")).code(), Errc::shape_mismatch);
  EXPECT_EQ(sut->table_epoch(), epoch + 1);
  push_top("still", 2);
  EXPECT_EQ(sink.last("still").worker, 100);
}

TEST_F(ServiceTest, the_request_map_is_bounded_and_an_evicted_request_releases_its_worker) {
  ServiceOptions o = locality();
  o.request_map_capacity = 2;
  make(o);
  push_top("r1", 0);
  push_top("r2", 1);
  push_top("r3", 2);
  EXPECT_EQ(sut->requests_in_flight(), 2u);
  EXPECT_EQ(metrics.request_evicted(), 1u);
  EXPECT_EQ(inflight(100), 0);  // r1 evicted
  sut->on_complete(1, "r1");
  EXPECT_EQ(metrics.complete_unknown(), 1u);
  sut->on_complete(1, "r2");
  sut->on_complete(1, "r3");
  EXPECT_EQ(inflight(101) + inflight(102), 0);
}

TEST_F(ServiceTest, completes_out_of_order_leave_room_and_the_oldest_held_request_is_evicted) {
  ServiceOptions o = locality();
  o.request_map_capacity = 3;
  make(o);
  push_top("r1", 0);
  push_top("r2", 1);
  push_top("r3", 2);
  sut->on_complete(1, "r2");  // a hole in the middle of the arrival order
  push_top("r4", 3);
  EXPECT_EQ(metrics.request_evicted(), 0u);
  EXPECT_EQ(sut->requests_in_flight(), 3u);
  push_top("r5", 3);
  EXPECT_EQ(metrics.request_evicted(), 1u);
  EXPECT_EQ(inflight(100), 0);  // r1, the oldest still held
  EXPECT_EQ(inflight(102), 1);  // r3 kept
  EXPECT_EQ(inflight(103), 2);
}

TEST_F(ServiceTest, a_request_pushed_again_becomes_the_newest_in_a_full_map) {
  ServiceOptions o = locality();
  o.request_map_capacity = 2;
  make(o);
  push_top("a", 0);
  push_top("b", 1);
  push_top("a", 2);  // a retry: rerouted, not evicting anything
  EXPECT_EQ(metrics.rerouted(), 1u);
  EXPECT_EQ(metrics.request_evicted(), 0u);
  EXPECT_EQ(inflight(100), 0);
  push_top("c", 3);  // evicts b, now the oldest
  EXPECT_EQ(metrics.request_evicted(), 1u);
  EXPECT_EQ(inflight(101), 0);
  EXPECT_EQ(inflight(102), 1);
  sut->on_complete(1, "a");
  sut->on_complete(1, "c");
  EXPECT_EQ(inflight(102) + inflight(103), 0);
  EXPECT_EQ(metrics.complete_unknown(), 0u);
}

TEST_F(ServiceTest, a_request_id_of_the_longest_length_completes) {
  make();
  const std::string longest(shm::kMaxRequestId, 'x');
  push_top(longest, 2);
  push_top(longest.substr(1), 2);  // a prefix is another request
  EXPECT_EQ(inflight(102), 2);
  sut->on_complete(1, longest);
  EXPECT_EQ(inflight(102), 1);
  EXPECT_EQ(sut->requests_in_flight(), 1u);
  EXPECT_EQ(metrics.complete_unknown(), 0u);
}

// The request map against a list + hash map model, through wrap-around of
// its pool, growth past its first allocation, evictions, duplicates and
// out-of-order removals (ids drawn from a small pool, so probe runs collide).
TEST(request_map, matches_an_oldest_first_list_model) {
  for (uint32_t capacity : {1u, 2u, 7u, 300u, 3000u}) {
    SCOPED_TRACE("capacity " + std::to_string(capacity));
    RequestMap sut(capacity);
    std::list<std::pair<std::string, int32_t>> order;
    std::unordered_map<std::string, std::list<std::pair<std::string, int32_t>>::iterator> model;
    std::mt19937 rng(20261201u + capacity);
    const uint32_t ids = capacity * 3 + 5;
    for (int step = 0; step < 40000; ++step) {
      const std::string id = "req-" + std::to_string(rng() % ids);
      const uint32_t op = rng() % 8;
      if (op < 5) {  // a footprint: a held id is removed first (a retry), a full map evicts
        if (auto it = model.find(id); it != model.end()) {
          const std::optional<RequestMap::Held> held = sut.take(id);
          ASSERT_TRUE(held.has_value());
          ASSERT_EQ(held->worker, it->second->second);
          order.erase(it->second);
          model.erase(it);
        }
        if (sut.full()) {
          ASSERT_EQ(order.size(), capacity);
          ASSERT_EQ(sut.take_oldest().worker, order.front().second);
          model.erase(order.front().first);
          order.pop_front();
        }
        const auto worker = static_cast<int32_t>(step);
        sut.push(id, worker);
        order.emplace_back(id, worker);
        model.emplace(id, std::prev(order.end()));
      } else if (op < 7) {  // a complete
        auto it = model.find(id);
        const std::optional<RequestMap::Held> got = sut.take(id);
        if (it == model.end()) {
          ASSERT_FALSE(got.has_value());
        } else {
          ASSERT_TRUE(got.has_value());
          ASSERT_EQ(got->worker, it->second->second);
          order.erase(it->second);
          model.erase(it);
        }
      } else {
        auto it = model.find(id);
        const std::optional<int32_t> got = sut.find(id);
        if (it == model.end())
          ASSERT_FALSE(got.has_value());
        else
          ASSERT_EQ(got, it->second->second);
      }
      ASSERT_EQ(sut.size(), order.size());
    }
    for (const auto& [id, worker] : order) ASSERT_EQ(sut.find(id), worker) << id;
  }
}

TEST_F(ServiceTest, a_request_id_pushed_again_is_rerouted_without_leaking_in_flight) {
  make();
  push_top("same", 1);
  push_top("same", 3);
  EXPECT_EQ(sink.count("same"), 2u);
  EXPECT_EQ(sink.last("same").worker, 103);
  EXPECT_EQ(inflight(101), 0);
  EXPECT_EQ(inflight(103), 1);
  EXPECT_EQ(metrics.rerouted(), 1u);
}

TEST_F(ServiceTest, a_transport_rejection_publishes_an_error_when_the_id_is_readable) {
  make();
  sut->on_rejected(1, shm::RejectReason::bad_payload, "garbled",
                   {Errc::corrupt, "verifier failed"});
  EXPECT_EQ(sink.last("garbled").status, static_cast<int32_t>(Errc::corrupt));
  sut->on_rejected(1, shm::RejectReason::bad_checksum, "", {Errc::corrupt, "crc"});
  EXPECT_EQ(sink.published.size(), 1u);
  EXPECT_EQ(metrics.rejected(Rejection::bad_payload), 1u);
  EXPECT_EQ(metrics.rejected(Rejection::bad_checksum), 1u);
}

TEST_F(ServiceTest, refit_fits_the_recent_footprints_and_keeps_worker_locality) {
  ServiceOptions o = locality();
  o.refit.enabled = true;
  o.refit.window = 64;
  o.refit.min_samples = 32;
  make(o);
  EXPECT_EQ(sut->refit_now().code(), Errc::state);  // no samples yet
  for (int i = 0; i < 64; ++i) {
    std::vector<int16_t> c(8, 0);
    c[static_cast<size_t>(i % 4)] = static_cast<int16_t>(5 + i % 3);
    c[4 + static_cast<size_t>(i % 4)] = 1;
    push("s" + std::to_string(i), c);
    sut->on_complete(1, "s" + std::to_string(i));
  }
  const uint64_t epoch = sut->table_epoch();
  ASSERT_TRUE(sut->refit_now().is_ok());
  EXPECT_EQ(sut->table_epoch(), epoch + 1);
  EXPECT_EQ(sut->router().table()->fit.source, "eldrd refit");
  EXPECT_EQ(sut->refit_now().code(), Errc::state);  // nothing new to learn from
  EXPECT_EQ(sut->table_epoch(), epoch + 1);
  // Aligned to the old table: each expert's traffic stays on its worker.
  for (int cell = 0; cell < 4; ++cell) {
    push_top("check" + std::to_string(cell), cell);
    EXPECT_EQ(sink.last("check" + std::to_string(cell)).worker, 100 + cell);
  }
}

TEST_F(ServiceTest, evicted_decision_ages_are_a_histogram_in_seconds) {
  make();
  metrics.observe_decision_evicted(2'000'000'000);  // 2 s
  metrics.observe_decision_evicted(50'000'000);     // 50 ms
  EXPECT_EQ(metrics.decisions_evicted(), 2u);
  const std::string text = metrics.render();
  for (const char* line :
       {"# TYPE eldr_decision_evicted_age_seconds histogram",
        "eldr_decision_evicted_age_seconds_bucket{le=\"0.01\"} 0",
        "eldr_decision_evicted_age_seconds_bucket{le=\"0.1\"} 1",
        "eldr_decision_evicted_age_seconds_bucket{le=\"1\"} 1",
        "eldr_decision_evicted_age_seconds_bucket{le=\"5\"} 2",
        "eldr_decision_evicted_age_seconds_bucket{le=\"+Inf\"} 2",
        "eldr_decision_evicted_age_seconds_sum 2.05", "eldr_decision_evicted_age_seconds_count 2"})
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
}

TEST_F(ServiceTest, maintain_publishes_worker_rows_and_gauges) {
  make();
  push_top("x", 3);
  sut->on_worker_report(1, 101, 4, 0.75f);
  const auto rows = sut->maintain();
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[3].worker, 103);
  EXPECT_EQ(rows[3].inflight, 1u);
  EXPECT_EQ(rows[3].routed, 1u);
  EXPECT_EQ(rows[1].running, 4u);
  EXPECT_FLOAT_EQ(rows[1].kv_usage, 0.75f);
  const std::string text = metrics.render();
  for (const char* family :
       {"eldr_routed_total{worker=\"103\",policy=\"eldr\"} 1",
        "eldr_worker_inflight{worker=\"103\"} 1",
        "eldr_worker_healthy{worker=\"101\",state=\"active\"} 1", "eldr_table_epoch",
        "eldr_decision_latency_seconds_count 1", "eldr_rejected_total{reason=\"no_worker\"} 0",
        "eldr_complete_unknown_total 0", "eldr_clients 0", "eldr_clients_quarantined_total 0",
        "eldr_registrations_refused_total 0"})
    EXPECT_NE(text.find(family), std::string::npos) << family << "\n" << text;
}

}  // namespace
}  // namespace eldr::sidecar
