#include "eldr/pool/nats_auth.hpp"

#include <unistd.h>

#include "eldr/internal/file_io.hpp"
#include "eldr/pool/inbox.hpp"

namespace eldr::pool {

namespace {

Status readable(const char* what, const std::string& path) {
  if (path.empty() || ::access(path.c_str(), R_OK) == 0) return Status::ok();
  return {Errc::io, std::string(what) + " " + path + " cannot be read"};
}

}  // namespace

Status NatsAuth::check() const {
  if (cert_file.empty() != key_file.empty())
    return {Errc::invalid_argument,
            "a NATS client certificate needs its key, and a key its certificate"};
  const int kinds =
      !creds_file.empty() + (!user.empty() || !password_file.empty()) + !token_file.empty();
  if (kinds > 1)
    return {Errc::invalid_argument,
            "NATS credentials: give one of a .creds file, a user with a password file, or a token "
            "file"};
  if (user.empty() != password_file.empty())
    return {Errc::invalid_argument,
            "a NATS user needs a password file, and a password file a user"};
  if (!inbox_prefix.empty()) ELDR_TRY(validate_inbox_prefix("the NATS inbox prefix", inbox_prefix));
  ELDR_TRY(readable("NATS CA file", ca_file));
  ELDR_TRY(readable("NATS client certificate", cert_file));
  ELDR_TRY(readable("NATS client key", key_file));
  ELDR_TRY(readable("NATS credentials file", creds_file));
  ELDR_TRY(readable("NATS password file", password_file));
  return readable("NATS token file", token_file);
}

std::string NatsAuth::describe() const {
  std::string out;
  const auto add = [&](const std::string& part) { out += (out.empty() ? "" : ", ") + part; };
  if (tls())
    add("TLS" + (ca_file.empty() ? std::string() : " (CA " + ca_file + ")") +
        (cert_file.empty() ? std::string() : ", client certificate " + cert_file));
  if (!creds_file.empty()) add("credentials file " + creds_file);
  if (!user.empty()) add("user " + user + " (password from " + password_file + ")");
  if (!token_file.empty()) add("token from " + token_file);
  if (!inbox_prefix.empty()) add("inboxes " + inbox_prefix + ".>");
  return out.empty() ? "no TLS, no credentials" : out;
}

Result<std::string> read_secret(const std::string& path) {
  auto bytes = read_file(path, 64 * 1024);
  if (!bytes) return bytes.status();
  std::string text(bytes->begin(), bytes->end());
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  if (text.empty()) return Status{Errc::invalid_argument, path + " is empty"};
  return text;
}

}  // namespace eldr::pool
