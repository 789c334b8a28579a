// The daemon's routing service: turns the records the transport hands over
// (footprints, completes, load reports, worker control) into router calls and
// published decisions. Every footprint and every prompt gets exactly one
// decision: a worker, or an explicit error status (counted by reason). A
// request routed from its prompt is routed once: its real footprint, pushed
// later under the same id, is handed to the predictor (Router::learn). Single-threaded on the
// record path (the daemon's consumer thread); reload() and refit_now() may run on other threads
// because the router swaps tables atomically.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "config.hpp"
#include "eldr/peer_twins.hpp"
#include "eldr/pool/peer_wire.hpp"
#include "eldr/router.hpp"
#include "eldr/shm.hpp"
#include "eldr/signature_cache.hpp"
#include "metrics.hpp"
#include "refit.hpp"
#include "request_map.hpp"
#include "worker_health.hpp"

namespace eldr::sidecar {

// Where decisions go: the shared-memory segment in the daemon.
class DecisionSink {
 public:
  virtual ~DecisionSink() = default;
  virtual void publish(std::string_view request_id, const shm::DecisionIn& decision) = 0;
};

// Where this node's own bookings go when it is one of several routers of a
// pool (pool_node.hpp): every route, every release (complete, retry,
// eviction) and every load report an engine sent here.
class PoolPublisher {
 public:
  virtual ~PoolPublisher() = default;
  virtual void booked(uint64_t key, int32_t worker, std::span<const int16_t> counts) = 0;
  virtual void released(uint64_t key) = 0;
  virtual void reported(const PeerLoad& load) = 0;
  // A complete with a token for a request this node does not hold: another
  // node of the pool may have routed it (its engine completes through us).
  virtual void forward_complete(std::string_view request_id, uint64_t token) = 0;
  // This node's tag in the pool, which its completion tokens carry
  // (peer_wire.hpp), so that a complete sent to another node comes here.
  virtual uint32_t node_tag() const noexcept = 0;
};

struct ServiceOptions {
  RouterOptions router;
  uint32_t request_map_capacity = 1u << 16;
  uint32_t worker_report_timeout_ms = 0;  // 0 = reports never expire
  uint32_t block_size = 16;
  size_t signature_cache_bytes = size_t{64} << 20;
  RefitConfig refit;

  static ServiceOptions from(const DaemonConfig& config);
};

// The client id of footprints and completes that came over NATS, not from a ring.
inline constexpr uint32_t kRemoteClient = UINT32_MAX;

// Monotonic nanoseconds (CLOCK_MONOTONIC, the clock of FootprintIn::seen_ns).
using Clock = std::function<uint64_t()>;
uint64_t monotonic_ns() noexcept;

class Service final : public shm::RecordHandler {
 public:
  static Result<std::unique_ptr<Service>> create(std::shared_ptr<const ClusterTable> table,
                                                 const ServiceOptions& options, DecisionSink& sink,
                                                 Metrics& metrics, Clock clock = monotonic_ns);
  ~Service() override;

  // ---- shm::RecordHandler (consumer thread) ----
  void on_footprint(const shm::FootprintIn& footprint) override;
  void on_complete(uint32_t client, std::string_view request_id) override;
  void on_complete_ex(const shm::CompleteIn& complete) override;
  void on_worker_report(uint32_t client, uint32_t worker, uint32_t running,
                        float kv_usage) override;
  // With batch_size / step_ms (schema 2): the router's report().
  void on_worker_report_ex(uint32_t client, const shm::WorkerReportRecord& report) override;
  void on_worker_control(uint32_t client, uint32_t worker, shm::WorkerOp op) override;
  // Routes from the prompt (Router::route_prompt): the predicted footprint
  // stands for the request in its worker's batch and in the pool's bookings.
  void on_prompt(const shm::PromptIn& prompt) override;
  void on_rejected(uint32_t client, shm::RejectReason reason, std::string_view request_id,
                   const Status& why) override;

  // Consumer thread, every ~100 ms: expires workers whose reports stopped and
  // refreshes the worker and router gauges. Returns the rows for
  // shm::Host::publish_workers; router_row() the router's state with them.
  std::vector<shm::Host::WorkerRow> maintain();
  const shm::Host::RouterRow& router_row() const noexcept { return m_router_row; }

  // A reported step time above this is no decode step (the step fit's bound).
  static constexpr float kMaxStepMs = 10000.0f;

  // Any thread: load + validate a table file and swap it in (same geometry);
  // routing continues on the old table until the new one is complete.
  Status reload(const std::string& path);
  // epoch: the pool's (multi-node mode), above the current one; else the next.
  Status swap_table(std::shared_ptr<const ClusterTable> table,
                    std::optional<uint64_t> epoch = std::nullopt);
  // Any thread: fit a table on the recent footprints (refit.window), aligned
  // to the current table's workers, and swap it in. Errc::state when fewer
  // than refit.min_samples footprints were seen.
  Status refit_now(const OnlineRefit::Install& install = {});
  // A peer's booked footprint joins the refit window too: in a pool, the
  // node that refits sees every node's traffic.
  void keep_for_refit(std::span<const int16_t> counts) {
    if (m_refit) m_refit->keep(counts);
  }

