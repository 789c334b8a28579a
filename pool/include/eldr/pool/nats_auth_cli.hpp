// The command-line flags of NatsAuth, the same for eldrd and the eldr CLI.
// Header-only: its users link CLI11 themselves.
#pragma once

#include <CLI/CLI.hpp>

#include "eldr/pool/nats_auth.hpp"

namespace eldr::pool {

inline void add_nats_auth_options(CLI::App& app, NatsAuth& a) {
  for (const NatsAuthField& f : kNatsAuthFields) app.add_option(f.flag, a.*f.member, f.help);
}

// The flags given on the command line override `to` (a config file's).
inline void merge_given_nats_auth(const CLI::App& app, const NatsAuth& given, NatsAuth& to) {
  for (const NatsAuthField& f : kNatsAuthFields)
    if (app.count(f.flag) > 0) to.*f.member = given.*f.member;
}

}  // namespace eldr::pool
