// Online routing (docs/design.md §5): footprint -> signature scores per cluster ->
// locality band -> least-loaded worker in the band (the paper's rule), or
// footprint -> predicted expert demand -> the worker whose batch it slows
// least (eldr_cost, the default). Embedded, in-process and thread-safe; the
// sidecar runs the same object.
//
// Workers live in stable slots (index = order of addition; the table's
// centroids come first). A slot's worker routes by its cluster's centroid;
// several workers may share a cluster (a replica added at runtime).
// Removed slots stay as tombstones so indexes never shift under a caller.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "eldr/cluster_table.hpp"
#include "eldr/demand_code.hpp"
#include "eldr/predictor.hpp"
#include "eldr/status.hpp"
#include "eldr/step_model.hpp"

namespace eldr {

namespace detail {
struct RouterScoring;  // one table's precomputed scoring data (route/scoring.hpp)
class LiveBatches;     // in-flight requests and batch footprints (route/live_batch.hpp)
class StepFit;         // online fit of the step constants (route/step_fit.hpp)
class PromptMemory;    // prompts awaiting their real footprint (predict/prompt_memory.hpp)
}  // namespace detail

// eldr_guard (ours, beyond the paper): the locality band, but a pick may not
// run further ahead of the least-loaded active worker than a slack that grows
// with the pool's load (RouterOptions::guard_*); past that the request spills
// to the least-loaded worker (ties: higher score). It bounds the pile-up that bursts of one domain
// cause on a narrow band, which is where the paper's rule loses P99.
//
// eldr_cost (ours, the default): the worker whose pick adds the least to the
// pool's total decode time under the step model (docs/design.md §5.3): the
// request's own step time there plus the slowdown it brings to the requests
// already batched there, from the experts it is predicted to add to that
// batch. It spreads while workers are idle and clusters when they are busy;
// no band width to tune.
enum class Policy : uint8_t {
  eldr = 0,
  round_robin = 1,
  random = 2,
  jsq = 3,
  p2c = 4,
  domain = 5,
  eldr_guard = 6,
  eldr_cost = 7,
};
inline constexpr Policy kAllPolicies[] = {Policy::eldr,       Policy::round_robin, Policy::random,
                                          Policy::jsq,        Policy::p2c,         Policy::domain,
                                          Policy::eldr_guard, Policy::eldr_cost};
const char* policy_name(Policy policy) noexcept;
std::optional<Policy> parse_policy(std::string_view name) noexcept;

enum class WorkerState : uint8_t { active = 0, draining = 1, removed = 2 };
const char* worker_state_name(WorkerState state) noexcept;

inline constexpr uint32_t kNoCluster = 0xffffffffu;
inline constexpr uint32_t kMaxClusters = 1024;

struct RouterOptions {
  Policy policy = Policy::eldr_cost;
  float tau = -1.0f;           // locality band width; < 0 = the table's default_tau
  bool min2_band = false;      // prototype variant: widen a one-member band to the top two
  uint64_t seed = 0;           // random, jsq tie-break and p2c draws
  uint32_t max_workers = 256;  // slots, fixed at creation (the hot path never allocates)
  // eldr_guard: a pick may carry at most max(guard_slack, guard_ratio * mean
  // in-flight) requests more than the least-loaded active worker.
  uint32_t guard_slack = 2;
  float guard_ratio = 0.25f;
  // eldr_cost: the step constants it predicts with. Unset: the table's, else
  // the model preset of the table's geometry, else StepCost{}.
  std::optional<StepCost> step_cost;
  // eldr_cost: refine the constants from engine reports that carry a step
  // time and batch size (report()).
  bool fit_step_cost = true;
  // Request records (complete by id, batch footprints), fixed at creation.
  uint32_t max_inflight = 8192;
  // eldr_cost reads every s-th layer, at most about this many cells.
  uint32_t cost_cells = 1024;
};

struct Decision {
  int32_t worker_id = -1;
  uint32_t worker_index = 0;  // slot
  float similarity = 0.0f;    // score of the chosen worker (signature . centroid)
  uint32_t band_size = 0;     // candidates the pick was made among
  Policy policy = Policy::eldr;
  uint64_t table_epoch = 0;
  // Routed from the prompt: how sure the predictor was, in [0, 1]
  // (Prediction::confidence); 1 for a footprint.
  float confidence = 1.0f;
};

struct RouteHints {
  // Per-slot in-flight counts to use for this decision instead of the
  // router's own; when given, the router's counters are not touched.
  std::span<const uint32_t> loads;
  std::string_view label;  // domain label, for Policy::domain
  // Remembered so that complete_request(id) takes this request's footprint
  // out of its worker's batch. Ids are the caller's; one may not be in flight
  // twice. Not with `loads` (nothing is counted then).
  std::optional<uint64_t> request_id;
  // The workers this decision may pick (a gateway's candidate set, as the
  // Gateway API Inference Extension's subset hint); empty: every active
  // worker. Ids not active (or unknown) are skipped; none left: no_worker.
  std::span<const int32_t> workers;
};

// A decode engine's report about one worker (each field optional).
struct WorkerReport {
  // Requests the engine runs or queues: replaces the router's in-flight
  // count (the engine's view takes precedence; routes after it add to it).
  std::optional<uint32_t> batch;
  // Its last decode step, in ms: a sample for the online fit of the step
  // constants (RouterOptions::fit_step_cost), with `batch`.
  std::optional<double> step_ms;
  // Of `batch`, the requests that step ran (the rest wait in its queue), at
  // most `batch`. Unset: all of `batch`, as long as that fits the step
  // constants' max_batch. A step with a queue behind it is no sample for the
  // fit (the router's batch footprint holds the queued requests too).
  std::optional<uint32_t> running;
};

struct WorkerInfo {
  int32_t id = -1;
  WorkerState state = WorkerState::removed;
  uint32_t cluster = kNoCluster;
  int64_t inflight = 0;
  uint64_t routed = 0;
  uint32_t tracked = 0;        // in-flight requests the router holds a record of
  double batch_experts = 0.0;  // eldr_cost: expected distinct experts of that batch
};

struct RouterStats {
  uint64_t routed = 0;
  uint64_t rejected = 0;            // route calls that failed (bad footprint, no worker)
  uint64_t completes_rejected = 0;  // complete on a worker with nothing in flight / unknown
  uint64_t completes_unknown = 0;   // of those: complete_request with an id not in flight
  uint64_t untracked = 0;           // routes with every request record in use (not in a batch)
  uint64_t step_samples = 0;        // step-time reports the online fit used
  // Routing from the prompt (route_prompt, learn).
  uint64_t prompts_routed = 0;
  uint64_t prompts_rejected = 0;  // bad prompt, or the table has no predictor
  uint64_t learned = 0;           // real footprints the predictor learned from
  uint64_t learn_rejected = 0;    // learn() for an unknown id, or a bad footprint
  uint64_t prompts_dropped = 0;   // remembered prompts dropped unlearned (memory full)
};

class Router {
 public:
  static Result<std::unique_ptr<Router>> create(std::shared_ptr<const ClusterTable> table,
                                                const RouterOptions& options = {});
  Router(const Router&) = delete;
  Router& operator=(const Router&) = delete;
  ~Router();

