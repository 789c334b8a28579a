// KeyValue: one JetStream key-value bucket over a NatsLink's connection,
// opened again on each connection that replaces the last.
#include "nats_link_impl.hpp"

namespace eldr::pool {

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
