// libFuzzer target: arbitrary bytes as a message of another eldrd node. A
// message that decodes must hold what the decoder promises (a footprint of
// the table's shape with counts >= 0, ids >= 0), and the peer bookkeeping
// must take any sequence of such messages against a real router: bookings
// never go negative and all of them leave the router with the view.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>

#include "eldr/pool/peer_view.hpp"
#include "eldr/pool/peer_wire.hpp"
#include "eldr/router.hpp"

namespace {

eldr::ClusterTable axis_table() {
  eldr::ClusterTable t;
  t.model = "fuzz";
  t.geometry = {2, 4, 1};
  t.layer_mask = {0, 1};
  t.idf.assign(8, 1.0f);
  t.centroids.assign(4 * 8, 0.0f);
  for (uint32_t c = 0; c < 4; ++c) {
    t.centroids[c * 8 + c] = 1.0f;
    t.worker_ids.push_back(static_cast<int32_t>(100 + c));
  }
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace eldr;
  using namespace eldr::pool;
  static const auto table = std::make_shared<const ClusterTable>(axis_table());
  auto router = Router::create(table);
  if (!router) std::abort();
  PeerViewOptions o;
  o.self = "me";
  o.max_bookings = 64;
  {
    PeerView view(**router, table->geometry, o, [](const PeerLoad&) {});
    // The input is a run of messages: a 2-byte length before each.
    uint64_t now = 1'000'000'000;
    for (size_t at = 0; at + 2 <= size;) {
      const size_t n =
          std::min<size_t>(size - at - 2, size_t{data[at]} | size_t{data[at + 1]} << 8);
      const Decoded d =
          decode_peer_message({data + at + 2, n}, table->geometry,
                              cost_cells_of(table->geometry, RouterOptions{}.cost_cells), "");
      at += 2 + n;
      if (!d.ok) continue;
      if (d.message.kind == PeerKind::book) {
        if (d.message.counts.size() != table->geometry.cells() || d.message.worker < 0)
          std::abort();
        for (int16_t c : d.message.counts)
          if (c < 0) std::abort();
      }
      view.apply(d.message, now, d.message.head.sent_ns);
      now += 400'000'000;
      (void)view.expire(now);
      if (view.bookings() > o.max_bookings) std::abort();
    }
  }
  for (const WorkerInfo& w : (*router)->workers())
    if (w.inflight != 0) std::abort();  // the view released everything it booked
  return 0;
}
