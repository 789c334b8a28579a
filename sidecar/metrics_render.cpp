// The Prometheus text rendering of eldrd's metrics (exposition format 0.0.4):
// Metrics::render() and its parts (decisions, transport, pool, workers,
// router, the plain counters) and NsHistogram::render(), with the helpers
// that write a family's HELP/TYPE lines and its samples. metrics.cpp holds
// the counters themselves and the HTTP server that serves this text.
#include <atomic>
#include <cstdio>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "metrics.hpp"

namespace eldr::sidecar {

namespace {

void family(std::string& out, const char* name, const char* type, const char* help) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}

void sample(std::string& out, const char* name, const std::string& labels, double value) {
  char num[64];
  std::snprintf(num, sizeof num, "%.17g", value);
  out += name;
  if (!labels.empty()) {
    out += '{';
    out += labels;
    out += '}';
  }
  out += ' ';
  out += num;
  out += '\n';
}

void sample(std::string& out, const char* name, const std::string& labels, uint64_t value) {
  out += name;
  if (!labels.empty()) {
    out += '{';
    out += labels;
    out += '}';
  }
  out += ' ';
  out += std::to_string(value);
  out += '\n';
}

std::string label(const char* key, const std::string& value) {
  return std::string(key) + "=\"" + value + "\"";
}

void render_pool(std::string& out, const PoolGauge& c) {
  // Unlabelled families, one sample each.
  struct Plain {
    const char* name;
    const char* type;
    const char* help;
    double value;
  };
  const auto d = [](uint64_t v) { return static_cast<double>(v); };
  const Plain plain[] = {
      {"eldr_pool_connected", "gauge", "1 while this node is connected to NATS.",
       c.connected ? 1.0 : 0.0},
      {"eldr_pool_peers", "gauge", "Other nodes of the pool heard of recently.", d(c.peers)},
      {"eldr_pool_peer_bookings", "gauge",
       "The other nodes' requests in flight, as this node counts them.", d(c.peer_bookings)},
      {"eldr_pool_twins", "gauge",
       "Anticipated picks of the other nodes, booked until their bookings can have arrived.",
       d(c.twins)},
      {"eldr_pool_view_age_seconds", "gauge",
       "How old the other nodes' messages are when they arrive (the slowest peer, smoothed).",
       c.view_age_ms / 1000.0},
      {"eldr_pool_messages_published_total", "counter", "Messages this node sent.", d(c.published)},
      {"eldr_pool_published_bytes_total", "counter", "Payload bytes this node sent over NATS.",
       d(c.published_bytes)},
      {"eldr_pool_received_bytes_total", "counter",
       "Payload bytes this node received over NATS (every subject it listens on).",
       d(c.received_bytes)},
      {"eldr_pool_publish_failed_total", "counter",
       "Messages NATS refused to send (disconnected past its buffer); snapshots repair them.",
       d(c.publish_failed)},
      {"eldr_pool_messages_dropped_total", "counter",
       "Messages dropped before decoding (inbox or client library full).", d(c.dropped)},
      {"eldr_pool_messages_lost_total", "counter",
       "Gaps in the other nodes' sequences: messages that never arrived.", d(c.lost)},
      {"eldr_pool_messages_stale_total", "counter",
       "Messages with a sequence already seen (dropped).", d(c.stale)},
      {"eldr_pool_bookings_refused_total", "counter",
       "Bookings not applied: capacity, a worker this node does not know, a duplicate key.",
       d(c.refused)},
      {"eldr_pool_unknown_releases_total", "counter",
       "Releases of bookings this node never heard of.", d(c.unknown_release)},
      {"eldr_pool_bookings_repaired_total", "counter",
       "Bookings a snapshot added or removed (their messages were lost).", d(c.repaired)},
      {"eldr_pool_peers_expired_total", "counter",
       "Nodes dropped after their silence exceeded peer_timeout_ms (bookings released).",
       d(c.expired_peers)},
      {"eldr_pool_peer_restarts_total", "counter",
       "Nodes seen with a new incarnation (their old bookings released).", d(c.restarts)},
      {"eldr_pool_disconnects_total", "counter", "Connections to NATS lost.", d(c.disconnects)},
      {"eldr_pool_reconnects_total", "counter", "Reconnections to NATS.", d(c.reconnects)},
      {"eldr_pool_reopened_total", "counter",
       "NATS connections opened anew after the servers refused the last one twice.", d(c.reopened)},
      {"eldr_pool_join_errors_total", "counter",
       "Reasons NATS gave while this node was not connected (refused credentials, an unreachable "
       "server, a TLS failure), each counted and logged once as it appears.",
       d(c.join_errors)},
      {"eldr_pool_snapshot_too_large_total", "counter",
       "Snapshots not sent: larger than the server's max_payload.", d(c.snapshot_too_large)},
      {"eldr_pool_remote_routes_total", "counter",
       "Footprints and prompts routed for gateways over NATS (eldr.<pool>.route).",
       d(c.remote_routes)},
      {"eldr_pool_remote_malformed_total", "counter",
       "Routes, completes, cancels and beats over NATS refused as malformed (a route is answered "
       "with the error).",
       d(c.remote_malformed)},
      {"eldr_pool_routes_cancelled_total", "counter",
       "Gateway routes this node made and released on their gateway's cancel "
       "(eldr.<pool>.cancel): the gateway never heard the answer (a timeout, its server lost).",
       d(c.routes_cancelled)},
      {"eldr_pool_routes_refused_cancelled_total", "counter",
       "Gateway routes refused as they came: their gateway had cancelled them already.",
       d(c.routes_refused)},
      {"eldr_pool_routes_refused_owned_total", "counter",
       "Gateway routes refused because their request id is in flight at this node for another "
       "gateway or one of its engines (never replaced or released).",
       d(c.routes_refused_owned)},
      {"eldr_pool_completes_refused_total", "counter",
       "Gateway completes refused: the request was routed by a gateway and the complete did not "
       "present that route's key (a token alone releases nothing there).",
       d(c.completes_refused)},
      {"eldr_pool_replies_refused_total", "counter",
       "Requests over NATS whose reply subject lies under no prefix this node answers on "
       "([pool] reply_prefixes): not answered, not routed.",
       d(c.replies_refused)},
      {"eldr_pool_routes_orphaned_total", "counter",
       "Gateway routes this node made and released because their gateway (pool handle) went "
       "silent for gateway_timeout_ms or was freed: nobody was left to complete them.",
       d(c.routes_orphaned)},
      {"eldr_pool_completes_forwarded_total", "counter",
       "Completes (with a token) of requests this node does not hold, sent to every node "
       "(eldr.<pool>.complete): their token names no single peer (a node before token tags).",
       d(c.completes_forwarded)},
      {"eldr_pool_completes_direct_total", "counter",
       "Completes of requests this node does not hold, sent to the one node their token names "
       "(eldr.<pool>.forward.<node>).",
       d(c.completes_direct)},
      {"eldr_pool_completes_resent_total", "counter",
       "Completes sent to the node their token names again, that node not having answered "
       "(lost with a server, or sent while it was between connections).",
       d(c.completes_resent)},
      {"eldr_pool_completes_unanswered_total", "counter",
       "Completes sent to the node their token names that it never answered (given up after "
       "8 sends over about 12 s: a node from before answers, or gone).",
       d(c.completes_unanswered)},
      {"eldr_pool_completes_received_total", "counter",
       "Completes over NATS (another node's forward, a gateway's) that released a request of "
       "this node.",
       d(c.completes_received)},
      {"eldr_pool_refit_samples_sent_total", "counter",
       "Footprints sent to the node holding the refit lease (compact bookings carry none).",
       d(c.refit_samples_sent)},
      {"eldr_pool_refit_samples_received_total", "counter",
       "Footprints other nodes sent that joined this node's refit window (as lease holder).",
       d(c.refit_samples_received)},
  };
  for (const Plain& f : plain) {
    family(out, f.name, f.type, f.help);
    sample(out, f.name, "", f.value);
  }
  family(out, "eldr_pool_messages_received_total", "counter",
         "Messages of other nodes applied, by kind.");
  for (size_t k = 0; k < c.received.size(); ++k)
    sample(out, "eldr_pool_messages_received_total",
           label("kind", peer_kind_name(static_cast<PeerKind>(k))), c.received[k]);
  family(out, "eldr_pool_malformed_total", "counter",
         "Messages dropped as malformed, by fault (never applied).");
  for (size_t f = 0; f < c.malformed.size(); ++f)
    sample(out, "eldr_pool_malformed_total",
           label("fault", wire_fault_name(static_cast<WireFault>(f))), c.malformed[f]);
  sample(out, "eldr_pool_malformed_total", label("fault", "foreign_subject"), c.foreign_subject);
}

// Per worker: health, requests in flight, the live batch's experts.
void render_workers(std::string& out, const std::vector<WorkerGauge>& workers) {
  family(out, "eldr_worker_healthy", "gauge",
         "1 while the worker's load reports are fresh (or it never reported).");
  for (const WorkerGauge& w : workers)
    if (w.state != WorkerState::removed)
      sample(out, "eldr_worker_healthy",
             label("worker", std::to_string(w.worker)) + "," +
                 label("state", worker_state_name(w.state)),
             uint64_t{w.healthy});
  family(out, "eldr_worker_inflight", "gauge", "Requests routed to the worker, not completed.");
  for (const WorkerGauge& w : workers)
    if (w.state != WorkerState::removed)
      sample(out, "eldr_worker_inflight", label("worker", std::to_string(w.worker)),
             static_cast<double>(w.inflight));

  family(out, "eldr_worker_batch_experts", "gauge",
         "eldr_cost: expected distinct (layer, expert) pairs of the worker's live batch.");
  for (const WorkerGauge& w : workers)
    if (w.state != WorkerState::removed)
      sample(out, "eldr_worker_batch_experts", label("worker", std::to_string(w.worker)),
             w.batch_experts);
}

// The policy in use and the step model it predicts with.
void render_router(std::string& out, const RouterGauge& router) {
  family(out, "eldr_router_policy", "gauge", "The routing policy (1 for the one in use).");
  sample(out, "eldr_router_policy", label("policy", policy_name(router.policy)), uint64_t{1});
  family(out, "eldr_step_cost", "gauge",
         "Step-model constants eldr_cost predicts with now (configured or fitted): step = "
         "t0_ms + tseq_ms * batch + alpha_us / 1000 * distinct experts.");
  sample(out, "eldr_step_cost", label("constant", "t0_ms"), router.step_cost.t0_ms);
  sample(out, "eldr_step_cost", label("constant", "tseq_ms"), router.step_cost.tseq_ms);
  sample(out, "eldr_step_cost", label("constant", "alpha_us"), router.step_cost.alpha_us);
  sample(out, "eldr_step_cost", label("constant", "max_batch"),
         static_cast<double>(router.step_cost.max_batch));
  family(out, "eldr_step_samples_total", "counter",
         "Worker reports with a step time that the online fit of the step constants used.");
  sample(out, "eldr_step_samples_total", "", router.step_samples);
  family(out, "eldr_router_untracked_total", "counter",
         "Requests routed with every router request record in use (not in a batch footprint).");
  sample(out, "eldr_router_untracked_total", "", router.untracked);
  family(out, "eldr_router_completes_unknown_total", "counter",
         "Completes by request key the router held no record of (part of "
         "eldr_complete_unknown_total).");
  sample(out, "eldr_router_completes_unknown_total", "", router.completes_unknown);
}

}  // namespace