  // ---- multi-node mode (consumer thread) ----
  // From now on, bookings and reports go to `publisher` too (nullptr: no more).
  void join_pool(PoolPublisher* publisher) noexcept { m_publisher = publisher; }
  // A load report another node of the pool received: applied like one of
  // ours (worker health, the router's load), not published again.
  void apply_peer_load(const PeerLoad& load);
  // A footprint that came over NATS (eldr.<pool>.route): routed like one
  // from a ring and its decision returned for the reply (not published to
  // the segment, whose decisions are its engines').
  shm::DecisionIn route_remote(const shm::FootprintIn& footprint);
  // A prompt that came over NATS, as route_remote.
  shm::DecisionIn route_remote(const shm::PromptIn& prompt);
  // A complete another node forwarded (eldr.<pool>.complete): releases the
  // request when this node holds it with this token, and says so. Every node
  // hears each one, so a miss is normal and counted nowhere.
  bool complete_for_pool(std::string_view request_id, uint64_t token);
  // Every request this node has in flight (router key, worker), oldest first.
  std::vector<std::pair<uint64_t, int32_t>> local_requests() const;
  // The router key of a request in flight here (what PoolPublisher's booked
  // and released name it by), if it is held.
  std::optional<uint64_t> request_key(std::string_view request_id) const {
    const auto held = m_requests.held(request_id);
    return held ? std::optional<uint64_t>(held->key) : std::nullopt;
  }
  // Anticipation of the peers' unseen picks (eldr::PeerTwins): each route
  // books twins_per_pick twins (fractions carried) on its worker until
  // view_age_ms has passed.
  void anticipate_peers(double twins_per_pick, double view_age_ms) noexcept;
  double twins_per_pick() const noexcept { return m_twins.twins_per_pick(); }
  size_t twins_pending() const noexcept { return m_twins.pending(); }
  // The pool's bookings go into the same router.
  Router& shared_router() noexcept { return *m_router; }

  const Router& router() const noexcept { return *m_router; }
  uint64_t table_epoch() const noexcept { return m_router->table_epoch(); }
  size_t requests_in_flight() const noexcept { return m_requests.size(); }
  uint64_t samples_seen() const noexcept { return m_refit ? m_refit->samples_seen() : 0; }

 private:
  Service(std::unique_ptr<Router> router, const ServiceOptions& options, DecisionSink& sink,
          Metrics& metrics, Clock clock);
  void route_and_publish(const shm::FootprintIn& footprint, std::span<const int16_t> counts);
  // One request placed: from its footprint (counts) or, when prompt is set,
  // from its prompt. Publishes the decision (or the rejection).
  void place(std::string_view request_id, uint32_t client_pid, uint64_t seen_ns,
             std::span<const int16_t> counts, const Prompt* prompt);
  // The real footprint of a request routed from its prompt.
  void learn(std::string_view request_id, const RequestMap::Held& held,
             std::span<const int16_t> counts);
  void reject(std::string_view request_id, Rejection why, const Status& status);
  void reject_prompt(std::string_view request_id, PromptRejection why, const Status& status);
  void publish_rejection(std::string_view request_id, const Status& status);
  Status sum_block_form(const shm::FootprintIn& footprint);
  // A held request leaves the router (complete by its key) and the pool.
  Status release(const RequestMap::Held& held);
  // The report path shared by our engines' reports and the peers'.
  void apply_report(int32_t worker, uint32_t running, float kv_usage, uint32_t batch_size,
                    float step_ms);
  const ClusterTable& table() const { return *m_table_cache; }

  ServiceOptions m_options;
  std::unique_ptr<Router> m_router;
  DecisionSink& m_sink;
  Metrics& m_metrics;
  Clock m_clock;
  std::shared_ptr<const ClusterTable> m_table_cache;  // geometry checks (geometry never changes)
  std::optional<SignatureCache> m_signatures;         // when the table knows top-k
  std::vector<int16_t> m_scratch;                     // block-form sum
  std::vector<int16_t> m_predicted;                   // a prompt's predicted footprint

  RequestMap m_requests;    // request id -> worker and router key, oldest first, bounded
  uint64_t m_next_key = 1;  // the router's request ids (RouteHints::request_id)
  uint64_t m_token_secret;  // keys the completion tokens (random per start)
  uint64_t m_refusals_logged = 0;
  uint64_t completion_token(uint64_t key) const noexcept;
  shm::Host::RouterRow m_router_row;

  PoolPublisher* m_publisher = nullptr;
  shm::DecisionIn* m_capture = nullptr;  // route_remote: where the decision also goes
  PeerTwins m_twins{0, 0.0};

  WorkerHealth m_health;                 // uses *m_router: declared after it
  std::unique_ptr<OnlineRefit> m_refit;  // when refit.enabled
  uint64_t m_rejections_logged = 0;
};

}  // namespace eldr::sidecar
