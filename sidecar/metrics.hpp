// Daemon metrics in the Prometheus text format, served on a loopback HTTP
// port. The service thread updates counters with relaxed atomics (nothing on
// the routing path locks); the slow-changing tables (clients, workers) are
// replaced as a whole every maintenance tick and copied out by the HTTP
// thread under a mutex the routing path never takes.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "eldr/pool/peer_wire.hpp"
#include "eldr/router.hpp"
#include "eldr/shm.hpp"
#include "eldr/status.hpp"
#include "eldr/step_model.hpp"

namespace eldr::sidecar {

// Multi-node mode's names (pool/), unqualified in the daemon.
using namespace ::eldr::pool;

// Why a record or request got no routing decision (label of eldr_rejected_total).
enum class Rejection : uint8_t {
  bad_header = 0,  // the transport's reasons first, in shm::RejectReason order
  bad_checksum,
  bad_payload,
  too_large,
  shape_mismatch,  // footprint geometry differs from the table's
  bad_footprint,   // negative counts, inconsistent block form
  unknown_block,   // a hash-only block the signature cache does not hold
  unsupported,     // block form with a table that has no top-k
  no_worker,       // nothing routable (all drained or removed)
  internal,
  count_,
};
const char* rejection_name(Rejection r) noexcept;

// Why a prompt got no routing decision (label of eldr_prompt_rejected_total).
enum class PromptRejection : uint8_t {
  no_predictor = 0,  // the table has no predictor, or none for the prompt's kind
  bad_prompt,        // empty, an id >= 2^20, invalid UTF-8
  too_long,          // more than 131072 tokens or 512 KiB of text (before any cut)
  no_worker,         // nothing routable
  internal,
  count_,
};
const char* prompt_rejection_name(PromptRejection r) noexcept;
Rejection rejection_from(shm::RejectReason reason) noexcept;

inline constexpr size_t kPolicyCount = std::size(kAllPolicies);
// Upper bounds of the decision latency histogram, in nanoseconds (+Inf implied).
inline constexpr std::array<uint64_t, 14> kLatencyBucketsNs = {
    1000,   2000,   5000,    10000,   20000,   50000,    100000,
    200000, 500000, 1000000, 2000000, 5000000, 10000000, 100000000};
// ... of the age of decisions overwritten in a full decision table.
inline constexpr std::array<uint64_t, 10> kEvictedAgeBucketsNs = {
    1000000,    10000000,    100000000,   500000000,    1000000000,
    5000000000, 10000000000, 60000000000, 300000000000, 3600000000000};

// A Prometheus histogram of nanosecond values, exposed in seconds. Lock-free
// to observe; `bounds` must outlive it.
class NsHistogram {
 public:
  explicit NsHistogram(std::span<const uint64_t> bounds);
  void observe(uint64_t ns) noexcept;
  uint64_t count() const noexcept { return m_count.load(std::memory_order_relaxed); }
  void render(std::string& out, const char* name, const char* help) const;

