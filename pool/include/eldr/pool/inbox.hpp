// Where a node may answer, and where a client listens for answers. A NATS
// request names its reply subject itself, and a node publishes its answer
// there with the node's own permissions: so a node answers only under the
// inbox prefixes it accepts (never on $KV., $JS., eldr. or another node's
// subject), and each gateway listens under an inbox prefix of its own, which
// its NATS user alone may subscribe to. No NATS here.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "eldr/status.hpp"

namespace eldr::pool {

// libnats' default inbox prefix; a client's inboxes are "<prefix>.<nuid>...".
inline constexpr std::string_view kDefaultInboxPrefix = "_INBOX";
inline constexpr size_t kMaxInboxPrefix = 128;

// An inbox prefix a client may take ("_INBOX.gw-a"): 1..128 characters,
// dot-separated tokens of [A-Za-z0-9_-], not under "$" (the server's own
// subjects) nor "eldr" (the pool's). `what` names it in the error.
Status validate_inbox_prefix(std::string_view what, std::string_view prefix);

// The subjects a node answers requests on: strictly under one of its
// prefixes (at least one token more), every token non-empty and free of
// wildcards and whitespace.
class ReplyPolicy {
 public:
  // Each prefix as validate_inbox_prefix; none: kDefaultInboxPrefix.
  static Result<ReplyPolicy> create(const std::vector<std::string>& prefixes);
  ReplyPolicy() : m_prefixes{std::string(kDefaultInboxPrefix)} {}

  bool allows(std::string_view reply) const noexcept;
  const std::vector<std::string>& prefixes() const noexcept { return m_prefixes; }

 private:
  std::vector<std::string> m_prefixes;
};

// Whether `subject` is one a message may be published to: 1..256 bytes,
// dot-separated tokens, none empty, no wildcard, whitespace or control byte.
bool is_plain_subject(std::string_view subject) noexcept;

}  // namespace eldr::pool