void NsHistogram::render(std::string& out, const char* name, const char* help) const {
  family(out, name, "histogram", help);
  const std::string bucket = std::string(name) + "_bucket";
  uint64_t cumulative = 0;
  for (size_t b = 0; b <= m_bounds.size(); ++b) {
    cumulative += m_buckets[b].load(std::memory_order_relaxed);
    char le[32] = "+Inf";
    if (b < m_bounds.size())
      std::snprintf(le, sizeof le, "%g", static_cast<double>(m_bounds[b]) * 1e-9);
    sample(out, bucket.c_str(), label("le", le), cumulative);
  }
  sample(out, (std::string(name) + "_sum").c_str(), "",
         static_cast<double>(m_sum_ns.load(std::memory_order_relaxed)) * 1e-9);
  sample(out, (std::string(name) + "_count").c_str(), "", cumulative);
}

std::string Metrics::render() const {
  std::vector<WorkerGauge> workers;
  std::vector<shm::ClientInfo> clients;
  RouterGauge router;
  bool router_set = false;
  PoolGauge pool;
  bool pool_set = false;
  PredictorGauge predictor;
  {
    std::lock_guard lock(m_tables);
    workers = m_workers;
    clients = m_clients;
    router = m_router;
    router_set = m_router_set;
    pool = m_pool;
    pool_set = m_pool_set;
    predictor = m_predictor;
  }
  std::string out;
  out.reserve(4096 + workers.size() * 256);
  render_decisions(out, workers);
  render_transport(out, clients);
  if (pool_set) render_pool(out, pool);
  render_workers(out, workers);
  if (router_set) render_router(out, router);
  render_counters(out);
  render_prompts(out, predictor);
  return out;
}

