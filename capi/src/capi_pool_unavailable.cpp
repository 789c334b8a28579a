// eldr_pool_* in a build without libnats: each call says so.
#include <string>

#include "capi_internal.hpp"
#include "eldr/eldr_prompt.h"

using eldr::capi::fail;

namespace {
eldr_status_t unsupported(const char* fn) {
  return fail(ELDR_E_UNSUPPORTED,
              std::string(fn) + ": this libeldr was built without NATS support (libnats-dev)");
}
}  // namespace

extern "C" {
eldr_status_t eldr_pool_open(const char*, const char*, uint32_t, eldr_pool_t**) {
  return unsupported("eldr_pool_open");
}
eldr_status_t eldr_pool_open_auth(const char*, const char*, const eldr_nats_auth_t*, uint32_t,
                                  eldr_pool_t**) {
  return unsupported("eldr_pool_open_auth");
}
void eldr_pool_free(eldr_pool_t*) {}
eldr_status_t eldr_pool_route(eldr_pool_t*, const char*, const int16_t*, uint32_t, uint32_t,
                              uint32_t, eldr_decision_t*) {
  return unsupported("eldr_pool_route");
}
eldr_status_t eldr_pool_complete(eldr_pool_t*, const char*, uint64_t) {
  return unsupported("eldr_pool_complete");
}
eldr_status_t eldr_pool_route_tokens(eldr_pool_t*, const char*, const uint32_t*, size_t, uint32_t,
                                     eldr_decision_t*) {
  return unsupported("eldr_pool_route_tokens");
}
eldr_status_t eldr_pool_route_text(eldr_pool_t*, const char*, const char*, size_t, uint32_t,
                                   eldr_decision_t*) {
  return unsupported("eldr_pool_route_text");
}
}  // extern "C"
