#include "pool_client.hpp"

namespace eldr::cli {

Result<eldr_pool_t*> open_pool_client(const std::string& nats_urls, const std::string& pool,
                                      const pool::NatsAuth& auth, uint32_t timeout_ms) {
  const auto c = [](const std::string& s) { return s.empty() ? nullptr : s.c_str(); };
  eldr_nats_auth_t a = ELDR_NATS_AUTH_INIT;
  a.ca_file = c(auth.ca_file);
  a.cert_file = c(auth.cert_file);
  a.key_file = c(auth.key_file);
  a.creds_file = c(auth.creds_file);
  a.user = c(auth.user);
  a.password_file = c(auth.password_file);
  a.token_file = c(auth.token_file);
  a.inbox_prefix = c(auth.inbox_prefix);
  eldr_pool_t* handle = nullptr;
  if (const eldr_status_t s =
          eldr_pool_open_auth(nats_urls.c_str(), pool.c_str(), &a, timeout_ms, &handle);
      s != ELDR_OK)
    return Status{static_cast<Errc>(s), eldr_last_error_message()};
  return handle;
}

}  // namespace eldr::cli