// Routing from the prompt and the table's footprint predictor.
void Metrics::render_prompts(std::string& out, const PredictorGauge& predictor) const {
  family(out, "eldr_prompt_routed_total", "counter", "Requests routed from their prompt.");
  sample(out, "eldr_prompt_routed_total", "", m_prompt_routed.load(kRelaxed));
  family(out, "eldr_prompt_rejected_total", "counter",
         "Prompts that got an error decision instead of a worker, by reason.");
  for (size_t r = 0; r < m_prompt_rejected.size(); ++r)
    sample(out, "eldr_prompt_rejected_total",
           label("reason", prompt_rejection_name(static_cast<PromptRejection>(r))),
           m_prompt_rejected[r].load(kRelaxed));
  family(out, "eldr_prompt_cut_total", "counter",
         "Prompts longer than one ring record, sent as their head and tail (routed all the same).");
  sample(out, "eldr_prompt_cut_total", "", m_prompt_cut.load(kRelaxed));
  family(out, "eldr_predictor_learned_total", "counter",
         "Real footprints of requests routed from their prompt that the predictor learned from.");
  sample(out, "eldr_predictor_learned_total", "", m_learned.load(kRelaxed));
  family(out, "eldr_predictor_learn_rejected_total", "counter",
         "Footprints of prompt-routed requests not learned from (the prompt was dropped, or the "
         "footprint is bad).");
  sample(out, "eldr_predictor_learn_rejected_total", "", m_learn_rejected.load(kRelaxed));
  family(out, "eldr_predictor_saves_total", "counter",
         "Saves of the table with what its predictor learned.");
  sample(out, "eldr_predictor_saves_total", "", m_predictor_saves.load(kRelaxed));
  family(out, "eldr_predictor_save_failures_total", "counter",
         "Saves of the table that failed or were refused (the file changed under the daemon).");
  sample(out, "eldr_predictor_save_failures_total", "", m_predictor_save_failures.load(kRelaxed));
  family(out, "eldr_predictor_prototypes", "gauge",
         "Prototypes the table's predictor holds (0: no predictor).");
  sample(out, "eldr_predictor_prototypes", "", uint64_t{predictor.info.prototypes});
  family(out, "eldr_predictor_memory_bytes", "gauge", "Memory of the predictor, per component.");
  sample(out, "eldr_predictor_memory_bytes", label("component", "demand"),
         predictor.info.demand_bytes);
  sample(out, "eldr_predictor_memory_bytes", label("component", "features"),
         predictor.info.feature_bytes);
  sample(out, "eldr_predictor_memory_bytes", label("component", "index"),
         predictor.info.index_bytes);
}