  // One decision. Counts: int16 [L][E] of the table's geometry (validated:
  // size and non-negative counts). Counts the pick as in flight (+1) unless
  // hints.loads is given. Allocation-free on success.
  Result<Decision> route(std::span<const int16_t> counts, const RouteHints& hints = {});

  // Score API for gateways that blend eldr with their own scorers: per slot,
  // the similarity to its cluster and whether it is in the locality band
  // (removed / draining slots: score 0, not in band). Spans must hold
  // worker_slots() entries. Returns the band size through the Result.
  // One decision from the prompt (docs/design.md §5.6): the table's predictor
  // predicts the footprint, which is then routed as route() routes one.
  // With a request id the prompt is remembered (bounded: max_inflight
  // prompts, the oldest dropped first) until learn() hands its real
  // footprint. unsupported: the table has no predictor, or none for the
  // prompt's kind; invalid_argument: a bad prompt (extract_features).
  Result<Decision> route_prompt(const Prompt& prompt, const RouteHints& hints = {});
  // The same; out_counts (empty, or the table's geometry cells) receives the
  // predicted footprint it routed (what a pool's bookings carry).
  Result<Decision> route_prompt(const Prompt& prompt, const RouteHints& hints,
                                std::span<int16_t> out_counts);
  // The real footprint of a request routed from its prompt with this id
  // (from the engine after prefill, a routed-experts payload, the GPU): the
  // predictor learns from the pair. not_found: no prompt remembered for the
  // id (routed from a footprint, learned already, or dropped).
  Status learn(uint64_t request_id, std::span<const int16_t> counts);
  Result<uint32_t> scores(std::span<const int16_t> counts, std::span<float> scores,
                          std::span<uint8_t> in_band) const;

