// libFuzzer target: the C API driven by a byte stream. Each input is a
// program of op codes, each choosing an entry point and its arguments (sizes,
// versions, NULLs, ids, float bits) from the following bytes, against a fitted
// table and a router created per input. No daemon: the client calls get a
// NULL handle or an instance with no segment.
//
// Invariants (abort on violation): every status is a known code; a failing
// call leaves a message and its out-params untouched; a routed worker is one
// of the router's workers; the router's in-flight books never go below zero.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define ELDR_EXPERIMENTAL_GPU
#include "eldr/eldr.h"

namespace {

constexpr uint32_t kLayers = 2, kExperts = 8, kWorkers = 3, kCells = kLayers * kExperts;

class Bytes {
 public:
  Bytes(const uint8_t* data, size_t size) : m_data(data), m_size(size) {}
  bool empty() const { return m_pos >= m_size; }
  uint8_t u8() { return m_pos < m_size ? m_data[m_pos++] : 0; }
  uint32_t u32() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v = (v << 8) | u8();
    return v;
  }
  float f32() {
    const uint32_t bits = u32();
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
  }
  int16_t i16() { return static_cast<int16_t>((u8() << 8) | u8()); }

 private:
  const uint8_t* m_data;
  size_t m_size;
  size_t m_pos = 0;
};

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "capi_fuzz invariant broken: %s (last error: %s)\n", what,
                 eldr_last_error_message());
    std::abort();
  }
}

// Known code; a failure carries a message.
eldr_status_t checked(eldr_status_t s) {
  check(std::strcmp(eldr_status_name(s), "ELDR_E_UNKNOWN") != 0, "unknown status code");
  if (s != ELDR_OK) check(eldr_last_error_message()[0] != '\0', "failure without a message");
  return s;
}

// The fitted table every input starts from (fit once: it is the slow part).
eldr_table_t* base_table() {
  static eldr_table_t* table = [] {
    std::vector<int16_t> prefill;
    for (uint32_t i = 0; i < 24; ++i) {
      for (uint32_t c = 0; c < kCells; ++c) {
        const uint32_t domain = i % kWorkers;
        prefill.push_back(static_cast<int16_t>((c % kExperts) / 3 == domain ? 1 + (i + c) % 4 : 0));
      }
    }
    eldr_fit_options_t options = ELDR_FIT_OPTIONS_INIT;
    options.num_workers = kWorkers;
    options.threads = 1;
    eldr_table_t* t = nullptr;
    check(
        eldr_table_fit(prefill.data(), nullptr, 24, kLayers, kExperts, 2, &options, &t) == ELDR_OK,
        "base fit");
    return t;
  }();
  return table;
}

// Footprint arguments: the shape is usually right, sometimes anything. The
// buffer always holds the table's cell count: the API reads counts only when
// the claimed shape equals the table's.
struct Footprint {
  std::vector<int16_t> counts = std::vector<int16_t>(kCells);
  uint32_t layers = kLayers, experts = kExperts;
  const int16_t* ptr() const { return counts.data(); }
};

Footprint footprint(Bytes& in) {
  Footprint f;
  const uint8_t mode = in.u8();
  for (auto& c : f.counts) c = (mode & 1) ? in.i16() : static_cast<int16_t>(in.u8() & 7);
  switch ((mode >> 1) & 7) {
    case 0:
      f.layers = in.u32();
      f.experts = in.u32();
      break;
    case 1:
      f.layers = kExperts;  // same cell count, other shape
      f.experts = kLayers;
      break;
    case 2:
      f.layers = 0;
      break;
    default:
      break;
  }
  return f;
}

template <class T>
T* maybe_null(Bytes& in, T* p) {
  return (in.u8() & 15) == 0 ? nullptr : p;
}

