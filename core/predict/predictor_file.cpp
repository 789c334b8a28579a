// The predictor's serialised form (docs/design.md §5.6), stored in the table
// file's `predictor` field. Little-endian, versioned, every size and value
// checked on decode (the bytes are untrusted):
//   u32 magic "EPRD", u32 version, u32 layers, u32 experts, u32 top_k,
//   u32 capacity, u32 neighbours, f32 bandwidth, u32 max_features,
//   u64 learned, u32 records, then per record in ring order (oldest first):
//   u8 kinds (bit k: features of PromptKind k follow), per kind present
//   u16 n, u32 keys[n], u16 counts[n]; then u8 demand[L * E].
#include <cstring>

#include "snapshot.hpp"

namespace eldr {

namespace {

constexpr uint32_t kMagic = 0x44525045;  // "EPRD"

template <class T>
void put(std::vector<uint8_t>& out, T v) {
  const size_t at = out.size();
  out.resize(at + sizeof v);
  std::memcpy(out.data() + at, &v, sizeof v);
}

struct Reader {
  std::span<const uint8_t> in;
  size_t at = 0;
  template <class T>
  bool get(T& v) {
    if (in.size() - at < sizeof v) return false;
    std::memcpy(&v, in.data() + at, sizeof v);
    at += sizeof v;
    return true;
  }
  bool bytes(void* dst, size_t n) {
    if (in.size() - at < n) return false;
    std::memcpy(dst, in.data() + at, n);
    at += n;
    return true;
  }
};

Status corrupt(const std::string& what) { return {Errc::corrupt, "predictor: " + what}; }

}  // namespace

std::vector<uint8_t> Predictor::encode() const {
  std::lock_guard lock(m_mutex);
  std::vector<uint8_t> out;
  put(out, kMagic);
  put(out, kPredictorVersion);
  put(out, m_geometry.layers);
  put(out, m_geometry.experts);
  put(out, m_geometry.top_k);
  put(out, m_options.capacity);
  put(out, m_options.neighbours);
  put(out, m_options.bandwidth);
  put(out, m_options.max_features);
  put(out, m_learned);
  put(out, static_cast<uint32_t>(m_records.size()));
  const size_t n = m_records.size();
  const size_t first = n == m_options.capacity ? m_next : 0;
  for (size_t i = 0; i < n; ++i) {
    const Record& r = *m_records[(first + i) % n];
    uint8_t kinds = 0;
    for (uint32_t k = 0; k < kPromptKinds; ++k)
      if (r.has(static_cast<PromptKind>(k))) kinds |= static_cast<uint8_t>(1u << k);
    put(out, kinds);
    for (uint32_t k = 0; k < kPromptKinds; ++k) {
      const PromptFeatures& f = r.features[k];
      if (f.keys.empty()) continue;
      put(out, static_cast<uint16_t>(f.keys.size()));
      for (const uint32_t key : f.keys) put(out, key);
      for (const uint16_t c : f.counts) put(out, c);
    }
    out.insert(out.end(), r.demand.begin(), r.demand.end());
  }
  return out;
}

Result<std::shared_ptr<Predictor>> Predictor::decode(const Geometry& geometry,
                                                     std::span<const uint8_t> bytes) {
  Reader rd{bytes};
  uint32_t magic = 0, version = 0, records = 0;
  Geometry g;
  PredictorOptions o;
  uint64_t learned = 0;
  if (!rd.get(magic) || magic != kMagic) return corrupt("not a predictor (bad magic)");
  if (!rd.get(version)) return corrupt("truncated header");
  if (version != kPredictorVersion)
    return Status{Errc::incompatible, "predictor version " + std::to_string(version) +
                                          " is not supported (this build reads " +
                                          std::to_string(kPredictorVersion) + ")"};
  if (!rd.get(g.layers) || !rd.get(g.experts) || !rd.get(g.top_k) || !rd.get(o.capacity) ||
      !rd.get(o.neighbours) || !rd.get(o.bandwidth) || !rd.get(o.max_features) ||
      !rd.get(learned) || !rd.get(records))
    return corrupt("truncated header");
  if (g.layers != geometry.layers || g.experts != geometry.experts || g.top_k != geometry.top_k)
    return Status{Errc::shape_mismatch,
                  "predictor geometry " + std::to_string(g.layers) + "x" +
                      std::to_string(g.experts) + " top-" + std::to_string(g.top_k) +
                      " does not match the table's " + std::to_string(geometry.layers) + "x" +
                      std::to_string(geometry.experts) + " top-" + std::to_string(geometry.top_k)};
  if (Status st = o.validate(); !st) return corrupt(st.message());
  if (records > o.capacity) return corrupt("more records than its capacity");
  auto made = create(geometry, o);
  if (!made) return made.status();
  std::shared_ptr<Predictor> p = std::move(*made);
  const size_t cells = geometry.cells();
  std::lock_guard lock(p->m_mutex);
  for (uint32_t i = 0; i < records; ++i) {
    uint8_t kinds = 0;
    if (!rd.get(kinds)) return corrupt("truncated at record " + std::to_string(i));
    if (kinds == 0 || kinds >= (1u << kPromptKinds))
      return corrupt("record " + std::to_string(i) + " has no valid prompt kind");
    auto r = std::make_shared<Record>();
    for (uint32_t k = 0; k < kPromptKinds; ++k) {
      if (!(kinds & (1u << k))) continue;
      uint16_t n = 0;
      PromptFeatures& f = r->features[k];
      f.kind = static_cast<PromptKind>(k);
      if (!rd.get(n)) return corrupt("truncated at record " + std::to_string(i));
      if (n == 0 || n > o.max_features)
        return corrupt("record " + std::to_string(i) + " has " + std::to_string(n) + " features");
      f.keys.resize(n);
      f.counts.resize(n);
      if (!rd.bytes(f.keys.data(), n * sizeof(uint32_t)) ||
          !rd.bytes(f.counts.data(), n * sizeof(uint16_t)))
        return corrupt("truncated at record " + std::to_string(i));
      for (const uint16_t c : f.counts)
        if (c == 0) return corrupt("record " + std::to_string(i) + " has a zero count");
    }
    r->demand.resize(cells);
    if (!rd.bytes(r->demand.data(), cells))
      return corrupt("truncated at record " + std::to_string(i));
    p->m_records.push_back(std::move(r));
  }
  if (rd.at != bytes.size()) return corrupt("trailing bytes after the last record");
  p->m_learned = learned;
  p->m_next = 0;
  if (!p->m_records.empty()) p->rebuild_locked();
  return p;
}

}  // namespace eldr