  // In-flight accounting. complete_request: the request routed with this id
  // has finished (its worker's count -1, its footprint leaves the batch);
  // an unknown or repeated id is rejected and counted, nothing else changes.
  // complete(worker): the oldest request still on that worker has finished
  // (for callers that do not keep ids); never below zero: an extra complete
  // is rejected and counted. set_load = an externally reported count.
  Status complete_request(uint64_t request_id);
  // A request another router placed on worker_id (several routers sharing a
  // pool exchange these bookings): counted in flight there and, for
  // eldr_cost, its footprint joins that worker's batch, as if this router
  // had routed it; complete_request(request_id) takes it out again. Ids
  // share one space with route()'s request ids (a duplicate is Errc::state).
  Status book(int32_t worker_id, std::span<const int16_t> counts, uint64_t request_id);
  // What a compact booking carries instead of the footprint: the request's
  // demand over the cells eldr_cost reads, as codes (demand_code.hpp), one
  // per cell of cost_cells() (whatever the policy). book_demand() puts the
  // request in that worker's batch exactly as this router's route() or
  // book() of the same footprint does; routers that share a pool must read
  // the same cells (the same geometry and cost_cells; invalid_argument
  // otherwise: a code count other than cost_cells().count()).
  CostCells cost_cells() const noexcept;
  Status demand_codes(std::span<const int16_t> counts, std::span<uint8_t> codes) const;
  Status book_demand(int32_t worker_id, std::span<const uint8_t> codes, uint64_t request_id);
  Status complete(int32_t worker_id);
  Status set_load(int32_t worker_id, uint32_t inflight);
  Status report(int32_t worker_id, const WorkerReport& report);

  // Runtime membership. add_worker without a cluster replicates the cluster
  // whose workers carry the most in-flight requests each. Draining and
  // removed workers never receive new requests; a drained worker can be
  // re-activated by add_worker with its id.
  Status add_worker(int32_t worker_id, std::optional<uint32_t> cluster = std::nullopt);
  Status drain_worker(int32_t worker_id);
  Status remove_worker(int32_t worker_id);

  // Hot swap of the cluster table (same geometry); workers named in the new
  // table take its centroids, others keep routing with no cluster (score 0).
  Status swap_table(std::shared_ptr<const ClusterTable> table);
  // The same at a given epoch, which must be above the current one (the
  // routers of a pool switch to the pool's table at the same epoch).
  Status swap_table(std::shared_ptr<const ClusterTable> table, std::optional<uint64_t> epoch);

  uint32_t worker_slots() const noexcept;
  std::vector<WorkerInfo> workers() const;
  std::shared_ptr<const ClusterTable> table() const;
  uint64_t table_epoch() const noexcept;
  const RouterOptions& options() const noexcept { return m_options; }
  float tau() const noexcept;
  RouterStats stats() const;
  // The step constants eldr_cost predicts with now (configured, or fitted).
  StepCost step_cost() const;

 private:
  using Scoring = detail::RouterScoring;  // immutable per table
  struct Slot;
  explicit Router(const RouterOptions& options);
  Result<uint32_t> find_slot(int32_t worker_id) const;  // not removed
  float tau_for(const Scoring& scoring) const noexcept;
  // Active slots (index, cluster or kNoCluster and, when `load` is set,
  // in-flight count) of the first n slots whose worker is in `among` (empty:
  // any), gathered once per call; returns how many.
  uint32_t gather_active(uint32_t clusters, uint32_t n, std::span<const uint32_t> loads,
                         std::span<const int32_t> among, uint32_t* active, uint32_t* cluster,
                         int64_t* load) const noexcept;
  // Under m_live_mutex: the request's record on slot (with its demand, when
  // footprints are tracked: `codes`, else the footprint's demand in the live
  // batches' scratch) and its in-flight count. Errc::state if request_id is
  // in flight already.
  Status record_locked(uint32_t slot, std::optional<uint64_t> request_id,
                       const uint8_t* codes = nullptr);

  RouterOptions m_options;
  std::atomic<std::shared_ptr<const Scoring>> m_scoring;
  std::unique_ptr<Slot[]> m_slots;
  std::atomic<uint32_t> m_slot_count{0};
  std::atomic<uint64_t> m_epoch{0};
  std::atomic<uint64_t> m_rr_cursor{0};
  std::atomic<uint64_t> m_rng_counter{0};
  std::atomic<uint64_t> m_routed{0};
  std::atomic<uint64_t> m_rejected{0};
  std::atomic<uint64_t> m_completes_rejected{0};
  std::atomic<uint64_t> m_completes_unknown{0};
  std::mutex m_admin;  // serialises membership changes and table swaps
  // Request records, batch footprints and the step constants: one mutex, held
  // for the pick of eldr_cost and for every record change (short, no I/O).
  mutable std::mutex m_live_mutex;
  std::unique_ptr<detail::LiveBatches> m_live;
  std::unique_ptr<detail::StepFit> m_fit;
  // Prompts awaiting their real footprint (route_prompt with an id).
  mutable std::mutex m_prompt_mutex;
  std::unique_ptr<detail::PromptMemory> m_prompts;
  std::atomic<uint64_t> m_prompts_routed{0}, m_prompts_rejected{0}, m_learned{0},
      m_learn_rejected{0};
};

}  // namespace eldr
