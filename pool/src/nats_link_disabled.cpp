// NatsLink of a build without libnats: multi-node mode is refused with a
// message that says how to get it; everything else works as always.
#include "eldr/pool/nats_link.hpp"

namespace eldr::pool {

bool nats_supported() noexcept { return false; }
void nats_shutdown() noexcept {}

struct NatsLink::Impl {};

Result<std::unique_ptr<NatsLink>> NatsLink::open(const NatsLinkOptions&) {
  return Status{Errc::unsupported,
                "this eldrd was built without NATS support (libnats-dev was not found, or "
                "-DELDR_ENABLE_NATS=OFF): multi-node mode needs a build with it"};
}

NatsLink::NatsLink(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
NatsLink::~NatsLink() = default;
bool NatsLink::connected() const noexcept { return false; }
Status NatsLink::publish(std::string_view, std::span<const uint8_t>, std::string_view) {
  return {Errc::unsupported, "no NATS support in this build"};
}
size_t NatsLink::take(std::vector<InboxMessage>& out) {
  out.clear();
  return 0;
}
int64_t NatsLink::max_payload() const noexcept { return 0; }
NatsLinkCounters NatsLink::counters() const noexcept { return {}; }
std::string NatsLink::server() const { return {}; }
std::string NatsLink::last_error() const { return {}; }

bool NatsLink::wait_connected(int64_t) const { return false; }
Result<std::unique_ptr<KeyValue>> NatsLink::key_value(const std::string&, int) {
  return Status{Errc::unsupported, "no NATS support in this build"};
}

struct KeyValue::Impl {};
KeyValue::KeyValue(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
KeyValue::~KeyValue() = default;
namespace {
Status no_kv() { return {Errc::unsupported, "no NATS support in this build"}; }
}  // namespace
Result<std::optional<KeyValue::Entry>> KeyValue::get(const std::string&) { return no_kv(); }
Result<uint64_t> KeyValue::put(const std::string&, std::span<const uint8_t>) { return no_kv(); }
Result<uint64_t> KeyValue::create(const std::string&, std::span<const uint8_t>) { return no_kv(); }
Result<uint64_t> KeyValue::update(const std::string&, std::span<const uint8_t>, uint64_t) {
  return no_kv();
}
Status KeyValue::erase(const std::string&) { return no_kv(); }
Status KeyValue::watch(const std::string&) { return no_kv(); }
Result<std::optional<KeyValue::Entry>> KeyValue::next(int64_t) { return no_kv(); }

}  // namespace eldr::pool
