// A gateway's pool handle for the eldr CLI (loadgen, bench pool): the C
// API's eldr_pool_open_auth with the TLS, credential and inbox flags eldrd
// and eldr table take (pool/include/eldr/pool/nats_auth_cli.hpp).
#pragma once

#include <string>

#include "eldr/eldr.h"
#include "eldr/pool/nats_auth.hpp"
#include "eldr/status.hpp"

namespace eldr::cli {

// A handle the caller frees (eldr_pool_free), or why there is none.
Result<eldr_pool_t*> open_pool_client(const std::string& nats_urls, const std::string& pool,
                                      const pool::NatsAuth& auth, uint32_t timeout_ms);

}  // namespace eldr::cli
