// simulate(): the discrete-event loop of the decode-fleet simulator. Inputs are
// checked first (check_inputs), one Simulation then runs the events (arrivals,
// step ends, bookings reaching other routers) and reports the TPOT figures.
#include <algorithm>
#include <cmath>
#include <deque>
#include <memory>
#include <numeric>
#include <queue>

#include "eldr/lab/sim.hpp"
#include "eldr/peer_twins.hpp"
#include "eldr/random.hpp"

namespace eldr {

namespace {

struct Worker {
  std::vector<float> keep_product;  // per cell: P(no batch token uses it) = prod (1 - p)
  double distinct = 0.0;            // expected distinct experts, all layers
  std::vector<uint32_t> batch;      // request ids
  std::deque<uint32_t> queue;
  bool busy = false;
  uint64_t tokens = 0;
};

// Multiplies (join) or divides (leave) the batch's keep-products by a
// request's (1 - p) and refreshes the expected distinct-expert count.
void update_union(Worker& w, const float* inclusion, size_t cells, bool join) {
  float* prod = w.keep_product.data();
  float sum = 0.0f;
  if (join)
    for (size_t c = 0; c < cells; ++c) sum += prod[c] *= 1.0f - inclusion[c];
  else
    for (size_t c = 0; c < cells; ++c)
      sum += prod[c] = std::min(1.0f, prod[c] / (1.0f - inclusion[c]));
  w.distinct = static_cast<double>(cells) - sum;
}

struct Event {
  double time;
  // 0 = arrival, 1 = step end, 2 = a booking reaches another router, 3 = a
  // request's real footprint reaches its router (learn)
  uint32_t kind;
  uint32_t id;  // request, worker or booking
  bool operator>(const Event& o) const {
    return time != o.time ? time > o.time : (kind != o.kind ? kind > o.kind : id > o.id);
  }
};

double percentile_sorted(const std::vector<double>& v, double p) {
  if (v.empty()) return 0.0;
  const size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * v.size()));
  return v[std::min(v.size() - 1, rank == 0 ? 0 : rank - 1)];
}

Status check_inputs(const SimWorkload& wl, const ClusterTable* table, const SimOptions& o) {
  if (!table) return Status{Errc::invalid_argument, "simulate needs a cluster table"};
  const Geometry& g = wl.geometry;
  if (table->geometry.layers != g.layers || table->geometry.experts != g.experts)
    return Status{Errc::shape_mismatch, "table geometry " + table->geometry.to_string() +
                                            " differs from the workload's " + g.to_string()};
  if (!(o.rate > 0.0) || !std::isfinite(o.rate))
    return Status{Errc::invalid_argument, "rate must be > 0"};
  if (o.model.cost.max_batch == 0) return Status{Errc::invalid_argument, "max_batch must be >= 1"};
  if (o.routers == 0 || o.routers > 64)
    return Status{Errc::invalid_argument, "routers must be in [1, 64]"};
  if (!(o.lead_share >= 0.0 && o.lead_share < 1.0) || (o.lead_share > 0.0 && o.routers < 2))
    return Status{Errc::invalid_argument, "lead_share must be in [0, 1), with 2 or more routers"};
  if (!(o.view_delay_ms >= 0.0) || !std::isfinite(o.view_delay_ms))
    return Status{Errc::invalid_argument, "view_delay_ms must be finite and >= 0"};
  if (o.routers > 1 && o.report_steps)
    return Status{Errc::unsupported,
                  "step reports with several routers are not modelled (a report carries the "
                  "engine's whole batch, which would overwrite each router's delayed view)"};
  if (o.route_from != RouteFrom::footprint) {
    if (!table->predictor)
      return Status{Errc::invalid_argument, std::string("routing from the ") +
                                                route_from_name(o.route_from) +
                                                " needs a table with a footprint predictor"};
    if (!wl.has_prompts())
      return Status{Errc::invalid_argument,
                    "routing from the prompt needs prompts: this workload has none (a trace "
                    "needs its tokens.jsonl.gz)"};
    if (o.routers > 1)
      return Status{Errc::unsupported,
                    "routing from the prompt with several routers is not modelled (the "
                    "bookings would carry the real footprint)"};
  }
  if (!(o.learn_delay_ms >= 0.0) || !std::isfinite(o.learn_delay_ms))
    return Status{Errc::invalid_argument, "learn_delay_ms must be finite and >= 0"};
  return {};
}

