// eldrd's connection to NATS (the C client, libnats): one connection that
// reconnects by itself forever (and is replaced when the library gives up), one subscription whose
// messages queue in a bounded inbox for the consumer thread, and publishing. It knows nothing of
// what the messages mean (pool_node.hpp does). Built only with libnats
// (ELDR_ENABLE_NATS); without it, open() says so.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "eldr/pool/nats_auth.hpp"
#include "eldr/pool/nats_urls.hpp"  // split_urls, redact_url
#include "eldr/status.hpp"

namespace eldr::pool {

// Whether this build has NATS support.
bool nats_supported() noexcept;
// At process exit, after every NatsLink is gone: ends the library's threads
// and frees its global state.
void nats_shutdown() noexcept;

struct NatsLinkOptions {
  std::vector<std::string> urls;
  NatsAuth auth;     // TLS and credentials (none: plain, anonymous)
  std::string name;  // the connection's name (the server's monitoring shows it)
  // Subjects (wildcards allowed) whose messages reach the inbox; with a
  // queue group, each message goes to one member of the group only.
  struct Subscription {
    std::string subject;
    std::string queue;
  };
  std::vector<Subscription> subscribe;
  // Called on a library thread after a message entered the inbox.
  std::function<void()> on_message;
  size_t inbox_limit = 1u << 16;  // messages; beyond, dropped and counted
  // A server that refuses the connection at once (credentials, TLS): false
  // (a daemon) keeps the link and tries again every second, saying why in
  // last_error(); true (a one-shot client) makes open() fail with the reason.
  bool fail_when_refused = false;
};

struct InboxMessage {
  std::string subject;
  std::string reply;  // a request's reply subject, or ""
  std::vector<uint8_t> data;
  // Its kRouteKeyHeader and kGatewayHeader (route_wire.hpp) as sent, or ""
  // (the route requests of gateways before RouteRequest carry them).
  std::string route_key, gateway;
};

// Where a consumer of the inbox publishes: NatsLink::publish, or a test's
// (the daemon's pool parts take one, so that they run without NATS).
using PublishFn = std::function<Status(std::string_view subject, std::span<const uint8_t> data,
                                       std::string_view reply)>;

struct NatsLinkCounters {
  uint64_t received = 0;
  uint64_t received_bytes = 0;   // payloads of the messages received
  uint64_t published_bytes = 0;  // payloads published
  uint64_t dropped = 0;          // inbox full, or the library's slow-consumer drops
  uint64_t published = 0;
  uint64_t publish_failed = 0;
  uint64_t disconnects = 0;
  uint64_t reconnects = 0;
  // Connections opened anew because the library had closed the last one for
  // good (the servers refused it twice: credentials, permissions); a second
  // after each such close the link opens another, its secrets read again.
  uint64_t reopened = 0;
};

// One JetStream key-value bucket over a NatsLink's connection (libnats'
// kvStore), with bytes in and out. Calls block (bounded by the library's
// JetStream timeout); use it off the consumer thread.
class KeyValue {
 public:
  ~KeyValue();
  KeyValue(const KeyValue&) = delete;
  KeyValue& operator=(const KeyValue&) = delete;

  struct Entry {
    uint64_t revision = 0;
    std::vector<uint8_t> value;
    bool deleted = false;  // a delete or purge marker
  };
  // The key's latest value; nullopt when the key does not exist.
  Result<std::optional<Entry>> get(const std::string& key);
  Result<uint64_t> put(const std::string& key, std::span<const uint8_t> value);
  // Only if the key does not exist (Errc::state when it does).
  Result<uint64_t> create(const std::string& key, std::span<const uint8_t> value);
  // Only if the key's latest revision is `last` (Errc::state when not).
  Result<uint64_t> update(const std::string& key, std::span<const uint8_t> value, uint64_t last);
  Status erase(const std::string& key);
  // (Re)starts watching `key`: next() returns its latest value first, then
  // every change. The 3.4 client's watchers stall silently after a
  // reconnect, so the caller re-creates them (NatsLink::counters().reconnects).
  Status watch(const std::string& key);
  // The next change of the watched key; nullopt when none came within timeout_ms.
  Result<std::optional<Entry>> next(int64_t timeout_ms);

  struct Impl;

 private:
  friend class NatsLink;
  explicit KeyValue(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> m_impl;
};

class NatsLink {
 public:
  // Tries each server once, then returns: servers that cannot be reached yet
  // are retried in the background (connected() says when), and so are those
  // that refuse it (see fail_when_refused). Fails on options the library
  // refuses (e.g. a malformed URL) or files it cannot read.
  static Result<std::unique_ptr<NatsLink>> open(const NatsLinkOptions& options);
  ~NatsLink();  // unsubscribes, closes, waits for the library's callbacks to end
  NatsLink(const NatsLink&) = delete;
  NatsLink& operator=(const NatsLink&) = delete;

  bool connected() const noexcept;
  // Fire and forget (core NATS): while disconnected the library buffers a
  // little and then refuses; a refusal is counted and returned.
  // With a reply subject, the receiver may answer there.
  Status publish(std::string_view subject, std::span<const uint8_t> data,
                 std::string_view reply = {});
  // Moves every queued message into `out` (cleared first); returns how many.
  size_t take(std::vector<InboxMessage>& out);
  // The server's max_payload (bytes), 0 while never connected.
  int64_t max_payload() const noexcept;
  NatsLinkCounters counters() const noexcept;
  // The server the connection is on, or "" when disconnected.
  std::string server() const;
  // Why the connection is not up, as the library last said it (refused
  // credentials, an unreachable server, a TLS failure; URLs redacted); ""
  // when it has nothing to say.
  std::string last_error() const;
  // Waits until connected (true) or timeout_ms passed (false).
  bool wait_connected(int64_t timeout_ms) const;
  // The bucket, created when missing with `replicas` copies (0: as many as
  // there are servers, at most 3).
  Result<std::unique_ptr<KeyValue>> key_value(const std::string& bucket, int replicas = 0);

  struct Impl;

 private:
  explicit NatsLink(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> m_impl;
};

}  // namespace eldr::pool
