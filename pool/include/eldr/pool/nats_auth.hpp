// How a pool's clients prove themselves to NATS and how they check the
// server: TLS (the CA that signs the servers, a client certificate when the
// servers verify clients), one kind of credentials (a .creds file with a
// user JWT and nkey seed, or a user and a password file, or a token file),
// and the inbox prefix that user may subscribe to (inbox.hpp: a gateway's
// answers are for it alone). Secrets stay in files and are read when
// connecting; nothing here is ever logged but file names. No NATS needed
// (eldr_pool_wire); NatsLink and the C API's pool handle apply it.
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "eldr/status.hpp"

namespace eldr::pool {

struct NatsAuth {
  std::string ca_file;    // PEM: the CAs trusted for the servers' certificates; sets TLS
  std::string cert_file;  // PEM: this client's certificate chain (with key_file); sets TLS
  std::string key_file;
  std::string creds_file;     // a .creds file (JWT and nkey seed), decentralized accounts
  std::string user;           // with password_file
  std::string password_file;  // the password, alone in the file (a trailing newline is dropped)
  std::string token_file;     // a token, alone in the file
  // The client's reply inboxes are "<inbox_prefix>.<random>" ("": libnats'
  // _INBOX). A gateway's own ("_INBOX.gw-a"), so that the server lets its
  // user alone read its answers.
  std::string inbox_prefix;

  bool tls() const noexcept { return !ca_file.empty() || !cert_file.empty(); }
  // Consistent and its files readable: cert and key together, at most one
  // kind of credentials, a user with its password file, an inbox prefix
  // that validate_inbox_prefix takes.
  Status check() const;
  // For logs and status: what is used, by file name only.
  std::string describe() const;
};

// Each field once, with its [pool] key in eldrd.toml and its flag (eldrd,
// eldr table): the config reader, the flags and their merge all walk this.
struct NatsAuthField {
  std::string_view key;
  const char* flag;
  std::string NatsAuth::*member;
  const char* help;
};
inline constexpr std::array<NatsAuthField, 8> kNatsAuthFields{{
    {"tls_ca", "--nats-ca", &NatsAuth::ca_file,
     "PEM file of the CAs that sign the NATS servers (TLS)"},
    {"tls_cert", "--nats-cert", &NatsAuth::cert_file,
     "PEM client certificate for NATS (TLS, with --nats-key)"},
    {"tls_key", "--nats-key", &NatsAuth::key_file, "PEM key of --nats-cert"},
    {"creds", "--nats-creds", &NatsAuth::creds_file, "NATS .creds file (user JWT and nkey seed)"},
    {"user", "--nats-user", &NatsAuth::user, "NATS user (with --nats-password-file)"},
    {"password_file", "--nats-password-file", &NatsAuth::password_file,
     "file holding the NATS user's password"},
    {"token_file", "--nats-token-file", &NatsAuth::token_file, "file holding a NATS token"},
    {"inbox_prefix", "--nats-inbox-prefix", &NatsAuth::inbox_prefix,
     "prefix of this client's NATS reply inboxes (default _INBOX): one per gateway user, which "
     "alone may subscribe to it"},
}};

// A secret file's text, the trailing newline dropped (at most 64 KiB).
Result<std::string> read_secret(const std::string& path);

}  // namespace eldr::pool
