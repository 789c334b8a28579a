// The command-line flags of NatsAuth, the same for eldrd and the eldr CLI.
// Header-only: its users link CLI11 themselves.
#pragma once

#include <CLI/CLI.hpp>

#include "eldr/pool/nats_auth.hpp"

namespace eldr::pool {

inline void add_nats_auth_options(CLI::App& app, NatsAuth& a) {
  app.add_option("--nats-ca", a.ca_file, "PEM file of the CAs that sign the NATS servers (TLS)");
  app.add_option("--nats-cert", a.cert_file,
                 "PEM client certificate for NATS (TLS, with --nats-key)");
  app.add_option("--nats-key", a.key_file, "PEM key of --nats-cert");
  app.add_option("--nats-creds", a.creds_file, "NATS .creds file (user JWT and nkey seed)");
  app.add_option("--nats-user", a.user, "NATS user (with --nats-password-file)");
  app.add_option("--nats-password-file", a.password_file, "file holding the NATS user's password");
  app.add_option("--nats-token-file", a.token_file, "file holding a NATS token");
}

}  // namespace eldr::pool
