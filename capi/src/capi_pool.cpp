// eldr_pool_*: route through any eldrd node of a pool over NATS request/reply
// (multi-node mode), for a gateway that has a footprint but no local sidecar.
// The request is a RouteRequest, the reply a RouteReply
// (pool/schema/route_msg.fbs); the complete goes to the node that routed the
// request, which the handle remembers (bounded, oldest forgotten first),
// with the route's random key: the request is this handle's, and the key,
// which travels only on subjects other gateways cannot read, proves it. A
// route whose answer never came (a timeout, the gateway's server lost) may
// still have been booked at a node: the handle cancels it there with that key.
#include <nats/nats.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "capi_args.hpp"
#include "capi_internal.hpp"
#include "eldr/eldr_prompt.h"
#include "eldr/footprint.hpp"
#include "eldr/pool/nats_auth_apply.hpp"
#include "eldr/pool/nats_urls.hpp"
#include "eldr/pool/peer_wire.hpp"
#include "eldr/pool/recent_map.hpp"
#include "eldr/pool/route_wire.hpp"

struct eldr_pool {
  static constexpr size_t kRemembered = size_t{1} << 16;  // requests whose node a handle keeps
  static constexpr auto kBeatPeriod = std::chrono::seconds(1);
  natsConnection* nc = nullptr;
  std::string name;  // the pool's
  std::string route_subject;
  std::string cancel_subject;   // "eldr.<pool>.cancel"
  std::string gateway_subject;  // "eldr.<pool>.gateway"
  // This handle's id (random): its identity at the nodes, in every route
  // and beat; the nodes release its routes if it stops beating.
  uint64_t gateway = 0;
  std::mutex mutex;  // the members below; the connection is thread-safe
  // The node that routed each request, the route's key (its proof of
  // ownership) and whether the node confirms completes.
  struct Holder {
    std::string node;
    uint64_t route_key = 0;
    bool acks = false;
  };
  eldr::pool::RecentMap<std::string, Holder> holder_of{kRemembered};  // by request id
  // Nodes nobody listened for the last time a complete was sent to them
  // (gone, as far as this handle knows): asked once, not for kAbsentBudget.
  eldr::pool::RecentMap<std::string, bool> absent{1024};
  std::mt19937_64 keys{std::random_device{}() ^ (uint64_t{std::random_device{}()} << 32)};
  bool stopping = false;
  std::condition_variable stop;
  std::thread beater;
  // What the server last refused this connection (a subscription or a
  // publish its user may not make: "Permissions Violation for Subscription
  // to ..."), said with the timeout it causes. Under `mutex`.
  std::string refused;

  static void on_error(natsConnection* nc, natsSubscription*, natsStatus err, void* closure) {
    if (err != NATS_NOT_PERMITTED) return;
    const char* text = nullptr;
    (void)natsConnection_GetLastError(nc, &text);
    auto* self = static_cast<eldr_pool*>(closure);
    std::lock_guard lock(self->mutex);
    self->refused = text != nullptr && *text != '\0' ? text : "a permissions violation";
  }

  uint64_t next_key() {
    std::lock_guard lock(mutex);
    uint64_t key = 0;
    while (key == 0) key = keys();
    return key;
  }
  void beat(bool leaving) const {
    const auto bytes = eldr::pool::encode_gateway_beat({gateway, leaving});
    (void)natsConnection_Publish(nc, gateway_subject.c_str(), bytes.data(),
                                 static_cast<int>(bytes.size()));
  }
  void start_beating() {
    gateway = next_key();
    beater = std::thread([this] {
      std::unique_lock lock(mutex);
      while (!stop.wait_for(lock, kBeatPeriod, [this] { return stopping; })) {
        lock.unlock();  // routes and completes go on meanwhile
        beat(false);
        lock.lock();
      }
    });
  }
  ~eldr_pool() {
    if (beater.joinable()) {
      {
        std::lock_guard lock(mutex);
        stopping = true;
      }
      stop.notify_all();
      beater.join();
      // Its routes can never complete now: the nodes release them at once.
      beat(true);
      (void)natsConnection_FlushTimeout(nc, 500);
    }
    if (nc != nullptr) {
      natsConnection_Close(nc);
      natsConnection_Destroy(nc);
    }
  }
};

