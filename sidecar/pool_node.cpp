#include "pool_node.hpp"

#include <unistd.h>

#include <algorithm>
#include <random>

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
      m_node(std::move(node)),
      m_incarnation(random_incarnation()),
      m_tag(pool::node_tag(m_node)),
      m_nodes_prefix("eldr." + config.name + ".node."),
      m_route_subject(route_subject(config.name)),
      m_complete_subject(complete_subject(config.name, m_node)),
      m_cancel_subject(cancel_subject(config.name)),
      m_gateway_subject(gateway_subject(config.name)),
      m_forward_subject(forward_subject(config.name, m_node)),
      m_complete_any_subject(complete_any_subject(config.name)),
      m_ack_subject(ack_subject(config.name, m_node)),
      m_sample_subject(sample_subject(config.name, m_node)) {}

Result<std::unique_ptr<PoolNode>> PoolNode::create(const PoolConfig& config, Service& service,
                                                   Metrics& metrics, std::function<void()> wake,
                                                   const RefitConfig* refit) {
  const std::string node = config.node.empty() ? default_node_name() : config.node;
  ELDR_TRY(validate_pool_name("node", node));
  ELDR_TRY(validate_pool_name("pool", config.name));
  auto replies = ReplyPolicy::create(config.reply_prefixes);
  if (!replies) return Status{replies.status().code(), "[pool] " + replies.status().message()};
  std::unique_ptr<PoolNode> n(new PoolNode(config, node, service, metrics));
  PoolNode* self = n.get();
  // The parts publish on the link, which exists before any message flows.
  const PublishFn publish = [self](std::string_view subject, std::span<const uint8_t> data,
                                   std::string_view reply) {
    return self->m_link->publish(subject, data, reply);
  };
  n->m_refit = refit != nullptr;
  const double samples_per_s = refit != nullptr
                                   ? std::max(1.0, static_cast<double>(refit->window) /
                                                       std::max<uint32_t>(refit->period_s, 1))
                                   : 0.0;
  n->m_peers = std::make_unique<PoolPeers>(n->m_config, node, n->m_incarnation, service, publish,
                                           samples_per_s, [self] { return self->lease_holder(); });
  n->m_gateways =
      std::make_unique<PoolGateways>(n->m_config, std::move(*replies), node, service, publish);
  n->m_completes = std::make_unique<PoolCompletes>(config.name, node, n->m_tag, service, publish);
  NatsLinkOptions lo;
  lo.urls = config.nats;
  lo.auth = config.auth;
  lo.name = "eldrd " + config.name + "/" + node;
  // The nodes' messages; requests to route (one node of the pool answers
  // each: a queue group); gateways' completes of the requests this node
  // routed for them, their cancels and beats; completes other nodes forward
  // here, to every node, and the answers to ours.
  lo.subscribe = {{pool_nodes_subject(config.name), ""},
                  {n->m_route_subject, "eldr"},
                  {n->m_complete_subject, ""},
                  {n->m_cancel_subject, ""},
                  {n->m_gateway_subject, ""},
                  {n->m_forward_subject, ""},
                  {n->m_complete_any_subject, ""},
                  {n->m_ack_subject, ""}};
  if (refit) lo.subscribe.push_back({n->m_sample_subject, ""});
  lo.on_message = std::move(wake);
  auto link = NatsLink::open(lo);
  if (!link) return link.status();
  n->m_link = std::move(*link);
  service.join_pool(n.get());
  n->m_table_thread = std::thread([self] { self->table_loop(); });
  ELDR_LOG(info, "pool: node %s of pool %s, NATS %s%s, %s; answers gateways under %s.>",
           node.c_str(), config.name.c_str(), pool::redact_url(config.nats.front()).c_str(),
           config.nats.size() > 1 ? " (and others)" : "", config.auth.describe().c_str(),
           config.reply_prefixes.empty() ? std::string(pool::kDefaultInboxPrefix).c_str()
                                         : config.reply_prefixes.front().c_str());
  return n;
}

PoolNode::~PoolNode() {
  m_stop.store(true);
  if (m_table_thread.joinable()) m_table_thread.join();
  m_service.join_pool(nullptr);
  m_service.anticipate_peers(0, 0.0);
  m_peers.reset();  // the peers' bookings leave the router
  m_link.reset();
}

std::string PoolNode::lease_holder() const {
  std::lock_guard lock(m_table_mutex);
  return m_lease_holder;
}