// One run: the routers, the fleet's workers and the event queue.
class Simulation {
 public:
  Simulation(const SimWorkload& wl, std::shared_ptr<const ClusterTable> table, const SimOptions& o)
      : m_wl(wl),
        m_table(std::move(table)),
        m_o(o),
        m_k(m_table->num_clusters()),
        m_cells(wl.geometry.cells()),
        m_n(wl.requests.size()),
        m_own(o.routers, std::vector<int64_t>(m_k, 0)),
        m_seen(o.routers, std::vector<int64_t>(m_k, 0)),
        m_owner(o.routers > 1 ? m_n : 0),
        m_placed(o.routers > 1 ? m_n : 0),
        m_pick_router(o.seed ^ 0x5bd1e995u),
        m_workers(m_k),
        m_remaining(m_n),
        m_join_time(m_n, 0.0),
        m_next_report(m_n / 100 + 1) {}

  Status create_routers();
  // The share of the arrivals router i takes.
  double share_of(uint32_t i) const noexcept {
    const double n = m_o.routers;
    if (m_o.lead_share <= 0.0) return 1.0 / n;
    return i == 0 ? m_o.lead_share : (1.0 - m_o.lead_share) / (n - 1);
  }
  Status run();
  SimResult report();

 private:
  struct Booking {
    uint32_t router, worker;
    int32_t delta;
    uint32_t request;
  };

  const float* inclusion_of(uint32_t r) const {
    return &m_wl.inclusion[size_t{m_wl.requests[r].profile} * m_cells];
  }
  void start_step(uint32_t wi, double now);
  void publish_booking(uint32_t from, uint32_t worker, int32_t delta, uint32_t request, double now);
  void deliver_booking(const Booking& b);
  Status arrive(uint32_t r, double now);
  void finish_step(uint32_t wi, double now);
  Result<Decision> route(Router& router, uint32_t r, const RouteHints& hints);

  const SimWorkload& m_wl;
  const std::shared_ptr<const ClusterTable> m_table;
  const SimOptions& m_o;
  const uint32_t m_k;
  const size_t m_cells;
  const uint64_t m_n;
  RouterOptions m_ro;
  // One Router per router process, each with its own draws.
  std::vector<std::unique_ptr<Router>> m_routers;
  // Each router's view of the others' in-flight requests per worker, and its
  // own; the Router holds their sum (set_load after every delivered booking).
  std::vector<std::vector<int64_t>> m_own, m_seen;
  // Each router's anticipated twins of its own picks.
  std::vector<PeerTwins> m_twins;
  std::vector<Booking> m_bookings;
  std::vector<uint32_t> m_owner, m_placed;  // per request, with several routers
  Rng m_pick_router;
  std::vector<Worker> m_workers;
  std::vector<uint32_t> m_remaining;
  std::vector<double> m_join_time;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> m_events;
  SimResult m_res;
  uint64_t m_finished = 0, m_next_report;
  double m_confidence_sum = 0.0;
  uint64_t m_prompt_routes = 0;
};

Status Simulation::create_routers() {
  m_ro = m_o.router;
  m_ro.max_workers = std::max(m_ro.max_workers, m_k);
  // A record for every request in flight (up to 2^20 at once: 2 KiB of
  // address space each, touched only while used), so each completes by its
  // id and its own footprint leaves its worker's batch.
  m_ro.max_inflight = std::max<uint32_t>(
      m_ro.max_inflight, static_cast<uint32_t>(std::min<uint64_t>(m_n, uint64_t{1} << 20)));
  for (uint32_t i = 0; i < m_o.routers; ++i) {
    RouterOptions ri = m_ro;
    ri.seed = m_ro.seed + i;
    auto created = Router::create(m_table, ri);
    if (!created) return created.status();
    m_routers.push_back(std::move(*created));
  }
  // No anticipation with count-only bookings: a twin is a footprint.
  const bool anticipate = m_o.anticipate_peers && m_o.bookings_carry_footprints && m_o.routers > 1;
  m_twins.assign(m_o.routers, PeerTwins(anticipate ? m_o.routers - 1 : 0, m_o.view_delay_ms));
  if (anticipate && m_o.rate_aware_twins)
    for (uint32_t i = 0; i < m_o.routers; ++i) {
      const double share = share_of(i);
      m_twins[i].set_twins_per_pick((1.0 - share) / share);
    }
  for (auto& w : m_workers) w.keep_product.assign(m_cells, 1.0f);
  return {};
}