namespace eldr::capi {
namespace {

constexpr auto kCompleteBudget = std::chrono::seconds(5);  // eldr_pool_complete tries this long
// A node with no subscriber (between connections, or gone: then its lease
// releases its requests) is asked again for this long only.
constexpr auto kAbsentBudget = std::chrono::seconds(1);

eldr_status_t nats_fail(const char* fn, const std::string& what, natsStatus s) noexcept {
  natsStatus code = s;
  const char* text = nats_GetLastError(&code);
  const std::string detail = text != nullptr && *text != '\0' ? text : natsStatus_GetText(s);
  return fail(s == NATS_TIMEOUT         ? ELDR_E_TIMEOUT
              : s == NATS_NO_RESPONDERS ? ELDR_E_NO_DAEMON
                                        : ELDR_E_IO,
              std::string(fn) + ": " + what + ": " + detail);
}

bool pool_name_ok(std::string_view name) noexcept {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
          c == '-'))
      return false;
  return true;
}

// What the server refused this handle lately, for an error it explains.
std::string refused_note(eldr_pool_t* pool) {
  std::lock_guard lock(pool->mutex);
  if (pool->refused.empty()) return {};
  return " (NATS refused this connection: " + pool->refused +
         "; may this user subscribe to its inbox prefix?)";
}

// Publishes `bytes` on `subject` until a server has them (a flush answered):
// one that dies with them unsent loses them, so they go again across the
// reconnect, for at most `budget`. The receivers take a second copy as a
// no-op.
natsStatus publish_until_taken(eldr_pool_t* pool, const std::string& subject,
                               const std::vector<uint8_t>& bytes,
                               std::chrono::milliseconds budget) {
  const auto deadline = std::chrono::steady_clock::now() + budget;
  for (;;) {
    natsStatus s = natsConnection_Publish(pool->nc, subject.c_str(), bytes.data(),
                                          static_cast<int>(bytes.size()));
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    if (s == NATS_OK) s = natsConnection_FlushTimeout(pool->nc, std::max<int64_t>(left, 1));
    if (s == NATS_OK || std::chrono::steady_clock::now() >= deadline) return s;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // reconnecting
  }
}

// A complete to a node that confirms them: sent again, 0.25, 0.5, 1, 2 s
// apart, until the node answers with its token, for at most kCompleteBudget
// (kAbsentBudget while nobody listens on the subject; once, to a node that
// was absent last time).
eldr_status_t request_until_answered(const char* fn, eldr_pool_t* pool, const std::string& node,
                                     const std::string& subject, const std::vector<uint8_t>& bytes,
                                     uint64_t token) {
  using Clock = std::chrono::steady_clock;
  bool was_absent = false;
  {
    std::lock_guard lock(pool->mutex);
    was_absent = pool->absent.find(node) != nullptr;
  }
  const auto absent_budget = was_absent ? std::chrono::milliseconds(0) : kAbsentBudget;
  const auto start = Clock::now();
  auto wait = std::chrono::milliseconds(250);
  natsStatus s = NATS_OK;
  for (;;) {
    const auto budget = s == NATS_NO_RESPONDERS ? absent_budget : kCompleteBudget;
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(start + budget - Clock::now());
    if (left.count() <= 0) break;
    natsMsg* reply = nullptr;
    s = natsConnection_Request(&reply, pool->nc, subject.c_str(), bytes.data(),
                               static_cast<int>(bytes.size()),
                               static_cast<int64_t>(std::min(wait, left).count()));
    if (s == NATS_OK) {
      const bool ours = natsMsg_GetDataLength(reply) == sizeof token &&
                        std::memcmp(natsMsg_GetData(reply), &token, sizeof token) == 0;
      natsMsg_Destroy(reply);
      if (was_absent) {
        std::lock_guard lock(pool->mutex);
        pool->absent.take(node);
      }
      if (ours) return ELDR_OK;
      return fail(ELDR_E_CORRUPT,
                  std::string(fn) + ": the answer on " + subject + " is not the complete's token");
    }
    if (s == NATS_NO_RESPONDERS)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // between connections
    else
      wait = std::min(wait * 2, std::chrono::milliseconds(2000));
  }
  if (s == NATS_NO_RESPONDERS) {
    std::lock_guard lock(pool->mutex);
    pool->absent.put(node, true);
  }
  return nats_fail(fn, "the node did not confirm the complete on " + subject + refused_note(pool),
                   s);
}

