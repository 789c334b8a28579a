// NATS server URLs as operators give them: a comma-separated list, and the
// same with its credentials masked for anything a person reads (logs,
// status, error messages). No NATS needed (eldr_pool_wire).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace eldr::pool {

// "nats://a:4222, nats://b:4222" -> the URLs (blanks around commas dropped).
std::vector<std::string> split_urls(std::string_view text);
// A text for logs and status with the user info of every URL in it masked:
// "nats://user:pw@h:4222" -> "nats://user:***@h:4222", a token -> "***".
std::string redact_url(std::string_view text);

}  // namespace eldr::pool