void Simulation::start_step(uint32_t wi, double now) {
  Worker& w = m_workers[wi];
  while (w.batch.size() < m_o.model.cost.max_batch && !w.queue.empty()) {
    const uint32_t r = w.queue.front();
    w.queue.pop_front();
    update_union(w, inclusion_of(r), m_cells, true);
    m_join_time[r] = now;
    w.batch.push_back(r);
  }
  if (w.batch.empty()) {
    w.busy = false;
    return;
  }
  w.busy = true;
  const double step_ms = m_o.model.cost.step_ms(static_cast<uint32_t>(w.batch.size()), w.distinct);
  if (m_o.report_steps) {
    WorkerReport rep;
    rep.batch = static_cast<uint32_t>(w.batch.size() + w.queue.size());
    rep.running = static_cast<uint32_t>(w.batch.size());
    rep.step_ms = step_ms;
    (void)m_routers[0]->report(m_table->worker_ids[wi], rep);
  }
  m_res.experts_per_step_samples.push_back(static_cast<float>(w.distinct / m_wl.geometry.layers));
  ++m_res.steps;
  m_events.push({now + step_ms / 1000.0, 1, wi});
}

// A router's route (+1) or finish (-1) on a worker reaches every other
// router view_delay_ms later.
void Simulation::publish_booking(uint32_t from, uint32_t worker, int32_t delta, uint32_t request,
                                 double now) {
  m_own[from][worker] += delta;
  for (uint32_t j = 0; j < m_o.routers; ++j) {
    if (j == from) continue;
    m_bookings.push_back({j, worker, delta, request});
    m_events.push(
        {now + m_o.view_delay_ms / 1000.0, 2, static_cast<uint32_t>(m_bookings.size() - 1)});
  }
}

void Simulation::deliver_booking(const Booking& b) {
  Router& to = *m_routers[b.router];
  if (m_o.bookings_carry_footprints) {
    if (b.delta > 0)
      (void)to.book(m_table->worker_ids[b.worker], m_wl.prefill.row(b.request), b.request);
    else
      (void)to.complete_request(b.request);
    return;
  }
  m_seen[b.router][b.worker] += b.delta;
  const int64_t view = std::max<int64_t>(0, m_own[b.router][b.worker] + m_seen[b.router][b.worker]);
  (void)to.set_load(m_table->worker_ids[b.worker], static_cast<uint32_t>(view));
}

Result<Decision> Simulation::route(Router& router, uint32_t r, const RouteHints& hints) {
  if (m_o.route_from == RouteFrom::footprint) return router.route(m_wl.prefill.row(r), hints);
  const uint32_t p = m_wl.requests[r].prompt;
  const Prompt prompt = m_o.route_from == RouteFrom::text
                            ? Prompt::of_text(m_wl.prompt_texts[p])
                            : Prompt::of_tokens(m_wl.prompt_tokens[p]);
  auto d = router.route_prompt(prompt, hints);
  if (d) {
    m_confidence_sum += d->confidence;
    ++m_prompt_routes;
  }
  return d;
}

Status Simulation::arrive(uint32_t r, double now) {
  RouteHints hints;
  if (m_wl.requests[r].domain < m_wl.domain_names.size())
    hints.label = m_wl.domain_names[m_wl.requests[r].domain];
  hints.request_id = r;
  uint32_t by = 0;
  if (m_o.routers > 1 && m_o.lead_share <= 0.0) {
    by = static_cast<uint32_t>(m_pick_router.next() % m_o.routers);
  } else if (m_o.routers > 1) {
    // Router 0 takes lead_share of the arrivals, the others the rest evenly.
    const double u = static_cast<double>(m_pick_router.next() >> 11) * 0x1p-53;
    by = u < share_of(0) ? 0
                         : 1 + std::min(m_o.routers - 2,
                                        static_cast<uint32_t>((u - share_of(0)) / share_of(1)));
  }
  m_twins[by].release_due(*m_routers[by], now * 1000.0);
  auto d = route(*m_routers[by], r, hints);
  if (!d) return d.status();
  if (d->worker_index >= m_k)
    return Status{Errc::internal, "router returned a worker outside the table"};
  if (m_o.routers > 1) {
    m_owner[r] = by;
    m_placed[r] = d->worker_index;
    publish_booking(by, d->worker_index, +1, r, now);
    ELDR_TRY(m_twins[by].after_route(*m_routers[by], m_table->worker_ids[d->worker_index],
                                     m_wl.prefill.row(r), now * 1000.0));
  }
  if (m_o.learn && m_o.route_from != RouteFrom::footprint)
    m_events.push({now + m_o.learn_delay_ms / 1000.0, 3, r});
  m_remaining[r] = m_wl.requests[r].output_tokens;
  m_workers[d->worker_index].queue.push_back(r);
  if (!m_workers[d->worker_index].busy) start_step(d->worker_index, now);
  return {};
}

