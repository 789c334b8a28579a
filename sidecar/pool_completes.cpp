#include "pool_completes.hpp"

#include <algorithm>
#include <cstring>

#include "eldr/pool/peer_wire.hpp"
#include "eldr/pool/route_wire.hpp"

namespace eldr::sidecar {

namespace {

constexpr size_t kMaxUnacked = size_t{1} << 16;    // forwards awaiting an answer
constexpr uint64_t kForwardRetryNs = 250'000'000;  // first wait for an answer
constexpr uint32_t kForwardTries = 8;              // sends, then given up (~12 s)

}  // namespace

PoolCompletes::PoolCompletes(std::string pool, std::string node, uint32_t tag, Service& service,
                             pool::PublishFn publish)
    : m_pool(std::move(pool)),
      m_forward_subject(pool::forward_subject(m_pool, node)),
      m_every_subject(pool::complete_any_subject(m_pool)),
      m_ack_subject(pool::ack_subject(m_pool, node)),
      m_ack_prefix(pool::ack_subject(m_pool, "")),
      m_tag(tag),
      m_service(service),
      m_publish(std::move(publish)) {}

// The subject a forward to `node` goes on: its forward subject, or, for a
// node from before it (no kFeatureForwardSubject), its complete subject.
static std::string subject_of(const std::string& pool, const std::string& node, bool forward) {
  return forward ? pool::forward_subject(pool, node) : pool::complete_subject(pool, node);
}

void PoolCompletes::forward(std::string_view request_id, uint64_t token) {
  // The RouteComplete a node reads (without a route key: nodes may publish
  // here, gateways may not, so the token is proof enough).
  std::vector<uint8_t> bytes = pool::encode_route_complete(request_id, token);
  // To the node the token names, when exactly one peer has its tag; else
  // (a token of a node before tags, an unknown or shared tag) to every node.
  if (const auto tag = pool::token_tag(token)) {
    const auto it = m_peer_by_tag.find(*tag);
    if (it != m_peer_by_tag.end() && !it->second.node.empty()) {
      ++m_counts.direct;
      (void)m_publish(subject_of(m_pool, it->second.node, it->second.forward), bytes,
                      m_ack_subject);
      if (m_unacked.size() < kMaxUnacked)
        m_unacked.insert_or_assign(token,
                                   Unacked{it->second.node, it->second.forward, std::move(bytes),
                                           monotonic_ns() + kForwardRetryNs, 1});
      return;
    }
  }
  ++m_counts.forwarded;
  (void)m_publish(m_every_subject, bytes, {});
}

void PoolCompletes::forwarded(const pool::InboxMessage& in) {
  const auto c = pool::decode_route_complete(in.data);
  if (!c || !shm::validate_request_id(c->request_id).is_ok()) {
    ++m_counts.malformed;
    return;
  }
  // The forwarder waits for our answer: the complete is ours now, whatever
  // comes of it. Answered on a node's ack subject, nowhere else.
  if (in.reply.size() > m_ack_prefix.size() && in.reply.starts_with(m_ack_prefix) &&
      pool::validate_pool_name("node", std::string_view(in.reply).substr(m_ack_prefix.size()))
          .is_ok()) {
    const uint64_t token = c->completion_token;
    (void)m_publish(in.reply, {reinterpret_cast<const uint8_t*>(&token), sizeof token}, {});
  }
  if (const auto tag = pool::token_tag(c->completion_token)) {
    if (m_service.complete_for_pool(c->request_id, c->completion_token)) {
      ++m_counts.received;
      return;
    }
    // Its tag names another node (one our peer shared a moment ago): on to
    // every node, where only the holder acts.
    if (*tag != m_tag) {
      ++m_counts.forwarded;
      (void)m_publish(m_every_subject, in.data, {});
      return;
    }
  }
  m_service.on_complete_ex({kRemoteClient, 0, c->request_id, c->completion_token});
}

void PoolCompletes::to_every_node(const pool::InboxMessage& in) {
  const auto c = pool::decode_route_complete(in.data);
  if (!c || !shm::validate_request_id(c->request_id).is_ok()) {
    ++m_counts.malformed;
    return;
  }
  // Every node hears it; the one holding the request with this token
  // releases it (our own forwards come back too, and match nothing).
  if (m_service.complete_for_pool(c->request_id, c->completion_token)) ++m_counts.received;
}

void PoolCompletes::acked(const pool::InboxMessage& in) {
  uint64_t token = 0;
  if (in.data.size() != sizeof token) {
    ++m_counts.malformed;
    return;
  }
  std::memcpy(&token, in.data.data(), sizeof token);
  m_unacked.erase(token);
}

// A forward the named node has not answered: lost with a server that died,
// or sent while that node was between connections. Again after 0.25, 0.5,
// 1, 2, 2 ... s; a second copy releases nothing.
void PoolCompletes::maintain(uint64_t now_ns, const std::vector<pool::PeerView::Name>& peers) {
  m_peer_by_tag.clear();
  for (const pool::PeerView::Name& p : peers) {
    const auto [it, fresh] = m_peer_by_tag.try_emplace(
        pool::node_tag(p.node), Peer{p.node, (p.features & pool::kFeatureForwardSubject) != 0});
    if (!fresh) it->second.node.clear();  // shared: nobody's
  }
  for (auto it = m_unacked.begin(); it != m_unacked.end();) {
    Unacked& u = it->second;
    if (now_ns < u.next_ns) {
      ++it;
      continue;
    }
    if (u.tries >= kForwardTries) {
      ++m_counts.unanswered;
      it = m_unacked.erase(it);
      continue;
    }
    (void)m_publish(subject_of(m_pool, u.node, u.forward), u.bytes, m_ack_subject);
    ++m_counts.resent;
    u.next_ns = now_ns + (kForwardRetryNs << std::min<uint32_t>(u.tries, 3));
    ++u.tries;
    ++it;
  }
}

}  // namespace eldr::sidecar