// ---- in ---------------------------------------------------------------------------

size_t PoolNode::drain() {
  if (m_link->take(m_batch) == 0) return 0;
  const uint64_t now = monotonic_ns();
  const uint64_t now_real = realtime_ns();
  for (const InboxMessage& in : m_batch) {
    const std::string& s = in.subject;
    if (s == m_route_subject) {
      m_gateways->route(in);
    } else if (s == m_complete_subject) {
      m_gateways->complete(in);
    } else if (s == m_cancel_subject) {
      m_gateways->cancel(in);
    } else if (s == m_gateway_subject) {
      m_gateways->beat(in);
    } else if (s == m_forward_subject) {
      m_completes->forwarded(in);
    } else if (s == m_complete_any_subject) {
      m_completes->to_every_node(in);
    } else if (s == m_ack_subject) {
      m_completes->acked(in);
    } else if (s == m_sample_subject) {
      m_peers->sampled(in, m_lease_held.load());
    } else if (s.size() > m_nodes_prefix.size() && s.starts_with(m_nodes_prefix)) {
      m_peers->apply(in, std::string_view(s).substr(m_nodes_prefix.size()), now, now_real);
    } else {
      ++m_foreign_subject;
    }
  }
  const size_t n = m_batch.size();
  m_batch.clear();
  return n;
}

// ---- maintenance ------------------------------------------------------------------

std::string PoolNode::maintain() {
  const uint64_t now = monotonic_ns();
  const bool connected = m_link->connected();
  const bool reconnected = connected && !m_was_connected;
  if (connected != m_was_connected) {
    if (connected)
      ELDR_LOG(info, "pool: connected to NATS at %s", m_link->server().c_str());
    else
      ELDR_LOG(warn,
               "pool: NATS connection lost: routing on the last view plus this node's own "
               "bookings, reconnecting");
    m_was_connected = connected;
    if (connected) m_next_snapshot_ns = 0;  // tell everyone where we stand at once
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
    m_peers->send_snapshot(m_link->max_payload());
    m_next_snapshot_ns = now + uint64_t{m_config.snapshot_ms} * 1'000'000;
  }
  m_completes->maintain(now, m_peers->view().names());
  // Beats went unheard while this node was away: a timeout from now.
  if (connected) m_gateways->maintain(now, reconnected);
  m_peers->expire(now);
  m_service.anticipate_peers(m_config.anticipate ? m_peers->twins_per_pick(now) : 0.0,
                             m_peers->view().view_age_ms());
  const PoolStatus s = status(now);
  m_metrics.set_pool(s.gauge());
  return s.json();
}

std::string PoolNode::not_connected_reason() const {
  std::string why = m_link->last_error();
  if (why.empty()) {
    why = "no NATS server answers at " + redact_url(m_config.nats.front());
    if (m_config.nats.size() > 1) why += " (or the others given)";
  }
  return why;
}

PoolStatus PoolNode::status(uint64_t now_ns) const {
  PoolStatus s;
  s.connected = m_link->connected();
  s.server = m_link->server();
  s.join_error = m_join_error;
  s.join_errors = m_join_errors;
  s.node = m_node;
  s.pool = m_config.name;
  s.incarnation = m_incarnation;
  const PeerView& view = m_peers->view();
  s.view_age_ms = view.view_age_ms();
  s.peers = view.peers();
  s.peer_bookings = view.bookings();
  s.twins = m_service.twins_pending();
  s.own_rate = m_peers->own_rate();
  s.peer_rate = m_peers->peer_rate();
  s.twins_per_pick = m_service.twins_per_pick();
  s.peer_info = view.info(now_ns);
  s.booking_delays_ms = view.booking_delays_ms();
  s.view = view.counters();
  s.peer_counts = m_peers->counters();
  s.foreign_subject = m_foreign_subject;
  s.nats = m_link->counters();
  s.gateways = m_gateways->counters();
  s.completes = m_completes->counters();
  if (const uint64_t revision = m_table_revision.load(); revision != 0) s.table_revision = revision;
  s.table_epoch = m_service.table_epoch();
  s.table_errors = m_table_errors.load();
  s.refit = m_refit;
  s.lease_held = m_lease_held.load();
  std::lock_guard lock(m_table_mutex);
  s.table_error = m_table_error;
  s.lease_holder = m_lease_holder;
  return s;
}

}  // namespace eldr::sidecar
