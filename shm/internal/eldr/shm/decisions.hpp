// The decision table: decision_slots seqlock cells written only by the daemon,
// read by any client. A request id hashes (XXH3) to two runs of kProbe cells;
// the writer reuses the cell holding the same id, else an empty one, else the
// oldest of both runs. Readers never block the writer: they retry a torn read.
//
// Retention: the table is bounded and the writer never waits for a reader, so
// a decision nobody has read is eventually overwritten. With a full table the
// oldest of 16 cells in two independent runs is, in simulation (20M random
// ids, 65,536 slots), never younger than 0.34 x decision_slots publishes; a
// single run of 8 evicted decisions 0.075 x decision_slots old (the soak's
// lost decisions). A reader that trails the daemon by more than about a third
// of decision_slots decisions (a stalled gateway) loses its oldest ones:
// size decision_slots to the decision rate times the longest reader stall.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "eldr/shm.hpp"
#include "eldr/shm/layout.hpp"

namespace eldr::shm::detail {

// Writes (or overwrites) request_id's decision. Single writer only. Returns
// the publish time of another request's decision it overwrote, if it did.
// Cells keep publish times to the microsecond (format 2.2: the word holds
// the confidence too), so the caller makes them strictly increasing in
// microseconds (Host::publish): the oldest of a probe run is then always
// the one evicted.
std::optional<uint64_t> publish_decision(DecisionCell* cells, uint32_t slots,
                                         std::string_view request_id, const DecisionIn& decision,
                                         uint64_t publish_ns);
// The decision for request_id, if a consistent copy of its cell was read.
// with_confidence: the daemon is format 2.2 or later (before, the stamp is
// its publish time and the confidence 1).
std::optional<DecisionIn> lookup_decision(const DecisionCell* cells, uint32_t slots,
                                          std::string_view request_id, bool with_confidence = true);

// The worker rows, one seqlock over the whole table (single writer).
// `router`, when given, is published in the same seqlock (format 1.1).
void write_workers(SegmentHeader& header, WorkerCell* cells, uint32_t capacity,
                   std::span<const Host::WorkerRow> rows, uint64_t table_epoch,
                   const Host::RouterRow* router = nullptr);
// False when no consistent copy was read within a few tries. `router`, when
// given, is set if the daemon published one (a 1.0 daemon never does).
bool read_workers(const SegmentHeader& header, const WorkerCell* cells, uint32_t capacity,
                  std::vector<Host::WorkerRow>& out,
                  std::optional<Host::RouterRow>* router = nullptr);

// The pool status text (format 2.1), a seqlock of its own (single writer).
void write_pool_status(SegmentHeader& header, PoolStatusCell& cell, std::string_view json);
bool read_pool_status(const SegmentHeader& header, const PoolStatusCell& cell, std::string& out);

}  // namespace eldr::shm::detail
