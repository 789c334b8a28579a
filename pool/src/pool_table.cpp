#include "eldr/pool/pool_table.hpp"

#define XXH_INLINE_ALL  // header-only, as in request_map.hpp
#include <xxhash.h>

#include <nlohmann/json.hpp>
#include <random>

namespace eldr::pool {

namespace {

constexpr uint32_t kManifestVersion = 1;
constexpr uint32_t kMaxChunks = 4096;

std::string random_id() {
  std::random_device rd;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%08x%08x", rd(), rd());
  return buf;
}

std::string chunk_key(const std::string& id, uint32_t i) {
  return "chunk." + id + "." + std::to_string(i);
}

struct Manifest {
  std::string id;
  uint64_t bytes = 0;
  uint64_t xxh3 = 0;
  uint32_t chunks = 0;
};

Result<Manifest> parse_manifest(const std::vector<uint8_t>& value) {
  const auto j = nlohmann::json::parse(value.begin(), value.end(), nullptr, false);
  const auto bad = [](const std::string& why) {
    return Status{Errc::corrupt, "the pool's table manifest " + why};
  };
  if (!j.is_object()) return bad("is not a JSON object");
  if (j.value("version", 0u) != kManifestVersion)
    return bad("has version " + std::to_string(j.value("version", 0u)) + ", this build reads " +
               std::to_string(kManifestVersion));
  Manifest m;
  if (!j.contains("id") || !j["id"].is_string() || !j.contains("bytes") ||
      !j["bytes"].is_number_unsigned() || !j.contains("xxh3") || !j["xxh3"].is_string() ||
      !j.contains("chunks") || !j["chunks"].is_number_unsigned())
    return bad("lacks id, bytes, xxh3 or chunks");
  m.id = j["id"].get<std::string>();
  m.bytes = j["bytes"].get<uint64_t>();
  m.chunks = j["chunks"].get<uint32_t>();
  if (m.id.empty() || m.id.size() > 32 || m.chunks == 0 || m.chunks > kMaxChunks || m.bytes == 0 ||
      m.bytes > (uint64_t{1} << 32))
    return bad("has impossible values");
  for (char c : m.id)
    if (!std::isxdigit(static_cast<unsigned char>(c))) return bad("has a bad id");
  try {
    m.xxh3 = std::stoull(j["xxh3"].get<std::string>(), nullptr, 16);
  } catch (...) {
    return bad("has a bad hash");
  }
  return m;
}

}  // namespace

std::string pool_bucket(std::string_view pool) { return "eldr_" + std::string(pool); }

Result<uint64_t> publish_pool_table(KeyValue& kv, const ClusterTable& table,
                                    std::optional<uint64_t> expect_revision, size_t chunk_bytes) {
  ELDR_TRY(table.validate());
  if (chunk_bytes < 1024) return Status{Errc::invalid_argument, "chunks of at least 1 KiB"};
  const std::vector<uint8_t> bytes = encode_table(table);
  const size_t chunks = (bytes.size() + chunk_bytes - 1) / chunk_bytes;
  if (chunks > kMaxChunks)
    return Status{Errc::capacity, "a table of " + std::to_string(bytes.size()) +
                                      " bytes needs more than " + std::to_string(kMaxChunks) +
                                      " chunks"};
  // The revision the manifest must still be at when it is replaced.
  uint64_t last = 0;
  std::optional<Manifest> previous;
  if (expect_revision) {
    last = *expect_revision;
  } else {
    auto current = kv.get(kPoolTableKey);
    if (!current) return current.status();
    if (*current && !(*current)->deleted) {
      last = (*current)->revision;
      if (auto m = parse_manifest((*current)->value)) previous = *m;
    }
  }
  const std::string id = random_id();
  for (size_t i = 0; i < chunks; ++i) {
    const size_t at = i * chunk_bytes;
    const size_t n = std::min(chunk_bytes, bytes.size() - at);
    auto put = kv.put(chunk_key(id, static_cast<uint32_t>(i)), {bytes.data() + at, n});
    if (!put) return put.status();
  }
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016llx",
                static_cast<unsigned long long>(XXH3_64bits(bytes.data(), bytes.size())));
  const nlohmann::json manifest = {{"version", kManifestVersion},
                                   {"id", id},
                                   {"bytes", bytes.size()},
                                   {"xxh3", hash},
                                   {"chunks", chunks},
                                   {"model", table.model},
                                   {"geometry", table.geometry.to_string()},
                                   {"workers", table.num_clusters()}};
  const std::string text = manifest.dump();
  const std::span<const uint8_t> value(reinterpret_cast<const uint8_t*>(text.data()), text.size());
  auto written =
      last == 0 ? kv.create(kPoolTableKey, value) : kv.update(kPoolTableKey, value, last);
  if (!written) {
    for (size_t i = 0; i < chunks; ++i) (void)kv.erase(chunk_key(id, static_cast<uint32_t>(i)));
    if (written.status().code() != Errc::state) return written.status();
    auto now = kv.get(kPoolTableKey);
    const uint64_t found = now && *now ? (*now)->revision : 0;
    return Status{Errc::state, "the pool's table is at revision " + std::to_string(found) +
                                   ", not " + std::to_string(last) +
                                   ": another table was published meanwhile (read it again, "
                                   "then publish)"};
  }
  // The previous table's chunks: nodes that still read them will read the
  // new manifest next (read_pool_table says not_found meanwhile).
  if (previous)
    for (uint32_t i = 0; i < previous->chunks; ++i) (void)kv.erase(chunk_key(previous->id, i));
  return *written;
}

Result<PoolTable> read_pool_table(KeyValue& kv, const KeyValue::Entry& entry) {
  auto m = parse_manifest(entry.value);
  if (!m) return m.status();
  std::vector<uint8_t> bytes;
  bytes.reserve(m->bytes);
  for (uint32_t i = 0; i < m->chunks; ++i) {
    auto chunk = kv.get(chunk_key(m->id, i));
    if (!chunk) return chunk.status();
    if (!*chunk || (*chunk)->deleted)
      return Status{Errc::not_found, "chunk " + std::to_string(i) +
                                         " of the pool's table "
                                         "revision " +
                                         std::to_string(entry.revision) + " is gone"};
    if (bytes.size() + (*chunk)->value.size() > m->bytes)
      return Status{Errc::corrupt, "the pool's table chunks exceed the manifest's size"};
    bytes.insert(bytes.end(), (*chunk)->value.begin(), (*chunk)->value.end());
  }
  if (bytes.size() != m->bytes || XXH3_64bits(bytes.data(), bytes.size()) != m->xxh3)
    return Status{Errc::corrupt, "the pool's table revision " + std::to_string(entry.revision) +
                                     " does not match its manifest (size or hash)"};
  auto table = decode_table(bytes);
  if (!table) return table.status();
  ELDR_TRY(table->validate());
  return PoolTable{entry.revision, std::move(*table)};
}

Result<std::optional<PoolTable>> fetch_pool_table(KeyValue& kv) {
  auto current = kv.get(kPoolTableKey);
  if (!current) return current.status();
  if (!*current || (*current)->deleted) return std::optional<PoolTable>{};
  auto t = read_pool_table(kv, **current);
  if (!t) return t.status();
  return std::optional<PoolTable>{std::move(*t)};
}

}  // namespace eldr::pool
