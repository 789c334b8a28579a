// The decision table: decision_slots seqlock cells written only by the daemon,
// read by any client. A request id hashes (XXH3) to a run of kProbe cells; the
// writer reuses the cell holding the same id, else an empty one, else the
// oldest of the run. Readers never block the writer: they retry a torn read.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "eldr/shm.hpp"
#include "shm_layout.hpp"

namespace eldr::shm::detail {

// Writes (or overwrites) request_id's decision. Single writer only.
void publish_decision(DecisionCell* cells, uint32_t slots, std::string_view request_id,
                      const DecisionIn& decision, uint64_t publish_ns);
// The decision for request_id, if a consistent copy of its cell was read.
std::optional<DecisionIn> lookup_decision(const DecisionCell* cells, uint32_t slots,
                                          std::string_view request_id);

// The worker rows, one seqlock over the whole table (single writer).
void write_workers(SegmentHeader& header, WorkerCell* cells, uint32_t capacity,
                   std::span<const Host::WorkerRow> rows, uint64_t table_epoch);
// False when no consistent copy was read within a few tries.
bool read_workers(const SegmentHeader& header, const WorkerCell* cells, uint32_t capacity,
                  std::vector<Host::WorkerRow>& out);

}  // namespace eldr::shm::detail
