#include "eldr/pool/nats_auth_apply.hpp"

namespace eldr::pool {

namespace {

Status refused(const std::string& what, natsStatus s) {
  return {Errc::io, what + ": " + natsStatus_GetText(s)};
}

}  // namespace

Status apply_nats_auth(natsOptions* opts, const NatsAuth& a) {
  ELDR_TRY(a.check());
  natsStatus s = NATS_OK;
  if (a.tls()) s = natsOptions_SetSecure(opts, true);
  if (s == NATS_OK && !a.ca_file.empty())
    s = natsOptions_LoadCATrustedCertificates(opts, a.ca_file.c_str());
  if (s != NATS_OK) return refused("NATS TLS: the CA file " + a.ca_file + " was refused", s);
  if (!a.cert_file.empty())
    s = natsOptions_LoadCertificatesChain(opts, a.cert_file.c_str(), a.key_file.c_str());
  if (s != NATS_OK)
    return refused("NATS TLS: the client certificate " + a.cert_file + " was refused", s);
  if (!a.creds_file.empty())
    s = natsOptions_SetUserCredentialsFromFiles(opts, a.creds_file.c_str(), nullptr);
  if (s != NATS_OK)
    return refused("NATS: the credentials file " + a.creds_file + " was refused", s);
  if (!a.user.empty()) {
    auto password = read_secret(a.password_file);
    if (!password) return password.status();
    s = natsOptions_SetUserInfo(opts, a.user.c_str(), password->c_str());
  }
  if (s == NATS_OK && !a.token_file.empty()) {
    auto token = read_secret(a.token_file);
    if (!token) return token.status();
    s = natsOptions_SetToken(opts, token->c_str());
  }
  if (s != NATS_OK) return refused("NATS credentials refused", s);
  if (!a.inbox_prefix.empty()) s = natsOptions_SetCustomInboxPrefix(opts, a.inbox_prefix.c_str());
  if (s != NATS_OK) return refused("NATS: the inbox prefix " + a.inbox_prefix + " was refused", s);
  return Status::ok();
}

}  // namespace eldr::pool
