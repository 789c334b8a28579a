// NatsAuth onto a libnats options object: what eldrd's link and the C API's
// pool client both connect with (eldr_pool_auth, built with libnats only).
#pragma once

#include <nats/nats.h>

#include "eldr/pool/nats_auth.hpp"

namespace eldr::pool {

// Checks `auth` (NatsAuth::check), reads its secret files and sets TLS and
// credentials on `opts`; Errc::io for what libnats refuses (a CA or a
// certificate it cannot load).
Status apply_nats_auth(natsOptions* opts, const NatsAuth& auth);

}  // namespace eldr::pool