// The request/reply of every eldr_pool_route*: `request` (a RouteRequest
// carrying `key`) to the pool's route subject, the RouteReply checked into out.
eldr_status_t request_route(const char* fn, eldr_pool_t* pool, std::string_view id, uint64_t key,
                            const std::vector<uint8_t>& request, uint32_t timeout_ms,
                            eldr_decision_t* out) {
  const int timeout =
      timeout_ms == 0 ? 2000 : static_cast<int>(std::min<uint32_t>(timeout_ms, INT32_MAX));
  natsMsg* reply = nullptr;
  const natsStatus ns =
      natsConnection_Request(&reply, pool->nc, pool->route_subject.c_str(), request.data(),
                             static_cast<int>(request.size()), timeout);
  // No answer, yet a node may have routed it (the answer lost with a
  // server, or later than the timeout): withdrawn at that node, or refused
  // there if the cancel gets there first. No responders: nobody got it.
  const auto cancel = [&](eldr_status_t failed) -> eldr_status_t {
    const natsStatus cs =
        publish_until_taken(pool, pool->cancel_subject, eldr::pool::encode_route_cancel(id, key),
                            std::chrono::milliseconds(timeout));
    if (cs != NATS_OK)
      return eldr::capi::nats_fail(fn,
                                   "no answer for request '" + std::string(id) +
                                       "', and its cancel could not be sent on " +
                                       pool->cancel_subject,
                                   cs);
    return failed;
  };
  if (ns != NATS_OK) {
    const eldr_status_t failed = eldr::capi::nats_fail(
        fn, "no node of the pool answered on " + pool->route_subject + refused_note(pool), ns);
    return ns == NATS_NO_RESPONDERS ? failed : cancel(failed);
  }
  // The reply is as untrusted as anything else: verified, then each field.
  const int n = natsMsg_GetDataLength(reply);
  auto r = eldr::pool::decode_route_reply(
      {reinterpret_cast<const uint8_t*>(natsMsg_GetData(reply)), static_cast<size_t>(n)});
  natsMsg_Destroy(reply);
  if (!r)
    return cancel(
        fail(ELDR_E_CORRUPT, std::string(fn) + ": the pool's answer is not a RouteReply"));
  if (r->status != 0) {
    const std::string why = r->message;
    return fail(r->status < 0 && r->status >= -64 ? r->status : ELDR_E_CORRUPT,
                std::string(fn) + ": the pool rejected request '" + std::string(id) + "': " + why);
  }
  if (!eldr::capi::pool_name_ok(r->node) || r->request_id != id || r->worker < 0)
    return cancel(
        fail(ELDR_E_CORRUPT, std::string(fn) + ": the pool's answer is for another request"));
  {
    std::lock_guard lock(pool->mutex);
    pool->holder_of.put(std::string(id), {r->node, key, r->acks_completes});
  }
  eldr::capi::write_decision({.worker = r->worker,
                              .similarity = r->similarity,
                              .band_size = r->band_size,
                              .table_epoch = r->table_epoch,
                              .policy = r->policy,
                              .completion_token = r->completion_token,
                              .confidence = r->confidence},
                             out);
  return ELDR_OK;
}

// The arguments of eldr_pool_route_tokens/_text, then the prompt's
// RouteRequest, uncut.
eldr_status_t route_prompt(const char* fn, eldr_pool_t* pool, const char* request_id,
                           const Prompt& prompt, uint32_t timeout_ms, eldr_decision_t* out) {
  if (eldr_status_t s = require(fn, pool, "pool")) return s;
  std::string_view id;
  if (eldr_status_t s = check_request_id(fn, request_id, &id)) return s;
  if (eldr_status_t s = require(fn, out, "out")) return s;
  if (eldr_status_t s = check_version(fn, "out", out->version, ELDR_DECISION_VERSION)) return s;
  const bool tokens = prompt.kind == PromptKind::tokens;
  const size_t n = tokens ? prompt.tokens.size() : prompt.text.size();
  const size_t limit = tokens ? kMaxPromptTokens : kMaxPromptBytes;
  if (n > limit)
    return fail(ELDR_E_INVALID_ARGUMENT, std::string(fn) + ": the prompt has " + std::to_string(n) +
                                             (tokens ? " tokens" : " bytes") + ", more than " +
                                             std::to_string(limit));
  const uint64_t key = pool->next_key();
  return request_route(fn, pool, id, key,
                       eldr::pool::encode_route_request(id, key, pool->gateway, prompt), timeout_ms,
                       out);
}

}  // namespace
}  // namespace eldr::capi

using eldr::capi::check_request_id;
using eldr::capi::check_shape;
using eldr::capi::check_version;
using eldr::capi::fail;
using eldr::capi::guarded;
using eldr::capi::require;

