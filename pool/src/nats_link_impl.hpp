// NatsLink's insides, shared by nats_link.cpp (the connection, its inbox and
// its replacement) and key_value.cpp (JetStream buckets over it). Private
// to pool/src.
#pragma once

#include <nats/nats.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "eldr/pool/nats_link.hpp"
#include "eldr/pool/route_wire.hpp"

namespace eldr::pool {

Status nats_error(const std::string& what, natsStatus s);
// The library's last error text for a failed call (it says more than the code).
std::string last_error_text(natsStatus s);
// The servers a connection knows of (at least 1).
size_t servers_known_to(natsConnection* nc);

// One connection with its options and subscriptions.
struct Conn {
  natsOptions* opts = nullptr;
  natsConnection* nc = nullptr;
  std::vector<natsSubscription*> subs;
};

struct NatsLink::Impl {
  NatsLinkOptions options;
  // The connection. libnats closes one for good when a server refuses it
  // twice (credentials, permissions, at start or later); revive_loop() then
  // opens another and swaps it in under the write lock, while every other
  // use of conn holds the read lock.
  mutable std::shared_mutex conn_mutex;
  Conn conn;
  std::atomic<uint64_t> generation{0};  // connections replaced so far (KeyValue follows)
  std::string start_error;              // why the current connection did not start ("": it did)
  std::string closed_reason;            // what the servers said to the connection it replaced
  std::atomic<bool> joined{false};      // the current connection has been connected

  mutable std::mutex inbox_mutex;
  std::deque<InboxMessage> inbox;

  std::atomic<uint64_t> received{0}, dropped{0}, published{0}, publish_failed{0};
  std::atomic<uint64_t> received_bytes{0}, published_bytes{0};
  std::atomic<uint64_t> disconnects{0}, reconnects{0}, reopened{0};
  std::atomic<int64_t> max_payload{0};

  // Shutdown: the library calls back on its own threads, so `this` must
  // outlive the subscription's last delivery and the connection's close.
  std::mutex done_mutex;
  std::condition_variable done_cv;
  size_t subs_complete = 0;
  bool closed = false;    // the current connection is closed for good (or never started)
  bool stopping = false;  // the link is going: no more connections
  std::thread reviver;

  static void on_msg(natsConnection*, natsSubscription*, natsMsg* msg, void* closure) {
    auto* self = static_cast<Impl*>(closure);
    InboxMessage m;
    m.subject = natsMsg_GetSubject(msg);
    if (const char* reply = natsMsg_GetReply(msg); reply != nullptr) m.reply = reply;
    if (const char* v = nullptr; natsMsgHeader_Get(msg, kRouteKeyHeader, &v) == NATS_OK && v)
      m.route_key = v;
    if (const char* v = nullptr; natsMsgHeader_Get(msg, kGatewayHeader, &v) == NATS_OK && v)
      m.gateway = v;
    const auto* data = reinterpret_cast<const uint8_t*>(natsMsg_GetData(msg));
    m.data.assign(data, data + natsMsg_GetDataLength(msg));
    natsMsg_Destroy(msg);
    self->received.fetch_add(1, std::memory_order_relaxed);
    self->received_bytes.fetch_add(m.data.size(), std::memory_order_relaxed);
    {
      std::lock_guard lock(self->inbox_mutex);
      if (self->inbox.size() >= self->options.inbox_limit) {
        self->dropped.fetch_add(1, std::memory_order_relaxed);
        return;
      }
      self->inbox.push_back(std::move(m));
    }
    if (self->options.on_message) self->options.on_message();
  }
  static void on_connected(natsConnection* nc, void* closure) {
    auto* self = static_cast<Impl*>(closure);
    self->joined.store(true, std::memory_order_relaxed);
    self->max_payload.store(natsConnection_GetMaxPayload(nc), std::memory_order_relaxed);
  }
  static void on_disconnected(natsConnection*, void* closure) {
    static_cast<Impl*>(closure)->disconnects.fetch_add(1, std::memory_order_relaxed);
  }
  static void on_reconnected(natsConnection* nc, void* closure) {
    auto* self = static_cast<Impl*>(closure);
    self->reconnects.fetch_add(1, std::memory_order_relaxed);
    self->max_payload.store(natsConnection_GetMaxPayload(nc), std::memory_order_relaxed);
  }
  static void on_closed(natsConnection*, void* closure) {
    auto* self = static_cast<Impl*>(closure);
    std::lock_guard lock(self->done_mutex);
    self->closed = true;
    self->done_cv.notify_all();
  }
  static void on_sub_complete(void* closure) {
    auto* self = static_cast<Impl*>(closure);
    std::lock_guard lock(self->done_mutex);
    ++self->subs_complete;
    self->done_cv.notify_all();
  }
  static void on_error(natsConnection*, natsSubscription* sub, natsStatus err, void* closure) {
    // Slow consumer: the library dropped messages past the pending limits
    // (the snapshots repair what they carried).
    if (sub != nullptr && err == NATS_SLOW_CONSUMER)
      static_cast<Impl*>(closure)->dropped.fetch_add(1, std::memory_order_relaxed);
  }

  Status make_options(Conn& c);
  // A new connection and its subscriptions, into c. First one attempt in
  // the foreground, so that a refusal (credentials, TLS) comes back with the
  // server's reason: Errc::state, and revive_loop() tries again in a second.
  // When no server answers, the library keeps trying in the background.
  Status connect(Conn& c);
  // A connection's subscriptions, connection and options, freed.
  void release(Conn& c);
  // Puts c in place of the current connection (closed for good, or none yet
  // at open); whether c started (s) decides when the next try comes.
  void install(Conn c, const Status& s);
  void revive_loop();

  ~Impl() {
    {
      std::lock_guard lock(done_mutex);
      stopping = true;
      done_cv.notify_all();
    }
    if (reviver.joinable()) reviver.join();
    size_t unsubscribed = 0;
    for (natsSubscription* sub : conn.subs)
      unsubscribed += natsSubscription_Unsubscribe(sub) == NATS_OK;
    if (unsubscribed != 0) {
      std::unique_lock lock(done_mutex);
      done_cv.wait_for(lock, std::chrono::seconds(2),
                       [&] { return subs_complete >= unsubscribed; });
    }
    if (conn.nc != nullptr && !natsConnection_IsClosed(conn.nc)) {
      {
        std::lock_guard lock(done_mutex);
        closed = false;
      }
      natsConnection_Close(conn.nc);
      std::unique_lock lock(done_mutex);
      done_cv.wait_for(lock, std::chrono::seconds(2), [&] { return closed; });
    }
    release(conn);
  }
};

}  // namespace eldr::pool
