#include "eldr/pool/nats_link.hpp"

#include <nats/nats.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "eldr/pool/nats_auth_apply.hpp"

namespace eldr::pool {

bool nats_supported() noexcept { return true; }

void nats_shutdown() noexcept { (void)nats_CloseAndWait(2000); }

namespace {

Status nats_error(const std::string& what, natsStatus s) {
  return {Errc::io, what + ": " + natsStatus_GetText(s)};
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

struct NatsLink::Impl {
  NatsLinkOptions options;
  natsOptions* opts = nullptr;
  natsConnection* nc = nullptr;
  std::vector<natsSubscription*> subs;

  mutable std::mutex inbox_mutex;
  std::deque<InboxMessage> inbox;

  std::atomic<uint64_t> received{0}, dropped{0}, published{0}, publish_failed{0};
  std::atomic<uint64_t> received_bytes{0}, published_bytes{0};
  std::atomic<uint64_t> disconnects{0}, reconnects{0};
  std::atomic<int64_t> max_payload{0};

  // Shutdown: the library calls back on its own threads, so `this` must
  // outlive the subscription's last delivery and the connection's close.
  std::mutex done_mutex;
  std::condition_variable done_cv;
  size_t subs_complete = 0;
  bool closed = false;

  static void on_msg(natsConnection*, natsSubscription*, natsMsg* msg, void* closure) {
    auto* self = static_cast<Impl*>(closure);
    InboxMessage m;
    m.subject = natsMsg_GetSubject(msg);
    if (const char* reply = natsMsg_GetReply(msg); reply != nullptr) m.reply = reply;
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

  ~Impl() {
    size_t unsubscribed = 0;
    for (natsSubscription* sub : subs) unsubscribed += natsSubscription_Unsubscribe(sub) == NATS_OK;
    if (unsubscribed != 0) {
      std::unique_lock lock(done_mutex);
      done_cv.wait_for(lock, std::chrono::seconds(2),
                       [&] { return subs_complete >= unsubscribed; });
    }
    if (nc != nullptr) {
      natsConnection_Close(nc);
      std::unique_lock lock(done_mutex);
      done_cv.wait_for(lock, std::chrono::seconds(2), [&] { return closed; });
    }
    for (natsSubscription* sub : subs) natsSubscription_Destroy(sub);
    if (nc != nullptr) natsConnection_Destroy(nc);
    if (opts != nullptr) natsOptions_Destroy(opts);
  }
};

Result<std::unique_ptr<NatsLink>> NatsLink::open(const NatsLinkOptions& o) {
  if (o.urls.empty()) return Status{Errc::invalid_argument, "no NATS server URL"};
  auto impl = std::make_unique<Impl>();
  impl->options = o;
  Impl* m = impl.get();
  if (natsStatus s = natsOptions_Create(&m->opts); s != NATS_OK)
    return nats_error("cannot create NATS options", s);
  std::vector<const char*> urls;
  for (const std::string& u : o.urls) urls.push_back(u.c_str());
  natsStatus s = natsOptions_SetServers(m->opts, urls.data(), static_cast<int>(urls.size()));
  if (s != NATS_OK) return nats_error("NATS server URLs refused", s);
  // Reconnect forever, every 250 ms (with jitter, so nodes do not stampede a
  // restarted server); a dead connection is noticed within ~2 s of pings.
  if (s == NATS_OK) s = natsOptions_SetName(m->opts, o.name.c_str());
  if (s == NATS_OK) s = natsOptions_SetMaxReconnect(m->opts, -1);
  if (s == NATS_OK) s = natsOptions_SetReconnectWait(m->opts, 250);
  if (s == NATS_OK) s = natsOptions_SetReconnectJitter(m->opts, 100, 1000);
  if (s == NATS_OK) s = natsOptions_SetTimeout(m->opts, 1000);
  if (s == NATS_OK) s = natsOptions_SetPingInterval(m->opts, 1000);
  if (s == NATS_OK) s = natsOptions_SetMaxPingsOut(m->opts, 2);
  if (s == NATS_OK) s = natsOptions_SetReconnectBufSize(m->opts, 8 << 20);
  if (s == NATS_OK) s = natsOptions_SetNoEcho(m->opts, true);  // our own messages stay away
  if (s == NATS_OK)
    s = natsOptions_SetSendAsap(m->opts,
                                true);  // no flusher-thread hop: -0.5 ms per booking and reply
  if (s == NATS_OK) s = natsOptions_SetRetryOnFailedConnect(m->opts, true, Impl::on_connected, m);
  if (s == NATS_OK) s = natsOptions_SetDisconnectedCB(m->opts, Impl::on_disconnected, m);
  if (s == NATS_OK) s = natsOptions_SetReconnectedCB(m->opts, Impl::on_reconnected, m);
  if (s == NATS_OK) s = natsOptions_SetClosedCB(m->opts, Impl::on_closed, m);
  if (s == NATS_OK) s = natsOptions_SetErrorHandler(m->opts, Impl::on_error, m);
  if (s != NATS_OK) return nats_error("NATS options refused", s);
  ELDR_TRY(apply_nats_auth(m->opts, o.auth));
  s = natsConnection_Connect(&m->nc, m->opts);
  // Not yet connected: the library keeps trying (RetryOnFailedConnect).
  if (s != NATS_OK && s != NATS_NOT_YET_CONNECTED)
    return nats_error("cannot start the NATS connection", s);
  if (s == NATS_OK) Impl::on_connected(m->nc, m);
  for (const NatsLinkOptions::Subscription& want : o.subscribe) {
    natsSubscription* sub = nullptr;
    s = want.queue.empty()
            ? natsConnection_Subscribe(&sub, m->nc, want.subject.c_str(), Impl::on_msg, m)
            : natsConnection_QueueSubscribe(&sub, m->nc, want.subject.c_str(), want.queue.c_str(),
                                            Impl::on_msg, m);
    if (s != NATS_OK) {
      const std::string why = subscribe_failed_reason(m->nc);
      return nats_error(
          "cannot subscribe to " + want.subject + (why.empty() ? "" : " (NATS said: " + why + ")"),
          s);
    }
    m->subs.push_back(sub);
    s = natsSubscription_SetPendingLimits(sub, 1 << 16, 256 << 20);
    if (s == NATS_OK) s = natsSubscription_SetOnCompleteCB(sub, Impl::on_sub_complete, m);
    if (s != NATS_OK) return nats_error("cannot subscribe to " + want.subject, s);
  }
  return std::unique_ptr<NatsLink>(new NatsLink(std::move(impl)));
}

NatsLink::NatsLink(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
NatsLink::~NatsLink() = default;

bool NatsLink::connected() const noexcept {
  return natsConnection_Status(m_impl->nc) == NATS_CONN_STATUS_CONNECTED;
}

Status NatsLink::publish(std::string_view subject, std::span<const uint8_t> data) {
  const std::string subj(subject);
  const natsStatus s =
      natsConnection_Publish(m_impl->nc, subj.c_str(), data.data(), static_cast<int>(data.size()));
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
  for (natsSubscription* sub : m.subs) {
    int64_t d = 0;
    if (natsSubscription_GetDropped(sub, &d) == NATS_OK) lib_dropped += d;
  }
  return {m.received.load(r),
          m.received_bytes.load(r),
          m.published_bytes.load(r),
          m.dropped.load(r) + static_cast<uint64_t>(std::max<int64_t>(lib_dropped, 0)),
          m.published.load(r),
          m.publish_failed.load(r),
          m.disconnects.load(r),
          m.reconnects.load(r)};
}

std::string NatsLink::server() const {
  char url[256] = {};
  if (!connected() || natsConnection_GetConnectedUrl(m_impl->nc, url, sizeof(url)) != NATS_OK)
    return {};
  return redact_url(url);
}

std::string NatsLink::last_error() const {
  const char* text = nullptr;
  const natsStatus s = natsConnection_GetLastError(m_impl->nc, &text);
  if (s == NATS_OK || s == NATS_NO_SERVER) return {};
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

size_t NatsLink::known_servers() const {
  char** servers = nullptr;
  int count = 0;
  if (natsConnection_GetServers(m_impl->nc, &servers, &count) != NATS_OK) return 1;
  for (int i = 0; i < count; ++i) free(servers[i]);
  free(servers);
  return static_cast<size_t>(std::max(count, 1));
}

// ---- key-value ------------------------------------------------------------------

namespace {

// The library's last error text for a failed call (it says more than the code).
std::string last_error_text(natsStatus s) {
  natsStatus code = s;
  const char* text = nats_GetLastError(&code);
  return text != nullptr && *text != '\0' ? std::string(text) : natsStatus_GetText(s);
}

bool is_wrong_sequence(const std::string& text) {
  return text.find("wrong last sequence") != std::string::npos ||
         text.find("key exists") != std::string::npos;
}

}  // namespace

struct KeyValue::Impl {
  jsCtx* js = nullptr;
  kvStore* kv = nullptr;
  kvWatcher* watcher = nullptr;
  std::string bucket;
  ~Impl() {
    if (watcher != nullptr) {
      (void)kvWatcher_Stop(watcher);
      kvWatcher_Destroy(watcher);
    }
    if (kv != nullptr) kvStore_Destroy(kv);
    if (js != nullptr) jsCtx_Destroy(js);
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

KeyValue::KeyValue(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
KeyValue::~KeyValue() = default;

Result<std::unique_ptr<KeyValue>> NatsLink::key_value(const std::string& bucket, int replicas) {
  auto impl = std::make_unique<KeyValue::Impl>();
  impl->bucket = bucket;
  jsOptions jo;
  jsOptions_Init(&jo);
  jo.Wait = 2000;
  if (natsStatus s = natsConnection_JetStream(&impl->js, m_impl->nc, &jo); s != NATS_OK)
    return nats_error("cannot open JetStream", s);
  natsStatus s = js_KeyValue(&impl->kv, impl->js, bucket.c_str());
  if (s == NATS_NOT_FOUND) {
    kvConfig cfg;
    kvConfig_Init(&cfg);
    cfg.Bucket = bucket.c_str();
    cfg.History = 4;
    cfg.Replicas = replicas > 0 ? replicas : static_cast<int>(std::min<size_t>(3, known_servers()));
    s = js_CreateKeyValue(&impl->kv, impl->js, &cfg);
    // Another node created it in between: open that one.
    if (s != NATS_OK) s = js_KeyValue(&impl->kv, impl->js, bucket.c_str());
  }
  if (s != NATS_OK) return impl->failed("cannot open the key-value bucket", s);
  return std::unique_ptr<KeyValue>(new KeyValue(std::move(impl)));
}

Result<std::optional<KeyValue::Entry>> KeyValue::get(const std::string& key) {
  kvEntry* e = nullptr;
  const natsStatus s = kvStore_Get(&e, m_impl->kv, key.c_str());
  if (s == NATS_NOT_FOUND) return std::optional<Entry>{};
  if (s != NATS_OK) return m_impl->failed("get " + key, s);
  Entry out = Impl::entry_of(e);
  kvEntry_Destroy(e);
  return std::optional<Entry>{std::move(out)};
}

Result<uint64_t> KeyValue::put(const std::string& key, std::span<const uint8_t> value) {
  uint64_t rev = 0;
  const natsStatus s =
      kvStore_Put(&rev, m_impl->kv, key.c_str(), value.data(), static_cast<int>(value.size()));
  if (s != NATS_OK) return m_impl->failed("put " + key, s);
  return rev;
}

Result<uint64_t> KeyValue::create(const std::string& key, std::span<const uint8_t> value) {
  uint64_t rev = 0;
  const natsStatus s =
      kvStore_Create(&rev, m_impl->kv, key.c_str(), value.data(), static_cast<int>(value.size()));
  if (s != NATS_OK) return m_impl->failed("create " + key, s);
  return rev;
}

Result<uint64_t> KeyValue::update(const std::string& key, std::span<const uint8_t> value,
                                  uint64_t last) {
  uint64_t rev = 0;
  const natsStatus s = kvStore_Update(&rev, m_impl->kv, key.c_str(), value.data(),
                                      static_cast<int>(value.size()), last);
  if (s != NATS_OK) return m_impl->failed("update " + key, s);
  return rev;
}

Status KeyValue::erase(const std::string& key) {
  const natsStatus s = kvStore_Delete(m_impl->kv, key.c_str());
  if (s != NATS_OK) return m_impl->failed("delete " + key, s);
  return Status::ok();
}

Status KeyValue::watch(const std::string& key) {
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
  if (m_impl->watcher == nullptr) return Status{Errc::state, "no key is watched"};
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