void run(Bytes& in) {
  eldr_table_t* table = base_table();
  eldr_router_options_t options = ELDR_ROUTER_OPTIONS_INIT;
  options.policy = in.u8() % 9;  // 8: unknown
  if (options.policy == ELDR_POLICY_DOMAIN) options.policy = ELDR_POLICY_ELDR;
  options.tau = (in.u8() & 1) ? -1.0f : static_cast<float>(in.u8()) / 100.0f;
  options.min2_band = in.u8() & 1;
  options.seed = in.u8();
  eldr_router_t* router = nullptr;
  if (checked(eldr_router_new(table, &options, &router)) != ELDR_OK) return;

  for (int step = 0; step < 64 && !in.empty(); ++step) {
    const uint8_t op = in.u8();
    switch (op % 20) {
      case 0: {  // route
        Footprint f = footprint(in);
        eldr_decision_t d = ELDR_DECISION_INIT;
        d.worker = -7;
        const eldr_status_t s =
            checked(eldr_router_route(maybe_null(in, router), maybe_null(in, f.ptr()), f.layers,
                                      f.experts, nullptr, 0, maybe_null(in, &d)));
        if (s != ELDR_OK) check(d.worker == -7, "route wrote the decision on failure");
        if (s == ELDR_OK) check(d.worker >= 0, "routed to a negative worker");
        break;
      }
      case 1: {  // route_ex with loads and a decision version
        Footprint f = footprint(in);
        uint32_t n_loads = in.u8() % 6;
        std::vector<uint32_t> loads(8);
        for (auto& l : loads) l = in.u8();
        eldr_decision_t d = ELDR_DECISION_INIT;
        d.version = in.u8() % 3;
        const eldr_decision_t before = d;
        const eldr_status_t s = checked(
            eldr_router_route(router, maybe_null(in, f.ptr()), f.layers, f.experts,
                              (in.u8() & 1) ? loads.data() : nullptr, n_loads, maybe_null(in, &d)));
        if (s != ELDR_OK)
          check(std::memcmp(&d, &before, sizeof d) == 0, "route_ex wrote on failure");
        break;
      }
      case 2: {  // scores
        Footprint f = footprint(in);
        const uint32_t n = in.u8() % 8;
        std::vector<float> scores(8, 9.0f);
        std::vector<uint8_t> band(8, 9);
        const eldr_status_t s = checked(eldr_router_score(router, f.ptr(), f.layers, f.experts,
                                                          maybe_null(in, scores.data()),
                                                          maybe_null(in, band.data()), n));
        if (s != ELDR_OK) check(scores[0] == 9.0f && band[0] == 9, "scores wrote on failure");
        break;
      }
      case 3:
        checked(eldr_router_complete_worker(maybe_null(in, router), static_cast<int8_t>(in.u8())));
        break;
      case 4:
        checked(eldr_router_set_load(router, static_cast<int8_t>(in.u8()), in.u32()));
        break;
      case 5:
        checked(eldr_router_add_worker(router, static_cast<int8_t>(in.u8())));
        break;
      case 6:
        checked(eldr_router_drain_worker(router, static_cast<int8_t>(in.u8())));
        break;
      case 7:
        checked(eldr_router_remove_worker(router, static_cast<int8_t>(in.u8())));
        break;
      case 8: {  // table signature / scores with a fuzzed out size
        Footprint f = footprint(in);
        const uint32_t n = in.u8() % (kCells + 4);
        std::vector<float> out(kCells + 4, 5.0f);
        const eldr_status_t s =
            (op & 16)
                ? checked(eldr_table_compute_signature(maybe_null(in, table), f.ptr(), f.layers,
                                                       f.experts, maybe_null(in, out.data()), n))
                : checked(eldr_table_score(table, f.ptr(), f.layers, f.experts,
                                           maybe_null(in, out.data()), n));
        if (s != ELDR_OK) check(out[0] == 5.0f, "signature/scores wrote on failure");
        break;
      }
      case 9: {  // info and worker ids
        eldr_table_info_t info = ELDR_TABLE_INFO_INIT;
        info.version = in.u8() % 3;
        checked(eldr_table_get_info(maybe_null(in, table), maybe_null(in, &info)));
        std::vector<int32_t> ids(8, -3);
        const eldr_status_t s =
            checked(eldr_table_get_worker_ids(table, maybe_null(in, ids.data()), in.u8() % 8));
        if (s != ELDR_OK) check(ids[0] == -3, "worker_ids wrote on failure");
        break;
      }
      case 10: {  // a fresh router with any options
        eldr_router_options_t o = ELDR_ROUTER_OPTIONS_INIT;
        o.version = in.u8() % 4;
        o.policy = in.u8();
        if (in.u8() & 1) {
          o.t0_ms = in.f32();
          o.tseq_ms = in.f32();
          o.alpha_us = in.f32();
          o.max_batch = in.u32() % 200;
          o.max_inflight = in.u32() % 100000;
        }
        o.tau = in.f32();
        o.max_workers = in.u32() % 5000;
        eldr_router_t* other = reinterpret_cast<eldr_router_t*>(uintptr_t{0x10});
        const eldr_status_t s =
            checked(eldr_router_new(maybe_null(in, table), maybe_null(in, &o), &other));
        if (s == ELDR_OK) {
          eldr_router_free(other);
        } else {
          check(other == reinterpret_cast<eldr_router_t*>(uintptr_t{0x10}), "router_new wrote");
        }
        break;
      }
      case 11: {  // a small fit, then swap it in
        const uint32_t layers = 1 + in.u8() % 3, experts = 1 + in.u8() % 8;
        const uint64_t n = in.u8() % 12;
        std::vector<int16_t> prefill(n * layers * experts);
        for (auto& c : prefill) c = static_cast<int16_t>(in.u8() % 5 - (in.u8() == 0xff));
        eldr_fit_options_t fit = ELDR_FIT_OPTIONS_INIT;
        fit.version = in.u8() % 3;
        fit.num_workers = in.u8() % 5;
        fit.max_iterations = in.u8() % 5;
        fit.threads = 1;
        eldr_table_t* t = nullptr;
        // Layer selection draws 30,000 rho pairs: the slow path, so a rare one.
        const bool with_decode = (in.u8() & 7) == 0;
        if (checked(eldr_table_fit(n ? prefill.data() : nullptr,
                                   with_decode && n ? prefill.data() : nullptr, n, layers, experts,
                                   in.u8() % 4, &fit, &t)) == ELDR_OK) {
          checked(eldr_router_swap_table(router, t));
          eldr_table_free(t);
        }
        break;
      }
      case 12: {  // worker list
        uint32_t slots = 0;
        checked(eldr_router_get_worker_slots(router, &slots));
        const uint32_t n = (in.u8() & 1) ? slots : in.u8() % 8;
        std::vector<int32_t> ids(n + 1);
        std::vector<uint32_t> states(n + 1);
        std::vector<uint32_t> inflight(n + 1);
        checked(eldr_router_get_workers(router, maybe_null(in, ids.data()),
                                        maybe_null(in, states.data()),
                                        maybe_null(in, inflight.data()), n));
        break;
      }
      case 13: {  // status texts, policy names
        const int32_t code = static_cast<int32_t>(in.u32());
        check(eldr_status_name(code) != nullptr && eldr_status_string(code) != nullptr, "texts");
        (void)eldr_policy_name(in.u32());
        break;
      }
      case 14: {  // client calls without a daemon
        Footprint f = footprint(in);
        std::string id(in.u8() % 140, 'r');
        for (auto& ch : id) ch = static_cast<char>(1 + in.u8() % 255);
        eldr_decision_t d = ELDR_DECISION_INIT;
        check(checked(eldr_client_push(nullptr, id.c_str(), f.ptr(), f.layers, f.experts)) ==
                  ELDR_E_INVALID_ARGUMENT,
              "push without a client");
        check(checked(eldr_client_wait(nullptr, id.c_str(), 0, &d)) == ELDR_E_INVALID_ARGUMENT,
              "wait without a client");
        check(checked(eldr_client_complete(nullptr, id.c_str(),
                                           (uint64_t{in.u32()} << 32) | in.u32())) ==
                  ELDR_E_INVALID_ARGUMENT,
              "complete without a client");
        eldr_worker_report_t report = ELDR_WORKER_REPORT_INIT;
        report.worker = static_cast<int32_t>(in.u32());
        report.running = in.u32();
        report.kv_usage = in.f32();
        check(checked(eldr_client_report(nullptr, &report)) == ELDR_E_INVALID_ARGUMENT,
              "report without a client");
        check(checked(eldr_client_drain_worker(nullptr, static_cast<int32_t>(in.u32()))) ==
                  ELDR_E_INVALID_ARGUMENT,
              "drain without a client");
        break;
      }
      case 16: {  // route with a request id (a small id space: repeats and collisions)
        Footprint f = footprint(in);
        eldr_decision_t d = ELDR_DECISION_INIT;
        checked(eldr_router_route_request(maybe_null(in, router), in.u8() % 16,
                                          maybe_null(in, f.ptr()), f.layers, f.experts,
                                          maybe_null(in, &d)));
        break;
      }
      case 17:  // complete by id: unknown and repeated ids are refused, never harmful
        checked(eldr_router_complete(maybe_null(in, router), in.u8() % 16));
        break;
      case 18: {  // an engine's report
        eldr_worker_report_t r = ELDR_WORKER_REPORT_INIT;
        r.version = in.u8() % 3;
        r.worker = static_cast<int8_t>(in.u8());
        r.running = in.u32();
        r.kv_usage = in.f32();
        r.batch_size = in.u32() % 300;
        r.step_ms = in.f32();
        checked(eldr_router_report(maybe_null(in, router), maybe_null(in, &r)));
        break;
      }
      case 19: {  // stats
        eldr_router_stats_t st = ELDR_ROUTER_STATS_INIT;
        st.version = in.u8() % 3;
        checked(eldr_router_get_stats(maybe_null(in, router), maybe_null(in, &st)));
        break;
      }
      case 15: {  // open an instance that has no daemon
        std::string name(in.u8() % 80, 'i');
        for (auto& ch : name) ch = static_cast<char>(1 + in.u8() % 255);
        name = "capifuzz-nodaemon-" + name;
        eldr_client_options_t o = ELDR_CLIENT_OPTIONS_INIT;
        o.open_timeout_ms = 0;
        o.version = in.u8() % 3;
        eldr_client_t* client = nullptr;
        const eldr_status_t s = checked(eldr_client_open(name.c_str(), &o, &client));
        check(s != ELDR_OK && client == nullptr, "opened a client without a daemon");
        break;
      }
    }
  }
  // The books: nothing in flight is below zero (the counter is clamped in the
  // C view, so check complete refuses on an idle worker instead).
  uint32_t slots = 0;
  checked(eldr_router_get_worker_slots(router, &slots));
  std::vector<int32_t> ids(slots);
  std::vector<uint32_t> inflight(slots);
  std::vector<uint32_t> states(slots);
  if (slots > 0 && checked(eldr_router_get_workers(router, ids.data(), states.data(),
                                                   inflight.data(), slots)) == ELDR_OK) {
    for (uint32_t i = 0; i < slots; ++i) {
      if (inflight[i] == 0 && ids[i] >= 0) {
        bool newer_slot = false;  // complete takes the newest slot with the id
        for (uint32_t j = i + 1; j < slots; ++j) newer_slot |= ids[j] == ids[i];
        if (newer_slot) continue;
        // A count of 0 may still hold requests the router tracks (a report or
        // set_load lowered it): each complete takes one, the count stays at 0,
        // and then complete refuses.
        eldr_status_t s = ELDR_OK;
        for (int n = 0; n < 10000 && s == ELDR_OK; ++n)
          s = eldr_router_complete_worker(router, ids[i]);
        check(s == ELDR_E_STATE, "complete never refused on an idle worker");
        uint32_t now = 1;
        std::vector<int32_t> all(slots);
        std::vector<uint32_t> counts(slots);
        if (eldr_router_get_workers(router, all.data(), nullptr, counts.data(), slots) == ELDR_OK)
          now = counts[i];
        check(now == 0, "complete below zero");
      }
    }
  }
  eldr_router_free(router);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Bytes in(data, size);
  run(in);
  return 0;
}