 private:
  std::span<const uint64_t> m_bounds;
  std::unique_ptr<std::atomic<uint64_t>[]> m_buckets;  // one per bound, then +Inf
  std::atomic<uint64_t> m_count{0}, m_sum_ns{0};
};

struct WorkerGauge {
  uint32_t slot = 0;
  int32_t worker = -1;
  WorkerState state = WorkerState::active;
  bool healthy = true;
  int64_t inflight = 0;
  double batch_experts = 0.0;  // eldr_cost: expected distinct experts of its batch
};

// The router's state, refreshed every maintenance tick.
struct RouterGauge {
  Policy policy = Policy::eldr_cost;
  StepCost step_cost;              // the constants in force (configured or fitted)
  uint64_t step_samples = 0;       // reports the online fit used
  uint64_t untracked = 0;          // routes with no request record free
  uint64_t completes_unknown = 0;  // the router's: complete_request of an id not in flight
};

// The table's footprint predictor, refreshed every maintenance tick.
struct PredictorGauge {
  bool present = false;
  PredictorInfo info;
};

// Multi-node mode, refreshed every maintenance tick (pool_node.cpp).
struct PoolGauge {
  bool connected = false;
  uint64_t peers = 0;
  uint64_t peer_bookings = 0;  // the peers' requests in flight, counted here
  uint64_t twins = 0;          // anticipated peer picks held (PeerTwins)
  double view_age_ms = 0.0;
  std::array<uint64_t, 4> received{};  // applied, by PeerKind
  uint64_t published = 0, publish_failed = 0, dropped = 0;
  uint64_t received_bytes = 0, published_bytes = 0;  // NATS payloads, every subject
  std::array<uint64_t, kWireFaults> malformed{};
  uint64_t foreign_subject = 0;  // messages on a subject that is no node's
  uint64_t lost = 0, stale = 0, refused = 0, unknown_release = 0, repaired = 0;
  uint64_t expired_peers = 0, restarts = 0, disconnects = 0, reconnects = 0, reopened = 0;
  uint64_t snapshot_too_large = 0;
  uint64_t remote_routes = 0, remote_malformed = 0;  // route over NATS
  // Gateway routes withdrawn by their gateway's cancel: released here, or
  // refused as they came (the cancel got here first).
  uint64_t routes_cancelled = 0, routes_refused = 0;
  uint64_t routes_refused_owned = 0;  // refused: the id is another's in flight here
  uint64_t routes_orphaned = 0;       // released: their gateway went silent or left
  uint64_t completes_refused = 0;     // gateway completes without their route's key
  uint64_t replies_refused = 0;       // requests whose reply subject the node does not answer on
  // Completes of requests another node routed: sent to the pool, and the
  // pool's that were ours and released a request here.
  uint64_t completes_forwarded = 0, completes_received = 0;
  uint64_t completes_direct = 0;  // forwarded to the one node their token names
  uint64_t completes_resent = 0, completes_unanswered = 0;  // of those: again, given up
  uint64_t join_errors = 0;  // reasons NATS gave for not connecting (refused, unreachable, TLS)
  // Full bookings sampled to the refit lease holder, and taken into its
  // refit window here.
  uint64_t refit_samples_sent = 0, refit_samples_received = 0;
};

class Metrics {
 public:
  explicit Metrics(uint32_t max_workers);

  // ---- service thread, lock-free ----
  void count_routed(uint32_t slot, Policy policy) noexcept;
  void count_rejected(Rejection r) noexcept;
  void observe_latency(uint64_t ns) noexcept { m_latency.observe(ns); }
  // A decision overwritten `age_ns` after it was published, to make room.
  void observe_decision_evicted(uint64_t age_ns) noexcept { m_evicted_age.observe(age_ns); }
  void count_complete_unknown() noexcept { m_complete_unknown.fetch_add(1, kRelaxed); }
  // A complete without the request's token, from another process than its pusher.
  void count_complete_refused() noexcept { m_complete_refused.fetch_add(1, kRelaxed); }
  void count_request_evicted() noexcept { m_request_evicted.fetch_add(1, kRelaxed); }
  void count_rerouted() noexcept { m_rerouted.fetch_add(1, kRelaxed); }
  void count_report_unknown_worker() noexcept { m_report_unknown.fetch_add(1, kRelaxed); }
  // A report value dropped: a step time without a batch size, or implausible.
  void count_report_bad_value() noexcept { m_report_bad_value.fetch_add(1, kRelaxed); }
  void count_stale_transition() noexcept { m_stale_transitions.fetch_add(1, kRelaxed); }
  void count_reload(bool ok) noexcept {
    (ok ? m_reloads : m_reload_failures).fetch_add(1, kRelaxed);
  }
  void count_refit(bool ok) noexcept { (ok ? m_refits : m_refit_failures).fetch_add(1, kRelaxed); }
  void set_table_epoch(uint64_t epoch) noexcept { m_table_epoch.store(epoch, kRelaxed); }
  // Routing from the prompt.
  void count_prompt_routed() noexcept { m_prompt_routed.fetch_add(1, kRelaxed); }
  void count_prompt_rejected(PromptRejection r) noexcept;
  void count_prompt_cut() noexcept { m_prompt_cut.fetch_add(1, kRelaxed); }
  void count_learned(bool ok) noexcept {
    (ok ? m_learned : m_learn_rejected).fetch_add(1, kRelaxed);
  }
  // Any thread (the saver): a save of the table with its predictor.
  void count_predictor_save(bool ok) noexcept {
    (ok ? m_predictor_saves : m_predictor_save_failures).fetch_add(1, kRelaxed);
  }

