// Discrete-event simulator of a PD-disaggregated decode fleet (issue: eldr sim).
//
// Each decode worker runs continuous batching; one step costs
//   T0 + TSEQ * B + alpha * (distinct experts the batch's tokens use, over all layers)
// (docs/design.md §1). The expected number of distinct experts is kept incrementally per
// worker from each request's per-token inclusion probabilities, so a step costs
// O(1) and a join or leave O(L*E). Routing uses the real core Router.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "eldr/cluster_table.hpp"
#include "eldr/geometry.hpp"
#include "eldr/npy.hpp"
#include "eldr/router.hpp"
#include "eldr/status.hpp"
#include "eldr/step_model.hpp"

namespace eldr {

inline constexpr uint32_t kNoPrompt = UINT32_MAX;

// A request as the simulator sees it.
struct SimRequest {
  uint32_t domain = 0;   // label index (domain policy, reports)
  uint32_t profile = 0;  // index into SimWorkload::inclusion
  uint32_t output_tokens = 1;
  uint32_t prompt = kNoPrompt;  // index into SimWorkload::prompt_tokens / prompt_texts
  double arrival_s = 0.0;       // filled by the simulator from the rate
};

// Requests plus their decode expert-usage profiles: inclusion[p][l][e] is the
// probability that one decode token of a request with profile p uses expert e
// of layer l. Prefill footprints are what the router sees.
struct SimWorkload {
  Geometry geometry;
  std::vector<std::string> domain_names;
  std::vector<SimRequest> requests;
  CountsTensor prefill;          // [N][L][E]
  std::vector<float> inclusion;  // [profiles][L][E]
  // Prompts (optional), for routing from the prompt (SimOptions::route_from):
  // token ids (< 2^20) and the same prompt as text, indexed by
  // SimRequest::prompt. Kept whole when requests are selected or resampled.
  std::vector<std::vector<uint32_t>> prompt_tokens;
  std::vector<std::string> prompt_texts;
  uint32_t profiles() const noexcept {
    return geometry.cells() ? static_cast<uint32_t>(inclusion.size() / geometry.cells()) : 0;
  }
  // Every request has a prompt (both forms).
  bool has_prompts() const noexcept;
};

struct SyntheticSimOptions {
  std::string preset = "task";      // task | language
  uint32_t subtopics = 6;           // per domain: requests of one subtopic share a profile
  double domain_affinity = 0.30;    // share of a token's picks from its domain's experts
  double subtopic_affinity = 0.15;  // ... from its subtopic's experts
  double prompt_tokens_median = 160;
  double prompt_tokens_sigma = 0.7;
  double output_tokens_median = 220;
  double output_tokens_sigma = 0.6;
  uint32_t output_tokens_max = 512;  // paper: outputs capped at 512
  uint64_t model_seed = 1;           // the "model": expert preferences
  // Draw requests only from these domains (weights renormalised over them);
  // empty = every domain. Drift mode calibrates on some and routes others.
  std::vector<std::string> only_domains;
  // Prompts (drawn from a generator of their own: the footprints are the
  // same with or without them). A prompt is `prompt_boilerplate` tokens
  // common to every request (a system prompt), then as many tokens as the
  // request's prefill has: each from its subtopic's words with probability
  // prompt_subtopic_share, else its domain's with prompt_domain_share, else
  // the general vocabulary (Zipf). Its text: "w<id>" words joined by spaces.
  bool prompts = true;
  uint32_t prompt_boilerplate = 40;
  uint32_t prompt_vocabulary = 32000;  // ids in [0, prompt_vocabulary)
  double prompt_domain_share = 0.20;
  double prompt_subtopic_share = 0.10;
};
// Generates `n` requests; calibration and evaluation sets come from the same
// model_seed with different `seed`s. decode (optional) receives decode counts
// over 127 tokens, for layer selection.
Result<SimWorkload> synthetic_sim_workload(const Geometry& geometry, const SyntheticSimOptions& o,
                                           uint64_t n, uint64_t seed,
                                           CountsTensor* decode = nullptr);

// Captured traces: token_experts [tokens][L][k] (integer .npy) and an index
// [N][3] (start token, prompt tokens, output tokens); a request's tokens are
// rows [start, start + prompt + output). When prompt is 0 (decode-only
// traces) its first `prefill_proxy_tokens` decode tokens stand in for the
// prefill footprint. Optional labels (one per request).
Result<SimWorkload> load_trace_workload(const std::string& token_experts_npy,
                                        const std::string& index_npy, const std::string& labels,
                                        uint32_t prefill_proxy_tokens = 32);
// A trace's prompts: tokens.jsonl.gz (gzip; one JSON object per request in
// index order, "prompt": the prompt's token strings). Token ids are an id
// table built from the strings in first-seen order; the text is the strings
// joined. Sets every request's prompt; on error (unreadable, not gzip, bad
// JSON, a count that differs from the requests') `w` is unchanged.
Status load_trace_prompts(const std::string& tokens_jsonl_gz, SimWorkload& w);

// --- Load and step regimes that compare across presets (eldr sim --utilization,
// --expert-share).
//
// D_rand: the expected distinct (layer, expert) pairs of a batch of `batch`
// requests drawn at random (with replacement) from the workload, i.e. the
// mean over `trials` random batches of sum over cells of 1 - prod (1 - p),
// p the requests' per-token inclusion profiles.
double random_batch_distinct(const SimWorkload& workload, uint32_t batch, uint64_t seed,
                             uint32_t trials = 8);
double mean_output_tokens(const SimWorkload& workload);

// The fleet's capacity in requests per second:
//   capacity = workers * max_batch / (mean output tokens * S_full),
//   S_full = step_ms(max_batch, D_rand) (in seconds here),
// what a fleet of full random batches decodes. Utilization U means the Poisson
// arrival rate U * capacity.
struct FleetCapacity {
  double distinct_random = 0;  // D_rand at max_batch
  double full_step_ms = 0;     // S_full
  double mean_output_tokens = 0;
  double requests_per_s = 0;
};
FleetCapacity fleet_capacity(const StepCost& cost, uint32_t workers, double distinct_random,
                             double mean_output_tokens);

// The alpha (us) that makes alpha * distinct the share `share` (0 < share < 1)
// of the step step_ms(max_batch, distinct), T0 and TSEQ kept:
//   alpha * D = share * (T0 + TSEQ * max_batch + alpha * D).
Result<double> alpha_for_expert_share(const StepCost& cost, double distinct, double share);

// --- Request sets.
// The requests at `rows` (in that order), with their prefill rows; profiles
// and domain names are kept whole.
SimWorkload select_requests(const SimWorkload& workload, std::span<const uint64_t> rows);
// `n` requests drawn with replacement (seeded) from the workload's requests.
SimWorkload resample_requests(const SimWorkload& workload, uint64_t n, uint64_t seed);
// Drift mode: a label's group is its text up to the first '/' (a trace's
// benchmark; a synthetic domain is its own group). The groups sorted by name;
// the first half (floor(G / 2), at least 1) calibrate, the rest are routed.
// invalid_argument with fewer than two groups.
struct DriftGroups {
  std::vector<std::string> calibration, evaluation;
  bool calibrates(const std::string& label) const;
};
std::string label_group(const std::string& label);
Result<DriftGroups> drift_groups(const std::vector<std::string>& labels);

// What the router routes from: the request's prefill footprint
// (Router::route), or its prompt (Router::route_prompt with the table's
// predictor), as token ids or as text.
enum class RouteFrom : uint8_t { footprint = 0, prompt = 1, text = 2 };
const char* route_from_name(RouteFrom from) noexcept;
Result<RouteFrom> parse_route_from(std::string_view name);

struct SimOptions {
  StepModel model;
  uint32_t workers = 16;
  double rate = 40.0;    // Poisson arrivals per second
  uint64_t seed = 1;     // arrivals
  RouterOptions router;  // policy, tau, ...
  // After each step, report it to the router: Router::report(worker,
  // {batch = running + queued requests, step_ms = the simulated step,
  // running = the requests it ran}), so eldr_cost's online fit of the step
  // constants runs.
  bool report_steps = false;
  // Several routers share the fleet (one per node, or gateway replicas): each
  // arrival goes to one of them at random, and each sees the in-flight
  // requests the others routed only view_delay_ms after they routed or
  // finished them (the others' bookings travel that long). 1 router: the
  // live view of one process.
  uint32_t routers = 1;
  double view_delay_ms = 0.0;
  // The share of the arrivals router 0 takes (a gateway node that takes most
  // traffic), the rest spread evenly over the others; 0: all even.
  double lead_share = 0.0;
  // What a booking tells the other routers: the request's footprint
  // (Router::book: counted, and in the worker's batch for eldr_cost), or only
  // that the worker has one request more (Router::set_load).
  bool bookings_carry_footprints = true;
  // Against herding on a stale view: a router that routes a request assumes
  // each other router sent a twin to the same worker that it has not heard
  // of yet, and books routers - 1 copies of it there until the others' real
  // bookings can have arrived (view_delay_ms later). Needs footprint bookings.
  bool anticipate_peers = true;
  // Twins per pick from the routers' rates (the others' over this one's, as
  // eldrd measures them), or routers - 1 whatever the rates (false).
  bool rate_aware_twins = true;
  // Routing from the prompt needs the table's predictor and the workload's
  // prompts (one router). With learn, each such request's real prefill
  // footprint reaches Router::learn learn_delay_ms after its routing (its
  // prefill), so the predictor learns online; simulate() then works on a
  // copy of the table's predictor, so runs stay independent.
  RouteFrom route_from = RouteFrom::footprint;
  bool learn = false;
  double learn_delay_ms = 0.0;
  std::function<void(double)> progress;  // fraction of requests finished
};

struct SimResult {
  std::string policy;
  uint64_t requests = 0;
  double tpot_p50_ms = 0, tpot_p99_ms = 0, tpot_mean_ms = 0;
  double experts_per_step = 0;           // distinct experts per layer per step, mean over steps
  double worker_load_max_over_mean = 0;  // decode tokens served
  double makespan_s = 0;
  uint64_t steps = 0;
  StepCost router_step_cost;         // the constants the router predicted with at the end
  uint64_t router_step_samples = 0;  // step reports its online fit used
  std::vector<double> tpot_ms;       // per request
  std::vector<float> experts_per_step_samples;  // per step (for plots)
  // Routing from the prompt: the predictor's mean confidence over the routed
  // requests, and how many real footprints it learned during the run.
  double mean_confidence = 1.0;
  uint64_t learned = 0;
};

// A copy of the table whose predictor is a deep copy (its own learning).
std::shared_ptr<ClusterTable> with_own_predictor(const ClusterTable& table);

Result<SimResult> simulate(const SimWorkload& workload, std::shared_ptr<const ClusterTable> table,
                           const SimOptions& options);

}  // namespace eldr
