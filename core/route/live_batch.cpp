#include "live_batch.hpp"

#include <algorithm>
#include <cmath>

#include "eldr/internal/vector_kernels.hpp"
#include "eldr/random.hpp"

namespace eldr::detail {

Result<std::unique_ptr<LiveBatches>> LiveBatches::create(const Geometry& g, uint32_t slots,
                                                         uint32_t max_inflight, uint32_t cost_cells,
                                                         bool track_footprints) {
  ELDR_TRY(g.validate());
  if (max_inflight == 0 || max_inflight > (1u << 24))
    return Status{Errc::invalid_argument, "max_inflight must be in [1, 16777216]"};
  if (cost_cells == 0) return Status{Errc::invalid_argument, "cost_cells must be >= 1"};
  std::unique_ptr<LiveBatches> b(new LiveBatches());
  b->m_track = track_footprints;
  b->m_layout = cost_cells_of(g, cost_cells);
  b->m_top_k = g.top_k;
  b->m_layer_scale = b->m_layout.layer_scale(g);
  b->m_cells = track_footprints ? b->m_layout.count() : 0;
  b->m_slots.resize(slots);
  b->m_sum.assign(size_t{slots} * b->m_cells, 0);
  b->m_keep.assign(size_t{slots} * b->m_cells, 1.0f);
  b->m_demand.assign(b->m_cells, 0.0f);
  b->m_q12.assign(b->m_cells, 0);
  for (uint32_t k = 0; k < kDemandCodes; ++k) {
    b->m_level[k] = demand_code_levels()[k];
    b->m_factor[k] = static_cast<float>(std::exp2(-b->m_level[k] / 4096.0));
  }
  b->m_records.resize(max_inflight);
  if (b->m_cells) b->m_codes.reset(new uint8_t[size_t{max_inflight} * b->m_cells]);
  for (uint32_t r = 0; r < max_inflight; ++r)
    b->m_records[r].next = r + 1 < max_inflight ? r + 1 : kNoRecord;
  b->m_free = 0;
  size_t capacity = 16;
  while (capacity < size_t{max_inflight} * 2) capacity *= 2;
  b->m_ids.assign(capacity, IdEntry{0, kNoRecord});
  return b;
}

LiveBatches::~LiveBatches() = default;

float LiveBatches::demand(std::span<const int16_t> counts, float* p) const noexcept {
  float total = 0.0f;
  const uint32_t experts = m_layout.experts;
  for (uint32_t i = 0; i < m_layout.layers_read; ++i) {
    const int16_t* row = counts.data() + size_t{i} * m_layout.stride * experts;
    float* out = p + size_t{i} * experts;
    // The prompt's tokens: each picked top_k experts of this layer.
    const int64_t sum = kernels::sum16(row, experts);
    double tokens = 0.0;
    if (m_top_k > 0) {
      tokens = static_cast<double>(sum) / m_top_k;
    } else {
      for (uint32_t e = 0; e < experts; ++e) tokens = std::max<double>(tokens, row[e]);
    }
    if (tokens <= 0.0) {
      std::fill_n(out, experts, 0.0f);
      continue;
    }
    total += kernels::scaled_counts(row, experts, static_cast<float>(1.0 / tokens), out);
  }
  return total;
}

void LiveBatches::encode(const float* p, size_t n, uint16_t* q12, uint8_t* codes) noexcept {
  kernels::log_keep_q12(p, n, q12);
  encode_demand(q12, n, codes);
}

LiveBatches::Join LiveBatches::admit(uint32_t slot, std::optional<uint64_t> id, bool has_demand,
                                     uint32_t& r) {
  if (id && find_id(*id)) return Join::duplicate;
  if (m_free == kNoRecord) {
    ++m_untracked;
    return Join::untracked;
  }
  r = m_free;
  Record& rec = m_records[r];
  m_free = rec.next;
  rec.id = id.value_or(0);
  rec.has_id = id.has_value();
  rec.slot = slot;
  SlotState& s = m_slots[slot];
  rec.prev = s.tail;
  rec.next = kNoRecord;
  if (s.tail != kNoRecord) m_records[s.tail].next = r;
  s.tail = r;
  if (s.head == kNoRecord) s.head = r;
  ++s.count;
  if (id) insert_id(*id, r);
  // A slot's int32 q12 sums stay below 2^31 while at most kMaxFootprints
  // requests add theirs (each adds <= 40,822 per cell); requests beyond that
  // are recorded without a footprint.
  rec.footprint = has_demand && m_cells && s.footprints < kMaxFootprints;
  return Join::joined;
}

void LiveBatches::add_codes(uint32_t r) {
  Record& rec = m_records[r];
  SlotState& s = m_slots[rec.slot];
  ++s.footprints;
  int32_t* sum = &m_sum[size_t{rec.slot} * m_cells];
  float* keep = &m_keep[size_t{rec.slot} * m_cells];
  const uint8_t* codes = &m_codes[size_t{r} * m_cells];
  // keep *= 2^(-level / 4096): within float rounding of 2^(-sum), which the
  // next leave restores exactly; no exponentials on the route path. A
  // booking of the same codes does the same arithmetic.
  const double total =
      kernels::add_codes(sum, keep, codes, m_cells, m_level.data(), m_factor.data());
  s.distinct = std::max(0.0, static_cast<double>(m_cells) - total);
}

LiveBatches::Join LiveBatches::join(uint32_t slot, std::optional<uint64_t> id, const float* p) {
  uint32_t r = kNoRecord;
  const Join joined = admit(slot, id, p != nullptr, r);
  if (joined == Join::joined && m_records[r].footprint) {
    encode(p, m_cells, m_q12.data(), &m_codes[size_t{r} * m_cells]);
    add_codes(r);
  }
  return joined;
}

LiveBatches::Join LiveBatches::join_codes(uint32_t slot, std::optional<uint64_t> id,
                                          const uint8_t* codes) {
  uint32_t r = kNoRecord;
  const Join joined = admit(slot, id, codes != nullptr, r);
  if (joined == Join::joined && m_records[r].footprint) {
    std::copy_n(codes, m_cells, &m_codes[size_t{r} * m_cells]);
    add_codes(r);
  }
  return joined;
}

void LiveBatches::unlink(uint32_t r) {
  Record& rec = m_records[r];
  SlotState& s = m_slots[rec.slot];
  (rec.prev != kNoRecord ? m_records[rec.prev].next : s.head) = rec.next;
  (rec.next != kNoRecord ? m_records[rec.next].prev : s.tail) = rec.prev;
  --s.count;
  if (rec.has_id) erase_id(rec.id);
  if (rec.footprint) {
    --s.footprints;
    int32_t* sum = &m_sum[size_t{rec.slot} * m_cells];
    const uint8_t* codes = &m_codes[size_t{r} * m_cells];
    kernels::sub_codes(sum, codes, m_cells, m_level.data());
    refresh(rec.slot);
  }
  rec.has_id = false;
  rec.footprint = false;
  rec.prev = kNoRecord;
  rec.next = m_free;
  m_free = r;
}

Result<uint32_t> LiveBatches::leave_id(uint64_t id) {
  const uint32_t* r = find_id(id);
  if (!r) return Status{Errc::not_found, "no request " + std::to_string(id) + " in flight"};
  const uint32_t record = *r;
  const uint32_t slot = m_records[record].slot;
  unlink(record);
  return slot;
}

bool LiveBatches::leave_oldest(uint32_t slot) noexcept {
  if (m_slots[slot].head == kNoRecord) return false;
  unlink(m_slots[slot].head);
  return true;
}

void LiveBatches::refresh(uint32_t slot) {
  SlotState& s = m_slots[slot];
  const size_t at = size_t{slot} * m_cells;
  if (s.footprints == 0) {  // an empty batch is exactly empty
    std::fill_n(&m_keep[at], m_cells, 1.0f);
    s.distinct = 0.0;
    return;
  }
  const float kept = kernels::keep_from_q12(&m_sum[at], m_cells, &m_keep[at]);
  s.distinct = std::max(0.0, static_cast<double>(m_cells) - kept);
}

uint32_t* LiveBatches::find_id(uint64_t id) noexcept {
  const size_t mask = m_ids.size() - 1;
  for (size_t i = splitmix64(id) & mask;; i = (i + 1) & mask) {
    if (m_ids[i].record == kNoRecord) return nullptr;
    if (m_ids[i].id == id) return &m_ids[i].record;
  }
}

void LiveBatches::insert_id(uint64_t id, uint32_t record) noexcept {
  const size_t mask = m_ids.size() - 1;
  size_t i = splitmix64(id) & mask;
  while (m_ids[i].record != kNoRecord) i = (i + 1) & mask;
  m_ids[i] = {id, record};
}

void LiveBatches::erase_id(uint64_t id) noexcept {
  const size_t mask = m_ids.size() - 1;
  size_t i = splitmix64(id) & mask;
  while (m_ids[i].id != id || m_ids[i].record == kNoRecord) i = (i + 1) & mask;
  // Backward shift: pull later entries of the probe run into the hole.
  for (size_t j = (i + 1) & mask;; j = (j + 1) & mask) {
    if (m_ids[j].record == kNoRecord) break;
    const size_t home = splitmix64(m_ids[j].id) & mask;
    // Move j into i when its home does not lie cyclically in (i, j].
    if (((j - home) & mask) >= ((j - i) & mask)) {
      m_ids[i] = m_ids[j];
      i = j;
    }
  }
  m_ids[i].record = kNoRecord;
}

}  // namespace eldr::detail