  // ---- maintenance tick ----
  void set_workers(std::vector<WorkerGauge> workers);
  void set_clients(std::vector<shm::ClientInfo> clients);
  void set_transport(const shm::Host::Counters& counters) noexcept {
    m_clients_quarantined.store(counters.clients_quarantined, kRelaxed);
    m_registrations_refused.store(counters.registrations_refused, kRelaxed);
  }
  void set_router(const RouterGauge& router);
  void set_pool(const PoolGauge& pool);
  void set_predictor(const PredictorGauge& predictor);

  // ---- readers ----
  std::string render() const;  // Prometheus text exposition format 0.0.4
  uint64_t rejected(Rejection r) const noexcept;
  uint64_t complete_unknown() const noexcept { return m_complete_unknown.load(kRelaxed); }
  uint64_t complete_refused() const noexcept { return m_complete_refused.load(kRelaxed); }
  uint64_t request_evicted() const noexcept { return m_request_evicted.load(kRelaxed); }
  uint64_t rerouted() const noexcept { return m_rerouted.load(kRelaxed); }
  uint64_t report_bad_value() const noexcept { return m_report_bad_value.load(kRelaxed); }
  uint64_t report_unknown_worker() const noexcept { return m_report_unknown.load(kRelaxed); }
  uint64_t latency_count() const noexcept { return m_latency.count(); }
  uint64_t decisions_evicted() const noexcept { return m_evicted_age.count(); }
  uint64_t prompt_routed() const noexcept { return m_prompt_routed.load(kRelaxed); }
  uint64_t prompt_rejected(PromptRejection r) const noexcept;
  uint64_t prompt_cut() const noexcept { return m_prompt_cut.load(kRelaxed); }
  uint64_t learned() const noexcept { return m_learned.load(kRelaxed); }
  uint64_t learn_rejected() const noexcept { return m_learn_rejected.load(kRelaxed); }
  uint64_t predictor_saves() const noexcept { return m_predictor_saves.load(kRelaxed); }
  uint64_t predictor_save_failures() const noexcept {
    return m_predictor_save_failures.load(kRelaxed);
  }

 private:
  static constexpr auto kRelaxed = std::memory_order_relaxed;
  uint32_t m_max_workers;
  std::unique_ptr<std::atomic<uint64_t>[]> m_routed;  // [slot][policy]
  std::array<std::atomic<uint64_t>, static_cast<size_t>(Rejection::count_)> m_rejected{};
  NsHistogram m_latency{kLatencyBucketsNs};
  NsHistogram m_evicted_age{kEvictedAgeBucketsNs};
  std::atomic<uint64_t> m_complete_unknown{0}, m_complete_refused{0}, m_request_evicted{0},
      m_rerouted{0}, m_report_unknown{0}, m_report_bad_value{0}, m_stale_transitions{0},
      m_reloads{0}, m_reload_failures{0}, m_refits{0}, m_refit_failures{0}, m_table_epoch{0},
      m_clients_quarantined{0}, m_registrations_refused{0}, m_prompt_routed{0}, m_prompt_cut{0},
      m_learned{0}, m_learn_rejected{0}, m_predictor_saves{0}, m_predictor_save_failures{0};
  std::array<std::atomic<uint64_t>, static_cast<size_t>(PromptRejection::count_)>
      m_prompt_rejected{};
  mutable std::mutex m_tables;
  std::vector<WorkerGauge> m_workers;
  std::vector<shm::ClientInfo> m_clients;
  RouterGauge m_router;
  bool m_router_set = false;
  PoolGauge m_pool;
  bool m_pool_set = false;
  PredictorGauge m_predictor;

  // render()'s parts, one family group each (the others are free functions).
  void render_decisions(std::string& out, const std::vector<WorkerGauge>& workers) const;
  void render_transport(std::string& out, const std::vector<shm::ClientInfo>& clients) const;
  void render_counters(std::string& out) const;
  void render_prompts(std::string& out, const PredictorGauge& predictor) const;
};

// GET /metrics on 127.0.0.1:port in its own thread.
class MetricsServer {
 public:
  static Result<std::unique_ptr<MetricsServer>> start(const Metrics& metrics, uint16_t port);
  ~MetricsServer();  // stops and joins
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;
  uint16_t port() const noexcept { return m_port; }

 private:
  struct Impl;
  explicit MetricsServer(std::unique_ptr<Impl> impl, uint16_t port);
  std::unique_ptr<Impl> m_impl;
  uint16_t m_port;
};

}  // namespace eldr::sidecar
