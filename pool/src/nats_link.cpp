#include "eldr/pool/nats_link.hpp"

#include <nats/nats.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <shared_mutex>
#include <thread>

#include "eldr/pool/nats_auth_apply.hpp"
#include "eldr/pool/route_wire.hpp"

namespace eldr::pool {

bool nats_supported() noexcept { return true; }

void nats_shutdown() noexcept { (void)nats_CloseAndWait(2000); }

namespace {

Status nats_error(const std::string& what, natsStatus s) {
  return {Errc::io, what + ": " + natsStatus_GetText(s)};
}

// The library's last error text for a failed call (it says more than the code).
std::string last_error_text(natsStatus s) {
  natsStatus code = s;
  const char* text = nats_GetLastError(&code);
  return text != nullptr && *text != '\0' ? std::string(text) : natsStatus_GetText(s);
}

// What the connection last said, for a subscription that failed because the
// library closed it (refused credentials: it gives up after two refusals).
std::string subscribe_failed_reason(natsConnection* nc) {
  const char* text = nullptr;
  if (nc != nullptr && natsConnection_GetLastError(nc, &text) != NATS_OK && text != nullptr &&
      *text != '\0')
    return redact_url(text);
  return {};
}

}  // namespace

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

Status NatsLink::Impl::make_options(Conn& c) {
  Impl* m = this;
  const NatsLinkOptions& o = options;
  if (natsStatus s = natsOptions_Create(&c.opts); s != NATS_OK)
    return nats_error("cannot create NATS options", s);
  std::vector<const char*> urls;
  for (const std::string& u : o.urls) urls.push_back(u.c_str());
  natsStatus s = natsOptions_SetServers(c.opts, urls.data(), static_cast<int>(urls.size()));
  if (s != NATS_OK) return nats_error("NATS server URLs refused", s);
  // Reconnect forever, every 250 ms (with jitter, so nodes do not stampede a
  // restarted server); a dead connection is noticed within ~2 s of pings.
  if (s == NATS_OK) s = natsOptions_SetName(c.opts, o.name.c_str());
  if (s == NATS_OK) s = natsOptions_SetMaxReconnect(c.opts, -1);
  if (s == NATS_OK) s = natsOptions_SetReconnectWait(c.opts, 250);
  if (s == NATS_OK) s = natsOptions_SetReconnectJitter(c.opts, 100, 1000);
  if (s == NATS_OK) s = natsOptions_SetTimeout(c.opts, 1000);
  if (s == NATS_OK) s = natsOptions_SetPingInterval(c.opts, 1000);
  if (s == NATS_OK) s = natsOptions_SetMaxPingsOut(c.opts, 2);
  if (s == NATS_OK) s = natsOptions_SetReconnectBufSize(c.opts, 8 << 20);
  if (s == NATS_OK) s = natsOptions_SetNoEcho(c.opts, true);  // our own messages stay away
  if (s == NATS_OK)
    s = natsOptions_SetSendAsap(c.opts,
                                true);  // no flusher-thread hop: -0.5 ms per booking and reply
  if (s == NATS_OK) s = natsOptions_SetDisconnectedCB(c.opts, Impl::on_disconnected, m);
  if (s == NATS_OK) s = natsOptions_SetReconnectedCB(c.opts, Impl::on_reconnected, m);
  if (s == NATS_OK) s = natsOptions_SetClosedCB(c.opts, Impl::on_closed, m);
  if (s == NATS_OK) s = natsOptions_SetErrorHandler(c.opts, Impl::on_error, m);
  if (s != NATS_OK) return nats_error("NATS options refused", s);
  // Secrets are read from their files here, for every new connection: a
  // rotated password file is what the next one presents.
  return apply_nats_auth(c.opts, o.auth);
}

Status NatsLink::Impl::connect(Conn& c) {
  Impl* m = this;
  ELDR_TRY(make_options(c));
  natsStatus s = natsConnection_Connect(&c.nc, c.opts);
  if (s == NATS_NO_SERVER) {
    // Nobody answers: the library keeps trying (RetryOnFailedConnect).
    s = natsOptions_SetRetryOnFailedConnect(c.opts, true, Impl::on_connected, m);
    if (s == NATS_OK) s = natsConnection_Connect(&c.nc, c.opts);
    if (s != NATS_OK && s != NATS_NOT_YET_CONNECTED)
      return nats_error("cannot start the NATS connection", s);
  } else if (s != NATS_OK) {
    // Refused: by the server (credentials), or in the TLS handshake.
    std::string why = last_error_text(s);
    // "(conn.c:1905): Authorization Violation": the library's source line goes.
    if (why.starts_with('(')) {
      if (const size_t at = why.find("): "); at != std::string::npos) why.erase(0, at + 3);
    }
    return {Errc::state, redact_url(why)};
  }
  if (s == NATS_OK) Impl::on_connected(c.nc, m);
  for (const NatsLinkOptions::Subscription& want : options.subscribe) {
    natsSubscription* sub = nullptr;
    s = want.queue.empty()
            ? natsConnection_Subscribe(&sub, c.nc, want.subject.c_str(), Impl::on_msg, m)
            : natsConnection_QueueSubscribe(&sub, c.nc, want.subject.c_str(), want.queue.c_str(),
                                            Impl::on_msg, m);
    if (s != NATS_OK) {
      const std::string why = subscribe_failed_reason(c.nc);
      const Status failed = nats_error(
          "cannot subscribe to " + want.subject + (why.empty() ? "" : " (NATS said: " + why + ")"),
          s);
      // Closed meanwhile (refused twice in the background): tried again.
      if (natsConnection_IsClosed(c.nc)) return {Errc::state, failed.message()};
      return failed;
    }
    c.subs.push_back(sub);
    s = natsSubscription_SetPendingLimits(sub, 1 << 16, 256 << 20);
    if (s == NATS_OK) s = natsSubscription_SetOnCompleteCB(sub, Impl::on_sub_complete, m);
    if (s != NATS_OK) return nats_error("cannot subscribe to " + want.subject, s);
  }
  return Status::ok();
}

void NatsLink::Impl::release(Conn& c) {
  for (natsSubscription* sub : c.subs) {
    int64_t d = 0;  // what the library dropped stays counted
    if (natsSubscription_GetDropped(sub, &d) == NATS_OK && d > 0)
      dropped.fetch_add(static_cast<uint64_t>(d), std::memory_order_relaxed);
    natsSubscription_Destroy(sub);
  }
  c.subs.clear();
  if (c.nc != nullptr) {
    natsConnection_Close(c.nc);  // a no-op on a closed one
    natsConnection_Destroy(c.nc);
  }
  c.nc = nullptr;
  if (c.opts != nullptr) natsOptions_Destroy(c.opts);
  c.opts = nullptr;
}

void NatsLink::Impl::install(Conn c, const Status& s) {
  {
    std::unique_lock lock(conn_mutex);
    const char* text = nullptr;
    if (conn.nc != nullptr && natsConnection_GetLastError(conn.nc, &text) != NATS_OK &&
        text != nullptr && *text != '\0')
      closed_reason = redact_url(text);
    else if (!start_error.empty())
      closed_reason = start_error;
    std::swap(conn, c);
    start_error = s ? std::string() : s.message();
    generation.fetch_add(1, std::memory_order_release);
  }
  release(c);  // the old one, out of the lock
  std::lock_guard lock(done_mutex);
  closed = !s || natsConnection_IsClosed(conn.nc);
}

// Waits for the connection to close for good, then a second, then opens a
// new one (and again while the servers refuse it). Publishers wait only for
// the swap: the new connection is made outside the lock.
void NatsLink::Impl::revive_loop() {
  std::unique_lock lock(done_mutex);
  for (;;) {
    done_cv.wait(lock, [&] { return stopping || closed; });
    if (stopping || done_cv.wait_for(lock, std::chrono::seconds(1), [&] { return stopping; }))
      return;
    lock.unlock();
    joined.store(false, std::memory_order_relaxed);
    Conn c;
    const Status s = connect(c);
    install(std::move(c), s);
    reopened.fetch_add(1, std::memory_order_relaxed);
    lock.lock();
  }
}

Result<std::unique_ptr<NatsLink>> NatsLink::open(const NatsLinkOptions& o) {
  if (o.urls.empty()) return Status{Errc::invalid_argument, "no NATS server URL"};
  auto impl = std::make_unique<Impl>();
  impl->options = o;
  Impl* m = impl.get();
  // Refused at once: the link stays and says why (last_error) while
  // revive_loop tries again. Anything else (options, files) fails the start.
  Conn c;
  const Status s = m->connect(c);
  if (!s && (s.code() != Errc::state || o.fail_when_refused)) {
    m->release(c);
    if (s.code() != Errc::state) return s;
    return Status{Errc::state, "NATS refused the connection: " + s.message()};
  }
  m->install(std::move(c), s);
  m->reviver = std::thread([m] { m->revive_loop(); });
  return std::unique_ptr<NatsLink>(new NatsLink(std::move(impl)));
}

NatsLink::NatsLink(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
NatsLink::~NatsLink() = default;

namespace {

bool is_connected(natsConnection* nc) {
  return nc != nullptr && natsConnection_Status(nc) == NATS_CONN_STATUS_CONNECTED;
}

size_t servers_known_to(natsConnection* nc) {
  char** servers = nullptr;
  int count = 0;
  if (nc == nullptr || natsConnection_GetServers(nc, &servers, &count) != NATS_OK) return 1;
  for (int i = 0; i < count; ++i) free(servers[i]);
  free(servers);
  return static_cast<size_t>(std::max(count, 1));
}

}  // namespace

bool NatsLink::connected() const noexcept {
  std::shared_lock lock(m_impl->conn_mutex);
  return is_connected(m_impl->conn.nc);
}

Status NatsLink::publish(std::string_view subject, std::span<const uint8_t> data,
                         std::string_view reply) {
  const std::string subj(subject);
  const std::string reply_to(reply);
  natsStatus s = NATS_CONNECTION_CLOSED;
  {
    std::shared_lock lock(m_impl->conn_mutex);
    if (m_impl->conn.nc != nullptr)
      s = reply_to.empty()
              ? natsConnection_Publish(m_impl->conn.nc, subj.c_str(), data.data(),
                                       static_cast<int>(data.size()))
              : natsConnection_PublishRequest(m_impl->conn.nc, subj.c_str(), reply_to.c_str(),
                                              data.data(), static_cast<int>(data.size()));
  }
  if (s != NATS_OK) {
    m_impl->publish_failed.fetch_add(1, std::memory_order_relaxed);
    return nats_error("publish on " + subj, s);
  }
  m_impl->published.fetch_add(1, std::memory_order_relaxed);
  m_impl->published_bytes.fetch_add(data.size(), std::memory_order_relaxed);
  return Status::ok();
}

size_t NatsLink::take(std::vector<InboxMessage>& out) {
  out.clear();
  std::lock_guard lock(m_impl->inbox_mutex);
  out.reserve(m_impl->inbox.size());
  for (auto& m : m_impl->inbox) out.push_back(std::move(m));
  m_impl->inbox.clear();
  return out.size();
}

int64_t NatsLink::max_payload() const noexcept {
  return m_impl->max_payload.load(std::memory_order_relaxed);
}

NatsLinkCounters NatsLink::counters() const noexcept {
  const Impl& m = *m_impl;
  constexpr auto r = std::memory_order_relaxed;
  int64_t lib_dropped = 0;
  {
    std::shared_lock lock(m.conn_mutex);
    for (natsSubscription* sub : m.conn.subs) {
      int64_t d = 0;
      if (natsSubscription_GetDropped(sub, &d) == NATS_OK) lib_dropped += d;
    }
  }
  return {m.received.load(r),
          m.received_bytes.load(r),
          m.published_bytes.load(r),
          m.dropped.load(r) + static_cast<uint64_t>(std::max<int64_t>(lib_dropped, 0)),
          m.published.load(r),
          m.publish_failed.load(r),
          m.disconnects.load(r),
          m.reconnects.load(r),
          m.reopened.load(r)};
}

std::string NatsLink::server() const {
  char url[256] = {};
  std::shared_lock lock(m_impl->conn_mutex);
  if (!is_connected(m_impl->conn.nc) ||
      natsConnection_GetConnectedUrl(m_impl->conn.nc, url, sizeof(url)) != NATS_OK)
    return {};
  return redact_url(url);
}

std::string NatsLink::last_error() const {
  std::shared_lock lock(m_impl->conn_mutex);
  if (!m_impl->start_error.empty()) return m_impl->start_error;  // refused at once
  if (m_impl->conn.nc == nullptr) return {};
  const char* text = nullptr;
  const natsStatus s = natsConnection_GetLastError(m_impl->conn.nc, &text);
  // A new connection that has heard nothing yet: what the last one heard.
  if (s == NATS_OK || s == NATS_NO_SERVER)
    return m_impl->joined.load(std::memory_order_relaxed) ? std::string() : m_impl->closed_reason;
  return redact_url(text != nullptr && *text != '\0' ? text : natsStatus_GetText(s));
}

bool NatsLink::wait_connected(int64_t timeout_ms) const {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!connected()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// ---- key-value ------------------------------------------------------------------

namespace {

bool is_wrong_sequence(const std::string& text) {
  return text.find("wrong last sequence") != std::string::npos ||
         text.find("key exists") != std::string::npos;
}

}  // namespace

struct KeyValue::Impl {
  NatsLink::Impl* link = nullptr;  // outlives every call (not the destructor's business)
  uint64_t generation = 0;         // the link's connection the handles below are on
  jsCtx* js = nullptr;
  kvStore* kv = nullptr;
  kvWatcher* watcher = nullptr;
  std::string bucket, watched;
  int replicas = 0;
  ~Impl() { drop(); }
  void drop() {
    if (watcher != nullptr) {
      (void)kvWatcher_Stop(watcher);
      kvWatcher_Destroy(watcher);
    }
    if (kv != nullptr) kvStore_Destroy(kv);
    if (js != nullptr) jsCtx_Destroy(js);
    watcher = nullptr;
    kv = nullptr;
    js = nullptr;
  }
  // The bucket on the link's current connection, created when missing.
  Status bind();
  // Handles on a connection the link has since replaced are opened again
  // on the new one (and the watch with them).
  Status current() {
    if (generation == link->generation.load(std::memory_order_acquire) && kv != nullptr)
      return Status::ok();
    drop();
    ELDR_TRY(bind());
    if (!watched.empty()) {
      if (natsStatus s = kvStore_Watch(&watcher, kv, watched.c_str(), nullptr); s != NATS_OK)
        return failed("watch " + watched, s);
    }
    return Status::ok();
  }
  Status failed(const std::string& what, natsStatus s) const {
    const std::string text = last_error_text(s);
    return {is_wrong_sequence(text) ? Errc::state : Errc::io,
            what + " in bucket " + bucket + ": " + text};
  }
  static Entry entry_of(kvEntry* e) {
    Entry out;
    out.revision = kvEntry_Revision(e);
    const auto* v = static_cast<const uint8_t*>(kvEntry_Value(e));
    out.value.assign(v, v + kvEntry_ValueLen(e));
    out.deleted = kvEntry_Operation(e) != kvOp_Put;
    return out;
  }
};

Status KeyValue::Impl::bind() {
  std::shared_lock lock(link->conn_mutex);
  generation = link->generation.load(std::memory_order_acquire);
  if (link->conn.nc == nullptr) return {Errc::io, "not connected to NATS"};
  jsOptions jo;
  jsOptions_Init(&jo);
  jo.Wait = 2000;
  if (natsStatus s = natsConnection_JetStream(&js, link->conn.nc, &jo); s != NATS_OK)
    return nats_error("cannot open JetStream", s);
  natsStatus s = js_KeyValue(&kv, js, bucket.c_str());
  if (s == NATS_NOT_FOUND) {
    kvConfig cfg;
    kvConfig_Init(&cfg);
    cfg.Bucket = bucket.c_str();
    cfg.History = 4;
    cfg.Replicas = replicas > 0
                       ? replicas
                       : static_cast<int>(std::min<size_t>(3, servers_known_to(link->conn.nc)));
    s = js_CreateKeyValue(&kv, js, &cfg);
    // Another node created it in between: open that one.
    if (s != NATS_OK) s = js_KeyValue(&kv, js, bucket.c_str());
  }
  if (s != NATS_OK) return failed("cannot open the key-value bucket", s);
  return Status::ok();
}

KeyValue::KeyValue(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
KeyValue::~KeyValue() = default;

Result<std::unique_ptr<KeyValue>> NatsLink::key_value(const std::string& bucket, int replicas) {
  auto impl = std::make_unique<KeyValue::Impl>();
  impl->link = m_impl.get();
  impl->bucket = bucket;
  impl->replicas = replicas;
  ELDR_TRY(impl->bind());
  return std::unique_ptr<KeyValue>(new KeyValue(std::move(impl)));
}

Result<std::optional<KeyValue::Entry>> KeyValue::get(const std::string& key) {
  ELDR_TRY(m_impl->current());
  kvEntry* e = nullptr;
  const natsStatus s = kvStore_Get(&e, m_impl->kv, key.c_str());
  if (s == NATS_NOT_FOUND) return std::optional<Entry>{};
  if (s != NATS_OK) return m_impl->failed("get " + key, s);
  Entry out = Impl::entry_of(e);
  kvEntry_Destroy(e);
  return std::optional<Entry>{std::move(out)};
}

Result<uint64_t> KeyValue::put(const std::string& key, std::span<const uint8_t> value) {
  ELDR_TRY(m_impl->current());
  uint64_t rev = 0;
  const natsStatus s =
      kvStore_Put(&rev, m_impl->kv, key.c_str(), value.data(), static_cast<int>(value.size()));
  if (s != NATS_OK) return m_impl->failed("put " + key, s);
  return rev;
}

Result<uint64_t> KeyValue::create(const std::string& key, std::span<const uint8_t> value) {
  ELDR_TRY(m_impl->current());
  uint64_t rev = 0;
  const natsStatus s =
      kvStore_Create(&rev, m_impl->kv, key.c_str(), value.data(), static_cast<int>(value.size()));
  if (s != NATS_OK) return m_impl->failed("create " + key, s);
  return rev;
}

Result<uint64_t> KeyValue::update(const std::string& key, std::span<const uint8_t> value,
                                  uint64_t last) {
  ELDR_TRY(m_impl->current());
  uint64_t rev = 0;
  const natsStatus s = kvStore_Update(&rev, m_impl->kv, key.c_str(), value.data(),
                                      static_cast<int>(value.size()), last);
  if (s != NATS_OK) return m_impl->failed("update " + key, s);
  return rev;
}

Status KeyValue::erase(const std::string& key) {
  ELDR_TRY(m_impl->current());
  const natsStatus s = kvStore_Delete(m_impl->kv, key.c_str());
  if (s != NATS_OK) return m_impl->failed("delete " + key, s);
  return Status::ok();
}

Status KeyValue::watch(const std::string& key) {
  m_impl->watched = key;
  ELDR_TRY(m_impl->current());
  if (m_impl->watcher != nullptr) {
    (void)kvWatcher_Stop(m_impl->watcher);
    kvWatcher_Destroy(m_impl->watcher);
    m_impl->watcher = nullptr;
  }
  const natsStatus s = kvStore_Watch(&m_impl->watcher, m_impl->kv, key.c_str(), nullptr);
  if (s != NATS_OK) return m_impl->failed("watch " + key, s);
  return Status::ok();
}

Result<std::optional<KeyValue::Entry>> KeyValue::next(int64_t timeout_ms) {
  if (m_impl->watched.empty()) return Status{Errc::state, "no key is watched"};
  ELDR_TRY(m_impl->current());
  if (m_impl->watcher == nullptr) return Status{Errc::state, "the watch failed; watch again"};
  kvEntry* e = nullptr;
  const natsStatus s = kvWatcher_Next(&e, m_impl->watcher, timeout_ms);
  if (s == NATS_TIMEOUT) return std::optional<Entry>{};
  if (s != NATS_OK) return m_impl->failed("watch", s);
  if (e == nullptr) return std::optional<Entry>{};  // "initial values delivered"
  Entry out = Impl::entry_of(e);
  kvEntry_Destroy(e);
  return std::optional<Entry>{std::move(out)};
}

}  // namespace eldr::pool
