// Sidecar client: the eldr::shm::Client transport behind a C handle.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "capi_args.hpp"
#include "capi_internal.hpp"
#include "eldr/eldr_prompt.h"
#include "eldr/footprint.hpp"

namespace eldr::capi {
namespace {

// The engine's wall clock at prefill end (the push happens right after it):
// lets the daemon report prefill-to-decision latency across processes.
uint64_t realtime_ns() noexcept {
  timespec ts{};
  if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return 0;
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

eldr_status_t require_client(const char* fn, eldr_client_t* client) noexcept {
  if (eldr_status_t s = require(fn, client, "client")) return s;
  if (client_of(client) == nullptr) return fail(ELDR_E_INVALID_ARGUMENT, fn, "client is not open");
  return ELDR_OK;
}

eldr_status_t push_dense(const char* fn, eldr_client_t* client, const char* request_id,
                         const int16_t* counts, uint32_t layers, uint32_t experts) {
  if (eldr_status_t s = require_client(fn, client)) return s;
  std::string_view id;
  if (eldr_status_t s = check_request_id(fn, request_id, &id)) return s;
  if (eldr_status_t s = require(fn, counts, "counts")) return s;
  if (eldr_status_t s = check_shape(fn, layers, experts)) return s;
  const Geometry geometry{layers, experts, 0};
  const std::span<const int16_t> cells{counts, geometry.cells()};
  // Negative counts never leave the process: the daemon would reject them anyway.
  if (Status s = validate_footprint(geometry, cells); !s) return fail(fn, s);
  shm::FootprintOut footprint;
  footprint.request_id = id;
  footprint.layers = layers;
  footprint.experts = experts;
  footprint.counts = cells;
  footprint.prefill_end_ns = realtime_ns();
  if (Status s = client->client->push_footprint(footprint); !s) return fail(fn, s);
  return ELDR_OK;
}

eldr_status_t wait_decision(const char* fn, eldr_client_t* client, std::string_view id,
                            uint32_t timeout_ms, eldr_decision_t* out) {
  auto d = client->client->wait_decision(id, timeout_ms);
  if (!d) return fail(fn, d.status());
  write_decision({.worker = d->worker,
                  .similarity = d->similarity,
                  .band_size = d->band_size,
                  .table_epoch = d->table_epoch,
                  .policy = d->policy,
                  .status = d->status,
                  .latency_ns = d->latency_ns,
                  .completion_token = d->completion_token,
                  .confidence = d->confidence},
                 out);
  return ELDR_OK;
}

// A prompt into the ring; the daemon judges it (its verdict comes in the decision).
eldr_status_t push_prompt(const char* fn, eldr_client_t* client, const char* request_id,
                          const Prompt& prompt) {
  if (eldr_status_t s = require_client(fn, client)) return s;
  std::string_view id;
  if (eldr_status_t s = check_request_id(fn, request_id, &id)) return s;
  if (Status s = client->client->push_prompt({id, prompt}); !s) return fail(fn, s);
  return ELDR_OK;
}

// tokens/text may be NULL only with a length of 0 (an empty prompt, which
// the daemon rejects in the decision).
eldr_status_t check_units(const char* fn, const void* units, size_t n, const char* name) noexcept {
  if (units == nullptr && n != 0)
    return fail(ELDR_E_INVALID_ARGUMENT, std::string(fn) + ": " + name + " is NULL");
  return ELDR_OK;
}

eldr_status_t check_wait_args(const char* fn, eldr_client_t* client, const char* request_id,
                              eldr_decision_t* out, std::string_view* id) noexcept {
  if (eldr_status_t s = require_client(fn, client)) return s;
  if (eldr_status_t s = check_request_id(fn, request_id, id)) return s;
  if (eldr_status_t s = require(fn, out, "out")) return s;
  return check_version(fn, "out", out->version, ELDR_DECISION_VERSION);
}

eldr_status_t route_prompt(const char* fn, eldr_client_t* client, const char* request_id,
                           const Prompt& prompt, uint32_t timeout_ms, eldr_decision_t* out) {
  std::string_view id;
  if (eldr_status_t s = check_wait_args(fn, client, request_id, out, &id)) return s;
  if (eldr_status_t s = push_prompt(fn, client, request_id, prompt)) return s;
  if (eldr_status_t s = wait_decision(fn, client, id, timeout_ms, out)) return s;
  if (out->status != ELDR_OK)
    return fail(out->status, std::string(fn) + ": eldrd rejected request '" + std::string(id) +
                                 "': " + eldr_status_string(out->status));
  return ELDR_OK;
}

eldr_status_t control_worker(const char* fn, eldr_client_t* client, int32_t worker,
                             shm::WorkerOp op) noexcept {
  return guarded(fn, [&]() -> eldr_status_t {
    if (eldr_status_t s = require_client(fn, client)) return s;
    if (eldr_status_t s = check_worker(fn, worker)) return s;
    if (Status s = client->client->push_worker_control(static_cast<uint32_t>(worker), op); !s)
      return fail(fn, s);
    return ELDR_OK;
  });
}

}  // namespace
}  // namespace eldr::capi

using eldr::checked_mul;
using eldr::capi::check_request_id;
using eldr::capi::check_shape;
using eldr::capi::check_version;
using eldr::capi::fail;
using eldr::capi::guarded;
using eldr::capi::require;
using eldr::capi::require_client;

extern "C" {

void eldr_client_options_init(eldr_client_options_t* options) {
  if (options == nullptr) return;
  const eldr_client_options_t init = ELDR_CLIENT_OPTIONS_INIT;
  *options = init;
}

eldr_status_t eldr_client_open(const char* instance, const eldr_client_options_t* opts,
                               eldr_client_t** out) {
  static constexpr const char* fn = "eldr_client_open";
  return guarded(fn, [&]() -> eldr_status_t {
    if (eldr_status_t s = require(fn, instance, "instance")) return s;
    if (eldr_status_t s = require(fn, out, "out")) return s;
    eldr_client_options_t o = ELDR_CLIENT_OPTIONS_INIT;
    if (opts != nullptr) {
      if (eldr_status_t s = check_version(fn, "opts", opts->version, ELDR_CLIENT_OPTIONS_VERSION))
        return s;
      o = *opts;
    }
    const std::string_view name(instance, strnlen(instance, eldr::shm::kMaxInstanceName + 1));
    if (eldr::Status s = eldr::shm::validate_instance_name(name); !s) return fail(fn, s);
    eldr::shm::ClientOptions options;
    options.open_timeout = std::chrono::milliseconds(o.open_timeout_ms);
    options.daemon_stale = std::chrono::milliseconds(o.daemon_stale_ms);
    options.reattach = o.reattach != 0;
    auto client = eldr::shm::Client::open(name, options);
    if (!client) return fail(fn, client.status());
    auto handle = std::make_unique<eldr_client>();
    handle->client = std::move(*client);
    *out = handle.release();
    return ELDR_OK;
  });
}

void eldr_client_free(eldr_client_t* client) {
  // The transport's destructor does not throw; a failure to unregister is
  // recovered by the daemon, which reclaims the slot of a dead lock holder.
  delete client;
}

eldr_status_t eldr_client_push(eldr_client_t* client, const char* request_id, const int16_t* counts,
                               uint32_t layers, uint32_t experts) {
  static constexpr const char* fn = "eldr_client_push";
  return guarded(fn, [&]() -> eldr_status_t {
    return eldr::capi::push_dense(fn, client, request_id, counts, layers, experts);
  });
}

eldr_status_t eldr_client_push_blocks(eldr_client_t* client, const char* request_id,
                                      const uint64_t* block_hashes, const uint8_t* row_present,
                                      const uint8_t* rows, uint32_t n_blocks, uint32_t layers,
                                      uint32_t experts) {
  static constexpr const char* fn = "eldr_client_push_blocks";
  return guarded(fn, [&]() -> eldr_status_t {
    if (eldr_status_t s = require_client(fn, client)) return s;
    std::string_view id;
    if (eldr_status_t s = check_request_id(fn, request_id, &id)) return s;
    if (eldr_status_t s = check_shape(fn, layers, experts)) return s;
    if (n_blocks == 0) return fail(ELDR_E_INVALID_ARGUMENT, fn, "n_blocks is 0");
    if (eldr_status_t s = require(fn, block_hashes, "block_hashes")) return s;
    // The wire form wants present = 1 / absent = 0; callers may pass any nonzero.
    std::vector<uint8_t> present;
    uint64_t n_present = n_blocks;
    if (row_present != nullptr) {
      present.assign(row_present, row_present + n_blocks);
      n_present = 0;
      for (uint8_t& p : present) {
        p = p != 0 ? 1 : 0;
        n_present += p;
      }
    }
    uint64_t row_bytes = 0;
    if (!checked_mul(n_present, uint64_t{layers} * experts, &row_bytes) ||
        row_bytes > PTRDIFF_MAX) {
      return fail(ELDR_E_INVALID_ARGUMENT, fn, "n_blocks * layers * experts overflows");
    }
    if (n_present > 0) {
      if (eldr_status_t s = require(fn, rows, "rows")) return s;
    }
    eldr::shm::FootprintOut footprint;
    footprint.request_id = id;
    footprint.layers = layers;
    footprint.experts = experts;
    footprint.block_hashes = {block_hashes, n_blocks};
    footprint.row_present = present;
    if (n_present > 0) footprint.block_rows = {rows, static_cast<size_t>(row_bytes)};
    footprint.prefill_end_ns = eldr::capi::realtime_ns();
    if (eldr::Status s = client->client->push_footprint(footprint); !s) return fail(fn, s);
    return ELDR_OK;
  });
}

eldr_status_t eldr_client_wait(eldr_client_t* client, const char* request_id, uint32_t timeout_ms,
                               eldr_decision_t* out) {
  static constexpr const char* fn = "eldr_client_wait";
  return guarded(fn, [&]() -> eldr_status_t {
    std::string_view id;
    if (eldr_status_t s = eldr::capi::check_wait_args(fn, client, request_id, out, &id)) return s;
    return eldr::capi::wait_decision(fn, client, id, timeout_ms, out);
  });
}

eldr_status_t eldr_client_route(eldr_client_t* client, const char* request_id,
                                const int16_t* counts, uint32_t layers, uint32_t experts,
                                uint32_t timeout_ms, eldr_decision_t* out) {
  static constexpr const char* fn = "eldr_client_route";
  return guarded(fn, [&]() -> eldr_status_t {
    // Every argument is checked before anything is pushed.
    std::string_view id;
    if (eldr_status_t s = eldr::capi::check_wait_args(fn, client, request_id, out, &id)) return s;
    if (eldr_status_t s = eldr::capi::push_dense(fn, client, request_id, counts, layers, experts))
      return s;
    if (eldr_status_t s = eldr::capi::wait_decision(fn, client, id, timeout_ms, out)) return s;
    // The daemon's verdict is the call's result (out stays filled): a caller
    // that checks only the return value never routes a rejected request.
    if (out->status != ELDR_OK)
      return fail(out->status, "eldr_client_route: eldrd rejected request '" + std::string(id) +
                                   "': " + eldr_status_string(out->status));
    return ELDR_OK;
  });
}

eldr_status_t eldr_client_complete(eldr_client_t* client, const char* request_id,
                                   uint64_t completion_token) {
  static constexpr const char* fn = "eldr_client_complete";
  return guarded(fn, [&]() -> eldr_status_t {
    if (eldr_status_t s = require_client(fn, client)) return s;
    std::string_view id;
    if (eldr_status_t s = check_request_id(fn, request_id, &id)) return s;
    if (eldr::Status s = client->client->push_complete(id, completion_token); !s)
      return fail(fn, s);
    return ELDR_OK;
  });
}

eldr_status_t eldr_client_report(eldr_client_t* client, const eldr_worker_report_t* report) {
  static constexpr const char* fn = "eldr_client_report";
  return guarded(fn, [&]() -> eldr_status_t {
    if (eldr_status_t s = require_client(fn, client)) return s;
    if (eldr_status_t s = eldr::capi::check_worker_report(fn, report)) return s;
    // batch_size and step_ms 0: the plain report, which every eldrd reads.
    const eldr::shm::WorkerReportRecord record{static_cast<uint32_t>(report->worker),
                                               report->running, report->kv_usage,
                                               report->batch_size, report->step_ms};
    if (eldr::Status s = client->client->push_worker_report(record); !s) return fail(fn, s);
    return ELDR_OK;
  });
}

eldr_status_t eldr_client_add_worker(eldr_client_t* client, int32_t worker) {
  return eldr::capi::control_worker("eldr_client_add_worker", client, worker,
                                    eldr::shm::WorkerOp::add);
}

eldr_status_t eldr_client_drain_worker(eldr_client_t* client, int32_t worker) {
  return eldr::capi::control_worker("eldr_client_drain_worker", client, worker,
                                    eldr::shm::WorkerOp::drain);
}

eldr_status_t eldr_client_remove_worker(eldr_client_t* client, int32_t worker) {
  return eldr::capi::control_worker("eldr_client_remove_worker", client, worker,
                                    eldr::shm::WorkerOp::remove);
}

eldr_status_t eldr_client_push_tokens(eldr_client_t* client, const char* request_id,
                                      const uint32_t* tokens, size_t n_tokens) {
  static constexpr const char* fn = "eldr_client_push_tokens";
  return guarded(fn, [&]() -> eldr_status_t {
    if (eldr_status_t s = eldr::capi::check_units(fn, tokens, n_tokens, "tokens")) return s;
    return eldr::capi::push_prompt(fn, client, request_id,
                                   eldr::Prompt::of_tokens({tokens, n_tokens}));
  });
}

eldr_status_t eldr_client_push_text(eldr_client_t* client, const char* request_id, const char* text,
                                    size_t text_len) {
  static constexpr const char* fn = "eldr_client_push_text";
  return guarded(fn, [&]() -> eldr_status_t {
    if (eldr_status_t s = eldr::capi::check_units(fn, text, text_len, "text")) return s;
    return eldr::capi::push_prompt(fn, client, request_id, eldr::Prompt::of_text({text, text_len}));
  });
}

eldr_status_t eldr_client_route_tokens(eldr_client_t* client, const char* request_id,
                                       const uint32_t* tokens, size_t n_tokens, uint32_t timeout_ms,
                                       eldr_decision_t* out) {
  static constexpr const char* fn = "eldr_client_route_tokens";
  return guarded(fn, [&]() -> eldr_status_t {
    if (eldr_status_t s = eldr::capi::check_units(fn, tokens, n_tokens, "tokens")) return s;
    return eldr::capi::route_prompt(fn, client, request_id,
                                    eldr::Prompt::of_tokens({tokens, n_tokens}), timeout_ms, out);
  });
}

eldr_status_t eldr_client_route_text(eldr_client_t* client, const char* request_id,
                                     const char* text, size_t text_len, uint32_t timeout_ms,
                                     eldr_decision_t* out) {
  static constexpr const char* fn = "eldr_client_route_text";
  return guarded(fn, [&]() -> eldr_status_t {
    if (eldr_status_t s = eldr::capi::check_units(fn, text, text_len, "text")) return s;
    return eldr::capi::route_prompt(fn, client, request_id, eldr::Prompt::of_text({text, text_len}),
                                    timeout_ms, out);
  });
}

}  // extern "C"
