#include "pool_gateways.hpp"

#include <bit>
#include <cstring>
#include <utility>

#include "eldr/pool/peer_wire.hpp"
#include "eldr/pool/route_wire.hpp"
#include "eldr/shm/records.hpp"
#include "log.hpp"

namespace eldr::sidecar {

namespace {

// An untrusted subject for a log line: at most 80 bytes, the unprintable as '?'.
std::string printable(std::string_view text) {
  std::string out;
  for (const char c : text.substr(0, 80))
    out.push_back(static_cast<unsigned char>(c) > ' ' && c != 0x7f ? c : '?');
  return text.size() > 80 ? out + "..." : out;
}

// The route request of a gateway from before RouteRequest: the ring's
// FootprintMsg or PromptMsg (shm's decoder checks it), with the route's key
// and the gateway's id in NATS headers. Read through the 0.2 series
// (pool/schema/route_msg.fbs); its routes are released by their token alone.
Result<pool::RouteRequest> legacy_route_request(const pool::InboxMessage& in) {
  const std::vector<uint64_t> aligned = pool::aligned_copy(in.data);
  const bool prompt = in.data.size() >= 8 && std::memcmp(in.data.data() + 4, "ELPR", 4) == 0;
  shm::detail::DecodedRecord record;
  ELDR_TRY(shm::detail::decode_record(
      prompt ? shm::RecordType::prompt : shm::RecordType::footprint,
      prompt ? shm::detail::kPromptSchema : shm::detail::kFootprintSchema,
      {reinterpret_cast<const uint8_t*>(aligned.data()), in.data.size()}, record));
  pool::RouteRequest r;
  r.route_key = pool::parse_key(in.route_key);
  r.gateway = pool::parse_key(in.gateway);
  if ((!in.route_key.empty() && r.route_key == 0) || (!in.gateway.empty() && r.gateway == 0))
    return Status{Errc::invalid_argument,
                  std::string("the ") +
                      (r.route_key == 0 ? pool::kRouteKeyHeader : pool::kGatewayHeader) +
                      " header is not 1..16 hex digits, not zero"};
  if (prompt) {
    const shm::PromptIn& p = record.prompt;
    r.request_id.assign(p.request_id);
    r.kind = p.prompt.kind == PromptKind::tokens ? pool::RouteKind::tokens : pool::RouteKind::text;
    r.tokens.assign(p.prompt.tokens.begin(), p.prompt.tokens.end());
    r.text.assign(p.prompt.text);
    return r;
  }
  const shm::FootprintIn& f = record.footprint;
  if (f.counts.empty())
    return Status{Errc::invalid_argument, "a route over NATS carries a dense footprint"};
  r.request_id.assign(f.request_id);
  r.layers = f.layers;
  r.experts = f.experts;
  r.counts.assign(f.counts.begin(), f.counts.end());
  return r;
}

}  // namespace

PoolGateways::PoolGateways(const PoolConfig& config, pool::ReplyPolicy reply_policy,
                           std::string node, Service& service, pool::PublishFn publish)
    : m_config(config),
      m_replies(std::move(reply_policy)),
      m_node(std::move(node)),
      m_service(service),
      m_publish(std::move(publish)) {}

void PoolGateways::answer(const pool::InboxMessage& in, std::span<const uint8_t> bytes) {
  (void)m_publish(in.reply, bytes, {});
}

void PoolGateways::refuse_reply(std::string_view what, std::string_view reply, uint64_t sender) {
  ++m_counts.replies_refused;
  if (m_logged_senders.find(sender) != nullptr) return;
  m_logged_senders.put(sender, true);
  // Once per sender; a flood of new senders at powers of two.
  if (++m_refusals_logged > 16 && !std::has_single_bit(m_refusals_logged)) return;
  std::string under;
  for (const std::string& p : m_replies.prefixes()) under += (under.empty() ? "" : ", ") + p + ".>";
  ELDR_LOG(warn,
           "pool: a %.*s from gateway %s asked for its answer on '%s': not answered, not acted "
           "on (this node answers under %s only, [pool] reply_prefixes) [%llu senders so far]",
           static_cast<int>(what.size()), what.data(),
           sender != 0 ? pool::format_key(sender).c_str() : "(unnamed)", printable(reply).c_str(),
           under.c_str(), static_cast<unsigned long long>(m_refusals_logged));
}

void PoolGateways::route(const pool::InboxMessage& in) {
  if (in.reply.empty()) {
    ++m_counts.malformed;  // a publish, not a request: nobody would hear the decision
    return;
  }
  const bool current = pool::is_route_request(in.data);
  Result<pool::RouteRequest> request =
      current ? pool::decode_route_request(in.data) : legacy_route_request(in);
  // Nothing is routed for a request this node will not answer: its reply
  // subject could be the pool's table key or another node's subject.
  if (!m_replies.allows(in.reply)) {
    refuse_reply("route", in.reply, request ? request->gateway : 0);
    return;
  }
  shm::DecisionIn d;
  d.worker = -1;
  std::string message;
  const auto refuse = [&](Errc code, std::string why) {
    d.status = static_cast<int32_t>(code);
    message = std::move(why);
  };
  if (!request) {
    ++m_counts.malformed;
    refuse(request.status().code(), request.status().message());
  } else if (Status s = shm::validate_request_id(request->request_id); !s) {
    ++m_counts.malformed;
    refuse(s.code(), s.message());
  } else {
    const pool::RouteRequest& r = *request;
    const std::string_view id = r.request_id;
    switch (m_ledger.admit(id, r.gateway, r.route_key, m_service.request_key(id).has_value())) {
      case pool::GatewayLedger::Admission::cancelled:
        ++m_counts.refused_cancelled;  // its gateway gave up on it and said so first
        refuse(Errc::state, "the gateway cancelled this route before it reached a node");
        break;
      case pool::GatewayLedger::Admission::owned:
        ++m_counts.refused_owned;
        refuse(Errc::state, "request id '" + std::string(id) + "' is in flight at node " + m_node +
                                " for another gateway or an engine");
        break;
      case pool::GatewayLedger::Admission::ok: {
        ++m_counts.routed;
        const uint64_t now = monotonic_ns();
        if (r.kind == pool::RouteKind::footprint) {
          shm::FootprintIn f;
          f.client = kRemoteClient;  // not a ring's: nobody may complete it without the token
          f.request_id = id;
          f.layers = r.layers;
          f.experts = r.experts;
          f.counts = r.counts;
          f.seen_ns = now;
          d = m_service.route_remote(f);
          if (d.status != 0) message = "the daemon rejected the footprint";
        } else {
          shm::PromptIn p;
          p.client = kRemoteClient;
          p.request_id = id;
          p.prompt = r.prompt();
          p.prompt_units = p.units();  // whole: nothing was cut on the way
          p.head_units = static_cast<uint32_t>(p.units());
          p.seen_ns = now;
          d = m_service.route_remote(p);
          if (d.status != 0) message = "the daemon rejected the prompt";
        }
        if (d.status != 0) break;
        if (const auto router_key = m_service.request_key(id))
          m_ledger.add(id,
                       {r.gateway, r.route_key, d.completion_token, *router_key,
                        /*proven=*/current},
                       now);
        break;
      }
    }
  }
  const std::vector<uint8_t> reply = pool::encode_route_reply(
      {d.status, message, request ? request->request_id : std::string(), d.worker, d.similarity,
       d.band_size, d.policy, d.table_epoch, d.completion_token, m_node, d.confidence,
       /*acks_completes=*/true});
  answer(in, reply);
}

void PoolGateways::complete(const pool::InboxMessage& in) {
  const auto c = pool::decode_route_complete(in.data);
  if (!c || !shm::validate_request_id(c->request_id).is_ok()) {
    ++m_counts.malformed;
    return;
  }
  // Answered where a requester may listen, nowhere else. The complete still
  // counts: a node from before the forward subject sends its forwards here,
  // with its ack subject as the reply (then sends them again, unanswered).
  const bool answerable = in.reply.empty() || m_replies.allows(in.reply);
  if (!answerable) refuse_reply("complete", in.reply, 0);
  // A route a gateway proved with its key is its own: a token read off the
  // wire, or leaked anywhere else, releases nothing without that key.
  if (!m_ledger.may_complete(c->request_id, c->route_key)) {
    if (std::has_single_bit(++m_counts.completes_refused))
      ELDR_LOG(warn, "pool: refused a complete of request '%s': %s its route's key [%llu so far]",
               printable(c->request_id).c_str(), c->route_key == 0 ? "without" : "not with",
               static_cast<unsigned long long>(m_counts.completes_refused));
    return;
  }
  if (answerable && !in.reply.empty()) {
    // The sender waits for this: the complete is ours now, whatever comes of it.
    const uint64_t token = c->completion_token;
    answer(in, {reinterpret_cast<const uint8_t*>(&token), sizeof token});
  }
  if (m_service.complete_for_pool(c->request_id, c->completion_token)) {
    ++m_counts.completes;
    return;
  }
  // Unknown here, or another token: counted by the service, never forwarded
  // (a gateway's complete goes to the node that routed it).
  m_service.on_complete_ex({kRemoteClient, 0, c->request_id, c->completion_token});
}

void PoolGateways::cancel(const pool::InboxMessage& in) {
  const auto c = pool::decode_route_cancel(in.data);
  if (!c || !shm::validate_request_id(c->request_id).is_ok()) {
    ++m_counts.malformed;
    return;
  }
  // Every node hears it; the one that routed the id with that key releases
  // it, the others keep the key in case its route has not come yet.
  if (const auto held = m_ledger.cancel(c->request_id, c->route_key))
    release({*held}, m_counts.cancelled);
}

void PoolGateways::beat(const pool::InboxMessage& in) {
  const auto b = pool::decode_gateway_beat(in.data);
  if (!b) {
    ++m_counts.malformed;
    return;
  }
  const auto routes = m_ledger.beat(b->gateway, b->leaving, monotonic_ns());
  if (routes.empty()) return;
  const uint64_t before = m_counts.orphaned;
  release(routes, m_counts.orphaned);
  ELDR_LOG(info, "pool: gateway %s left: released the %llu requests it routed here",
           pool::format_key(b->gateway).c_str(),
           static_cast<unsigned long long>(m_counts.orphaned - before));
}

void PoolGateways::maintain(uint64_t now_ns, bool reconnected) {
  if (reconnected) m_ledger.heard_all(now_ns);
  const uint64_t timeout = uint64_t{m_config.gateway_timeout_ms} * 1'000'000;
  for (const pool::GatewayLedger::Silent& s : m_ledger.expire(now_ns, timeout)) {
    const uint64_t before = m_counts.orphaned;
    release(s.routes, m_counts.orphaned);
    if (m_counts.orphaned != before)
      ELDR_LOG(warn, "pool: gateway %s went silent: released the %llu requests it routed here",
               pool::format_key(s.gateway).c_str(),
               static_cast<unsigned long long>(m_counts.orphaned - before));
  }
}

// Each released as its complete would; the service's release reaches
// released(), which takes it out of the ledger.
void PoolGateways::release(const std::vector<pool::HeldRoute>& routes, uint64_t& counter) {
  for (const pool::HeldRoute& r : routes)
    if (m_service.complete_for_pool(r.request_id, r.token)) ++counter;
}

GatewayCounters PoolGateways::counters() const {
  GatewayCounters c = m_counts;
  c.held = m_ledger.held();
  c.gateways = m_ledger.gateways();
  return c;
}

}  // namespace eldr::sidecar
