// The pool's one cluster table in a JetStream key-value bucket: how it is
// stored (a manifest under the key "table", the encoded table in chunks that
// each fit NATS's max_payload), written with compare-and-set on the
// manifest's revision, and read back with every byte checked. Used by
// `eldr table publish` and by every node's table watcher (pool_node).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "eldr/cluster_table.hpp"
#include "eldr/pool/nats_link.hpp"
#include "eldr/status.hpp"

namespace eldr::pool {

// Epochs of pool tables: above every epoch a node reaches by itself (it
// starts at 1 and counts its own reloads), so a switch to the pool's table
// is always visible, and the same on every node (base + the revision).
inline constexpr uint64_t kPoolEpochBase = uint64_t{1} << 40;
inline constexpr const char* kPoolTableKey = "table";

std::string pool_bucket(std::string_view pool);  // "eldr_<pool>"

struct PoolTable {
  uint64_t revision = 0;  // the manifest's
  ClusterTable table;
  uint64_t epoch() const noexcept { return kPoolEpochBase + revision; }
};

// Verifies `table`, writes its chunks, then the manifest: with
// expect_revision, only if the manifest is at that revision (0: only if
// there is none yet); without, only if it is still at the revision read
// just before (no lost update either way). A refusal is Errc::state and
// names the revision found; the chunks it wrote are removed again.
// chunk_bytes: at most the server's max_payload minus headroom.
Result<uint64_t> publish_pool_table(KeyValue& kv, const ClusterTable& table,
                                    std::optional<uint64_t> expect_revision, size_t chunk_bytes);

// The table a manifest entry names, every chunk checked (sizes, hash,
// decode, validate). Errc::not_found when a chunk is gone (a newer table
// replaced it: the next manifest follows).
Result<PoolTable> read_pool_table(KeyValue& kv, const KeyValue::Entry& manifest);
// The bucket's current table, if it holds one.
Result<std::optional<PoolTable>> fetch_pool_table(KeyValue& kv);

}  // namespace eldr::pool
