// How a pool's clients prove themselves to NATS and how they check the
// server: TLS (the CA that signs the servers, a client certificate when the
// servers verify clients) and one kind of credentials (a .creds file with a
// user JWT and nkey seed, or a user and a password file, or a token file).
// Secrets stay in files and are read when connecting; nothing here is ever
// logged but file names. No NATS needed (eldr_pool_wire); NatsLink applies it.
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

  bool tls() const noexcept { return !ca_file.empty() || !cert_file.empty(); }
  // Consistent and its files readable: cert and key together, at most one
  // kind of credentials, a user with its password file.
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
inline constexpr std::array<NatsAuthField, 7> kNatsAuthFields{{
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
}};

// A secret file's text, the trailing newline dropped (at most 64 KiB).
Result<std::string> read_secret(const std::string& path);

}  // namespace eldr::pool