// Decisions: routed per worker and policy, rejected by reason, latencies.
void Metrics::render_decisions(std::string& out, const std::vector<WorkerGauge>& workers) const {
  family(out, "eldr_routed_total", "counter", "Requests routed, per worker and policy.");
  for (const WorkerGauge& w : workers) {
    if (w.slot >= m_max_workers) continue;
    for (size_t p = 0; p < kPolicyCount; ++p) {
      const uint64_t v = m_routed[size_t{w.slot} * kPolicyCount + p].load(kRelaxed);
      if (v == 0) continue;
      sample(out, "eldr_routed_total",
             label("worker", std::to_string(w.worker)) + "," +
                 label("policy", policy_name(kAllPolicies[p])),
             v);
    }
  }

  family(out, "eldr_rejected_total", "counter",
         "Records or requests that got an error decision instead of a worker, by reason.");
  for (size_t r = 0; r < m_rejected.size(); ++r)
    sample(out, "eldr_rejected_total", label("reason", rejection_name(static_cast<Rejection>(r))),
           m_rejected[r].load(kRelaxed));

  m_latency.render(out, "eldr_decision_latency_seconds",
                   "Record read from a ring -> decision published.");
  m_evicted_age.render(out, "eldr_decision_evicted_age_seconds",
                       "Age of decisions overwritten to make room in the full decision table; a "
                       "gateway that lags by more than the smallest of them loses decisions.");
}

