#include "eldr/pool/inbox.hpp"

namespace eldr::pool {

namespace {

bool name_char(char c) noexcept {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

// The first dot-separated token of `subject`.
std::string_view first_token(std::string_view subject) noexcept {
  return subject.substr(0, subject.find('.'));
}

}  // namespace

Status validate_inbox_prefix(std::string_view what, std::string_view prefix) {
  const auto bad = [&](const std::string& why) {
    return Status{
        Errc::invalid_argument,
        std::string(what) + " '" + std::string(prefix.substr(0, kMaxInboxPrefix)) + "' " + why};
  };
  if (prefix.empty() || prefix.size() > kMaxInboxPrefix)
    return bad("must be 1.." + std::to_string(kMaxInboxPrefix) + " characters");
  bool token_empty = true;
  for (const char c : prefix) {
    if (c == '.') {
      if (token_empty) return bad("has an empty token (a leading, trailing or double dot)");
      token_empty = true;
    } else if (name_char(c)) {
      token_empty = false;
    } else {
      return bad("must be dot-separated tokens of [A-Za-z0-9_-]");
    }
  }
  if (token_empty) return bad("has an empty token (a leading, trailing or double dot)");
  if (first_token(prefix) == "eldr")
    return bad("lies under eldr.: the pool's own subjects are no inbox");
  return Status::ok();
}

bool is_plain_subject(std::string_view subject) noexcept {
  if (subject.empty() || subject.size() > 256) return false;
  bool token_empty = true;
  for (const char c : subject) {
    if (c == '.') {
      if (token_empty) return false;
      token_empty = true;
      continue;
    }
    const auto u = static_cast<unsigned char>(c);
    if (u <= ' ' || u == 0x7f || c == '*' || c == '>') return false;
    token_empty = false;
  }
  return !token_empty;
}

Result<ReplyPolicy> ReplyPolicy::create(const std::vector<std::string>& prefixes) {
  ReplyPolicy p;
  if (prefixes.empty()) return p;
  p.m_prefixes.clear();
  for (const std::string& prefix : prefixes) {
    ELDR_TRY(validate_inbox_prefix("reply prefix", prefix));
    p.m_prefixes.push_back(prefix);
  }
  return p;
}

bool ReplyPolicy::allows(std::string_view reply) const noexcept {
  if (!is_plain_subject(reply)) return false;
  for (const std::string& prefix : m_prefixes)
    if (reply.size() > prefix.size() + 1 && reply.starts_with(prefix) &&
        reply[prefix.size()] == '.')
      return true;
  return false;
}

}  // namespace eldr::pool