extern "C" {

eldr_status_t eldr_pool_open(const char* nats_urls, const char* pool, uint32_t timeout_ms,
                             eldr_pool_t** out) {
  return eldr_pool_open_auth(nats_urls, pool, nullptr, timeout_ms, out);
}

eldr_status_t eldr_pool_open_auth(const char* nats_urls, const char* pool,
                                  const eldr_nats_auth_t* auth, uint32_t timeout_ms,
                                  eldr_pool_t** out) {
  static constexpr const char* fn = "eldr_pool_open";
  return guarded(fn, [&]() -> eldr_status_t {
    if (auth != nullptr && (auth->version < 1 || auth->version > ELDR_NATS_AUTH_VERSION))
      return fail(ELDR_E_INVALID_ARGUMENT,
                  std::string(fn) + ": eldr_nats_auth_t version " + std::to_string(auth->version) +
                      ", this library reads 1.." + std::to_string(ELDR_NATS_AUTH_VERSION));
    eldr::pool::NatsAuth na;
    if (auth != nullptr) {
      const auto text = [](const char* p) { return p != nullptr ? std::string(p) : std::string(); };
      na = {text(auth->ca_file), text(auth->cert_file), text(auth->key_file),
            text(auth->creds_file), text(auth->user), text(auth->password_file),
            text(auth->token_file),
            // A version 1 struct ends before it.
            auth->version >= 2 ? text(auth->inbox_prefix) : std::string()};
    }
    if (eldr_status_t s = require(fn, nats_urls, "nats_urls")) return s;
    if (eldr_status_t s = require(fn, pool, "pool")) return s;
    if (eldr_status_t s = require(fn, out, "out")) return s;
    if (!eldr::capi::pool_name_ok(pool))
      return fail(ELDR_E_INVALID_ARGUMENT, std::string(fn) + ": pool '" + pool +
                                               "' must be 1..64 characters of [A-Za-z0-9_-]");
    // libnats' SetURL reads one URL: a list of several never connected.
    const std::vector<std::string> urls = eldr::pool::split_urls(nats_urls);
    if (urls.empty())
      return fail(ELDR_E_INVALID_ARGUMENT, std::string(fn) + ": no NATS server URL given");
    std::vector<const char*> url_ptrs;
    for (const std::string& u : urls) url_ptrs.push_back(u.c_str());
    auto handle = std::make_unique<eldr_pool>();
    natsOptions* opts = nullptr;
    natsStatus s = natsOptions_Create(&opts);
    if (s == NATS_OK)
      s = natsOptions_SetServers(opts, url_ptrs.data(), static_cast<int>(url_ptrs.size()));
    if (s == NATS_OK) s = natsOptions_SetTimeout(opts, timeout_ms == 0 ? 2000 : timeout_ms);
    if (s == NATS_OK) s = natsOptions_SetMaxReconnect(opts, -1);
    if (s == NATS_OK) s = natsOptions_SetReconnectWait(opts, 250);
    if (s == NATS_OK) s = natsOptions_SetName(opts, "eldr pool client");
    if (s == NATS_OK) s = natsOptions_SetSendAsap(opts, true);
    if (s == NATS_OK) s = natsOptions_SetErrorHandler(opts, eldr_pool::on_error, handle.get());
    if (s == NATS_OK) {
      if (eldr::Status a = eldr::pool::apply_nats_auth(opts, na); !a) {
        natsOptions_Destroy(opts);
        return fail(a.code() == eldr::Errc::io ? ELDR_E_IO : ELDR_E_INVALID_ARGUMENT,
                    std::string(fn) + ": " + a.message());
      }
    }
    if (s == NATS_OK) s = natsConnection_Connect(&handle->nc, opts);
    if (opts != nullptr) natsOptions_Destroy(opts);
    if (s != NATS_OK)
      return eldr::capi::nats_fail(fn, "cannot connect to " + eldr::pool::redact_url(nats_urls), s);
    handle->name = pool;
    handle->route_subject = eldr::pool::route_subject(pool);
    handle->cancel_subject = eldr::pool::cancel_subject(pool);
    handle->gateway_subject = eldr::pool::gateway_subject(pool);
    handle->start_beating();
    *out = handle.release();
    return ELDR_OK;
  });
}

void eldr_pool_free(eldr_pool_t* pool) { delete pool; }

eldr_status_t eldr_pool_route(eldr_pool_t* pool, const char* request_id, const int16_t* counts,
                              uint32_t layers, uint32_t experts, uint32_t timeout_ms,
                              eldr_decision_t* out) {
  static constexpr const char* fn = "eldr_pool_route";
  return guarded(fn, [&]() -> eldr_status_t {
    if (eldr_status_t s = require(fn, pool, "pool")) return s;
    std::string_view id;
    if (eldr_status_t s = check_request_id(fn, request_id, &id)) return s;
    if (eldr_status_t s = require(fn, counts, "counts")) return s;
    if (eldr_status_t s = check_shape(fn, layers, experts)) return s;
    if (eldr_status_t s = require(fn, out, "out")) return s;
    if (eldr_status_t s = check_version(fn, "out", out->version, ELDR_DECISION_VERSION)) return s;
    const eldr::Geometry geometry{layers, experts, 0};
    const std::span<const int16_t> cells{counts, geometry.cells()};
    if (eldr::Status s = eldr::validate_footprint(geometry, cells); !s) return fail(fn, s);
    const uint64_t key = pool->next_key();
    return eldr::capi::request_route(
        fn, pool, id, key,
        eldr::pool::encode_route_request(id, key, pool->gateway, layers, experts, cells),
        timeout_ms, out);
  });
}

eldr_status_t eldr_pool_complete(eldr_pool_t* pool, const char* request_id,
                                 uint64_t completion_token) {
  static constexpr const char* fn = "eldr_pool_complete";
  return guarded(fn, [&]() -> eldr_status_t {
    if (eldr_status_t s = require(fn, pool, "pool")) return s;
    std::string_view id;
    if (eldr_status_t s = check_request_id(fn, request_id, &id)) return s;
    if (completion_token == 0)
      return fail(ELDR_E_INVALID_ARGUMENT,
                  std::string(fn) + ": a complete over NATS needs the decision's completion token");
    std::optional<eldr_pool::Holder> holder;
    {
      std::lock_guard lock(pool->mutex);
      holder = pool->holder_of.take(std::string(id));
    }
    if (!holder)
      return fail(ELDR_E_NOT_FOUND, std::string(fn) + ": request '" + std::string(id) +
                                        "' was not routed by this handle (or long ago)");
    const std::string subject = eldr::pool::complete_subject(pool->name, holder->node);
    const std::vector<uint8_t> bytes =
        eldr::pool::encode_route_complete(id, completion_token, holder->route_key);
    // A lost complete would hold the request in flight at its node for good,
    // so it is not fire and forget. A node from before confirmations: until
    // a server has it.
    if (!holder->acks) {
      const natsStatus s =
          eldr::capi::publish_until_taken(pool, subject, bytes, eldr::capi::kCompleteBudget);
      if (s == NATS_OK) return ELDR_OK;
      return eldr::capi::nats_fail(fn, "no NATS server took the complete on " + subject, s);
    }
    // Until the node answers with the token: a server on the way may die
    // with it, after the gateway's own server took it.
    return eldr::capi::request_until_answered(fn, pool, holder->node, subject, bytes,
                                              completion_token);
  });
}

eldr_status_t eldr_pool_route_tokens(eldr_pool_t* pool, const char* request_id,
                                     const uint32_t* tokens, size_t n_tokens, uint32_t timeout_ms,
                                     eldr_decision_t* out) {
  static constexpr const char* fn = "eldr_pool_route_tokens";
  return guarded(fn, [&]() -> eldr_status_t {
    if (tokens == nullptr && n_tokens != 0)
      return fail(ELDR_E_INVALID_ARGUMENT, std::string(fn) + ": tokens is NULL");
    return eldr::capi::route_prompt(fn, pool, request_id,
                                    eldr::Prompt::of_tokens({tokens, n_tokens}), timeout_ms, out);
  });
}

eldr_status_t eldr_pool_route_text(eldr_pool_t* pool, const char* request_id, const char* text,
                                   size_t text_len, uint32_t timeout_ms, eldr_decision_t* out) {
  static constexpr const char* fn = "eldr_pool_route_text";
  return guarded(fn, [&]() -> eldr_status_t {
    if (text == nullptr && text_len != 0)
      return fail(ELDR_E_INVALID_ARGUMENT, std::string(fn) + ": text is NULL");
    return eldr::capi::route_prompt(fn, pool, request_id, eldr::Prompt::of_text({text, text_len}),
                                    timeout_ms, out);
  });
}

}  // extern "C"
