#include "eldr/pool/nats_link.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "eldr/pool/nats_auth_apply.hpp"
#include "nats_link_impl.hpp"

namespace eldr::pool {

bool nats_supported() noexcept { return true; }

void nats_shutdown() noexcept { (void)nats_CloseAndWait(2000); }

Status nats_error(const std::string& what, natsStatus s) {
  return {Errc::io, what + ": " + natsStatus_GetText(s)};
}

std::string last_error_text(natsStatus s) {
  natsStatus code = s;
  const char* text = nats_GetLastError(&code);
  return text != nullptr && *text != '\0' ? std::string(text) : natsStatus_GetText(s);
}

size_t servers_known_to(natsConnection* nc) {
  char** servers = nullptr;
  int count = 0;
  if (nc == nullptr || natsConnection_GetServers(nc, &servers, &count) != NATS_OK) return 1;
  for (int i = 0; i < count; ++i) free(servers[i]);
  free(servers);
  return static_cast<size_t>(std::max(count, 1));
}

namespace {

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

}  // namespace eldr::pool
