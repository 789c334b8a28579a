// NatsLink of a build without libnats: cluster mode is refused with a
// message that says how to get it; everything else works as always.
#include "nats_link.hpp"

namespace eldr::sidecar {

bool nats_supported() noexcept { return false; }

struct NatsLink::Impl {};

Result<std::unique_ptr<NatsLink>> NatsLink::open(const NatsLinkOptions&) {
  return Status{Errc::unsupported,
                "this eldrd was built without NATS support (libnats-dev was not found, or "
                "-DELDR_ENABLE_NATS=OFF): cluster mode needs a build with it"};
}

NatsLink::NatsLink(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
NatsLink::~NatsLink() = default;
bool NatsLink::connected() const noexcept { return false; }
Status NatsLink::publish(std::string_view, std::span<const uint8_t>) {
  return {Errc::unsupported, "no NATS support in this build"};
}
size_t NatsLink::take(std::vector<InboxMessage>& out) {
  out.clear();
  return 0;
}
int64_t NatsLink::max_payload() const noexcept { return 0; }
NatsLinkCounters NatsLink::counters() const noexcept { return {}; }
std::string NatsLink::server() const { return {}; }

}  // namespace eldr::sidecar
