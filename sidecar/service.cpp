#include "service.hpp"

#include <time.h>
#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <random>

#include "log.hpp"

namespace eldr::sidecar {

uint64_t monotonic_ns() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

ServiceOptions ServiceOptions::from(const DaemonConfig& config) {
  ServiceOptions o;
  o.router = config.router();
  o.request_map_capacity = config.request_map_capacity;
  o.worker_report_timeout_ms = config.worker_report_timeout_ms;
  o.block_size = config.block_size;
  o.signature_cache_bytes = size_t{config.signature_cache_mb} << 20;
  o.refit = config.refit;
  return o;
}

Result<std::unique_ptr<Service>> Service::create(std::shared_ptr<const ClusterTable> table,
                                                 const ServiceOptions& options, DecisionSink& sink,
                                                 Metrics& metrics, Clock clock) {
  if (options.request_map_capacity == 0)
    return Status{Errc::invalid_argument, "request_map_capacity must be >= 1"};
  if (!clock) return Status{Errc::invalid_argument, "service needs a clock"};
  auto router = Router::create(table, options.router);
  if (!router) return router.status();
  std::unique_ptr<Service> service(
      new Service(std::move(*router), options, sink, metrics, std::move(clock)));
  service->m_table_cache = table;
  const Geometry& g = table->geometry;
  service->m_scratch.resize(g.cells());
  service->m_predicted.resize(g.cells());
  // The block form needs top-k (to bound a row's entries); a table without it
  // answers block-form footprints with Errc::unsupported.
  if (g.top_k != 0) {
    auto cache = SignatureCache::create(g, options.block_size,
                                        std::max(options.signature_cache_bytes, g.cells()));
    if (!cache) return cache.status();
    service->m_signatures.emplace(std::move(*cache));
  }
  if (options.refit.enabled) {
    auto refit = OnlineRefit::create(options.refit, g.cells(), options.router.seed,
                                     *service->m_router, metrics);
    if (!refit) return refit.status();
    service->m_refit = std::move(*refit);
  }
  metrics.set_table_epoch(service->m_router->table_epoch());
  return service;
}

Service::Service(std::unique_ptr<Router> router, const ServiceOptions& options, DecisionSink& sink,
                 Metrics& metrics, Clock clock)
    : m_options(options),
      m_router(std::move(router)),
      m_sink(sink),
      m_metrics(metrics),
      m_clock(std::move(clock)),
      m_requests(options.request_map_capacity),
      m_token_secret((uint64_t{std::random_device{}()} << 32) ^ std::random_device{}()),
      m_health(*m_router, metrics, options.worker_report_timeout_ms) {}

Service::~Service() = default;

// ---- footprints -----------------------------------------------------------------

void Service::on_footprint(const shm::FootprintIn& f) {
  const Geometry& g = table().geometry;
  if (f.layers != g.layers || f.experts != g.experts) {
    reject(
        f.request_id, Rejection::shape_mismatch,
        {Errc::shape_mismatch, "footprint is " + std::to_string(f.layers) + "x" +
                                   std::to_string(f.experts) + ", the table is " + g.to_string()});
    return;
  }
  const bool dense = !f.counts.empty();
  const bool blocks = !f.block_hashes.empty();
  if (dense == blocks) {
    reject(f.request_id, Rejection::bad_footprint,
           {Errc::invalid_argument,
            dense ? "footprint carries both dense counts and blocks" : "footprint is empty"});
    return;
  }
  if (dense) {
    route_and_publish(f, f.counts);
    return;
  }
  if (Status s = sum_block_form(f); !s) {
    const Rejection why = s.code() == Errc::not_found     ? Rejection::unknown_block
                          : s.code() == Errc::unsupported ? Rejection::unsupported
                                                          : Rejection::bad_footprint;
    reject(f.request_id, why, s);
    return;
  }
  route_and_publish(f, m_scratch);
}

// Block form: store the rows the producer sent (by content hash), then sum
// every block of the request, hash-only ones from the cache.
Status Service::sum_block_form(const shm::FootprintIn& f) {
  if (!m_signatures)
    return {Errc::unsupported, "the cluster table has no top-k: block-form footprints need it"};
  const size_t blocks = f.block_hashes.size();
  const size_t cells = table().geometry.cells();
  if (!f.row_present.empty() && f.row_present.size() != blocks)
    return {Errc::shape_mismatch, "row_present has " + std::to_string(f.row_present.size()) +
                                      " entries for " + std::to_string(blocks) + " blocks"};
  size_t present = 0;
  for (size_t b = 0; b < blocks; ++b) {
    const uint8_t p = f.row_present.empty() ? 1 : f.row_present[b];
    if (p > 1) return {Errc::invalid_argument, "row_present entries must be 0 or 1"};
    present += p;
  }
  if (f.block_rows.size() != present * cells)
    return {Errc::shape_mismatch, "block_rows has " + std::to_string(f.block_rows.size()) +
                                      " bytes, " + std::to_string(present) + " rows need " +
                                      std::to_string(present * cells)};
  size_t row = 0;
  for (size_t b = 0; b < blocks; ++b) {
    if (!f.row_present.empty() && f.row_present[b] == 0) continue;
    ELDR_TRY(m_signatures->put_row(f.block_hashes[b], f.block_rows.subspan(row * cells, cells)));
    ++row;
  }
  return m_signatures->request_footprint(f.block_hashes, m_scratch);
}

void Service::route_and_publish(const shm::FootprintIn& f, std::span<const int16_t> counts) {
  // The footprint of a request routed from its prompt (the engine, after
  // prefill): the predictor learns from it; the request stays where it is.
  if (const std::optional<RequestMap::Held> held = m_requests.held(f.request_id);
      held && held->awaiting_footprint) {
    learn(f.request_id, *held, counts);
    return;
  }
  place(f.request_id, f.client_pid, f.seen_ns, counts, nullptr);
}

void Service::place(std::string_view request_id, uint32_t client_pid, uint64_t seen_ns,
                    std::span<const int16_t> counts, const Prompt* prompt) {
  // A request id pushed again while in flight is a retry: release the first
  // pick so its in-flight count does not leak, then route anew.
  if (const std::optional<RequestMap::Held> first = m_requests.take(request_id)) {
    (void)release(*first);
    m_metrics.count_rerouted();
  }
  // Full: the oldest request was most likely lost by its engine. Release it
  // before routing (a load report corrects the worker anyway) and count it,
  // so the router's request records (as many as the map holds) never run out.
  if (m_requests.full()) {
    (void)release(m_requests.take_oldest());
    m_metrics.count_request_evicted();
  }
  // The router's key for this request: a sequence number, unique among the
  // requests in flight (it never wraps), kept in the map with the id.
  RouteHints hints;
  hints.request_id = m_next_key++;
  const double now_ms = static_cast<double>(m_clock()) / 1e6;
  m_twins.release_due(*m_router, now_ms);
  auto decision = prompt != nullptr ? m_router->route_prompt(*prompt, hints, m_predicted)
                                    : m_router->route(counts, hints);
  if (!decision) {
    const Errc code = decision.status().code();
    if (prompt != nullptr)
      reject_prompt(request_id,
                    code == Errc::unsupported        ? PromptRejection::no_predictor
                    : code == Errc::invalid_argument ? PromptRejection::bad_prompt
                    : code == Errc::no_worker        ? PromptRejection::no_worker
                                                     : PromptRejection::internal,
                    decision.status());
    else
      reject(request_id,
             code == Errc::no_worker        ? Rejection::no_worker
             : code == Errc::shape_mismatch ? Rejection::shape_mismatch
             : code == Errc::out_of_range   ? Rejection::bad_footprint
                                            : Rejection::internal,
             decision.status());
    return;
  }
  if (prompt != nullptr) counts = m_predicted;
  const uint64_t key = *hints.request_id;
  const uint64_t token = completion_token(key);
  m_requests.push(request_id, {decision->worker_id, key, token, client_pid, prompt != nullptr});
  shm::DecisionIn out;
  out.status = static_cast<int32_t>(Errc::ok);
  out.worker = decision->worker_id;
  out.similarity = decision->similarity;
  out.band_size = decision->band_size;
  out.policy = static_cast<uint32_t>(decision->policy);
  out.table_epoch = decision->table_epoch;
  const uint64_t now = m_clock();
  out.latency_ns = now > seen_ns && seen_ns != 0 ? now - seen_ns : 0;
  out.completion_token = token;
  out.confidence = decision->confidence;
  // A route over NATS is answered over NATS only: the segment holds the
  // decisions of this node's engines, which no gateway may write to.
  if (m_capture)
    *m_capture = out;
  else
    m_sink.publish(request_id, out);
  m_metrics.count_routed(decision->worker_index, decision->policy);
  if (prompt != nullptr) m_metrics.count_prompt_routed();
  m_metrics.observe_latency(out.latency_ns);
  // The pool hears of the pick after its gateway: encoding the footprint (a
  // prompt's predicted one) and handing it to NATS is not on the decision's path.
  if (m_publisher) m_publisher->booked(key, decision->worker_id, counts);
  // Twins are bounded so that they never take the request records that
  // peers' bookings and our own requests need.
  if (m_twins.pending() < kMaxPeerTwins)
    (void)m_twins.after_route(*m_router, decision->worker_id, counts, now_ms);
  // The refit learns from real footprints only (a prompt's comes with learn()).
  if (m_refit && prompt == nullptr) m_refit->keep(counts);
}

void Service::reject(std::string_view request_id, Rejection why, const Status& status) {
  m_metrics.count_rejected(why);
  // Log the 1st, 2nd, 4th, 8th... rejection: visible, but a hostile producer cannot flood the log.
  if (std::has_single_bit(++m_rejections_logged))
    ELDR_LOG(warn, "rejected request '%.*s' (%s): %s [%llu rejections so far]",
             static_cast<int>(request_id.size()), request_id.data(), rejection_name(why),
             status.to_string().c_str(), static_cast<unsigned long long>(m_rejections_logged));
  publish_rejection(request_id, status);
}

void Service::publish_rejection(std::string_view request_id, const Status& status) {
  shm::DecisionIn out;
  out.status = static_cast<int32_t>(status.code() == Errc::ok ? Errc::internal : status.code());
  out.worker = -1;
  out.table_epoch = m_router->table_epoch();
  if (m_capture) {
    *m_capture = out;  // a route over NATS: answered there
    return;
  }
  if (request_id.empty()) return;  // nothing to address a decision to
  m_sink.publish(request_id, out);
}

Status Service::release(const RequestMap::Held& held) {
  // The router holds a record for every request in the map (its record pool
  // is the map's capacity, and a full map evicts before routing), so
  // not_found cannot come from a request routed untracked. Never fall back
  // to complete(worker): that would take another request's footprint out.
  if (m_publisher) m_publisher->released(held.key);
  return m_router->complete_request(held.key);
}

shm::DecisionIn Service::route_remote(const shm::FootprintIn& footprint) {
  shm::DecisionIn out;
  out.status = static_cast<int32_t>(Errc::internal);  // overwritten by every path
  m_capture = &out;
  on_footprint(footprint);
  m_capture = nullptr;
  return out;
}

std::vector<std::pair<uint64_t, int32_t>> Service::local_requests() const {
  std::vector<std::pair<uint64_t, int32_t>> out;
  out.reserve(m_requests.size());
  m_requests.for_each([&](const RequestMap::Held& h) { out.emplace_back(h.key, h.worker); });
  return out;
}

void Service::anticipate_peers(double twins_per_pick, double view_age_ms) noexcept {
  m_twins.set_twins_per_pick(twins_per_pick);
  m_twins.set_view_delay_ms(view_age_ms);
}

// ---- completes, rejections ---------------------------------------------------------

uint64_t Service::completion_token(uint64_t key) const noexcept {
  // Keyed by a secret drawn at start: a client cannot derive one request's
  // token from another's, and a key reused after a restart gets another token.
  const uint64_t t = XXH3_64bits_withSeed(&key, sizeof(key), m_token_secret);
  // In a pool the token names this node: a complete for it that reaches
  // another node comes here, not to every node.
  if (m_publisher) return pool::tagged_token(m_publisher->node_tag(), t);
  return t != 0 ? t : 1;  // 0 means "no token"
}

void Service::on_complete(uint32_t client, std::string_view request_id) {
  on_complete_ex({client, 0, request_id, 0});
}

void Service::on_complete_ex(const shm::CompleteIn& c) {
  const std::string_view request_id = c.request_id;
  // Who may complete: whoever presents the request's token (it came with the
  // decision), or, with no token, the process that pushed the footprint. A
  // client completing ids it was never given changes nothing.
  const auto checked = m_requests.take_if(request_id, [&](const RequestMap::Held& held) {
    return c.completion_token != 0 ? c.completion_token == held.token
                                   : c.client_pid == held.owner_pid;
  });
  // In a pool, a token-carrying complete that matches no request of ours may
  // be another node's (its engine completes through us; ids need not be
  // unique across nodes): the pool hears it, and only the node whose token
  // it is releases anything.
  if ((!checked || !checked->taken) && m_publisher && c.completion_token != 0 &&
      c.client != kRemoteClient) {
    m_publisher->forward_complete(request_id, c.completion_token);
    return;
  }
  if (!checked) {
    // Unknown, or completed already: counted, nothing else changes.
    m_metrics.count_complete_unknown();
    ELDR_LOG(debug, "complete for unknown request '%.*s'", static_cast<int>(request_id.size()),
             request_id.data());
    return;
  }
  if (!checked->taken) {
    m_metrics.count_complete_refused();
    if (std::has_single_bit(++m_refusals_logged))
      ELDR_LOG(warn, "refused complete of request '%.*s' from client %u (pid %u): %s [%llu so far]",
               static_cast<int>(request_id.size()), request_id.data(), c.client, c.client_pid,
               c.completion_token != 0 ? "wrong completion token"
                                       : "no token, and not the process that pushed it",
               static_cast<unsigned long long>(m_refusals_logged));
    return;
  }
  // Its footprint leaves its worker's batch and the worker's count goes down
  // by one (never below zero: a worker reset by a load report may already
  // show fewer in flight).
  if (Status s = release(checked->held); !s) m_metrics.count_complete_unknown();
}

bool Service::complete_for_pool(std::string_view request_id, uint64_t token) {
  const auto checked = m_requests.take_if(
      request_id, [&](const RequestMap::Held& held) { return token != 0 && token == held.token; });
  if (!checked || !checked->taken) return false;
  if (Status s = release(checked->held); !s) m_metrics.count_complete_unknown();
  return true;
}

void Service::on_rejected(uint32_t client, shm::RejectReason reason, std::string_view request_id,
                          const Status& why) {
  const Status status =
      why.is_ok() ? Status{Errc::corrupt, "record rejected by the transport"}
                  : Status{why.code(), "client " + std::to_string(client) + ": " + why.message()};
  reject(request_id, rejection_from(reason), status);
}

// ---- tables -------------------------------------------------------------------------

Status Service::swap_table(std::shared_ptr<const ClusterTable> table,
                           std::optional<uint64_t> epoch) {
  if (!table) return {Errc::invalid_argument, "no table"};
  if (table->geometry.top_k != this->table().geometry.top_k && table->geometry.top_k != 0 &&
      this->table().geometry.top_k != 0) {
    m_metrics.count_reload(false);
    return {Errc::shape_mismatch, "new table has top-k " + std::to_string(table->geometry.top_k) +
                                      ", the running one " +
                                      std::to_string(this->table().geometry.top_k)};
  }
  Status s = m_router->swap_table(std::move(table), epoch);
  m_metrics.count_reload(s.is_ok());
  if (s) m_metrics.set_table_epoch(m_router->table_epoch());
  return s;
}

Status Service::reload(const std::string& path) {
  auto loaded = load_table(path);
  if (!loaded) {
    m_metrics.count_reload(false);
    return loaded.status();
  }
  return swap_table(std::make_shared<const ClusterTable>(std::move(*loaded)));
}

Status Service::refit_now(const OnlineRefit::Install& install) {
  if (!m_refit) return {Errc::state, "online refit is disabled"};
  return m_refit->run(install);
}

}  // namespace eldr::sidecar