void Simulation::finish_step(uint32_t wi, double now) {
  Worker& w = m_workers[wi];
  w.tokens += w.batch.size();
  size_t keep = 0;
  for (uint32_t r : w.batch) {
    if (--m_remaining[r] > 0) {
      w.batch[keep++] = r;
      continue;
    }
    m_res.tpot_ms.push_back((now - m_join_time[r]) * 1000.0 / m_wl.requests[r].output_tokens);
    update_union(w, inclusion_of(r), m_cells, false);
    // By id, so eldr_cost's batch footprint loses this request's.
    if (m_o.routers > 1) {
      (void)m_routers[m_owner[r]]->complete_request(r);
      publish_booking(m_owner[r], m_placed[r], -1, r, now);
    } else {
      (void)m_routers[0]->complete_request(r);
    }
    ++m_finished;
  }
  w.batch.resize(keep);
  if (w.batch.empty()) {  // drop accumulated rounding
    std::fill(w.keep_product.begin(), w.keep_product.end(), 1.0f);
    w.distinct = 0.0;
  }
  m_res.makespan_s = now;
  if (m_o.progress && m_finished >= m_next_report) {
    m_o.progress(static_cast<double>(m_finished) / m_n);
    m_next_report = m_finished + m_n / 100 + 1;
  }
  start_step(wi, now);
}

Status Simulation::run() {
  Rng arrivals(m_o.seed);
  double t = 0.0;
  for (uint64_t i = 0; i < m_n; ++i) {
    t += -std::log(1.0 - arrivals.uniform()) / m_o.rate;
    m_events.push({t, 0, static_cast<uint32_t>(i)});
  }
  m_res.policy = policy_name(m_ro.policy);
  m_res.requests = m_n;
  m_res.tpot_ms.reserve(m_n);
  while (!m_events.empty()) {
    const Event ev = m_events.top();
    m_events.pop();
    if (ev.kind == 3) {
      // The request's prefill ran: its real footprint teaches the predictor.
      if (m_routers[0]->learn(ev.id, m_wl.prefill.row(ev.id))) ++m_res.learned;
    } else if (ev.kind == 2)
      deliver_booking(m_bookings[ev.id]);
    else if (ev.kind == 0)
      ELDR_TRY(arrive(ev.id, ev.time));
    else
      finish_step(ev.id, ev.time);
  }
  return {};
}

SimResult Simulation::report() {
  SimResult& res = m_res;
  std::vector<double> sorted = res.tpot_ms;
  std::sort(sorted.begin(), sorted.end());
  res.tpot_p50_ms = percentile_sorted(sorted, 50);
  res.tpot_p99_ms = percentile_sorted(sorted, 99);
  res.tpot_mean_ms =
      sorted.empty() ? 0.0 : std::accumulate(sorted.begin(), sorted.end(), 0.0) / sorted.size();
  double eps = 0.0;
  for (float v : res.experts_per_step_samples) eps += v;
  res.experts_per_step = res.steps ? eps / static_cast<double>(res.steps) : 0.0;
  uint64_t max_tokens = 0, sum_tokens = 0;
  for (const auto& w : m_workers) {
    max_tokens = std::max(max_tokens, w.tokens);
    sum_tokens += w.tokens;
  }
  res.worker_load_max_over_mean =
      sum_tokens ? static_cast<double>(max_tokens) * m_k / static_cast<double>(sum_tokens) : 0.0;
  res.router_step_cost = m_routers[0]->step_cost();
  res.router_step_samples = m_routers[0]->stats().step_samples;
  res.mean_confidence =
      m_prompt_routes ? m_confidence_sum / static_cast<double>(m_prompt_routes) : 1.0;
  if (m_o.progress) m_o.progress(1.0);
  return std::move(res);
}

}  // namespace

Result<SimResult> simulate(const SimWorkload& wl, std::shared_ptr<const ClusterTable> table,
                           const SimOptions& o) {
  ELDR_TRY(check_inputs(wl, table.get(), o));
  // Learning changes the predictor: this run learns on a copy of its own.
  if (o.learn && o.route_from != RouteFrom::footprint) {
    auto own = with_own_predictor(*table);
    if (!own->predictor) return Status{Errc::internal, "the predictor could not be copied"};
    table = std::move(own);
  }
  Simulation sim(wl, std::move(table), o);
  ELDR_TRY(sim.create_routers());
  ELDR_TRY(sim.run());
  return sim.report();
}

}  // namespace eldr
