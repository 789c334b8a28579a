#include "eldr/pool/nats_urls.hpp"

#include <cctype>

namespace eldr::pool {

std::vector<std::string> split_urls(std::string_view text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view part = text.substr(start, end - start);
    while (!part.empty() && std::isspace(static_cast<unsigned char>(part.front())))
      part.remove_prefix(1);
    while (!part.empty() && std::isspace(static_cast<unsigned char>(part.back())))
      part.remove_suffix(1);
    if (!part.empty()) out.emplace_back(part);
    start = end + 1;
  }
  return out;
}

std::string redact_url(std::string_view text) {
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    const size_t scheme = text.find("://", i);
    if (scheme == std::string_view::npos) {
      out.append(text.substr(i));
      break;
    }
    const size_t authority = scheme + 3;
    out.append(text.substr(i, authority - i));
    size_t end = authority;  // the authority ends at a path, a list comma or a blank
    while (end < text.size() && text[end] != '/' && text[end] != ',' &&
           !std::isspace(static_cast<unsigned char>(text[end])))
      ++end;
    const std::string_view host_part = text.substr(authority, end - authority);
    const size_t at = host_part.rfind('@');
    if (at == std::string_view::npos) {
      out.append(host_part);
    } else {
      const std::string_view user_info = host_part.substr(0, at);
      const size_t colon = user_info.find(':');
      if (colon != std::string_view::npos) out.append(user_info.substr(0, colon + 1));
      out.append("***");
      out.append(host_part.substr(at));
    }
    i = end;
  }
  return out;
}

}  // namespace eldr::pool
