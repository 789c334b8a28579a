// The router's live view of every worker's batch (docs/design.md §5.3): which
// requests are in flight where, and, for eldr_cost, each worker's batch
// footprint. Private to route/; the Router serialises every call with one
// mutex.
//
// A request's *demand* is its predicted per-token usage of each cost cell,
// p = count / prompt tokens from its prefill footprint (capped at
// kMaxDemand). A worker's batch keeps, per cell, keep = P(no request of the
// batch uses it) = prod (1 - p), so one more request adds
// sum_c keep[c] * p[c] distinct experts in expectation: one dot product per
// worker. keep is a function of an exact integer sum of -log2(1 - p) in
// q12 units (vector_kernels.hpp), each request's rounded to its demand code
// (demand_code.hpp), so completion removes exactly what the route added,
// however long the router runs, and a booking that carries the codes puts a
// request in another router's batch exactly as its own router did.
//
// Cost cells: every s-th layer, s chosen so that at most `cost_cells` cells
// are read (all layers for small models); sums are scaled by L / layers read.
//
// Memory: per worker slot 8 bytes per cost cell; per in-flight request 48
// bytes plus 1 byte per cost cell (1 KiB at the default 1,024 cells), in a
// pool of max_inflight records fixed at creation (the hot path never
// allocates). A route that finds the pool full is still routed and counted in
// flight, but its footprint is not tracked (counted: untracked()).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "eldr/demand_code.hpp"
#include "eldr/geometry.hpp"
#include "eldr/status.hpp"

namespace eldr::detail {

inline constexpr uint32_t kNoRecord = 0xffffffffu;
// Footprints one slot's batch sums hold at most (2^31 / 40,822 per cell).
inline constexpr uint32_t kMaxFootprints = 32768;

class LiveBatches {
 public:
  // track_footprints: keep batch footprints (eldr_cost); otherwise only the
  // request records (complete by id, oldest first).
  static Result<std::unique_ptr<LiveBatches>> create(const Geometry& geometry, uint32_t slots,
                                                     uint32_t max_inflight, uint32_t cost_cells,
                                                     bool track_footprints);
  ~LiveBatches();

  bool tracks_footprints() const noexcept { return m_track; }
  uint32_t cells() const noexcept { return m_cells; }  // cost cells (0 without footprints)
  // The cells a demand covers, whether or not batches are kept.
  const CostCells& layout() const noexcept { return m_layout; }
  // L / layers read: scales a cost-cell sum to the whole model.
  double layer_scale() const noexcept { return m_layer_scale; }

  // The demand of a footprint ([L][E] counts of the table's geometry) into
  // p (layout().count() floats); returns sum p, unscaled.
  float demand(std::span<const int16_t> counts, float* p) const noexcept;
  // A demand's codes (layout().count() each): q12 scratch, then codes.
  static void encode(const float* p, size_t n, uint16_t* q12, uint8_t* codes) noexcept;

  // A buffer of cells() floats for one decision's demand (under the lock).
  float* demand_scratch() noexcept { return m_demand.data(); }

  // Per slot: keep[] (cells() floats, all 1 for an empty batch) and the
  // expected distinct cost cells of its batch, sum (1 - keep), unscaled.
  const float* keep(uint32_t slot) const noexcept { return &m_keep[size_t{slot} * m_cells]; }
  double distinct(uint32_t slot) const noexcept { return m_slots[slot].distinct; }
  uint32_t requests(uint32_t slot) const noexcept { return m_slots[slot].count; }

  // A routed request joins `slot`'s batch: p is its demand (ignored without
  // footprints). duplicate: the id is already in flight (nothing changes);
  // untracked: every record is in use (the caller still routes it;
  // untracked() counts it). No allocation on any outcome.
  enum class Join { joined, duplicate, untracked };
  Join join(uint32_t slot, std::optional<uint64_t> id, const float* p);
  // The same with the demand as codes (cells() of them, or null).
  Join join_codes(uint32_t slot, std::optional<uint64_t> id, const uint8_t* codes);
  // The request with this id leaves; returns its slot. not_found if unknown.
  Result<uint32_t> leave_id(uint64_t id);
  // The oldest request on `slot` leaves (its id, if any, is forgotten);
  // false when the slot has none.
  bool leave_oldest(uint32_t slot) noexcept;

  uint64_t untracked() const noexcept { return m_untracked; }

 private:
  struct Record {
    uint64_t id = 0;
    bool has_id = false;
    bool footprint = false;  // its q12 logs are in its slot's sums
    uint32_t slot = 0;
    uint32_t prev = kNoRecord, next = kNoRecord;  // the slot's FIFO; next = free list
  };
  struct SlotState {
    uint32_t head = kNoRecord, tail = kNoRecord;  // oldest, newest
    uint32_t count = 0;
    uint32_t footprints = 0;  // records whose footprint is in the sums
    double distinct = 0.0;
  };
  LiveBatches() = default;
  // The record of a new request (linked, id indexed), its footprint flag set
  // when it brings a demand and the slot's sums have room.
  Join admit(uint32_t slot, std::optional<uint64_t> id, bool has_demand, uint32_t& record);
  // Record r's codes (already in place) join its slot's sums.
  void add_codes(uint32_t r);
  void unlink(uint32_t r);
  void refresh(uint32_t slot);  // keep and distinct from the slot's q12 sums
  // Id index: open addressing, linear probing, backward-shift deletion.
  uint32_t* find_id(uint64_t id) noexcept;
  void insert_id(uint64_t id, uint32_t record) noexcept;
  void erase_id(uint64_t id) noexcept;

  bool m_track = false;
  CostCells m_layout;
  uint32_t m_top_k = 0;
  uint32_t m_cells = 0;
  double m_layer_scale = 1.0;
  std::vector<SlotState> m_slots;
  std::vector<int32_t> m_sum;                   // [slots][cells]: q12 sums
  std::vector<float> m_keep;                    // [slots][cells]
  std::vector<float> m_demand;                  // [cells]
  std::vector<uint16_t> m_q12;                  // [cells]: join's scratch
  std::array<int32_t, kDemandCodes> m_level{};  // per code: its q12 value
  std::array<float, kDemandCodes> m_factor{};   // and 2^(-level / 4096)
  std::vector<Record> m_records;
  std::unique_ptr<uint8_t[]> m_codes;  // [max_inflight][cells], left untouched until used
  uint32_t m_free = kNoRecord;
  struct IdEntry {
    uint64_t id;
    uint32_t record;  // kNoRecord = empty
  };
  std::vector<IdEntry> m_ids;  // power-of-two capacity >= 2 * max_inflight
  uint64_t m_untracked = 0;
};

}  // namespace eldr::detail
