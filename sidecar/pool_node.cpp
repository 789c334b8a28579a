#include "pool_node.hpp"

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>

#include "eldr/pool/route_wire.hpp"
#include "eldr/shm/records.hpp"
#include "log.hpp"

namespace eldr::sidecar {

std::string default_node_name() {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') return "node";
  std::string name;
  for (const char* p = host; *p != '\0' && name.size() < kMaxPoolName; ++p) {
    const char c = *p;
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-';
    name.push_back(ok ? c : '-');
  }
  return name;
}

namespace {

constexpr size_t kMaxUnacked = size_t{1} << 16;       // forwards awaiting an answer
constexpr uint64_t kForwardRetryNs = 250'000'000;     // first wait for an answer
constexpr uint32_t kForwardTries = 8;                 // sends, then given up (~12 s)
constexpr size_t kGateways = size_t{1} << 16;         // gateways a node follows at most
constexpr size_t kCancelled = size_t{1} << 12;        // cancels kept for a route yet to come
constexpr std::string_view kInboxPrefix = "_INBOX.";  // libnats' request inboxes (gateways')

uint64_t random_incarnation() {
  std::random_device rd;
  const uint64_t v = (uint64_t{rd()} << 32) ^ rd();
  return v != 0 ? v : 1;
}

}  // namespace

PoolNode::PoolNode(const PoolConfig& config, std::string node, Service& service, Metrics& metrics)
    : m_config(config),
      m_service(service),
      m_metrics(metrics),
      m_encoder(std::move(node), random_incarnation()),
      m_subject(node_subject(config.name, m_encoder.node())),
      m_prefix("eldr." + config.name + ".node."),
      m_route_subject(route_subject(config.name)),
      m_complete_subject(complete_subject(config.name, m_encoder.node())),
      m_complete_any_subject(complete_any_subject(config.name)),
      m_cancel_subject(cancel_subject(config.name)),
      m_gateway_subject(gateway_subject(config.name)),
      m_ack_subject(ack_subject(config.name, m_encoder.node())),
      m_ack_prefix(ack_subject(config.name, "")),
      m_tag(pool::node_tag(m_encoder.node())),
      m_cancelled(kCancelled),
      m_sample_encoder(m_encoder.node(), m_encoder.incarnation()),
      m_sample_subject(sample_subject(config.name, m_encoder.node())) {}

Result<std::unique_ptr<PoolNode>> PoolNode::create(const PoolConfig& config, Service& service,
                                                   Metrics& metrics, std::function<void()> wake,
                                                   const RefitConfig* refit) {
  const std::string node = config.node.empty() ? default_node_name() : config.node;
  ELDR_TRY(validate_pool_name("node", node));
  ELDR_TRY(validate_pool_name("pool", config.name));
  std::unique_ptr<PoolNode> n(new PoolNode(config, node, service, metrics));
  PeerViewOptions vo;
  vo.self = node;
  vo.peer_timeout_ns = uint64_t{config.peer_timeout_ms} * 1'000'000;
  vo.max_bookings = config.max_peer_bookings;
  n->m_view.emplace(service.shared_router(), service.router().table()->geometry, vo,
                    [s = &service](const PeerLoad& l) { s->apply_peer_load(l); });
  n->m_refit = refit != nullptr;
  if (refit)
    n->m_sample_rate =
        std::max(1.0, static_cast<double>(refit->window) / std::max<uint32_t>(refit->period_s, 1));
  if (refit)
    n->m_view->on_booked_footprint(
        [s = &service](std::span<const int16_t> counts) { s->keep_for_refit(counts); });
  NatsLinkOptions lo;
  lo.urls = config.nats;
  lo.auth = config.auth;
  lo.name = "eldrd " + config.name + "/" + node;
  // The nodes' messages; requests to route (one node of the pool answers
  // each: a queue group); completes of the requests this node routed so,
  // and the ones other nodes' engines sent for whichever node routed them;
  // gateways' cancels of the routes they never heard the answer to, and
  // their beats.
  lo.subscribe = {
      {pool_nodes_subject(config.name), ""},     {route_subject(config.name), "eldr"},
      {complete_subject(config.name, node), ""}, {complete_any_subject(config.name), ""},
      {ack_subject(config.name, node), ""},      {cancel_subject(config.name), ""},
      {gateway_subject(config.name), ""}};
  if (refit) lo.subscribe.push_back({sample_subject(config.name, node), ""});
  lo.on_message = std::move(wake);
  auto link = NatsLink::open(lo);
  if (!link) return link.status();
  n->m_link = std::move(*link);
  service.join_pool(n.get());
  n->m_table_thread = std::thread([p = n.get()] { p->table_loop(); });
  ELDR_LOG(info, "pool: node %s of pool %s, NATS %s%s, %s", node.c_str(), config.name.c_str(),
           pool::redact_url(config.nats.front()).c_str(),
           config.nats.size() > 1 ? " (and others)" : "", config.auth.describe().c_str());
  return n;
}

PoolNode::~PoolNode() {
  m_stop.store(true);
  if (m_table_thread.joinable()) m_table_thread.join();
  m_service.join_pool(nullptr);
  m_service.anticipate_peers(0, 0.0);
  m_view.reset();  // its bookings leave the router
  m_link.reset();
}

// ---- out -------------------------------------------------------------------------

void PoolNode::send(std::vector<uint8_t> bytes) {
  // A refusal (disconnected past the library's buffer) is counted by the
  // link; the next snapshot carries what it held.
  (void)m_link->publish(m_subject, bytes);
}

void PoolNode::booked(uint64_t key, int32_t worker, std::span<const int16_t> counts) {
  ++m_own_picks;
  const Router& router = m_service.router();
  const Geometry& geometry = router.table()->geometry;
  if (m_config.compact_bookings) {
    if (m_refit) sample_to_holder(key, worker, counts);
    const CostCells cells = router.cost_cells();
    m_demand.resize(cells.count());
    // counts passed the ring's checks; a refusal here would be a bug, and
    // the full booking still carries the request.
    if (router.demand_codes(counts, m_demand)) {
      send(m_encoder.book(key, worker, geometry, cells, m_demand));
      return;
    }
  }
  send(m_encoder.book(key, worker, geometry, counts));
}

void PoolNode::sample_to_holder(uint64_t key, int32_t worker, std::span<const int16_t> counts) {
  std::string holder;
  {
    std::lock_guard lock(m_table_mutex);
    holder = m_lease_holder;
  }
  if (holder.empty() || holder == "?" || holder == node()) return;
  const uint64_t now = monotonic_ns();
  // The pool's rate is shared among the nodes this one hears of.
  const double rate = m_sample_rate / static_cast<double>(m_view->peers() + 1);
  const double burst = std::max(1.0, rate);
  m_sample_tokens =
      std::min(burst, m_sample_tokens + rate * static_cast<double>(now - m_sample_last_ns) / 1e9);
  m_sample_last_ns = now;
  if (m_sample_tokens < 1.0) return;
  m_sample_tokens -= 1.0;
  const auto bytes =
      m_sample_encoder.book(key, worker, m_service.router().table()->geometry, counts);
  if (m_link->publish(sample_subject(m_config.name, holder), bytes)) ++m_samples_sent;
}

void PoolNode::released(uint64_t key) {
  send(m_encoder.release(key));
  if (const auto it = m_gateway_route_ids.find(key); it != m_gateway_route_ids.end()) {
    m_gateway_routes.erase(it->second);
    m_gateway_route_ids.erase(it);
  }
}

double PoolNode::twins_per_pick(uint64_t now_ns) {
  // The peers' booking rate over ours, each smoothed over about 2 s: a
  // gateway node that takes most of the traffic expects few unseen peer
  // picks per pick of its own, a node that takes little expects many.
  const uint64_t peer_books = m_view->counters().applied[static_cast<size_t>(PeerKind::book)];
  if (m_rate_last_ns != 0 && now_ns > m_rate_last_ns) {
    const double dt = static_cast<double>(now_ns - m_rate_last_ns) / 1e9;
    const double keep = std::exp(-dt / 2.0);
    m_own_rate =
        keep * m_own_rate + (1 - keep) * static_cast<double>(m_own_picks - m_own_seen) / dt;
    m_peer_rate =
        keep * m_peer_rate + (1 - keep) * static_cast<double>(peer_books - m_peer_seen) / dt;
  }
  m_rate_last_ns = now_ns;
  m_own_seen = m_own_picks;
  m_peer_seen = peer_books;
  // Until this node routes, every node is taken to route as much as it
  // will: a twin per peer.
  if (m_own_rate < 0.5) return static_cast<double>(m_view->peers());
  return m_peer_rate / m_own_rate;
}

void PoolNode::reported(const PeerLoad& load) { send(m_encoder.load(load)); }

void PoolNode::send_snapshot() {
  const auto held = m_service.local_requests();
  std::vector<uint8_t> bytes = m_encoder.snapshot(held);
  const int64_t limit = m_link->max_payload();
  if (limit > 0 && bytes.size() > static_cast<uint64_t>(limit)) {
    if (std::has_single_bit(++m_snapshot_too_large))
      ELDR_LOG(error,
               "pool: a snapshot of %zu requests is %zu bytes, the server's max_payload is "
               "%lld: not sent (lower request_map_capacity or raise max_payload) [%llu so far]",
               held.size(), bytes.size(), static_cast<long long>(limit),
               static_cast<unsigned long long>(m_snapshot_too_large));
    return;
  }
  send(std::move(bytes));
}

// ---- in --------------------------------------------------------------------------

size_t PoolNode::drain() {
  if (m_link->take(m_batch) == 0) return 0;
  const Geometry& geometry = m_service.router().table()->geometry;
  const CostCells cells = m_service.router().cost_cells();
  const uint64_t now = monotonic_ns();
  const uint64_t now_real = realtime_ns();
  for (const InboxMessage& in : m_batch) {
    if (in.subject == m_route_subject) {
      serve_route(in);
      continue;
    }
    if (in.subject == m_sample_subject) {
      // A full booking for the refit window, while this node holds the lease.
      const Decoded d = decode_peer_message(in.data, geometry, cells, "");
      if (!d.ok || d.message.kind != PeerKind::book || d.message.counts.empty()) {
        ++m_malformed[static_cast<size_t>(d.ok ? WireFault::bad_field : d.error.fault)];
        continue;
      }
      if (m_lease_held.load()) {
        m_service.keep_for_refit(d.message.counts);
        ++m_samples_received;
      }
      continue;
    }
    if (in.subject == m_ack_subject) {
      // The node a forward went to has it: the token, 8 bytes.
      uint64_t token = 0;
      if (in.data.size() != sizeof token) {
        ++m_remote_malformed;
        continue;
      }
      std::memcpy(&token, in.data.data(), sizeof token);
      m_unacked.erase(token);
      continue;
    }
    if (in.subject == m_cancel_subject) {
      serve_cancel(in);
      continue;
    }
    if (in.subject == m_gateway_subject) {
      serve_gateway_beat(in);
      continue;
    }
    if (in.subject == m_complete_subject || in.subject == m_complete_any_subject) {
      serve_complete(in, in.subject == m_complete_any_subject);
      continue;
    }
    if (in.subject.size() <= m_prefix.size() ||
        in.subject.compare(0, m_prefix.size(), m_prefix) != 0) {
      ++m_foreign_subject;
      continue;
    }
    const std::string_view subject_node = std::string_view(in.subject).substr(m_prefix.size());
    if (subject_node == node()) continue;  // our own
    Decoded d = decode_peer_message(in.data, geometry, cells, subject_node);
    if (!d.ok) {
      ++m_malformed[static_cast<size_t>(d.error.fault)];
      if (std::has_single_bit(++m_faults_logged))
        ELDR_LOG(warn, "pool: dropped a message on %s (%s): %s [%llu so far]", in.subject.c_str(),
                 wire_fault_name(d.error.fault), d.error.message.c_str(),
                 static_cast<unsigned long long>(m_faults_logged));
      continue;
    }
    m_view->apply(d.message, now, now_real);
  }
  const size_t n = m_batch.size();
  m_batch.clear();
  return n;
}

// ---- route over NATS ----------------------------------------------------------------

void PoolNode::serve_route(const InboxMessage& in) {
  if (in.reply.empty()) {
    ++m_remote_malformed;  // a publish, not a request: nobody would hear the decision
    return;
  }
  // The ring's FootprintMsg or PromptMsg (told apart by their file
  // identifiers), checked by the ring's own decoder.
  const std::vector<uint64_t> aligned = aligned_copy(in.data);
  const bool prompt = in.data.size() >= 8 && std::memcmp(in.data.data() + 4, "ELPR", 4) == 0;
  shm::detail::DecodedRecord record;
  const Status s = shm::detail::decode_record(
      prompt ? shm::RecordType::prompt : shm::RecordType::footprint,
      prompt ? shm::detail::kPromptSchema : shm::detail::kFootprintSchema,
      {reinterpret_cast<const uint8_t*>(aligned.data()), in.data.size()}, record);
  // A gateway's key for the route, which its cancel will present, and the
  // gateway's id (none from a client before them).
  const uint64_t route_key = pool::parse_key(in.route_key);
  const uint64_t gateway = pool::parse_key(in.gateway);
  shm::DecisionIn d;
  std::string message;
  std::string request_id;
  const auto refuse = [&](Errc code, std::string why) {
    d.status = static_cast<int32_t>(code);
    d.worker = -1;
    message = std::move(why);
  };
  const char* bad_header = !in.route_key.empty() && route_key == 0 ? pool::kRouteKeyHeader
                           : !in.gateway.empty() && gateway == 0   ? pool::kGatewayHeader
                                                                   : nullptr;
  if (!s || bad_header != nullptr) {
    ++m_remote_malformed;
    if (!s)
      refuse(s.code(), s.message());
    else
      refuse(Errc::invalid_argument,
             std::string("the ") + bad_header + " header is not 1..16 hex digits, not zero");
  } else if (route_key != 0 && m_cancelled.take(route_key)) {
    // Its gateway gave up on it and said so before it came here.
    ++m_routes_refused;
    refuse(Errc::state, "the gateway cancelled this route before it reached a node");
  } else if (prompt) {
    ++m_remote_routes;
    shm::PromptIn p = record.prompt;
    p.client = kRemoteClient;
    p.client_pid = 0;
    p.seen_ns = monotonic_ns();
    request_id.assign(p.request_id);
    d = m_service.route_remote(p);
    if (d.status != 0) message = "the daemon rejected the prompt";
  } else {
    ++m_remote_routes;
    shm::FootprintIn f = record.footprint;
    f.client = kRemoteClient;  // not a ring's
    f.client_pid = 0;          // nobody may complete it without the token
    f.seen_ns = monotonic_ns();
    request_id.assign(f.request_id);
    d = m_service.route_remote(f);
    if (d.status != 0) message = "the daemon rejected the footprint";
  }
  const std::optional<uint64_t> router_key =
      d.status == 0 && route_key != 0 ? m_service.request_key(request_id) : std::nullopt;
  if (router_key) {
    if (const auto old = m_gateway_routes.find(request_id); old != m_gateway_routes.end())
      m_gateway_route_ids.erase(old->second.router_key);
    m_gateway_routes.insert_or_assign(
        request_id, GatewayRoute{route_key, gateway, d.completion_token, *router_key});
    m_gateway_route_ids.insert_or_assign(*router_key, request_id);
    // Its gateway is heard of (bounded: past that, a new gateway's routes
    // stay until completed).
    if (gateway != 0 && (m_gateways.size() < kGateways || m_gateways.contains(gateway)))
      m_gateways.insert_or_assign(gateway, monotonic_ns());
  }
  const std::vector<uint8_t> reply =
      pool::encode_route_reply({d.status, message, request_id, d.worker, d.similarity, d.band_size,
                                d.policy, d.table_epoch, d.completion_token, node(), d.confidence,
                                /*acks_completes=*/true});
  (void)m_link->publish(in.reply, reply);
}

void PoolNode::serve_cancel(const InboxMessage& in) {
  const auto c = pool::decode_route_cancel(in.data);
  if (!c || !shm::validate_request_id(c->request_id).is_ok()) {
    ++m_remote_malformed;
    return;
  }
  // Every node hears it. Ours when we routed the id with that key: the
  // request is released as its complete would (nothing when it completed
  // already). Else its route may not have come yet: remembered, refused then.
  if (const auto it = m_gateway_routes.find(c->request_id);
      it != m_gateway_routes.end() && it->second.key == c->route_key) {
    // released() takes it out of the maps.
    if (m_service.complete_for_pool(c->request_id, it->second.token)) ++m_routes_cancelled;
    return;
  }
  m_cancelled.put(c->route_key, true);
}

void PoolNode::serve_gateway_beat(const InboxMessage& in) {
  const auto b = pool::decode_gateway_beat(in.data);
  if (!b) {
    ++m_remote_malformed;
    return;
  }
  // Only the gateways with routes here are followed.
  const auto it = m_gateways.find(b->gateway);
  if (it == m_gateways.end()) return;
  if (b->leaving)
    release_gateway(b->gateway, "left");
  else
    it->second = monotonic_ns();
}

void PoolNode::expire_gateways(uint64_t now_ns) {
  const uint64_t timeout = uint64_t{m_config.gateway_timeout_ms} * 1'000'000;
  std::vector<uint64_t> silent;
  for (const auto& [gateway, heard_ns] : m_gateways)
    if (now_ns > heard_ns + timeout) silent.push_back(gateway);
  for (const uint64_t gateway : silent) release_gateway(gateway, "went silent");
}

void PoolNode::release_gateway(uint64_t gateway, const char* why) {
  // Its routes still held here can never be completed or cancelled now.
  // (Collected first: released() takes each out of the maps.)
  std::vector<std::pair<std::string, uint64_t>> routes;
  for (const auto& [id, r] : m_gateway_routes)
    if (r.gateway == gateway) routes.emplace_back(id, r.token);
  size_t released = 0;
  for (const auto& [id, token] : routes)
    if (m_service.complete_for_pool(id, token)) ++released;
  m_gateways.erase(gateway);
  m_routes_orphaned += released;
  if (released > 0)
    ELDR_LOG(warn, "pool: gateway %s %s: released the %zu requests it routed here",
             pool::format_key(gateway).c_str(), why, released);
}

void PoolNode::serve_complete(const InboxMessage& in, bool pool_wide) {
  // A complete over NATS must carry the request's token.
  const auto c = pool::decode_route_complete(in.data);
  if (!c || !shm::validate_request_id(c->request_id).is_ok()) {
    ++m_remote_malformed;
    return;
  }
  if (pool_wide) {
    // Every node hears it; the one holding the request with this token
    // releases it (our own forwards come back too, and match nothing).
    if (m_service.complete_for_pool(c->request_id, c->completion_token)) ++m_completes_received;
    return;
  }
  // Sent to us: a gateway's (routed here), or another node's forward of a
  // token that names us. One whose token names another node (a tag this
  // node's peers shared a moment ago) goes on to every node. The sender
  // waits for our answer: it is ours now, whatever comes of it, so it need
  // not come again. Answered on a forwarding node's ack subject or a
  // gateway's request inbox, nowhere else (nobody may make a node publish
  // on another subject).
  const bool node_asks =
      in.reply.size() > m_ack_prefix.size() && in.reply.starts_with(m_ack_prefix);
  const bool gateway_asks =
      in.reply.size() > kInboxPrefix.size() && in.reply.starts_with(kInboxPrefix);
  if (node_asks || gateway_asks) {
    const uint64_t token = c->completion_token;
    (void)m_link->publish(in.reply, {reinterpret_cast<const uint8_t*>(&token), sizeof token});
  }
  if (const auto tag = pool::token_tag(c->completion_token)) {
    if (m_service.complete_for_pool(c->request_id, c->completion_token)) {
      ++m_completes_received;
      return;
    }
    if (*tag != m_tag) {
      ++m_completes_forwarded;
      (void)m_link->publish(m_complete_any_subject, in.data);
      return;
    }
  }
  m_service.on_complete_ex({kRemoteClient, 0, c->request_id, c->completion_token});
}

void PoolNode::forward_complete(std::string_view request_id, uint64_t token) {
  // The RouteComplete a pool handle sends (serve_complete checks it the same way).
  const std::vector<uint8_t> bytes = pool::encode_route_complete(request_id, token);
  // To the node the token names, when exactly one peer has its tag; else
  // (a token of a node before tags, an unknown or shared tag) to every node.
  if (const auto tag = pool::token_tag(token)) {
    const auto it = m_peer_by_tag.find(*tag);
    if (it != m_peer_by_tag.end() && !it->second.empty()) {
      ++m_completes_direct;
      std::string subject = pool::complete_subject(m_config.name, it->second);
      (void)m_link->publish(subject, bytes, m_ack_subject);
      if (m_unacked.size() < kMaxUnacked)
        m_unacked.insert_or_assign(
            token, Unacked{std::move(subject), bytes, monotonic_ns() + kForwardRetryNs, 1});
      return;
    }
  }
  ++m_completes_forwarded;
  (void)m_link->publish(m_complete_any_subject, bytes);
}

// ---- maintenance ----------------------------------------------------------------

// A forward the named node has not answered: lost with a server that died,
// or sent while that node was between connections. Again after 0.25, 0.5,
// 1, 2, 2 ... s; a second copy releases nothing.
void PoolNode::resend_unacked(uint64_t now_ns) {
  for (auto it = m_unacked.begin(); it != m_unacked.end();) {
    Unacked& u = it->second;
    if (now_ns < u.next_ns) {
      ++it;
      continue;
    }
    if (u.tries >= kForwardTries) {
      ++m_completes_unanswered;
      it = m_unacked.erase(it);
      continue;
    }
    (void)m_link->publish(u.subject, u.bytes, m_ack_subject);
    ++m_completes_resent;
    u.next_ns = now_ns + (kForwardRetryNs << std::min<uint32_t>(u.tries, 3));
    ++u.tries;
    ++it;
  }
}

std::string PoolNode::maintain() {
  const uint64_t now = monotonic_ns();
  const bool connected = m_link->connected();
  if (connected != m_was_connected) {
    if (connected)
      ELDR_LOG(info, "pool: connected to NATS at %s", m_link->server().c_str());
    else
      ELDR_LOG(warn,
               "pool: NATS connection lost: routing on the last view plus this node's own "
               "bookings, reconnecting");
    m_was_connected = connected;
    if (connected) {
      m_next_snapshot_ns = 0;  // tell everyone where we stand at once
      // Beats went unheard while we were away: the gateways get a timeout
      // from now before their routes go.
      for (auto& [gateway, heard_ns] : m_gateways) heard_ns = now;
    }
  }
  // Not in the pool (never joined, or lost): say why as soon as NATS says it,
  // once per reason; the library keeps retrying.
  if (connected) {
    m_join_error.clear();
  } else if (std::string why = not_connected_reason(); why != m_join_error) {
    ELDR_LOG(error, "pool: node %s is not in pool %s: NATS says \"%s\" (retrying)", node().c_str(),
             m_config.name.c_str(), why.c_str());
    ++m_join_errors;
    m_join_error = std::move(why);
  }
  if (connected && now >= m_next_snapshot_ns) {
    send_snapshot();
    m_next_snapshot_ns = now + uint64_t{m_config.snapshot_ms} * 1'000'000;
  }
  resend_unacked(now);
  if (connected) expire_gateways(now);
  for (const std::string& gone : m_view->expire(now))
    ELDR_LOG(warn, "pool: node %s silent for %u ms: its bookings expired", gone.c_str(),
             m_config.peer_timeout_ms);
  m_service.anticipate_peers(m_config.anticipate ? twins_per_pick(now) : 0.0,
                             m_view->view_age_ms());
  m_peer_by_tag.clear();
  for (std::string& name : m_view->names()) {
    const auto [it, fresh] = m_peer_by_tag.try_emplace(pool::node_tag(name), name);
    if (!fresh) it->second.clear();  // shared: nobody's
  }
  PoolGauge g;
  const PeerViewCounters& c = m_view->counters();
  const NatsLinkCounters l = m_link->counters();
  g.connected = connected;
  g.peers = m_view->peers();
  g.peer_bookings = m_view->bookings();
  g.twins = m_service.twins_pending();
  g.view_age_ms = m_view->view_age_ms();
  for (size_t k = 0; k < 4; ++k) g.received[k] = c.applied[k];
  g.published = l.published;
  g.published_bytes = l.published_bytes;
  g.received_bytes = l.received_bytes;
  g.publish_failed = l.publish_failed;
  g.dropped = l.dropped;
  g.malformed = m_malformed;
  g.foreign_subject = m_foreign_subject;
  g.lost = c.lost;
  g.stale = c.stale;
  g.refused = c.refused;
  g.unknown_release = c.unknown_release;
  g.repaired = c.repaired;
  g.expired_peers = c.expired_peers;
  g.restarts = c.restarts;
  g.disconnects = l.disconnects;
  g.reconnects = l.reconnects;
  g.reopened = l.reopened;
  g.snapshot_too_large = m_snapshot_too_large;
  g.remote_routes = m_remote_routes;
  g.remote_malformed = m_remote_malformed;
  g.routes_cancelled = m_routes_cancelled;
  g.routes_refused = m_routes_refused;
  g.routes_orphaned = m_routes_orphaned;
  g.completes_forwarded = m_completes_forwarded;
  g.completes_direct = m_completes_direct;
  g.completes_resent = m_completes_resent;
  g.completes_unanswered = m_completes_unanswered;
  g.completes_received = m_completes_received;
  g.join_errors = m_join_errors;
  g.refit_samples_sent = m_samples_sent;
  g.refit_samples_received = m_samples_received;
  m_metrics.set_pool(g);
  return status_json(now);
}

// Why the link is down: what NATS last said, else that no server answers
// (an unreachable server leaves the library nothing to say).
std::string PoolNode::not_connected_reason() const {
  std::string why = m_link->last_error();
  if (why.empty()) {
    why = "no NATS server answers at " + redact_url(m_config.nats.front());
    if (m_config.nats.size() > 1) why += " (or the others given)";
  }
  return why;
}

std::string PoolNode::status_json(uint64_t now_ns) const {
  nlohmann::json j;
  j["connected"] = m_link->connected();
  j["server"] = m_link->server();
  if (!m_join_error.empty()) j["error"] = m_join_error;  // why it is not connected
  j["node"] = node();
  j["pool"] = m_config.name;
  j["incarnation"] = m_encoder.incarnation();
  j["view_age_ms"] = m_view->view_age_ms();
  j["peer_bookings"] = m_view->bookings();
  j["twins"] = m_service.twins_pending();
  // Routing rates (smoothed, per second) and the twins each pick books.
  j["rate"] = {{"own", m_own_rate}, {"peers", m_peer_rate}};
  j["twins_per_pick"] = m_service.twins_per_pick();
  // What the pool costs this node on the wire (eldr bench cluster reads it).
  const NatsLinkCounters l = m_link->counters();
  j["nats"] = {{"received", l.received},
               {"received_bytes", l.received_bytes},
               {"published", l.published},
               {"published_bytes", l.published_bytes},
               {"reopened", l.reopened}};
  const uint64_t revision = m_table_revision.load();
  // Routes made for gateways over NATS, and those their gateway withdrew
  // (it never heard the answer): released here, or refused as they came.
  j["gateway_routes"] = {{"routed", m_remote_routes},       {"cancelled", m_routes_cancelled},
                         {"refused", m_routes_refused},     {"orphaned", m_routes_orphaned},
                         {"held", m_gateway_routes.size()}, {"gateways", m_gateways.size()}};
  j["table_source"] = revision != 0 ? "pool" : "local";
  j["table_revision"] = revision != 0 ? nlohmann::json(revision) : nlohmann::json(nullptr);
  j["table_epoch"] = m_service.table_epoch();
  j["table_errors"] = m_table_errors.load();
  {
    std::lock_guard lock(m_table_mutex);
    if (!m_table_error.empty()) j["table_error"] = m_table_error;
    if (m_refit)
      j["refit_lease"] = {{"held_here", m_lease_held.load()},
                          {"holder", m_lease_holder.empty() ? nlohmann::json(nullptr)
                                                            : nlohmann::json(m_lease_holder)}};
  }
  // Publish-to-counted delays of the latest bookings (same clock on one
  // host; across hosts it includes their clock offset).
  std::vector<float> delays = m_view->booking_delays_ms();
  if (!delays.empty()) {
    std::sort(delays.begin(), delays.end());
    const auto at = [&](double q) {
      return delays[std::min(delays.size() - 1, static_cast<size_t>(q * delays.size()))];
    };
    j["booking_delay_ms"] = {
        {"samples", delays.size()}, {"p50", at(0.5)}, {"p99", at(0.99)}, {"max", delays.back()}};
  }
  j["peers"] = nlohmann::json::array();
  for (const PeerInfo& p : m_view->info(now_ns))
    j["peers"].push_back({{"name", p.node},
                          {"last_seen_age_ms", p.last_seen_age_ms},
                          {"bookings", p.bookings},
                          {"bookings_applied", p.bookings_applied},
                          {"view_age_ms", p.view_age_ms}});
  std::string text = j.dump();
  // The status cell holds 16 KiB: with hundreds of peers, the list is cut.
  if (text.size() > 16000) {
    j["peers"] = nlohmann::json::array();
    j["peers_truncated"] = m_view->peers();
    text = j.dump();
  }
  return text;
}

}  // namespace eldr::sidecar
