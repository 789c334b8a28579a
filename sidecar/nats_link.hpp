// eldrd's connection to NATS (the C client, libnats): one connection that
// reconnects by itself forever, one subscription whose messages queue in a
// bounded inbox for the consumer thread, and publishing. It knows nothing of
// what the messages mean (cluster_node.hpp does). Built only with libnats
// (ELDR_ENABLE_NATS); without it, open() says so.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "eldr/status.hpp"

namespace eldr::sidecar {

// Whether this build has NATS support.
bool nats_supported() noexcept;

struct NatsLinkOptions {
  std::vector<std::string> urls;
  std::string name;       // the connection's name (the server's monitoring shows it)
  std::string subscribe;  // subject (wildcards allowed) whose messages reach the inbox
  // Called on a library thread after a message entered the inbox.
  std::function<void()> on_message;
  size_t inbox_limit = 1u << 16;  // messages; beyond, dropped and counted
};

struct InboxMessage {
  std::string subject;
  std::vector<uint8_t> data;
};

struct NatsLinkCounters {
  uint64_t received = 0;
  uint64_t dropped = 0;  // inbox full, or the library's slow-consumer drops
  uint64_t published = 0;
  uint64_t publish_failed = 0;
  uint64_t disconnects = 0;
  uint64_t reconnects = 0;
};

class NatsLink {
 public:
  // Starts connecting and returns at once: servers that cannot be reached
  // yet are retried in the background (connected() says when). Fails only on
  // options the library refuses (e.g. a malformed URL).
  static Result<std::unique_ptr<NatsLink>> open(const NatsLinkOptions& options);
  ~NatsLink();  // unsubscribes, closes, waits for the library's callbacks to end
  NatsLink(const NatsLink&) = delete;
  NatsLink& operator=(const NatsLink&) = delete;

  bool connected() const noexcept;
  // Fire and forget (core NATS): while disconnected the library buffers a
  // little and then refuses; a refusal is counted and returned.
  Status publish(std::string_view subject, std::span<const uint8_t> data);
  // Moves every queued message into `out` (cleared first); returns how many.
  size_t take(std::vector<InboxMessage>& out);
  // The server's max_payload (bytes), 0 while never connected.
  int64_t max_payload() const noexcept;
  NatsLinkCounters counters() const noexcept;
  // The server the connection is on, or "" when disconnected.
  std::string server() const;

  struct Impl;

 private:
  explicit NatsLink(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> m_impl;
};

}  // namespace eldr::sidecar