// The segment's clients and their rings.
void Metrics::render_transport(std::string& out,
                               const std::vector<shm::ClientInfo>& clients) const {
  family(out, "eldr_ring_used_bytes", "gauge", "Bytes written to a client's ring, not yet read.");
  for (const auto& c : clients)
    sample(out, "eldr_ring_used_bytes",
           label("client", std::to_string(c.slot)) + "," + label("pid", std::to_string(c.pid)),
           c.ring_used);
  family(out, "eldr_clients", "gauge", "Registered clients.");
  sample(out, "eldr_clients", "", uint64_t{clients.size()});
  family(out, "eldr_clients_quarantined_total", "counter",
         "Clients whose ring the daemon stopped reading after a protocol violation.");
  sample(out, "eldr_clients_quarantined_total", "", m_clients_quarantined.load(kRelaxed));
  family(out, "eldr_registrations_refused_total", "counter",
         "Registrations refused: another format or layout, no free slot, not an eldr hello.");
  sample(out, "eldr_registrations_refused_total", "", m_registrations_refused.load(kRelaxed));
}

// The table epoch and the daemon's plain counters.
void Metrics::render_counters(std::string& out) const {
  family(out, "eldr_table_epoch", "gauge", "Epoch of the cluster table routing now.");
  sample(out, "eldr_table_epoch", "", m_table_epoch.load(kRelaxed));

  const std::pair<const char*, const std::atomic<uint64_t>*> counters[] = {
      {"eldr_complete_unknown_total", &m_complete_unknown},
      {"eldr_complete_refused_total", &m_complete_refused},
      {"eldr_request_map_evicted_total", &m_request_evicted},
      {"eldr_rerouted_total", &m_rerouted},
      {"eldr_report_unknown_worker_total", &m_report_unknown},
      {"eldr_report_bad_value_total", &m_report_bad_value},
      {"eldr_worker_stale_total", &m_stale_transitions},
      {"eldr_reloads_total", &m_reloads},
      {"eldr_reload_failures_total", &m_reload_failures},
      {"eldr_refits_total", &m_refits},
      {"eldr_refit_failures_total", &m_refit_failures},
  };
  const char* helps[] = {
      "complete records for a request id the daemon does not hold (unknown, or completed "
      "already).",
      "complete records refused: no completion token (or a wrong one) and not from the "
      "process that pushed the request's footprint. Nothing changed.",
      "Oldest request ids dropped from the bounded request map (their in-flight released).",
      "Request ids pushed again while in flight (routed anew, the old pick released).",
      "Load reports for a worker the router does not know.",
      "Worker report values dropped: a step time without a batch size, or above 10 s.",
      "Workers taken out of routing because their reports stopped.",
      "Cluster table reloads that succeeded.",
      "Cluster table reloads that failed (the old table kept routing).",
      "Online refits swapped in.",
      "Online refits that failed.",
  };
  for (size_t i = 0; i < std::size(counters); ++i) {
    family(out, counters[i].first, "counter", helps[i]);
    sample(out, counters[i].first, "", counters[i].second->load(kRelaxed));
  }
}

}  // namespace eldr::sidecar
