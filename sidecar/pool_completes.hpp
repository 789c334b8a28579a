// Completes between the nodes of a pool (docs/design.md section 10): an
// engine completes through its own node a request another node routed; the
// token names that node (pool::token_tag), so its complete goes there alone,
// on eldr.<pool>.forward.<node>, a subject only nodes may publish to, and is
// sent again until that node answers on eldr.<pool>.ack.<node> (a lost
// complete would hold its request in flight for good). A token that names
// no single peer goes to every node (eldr.<pool>.complete). Consumer thread
// only; messages go out through `publish`.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "eldr/pool/nats_link.hpp"
#include "eldr/pool/peer_view.hpp"
#include "service.hpp"

namespace eldr::sidecar {

struct CompleteCounters {
  uint64_t direct = 0;      // forwarded to the one node their token names
  uint64_t forwarded = 0;   // sent to every node (eldr.<pool>.complete)
  uint64_t received = 0;    // forwarded by other nodes, released here
  uint64_t resent = 0;      // forwards sent again (no answer yet)
  uint64_t unanswered = 0;  // forwards given up on
  uint64_t malformed = 0;   // forwards and answers that do not decode
};

class PoolCompletes {
 public:
  PoolCompletes(std::string pool, std::string node, uint32_t tag, Service& service,
                pool::PublishFn publish);

  // The PoolPublisher's forward_complete: a complete with a token for a
  // request this node does not hold.
  void forward(std::string_view request_id, uint64_t token);
  // eldr.<pool>.forward.<node>: another node's forward of a token naming us;
  // answered on its ack subject.
  void forwarded(const pool::InboxMessage& in);
  // eldr.<pool>.complete: a forward to every node; the holder releases it.
  void to_every_node(const pool::InboxMessage& in);
  // eldr.<pool>.ack.<node>: the node a forward went to has it.
  void acked(const pool::InboxMessage& in);
  // Every maintenance tick: the peers heard of (their tags name the nodes
  // forwards go to), and forwards not answered in time sent again.
  void maintain(uint64_t now_ns, const std::vector<pool::PeerView::Name>& peers);

  CompleteCounters counters() const noexcept { return m_counts; }

 private:
  std::string m_pool;
  std::string m_forward_subject;  // ours
  std::string m_every_subject;    // eldr.<pool>.complete
  std::string m_ack_subject;      // ours: answers to the completes we forward
  std::string m_ack_prefix;       // "eldr.<pool>.ack.": where we answer, nowhere else
  uint32_t m_tag;                 // node_tag(node): in our completion tokens
  Service& m_service;
  pool::PublishFn m_publish;
  // The peers by the tag of their tokens; node "" where two peers share a
  // tag (their completes go to every node). forward: it reads its forward
  // subject (a node from before reads its complete subject).
  struct Peer {
    std::string node;
    bool forward = false;
  };
  std::unordered_map<uint32_t, Peer> m_peer_by_tag;
  // Forwards awaiting their answer, by token: sent again on a back-off,
  // given up after kForwardTries (about 12 s).
  struct Unacked {
    std::string node;
    bool forward = false;
    std::vector<uint8_t> bytes;
    uint64_t next_ns = 0;
    uint32_t tries = 1;
  };
  std::unordered_map<uint64_t, Unacked> m_unacked;
  CompleteCounters m_counts;
};

}  // namespace eldr::sidecar
