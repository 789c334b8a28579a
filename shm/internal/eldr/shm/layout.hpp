// The shared-memory segment's byte layout (format v1). Everything here crosses
// process (and language) boundaries: plain structs of fixed-width integers and
// lock-free atomics, integer offsets from the segment base, no pointers. Every
// struct's size and field offsets are pinned by static_asserts and folded into
// kLayoutHash, which the header carries: a client built against a different
// layout refuses the segment instead of misreading it.
//
//   [SegmentHeader][ClientRow x max_clients][RingControl + data x max_clients]
//   [DecisionCell x decision_slots][WorkerCell x max_workers]
//
// Writers: the daemon writes the header, the rows' daemon-side fields, the
// consumer positions, the decision cells and the worker cells. Client i
// writes its row's client-side fields, ring i's producer position and data.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "eldr/shm.hpp"

namespace eldr::shm::detail {

static_assert(std::atomic<uint64_t>::is_always_lock_free &&
                  sizeof(std::atomic<uint64_t>) == sizeof(uint64_t),
              "the shared layout needs lock-free 64-bit atomics");
static_assert(std::atomic<uint32_t>::is_always_lock_free &&
                  sizeof(std::atomic<uint32_t>) == sizeof(uint32_t),
              "the shared layout needs lock-free 32-bit atomics");

inline constexpr char kMagic[8] = {'E', 'L', 'D', 'R', 'S', 'H', 'M', '\0'};
inline constexpr size_t kCacheLine = 64;
// Hot words written by different processes sit 128 bytes apart: the
// adjacent-line prefetcher pulls cache lines in pairs.
inline constexpr size_t kBlock = 128;
inline constexpr size_t kPage = 4096;

enum class SegmentState : uint32_t { creating = 0, ready = 1, draining = 2 };
enum class RowState : uint32_t { free = 0, active = 1, dead = 2 };

struct SegmentHeader {
  // ---- identity: written once before READY. The first 16 bytes (magic,
  // major, minor, header size) keep their place in every future format.
  char magic[8];
  uint32_t format_major;
  uint32_t format_minor;
  uint32_t header_size;
  uint32_t cache_line;
  uint64_t segment_size;
  uint64_t layout_hash;
  uint32_t max_clients;
  uint32_t ring_bytes;
  uint32_t decision_slots;
  uint32_t max_workers;
  uint64_t clients_offset;
  uint64_t rings_offset;
  uint64_t ring_stride;  // RingControl + ring_bytes, page aligned
  uint64_t decisions_offset;
  uint64_t workers_offset;
  uint64_t generation;  // random per daemon start (and per recreation)
  uint32_t daemon_pid;
  uint32_t reserved0;
  uint64_t daemon_start_time;  // /proc/<pid>/stat field 22, clock ticks since boot
  uint64_t lock_dev;           // st_dev / st_ino of the lock file, so a client
  uint64_t lock_ino;           // can tell it opened the daemon's file
  char lock_path[256];         // NUL-terminated

  // ---- daemon liveness
  alignas(kBlock) std::atomic<uint32_t> state;  // SegmentState; READY stored last
  uint32_t reserved1;
  std::atomic<uint64_t> heartbeat_ns;  // CLOCK_MONOTONIC

  // ---- published state (eldr status)
  alignas(kBlock) std::atomic<uint64_t> table_epoch;
  std::atomic<uint64_t> decisions_published;
  std::atomic<uint64_t> workers_seq;  // seqlock over worker_count + the worker cells
  std::atomic<uint32_t> worker_count;
  uint32_t reserved2;
  // Format 1.1 (in this block's padding, zero in a 1.0 segment, not in the
  // layout hash: 1.0 readers keep opening 1.1 segments): the router's state,
  // written inside the workers' seqlock. Doubles as their bits.
  std::atomic<uint32_t> router_policy;  // eldr::Policy + 1; 0 = not published
  std::atomic<uint32_t> step_max_batch;
  std::atomic<uint64_t> step_t0_ms;  // the step constants in force (bit_cast<double>)
  std::atomic<uint64_t> step_tseq_ms;
  std::atomic<uint64_t> step_alpha_us;
  std::atomic<uint64_t> step_samples;       // reports the online fit used
  std::atomic<uint64_t> completes_unknown;  // completes of a request not in flight
  std::atomic<uint64_t> untracked;          // routes the router kept no record of
  std::atomic<uint64_t> completes_refused;  // completes without the token, not from the pusher

  // ---- doorbell: producers wake a sleeping daemon
  alignas(kBlock) std::atomic<uint32_t> doorbell;  // futex word
  std::atomic<uint32_t> daemon_sleeping;

  // ---- decisions: waiters sleep on decision_seq
  alignas(kBlock) std::atomic<uint32_t> decision_seq;  // futex word
  std::atomic<uint32_t> decision_waiters;
};

struct alignas(kBlock) ClientRow {
  std::atomic<uint32_t> state;  // RowState; the client stores ACTIVE, the daemon DEAD/FREE
  std::atomic<uint32_t> pid;
  std::atomic<uint64_t> start_time;    // with pid and epoch: the client's identity
  std::atomic<uint64_t> epoch;         // daemon: bumped on every reclaim
  std::atomic<uint64_t> heartbeat_ns;  // client: CLOCK_MONOTONIC of its last call
  uint64_t ring_offset;                // daemon, immutable
  std::atomic<uint64_t> records;       // daemon: records accepted
  std::atomic<uint64_t> rejected;      // daemon: records rejected
  std::atomic<uint32_t> quarantined;   // daemon: ring skipped after a protocol violation
  uint32_t reserved;
};

// Positions count bytes since registration and only grow; index = pos & (cap-1).
struct RingControl {
  alignas(kBlock) std::atomic<uint64_t> producer;  // client: release-stored commit
  alignas(kBlock) std::atomic<uint64_t> consumer;  // daemon: release-stored after reading
};

// Record framing: 32-byte header, payload, zero padding up to 32-byte
// alignment, so a padding record's header always fits at the wrap.
struct RecordHeader {
  uint32_t length;    // payload bytes
  uint16_t type;      // RecordType
  uint16_t schema;    // payload schema number of that type
  uint64_t sequence;  // per registration: 0, 1, 2, ... (padding records carry none)
  uint32_t epoch;     // low 32 bits of the row's epoch
  uint32_t checksum;  // record_checksum(payload), unless flags & kRecordNoChecksum
  uint32_t flags;
  uint32_t reserved;
};
inline constexpr uint32_t kRecordAlign = 32;
inline constexpr uint32_t kRecordNoChecksum = 1;  // GPU writers: payload unchecksummed
// How RecordHeader::checksum is computed (folded into kLayoutHash, so a
// producer and a daemon that disagree refuse each other's segment).
// 1: XXH32(payload, seed 0) (earlier builds); 2: low 32 bits of XXH3_64bits(payload).
inline constexpr uint32_t kRecordChecksumScheme = 2;

// A seqlock cell (single writer: the daemon). The payload is kept in atomic
// words so that a reader racing the writer is well-defined (relaxed loads,
// validated by the sequence).
inline constexpr size_t kDecisionWords = 23;
struct alignas(kCacheLine) DecisionCell {
  std::atomic<uint64_t> seq;  // 0 = empty, odd = being written
  std::atomic<uint64_t> words[kDecisionWords];
};
// What the words hold (packed/unpacked with memcpy).
struct DecisionPayload {
  uint16_t id_length;
  uint16_t policy;
  int32_t status;
  int32_t worker;
  float similarity;
  uint32_t band_size;
  uint32_t latency_ns;  // saturates at ~4.3 s
  uint64_t table_epoch;
  uint64_t publish_ns;  // CLOCK_MONOTONIC; the oldest of a probe run is evicted
  uint64_t id_hash;     // XXH3_64bits(id): a probe dismisses other ids on the first cache line
  uint64_t completion_token;  // what a complete of this request presents
  char id[kMaxRequestId];
};
// The words before the id: all a probe reads of a cell that holds another id.
inline constexpr size_t kDecisionHeadWords = offsetof(DecisionPayload, id) / 8;

inline constexpr size_t kWorkerWords = 4;
struct WorkerCell {
  std::atomic<uint64_t> words[kWorkerWords];
};
struct WorkerPayload {
  int32_t worker;
  uint8_t state;
  uint8_t healthy;
  uint16_t reserved;
  uint32_t inflight;
  uint32_t running;
  float kv_usage;
  float batch_experts;  // format 1.1 (0 before): expected distinct experts of its batch
  uint64_t routed;
};

// ---- pinned layout ----------------------------------------------------------
static_assert(offsetof(SegmentHeader, magic) == 0 && offsetof(SegmentHeader, format_major) == 8 &&
              offsetof(SegmentHeader, format_minor) == 12 &&
              offsetof(SegmentHeader, header_size) == 16);
static_assert(offsetof(SegmentHeader, segment_size) == 24 &&
              offsetof(SegmentHeader, layout_hash) == 32 &&
              offsetof(SegmentHeader, generation) == 96 &&
              offsetof(SegmentHeader, lock_path) == 136);
static_assert(offsetof(SegmentHeader, state) == 512 &&
              offsetof(SegmentHeader, heartbeat_ns) == 520 &&
              offsetof(SegmentHeader, table_epoch) == 640 &&
              offsetof(SegmentHeader, doorbell) == 768 &&
              offsetof(SegmentHeader, decision_seq) == 896);
static_assert(offsetof(SegmentHeader, router_policy) == 672 &&
              offsetof(SegmentHeader, step_t0_ms) == 680 &&
              offsetof(SegmentHeader, untracked) == 720 &&
              offsetof(SegmentHeader, completes_refused) + 8 <= offsetof(SegmentHeader, doorbell));
static_assert(sizeof(SegmentHeader) == 1024 && alignof(SegmentHeader) == kBlock);
static_assert(sizeof(ClientRow) == 128 && offsetof(ClientRow, epoch) == 16 &&
              offsetof(ClientRow, ring_offset) == 32 && offsetof(ClientRow, quarantined) == 56);
static_assert(sizeof(RingControl) == 256 && offsetof(RingControl, consumer) == 128);
static_assert(sizeof(RecordHeader) == kRecordAlign && offsetof(RecordHeader, sequence) == 8 &&
              offsetof(RecordHeader, epoch) == 16 && offsetof(RecordHeader, checksum) == 20 &&
              offsetof(RecordHeader, flags) == 24);
static_assert(sizeof(DecisionPayload) == kDecisionWords * 8);
static_assert(sizeof(DecisionCell) == 192);
static_assert(sizeof(WorkerPayload) == kWorkerWords * 8 && sizeof(WorkerCell) == 32 &&
              offsetof(WorkerPayload, batch_experts) == 20);

// Decision placement: a request id hashes to two runs of kProbe cells each
// (two independent homes, "two choices"); the daemon writes the id's own
// cell, else an empty one, else the oldest of all 2 x kProbe. One run alone
// evicted decisions only ~8% of decision_slots publishes old (its 8 cells
// were all recent) while far older ones survived elsewhere; the older of two
// independent runs keeps every decision for about a third of decision_slots
// publishes (see decisions.hpp). Readers probe the same cells, so the
// scheme is folded into kLayoutHash.
inline constexpr uint32_t kProbe = 8;            // cells per run
inline constexpr uint32_t kProbeRuns = 2;        // runs per request id
inline constexpr uint32_t kPlacementScheme = 2;  // 1 was a single run (earlier builds)

constexpr uint64_t fnv1a(std::initializer_list<uint64_t> values) {
  uint64_t h = 1469598103934665603ull;
  for (uint64_t v : values)
    for (int b = 0; b < 8; ++b) {
      h ^= (v >> (8 * b)) & 0xff;
      h *= 1099511628211ull;
    }
  return h;
}

// Sizes, alignments and offsets of every shared struct, and the decision
// placement every reader must share with the daemon.
inline constexpr uint64_t kLayoutHash = fnv1a({
    sizeof(SegmentHeader),
    alignof(SegmentHeader),
    offsetof(SegmentHeader, segment_size),
    offsetof(SegmentHeader, layout_hash),
    offsetof(SegmentHeader, max_clients),
    offsetof(SegmentHeader, clients_offset),
    offsetof(SegmentHeader, rings_offset),
    offsetof(SegmentHeader, ring_stride),
    offsetof(SegmentHeader, decisions_offset),
    offsetof(SegmentHeader, workers_offset),
    offsetof(SegmentHeader, generation),
    offsetof(SegmentHeader, daemon_pid),
    offsetof(SegmentHeader, lock_dev),
    offsetof(SegmentHeader, lock_path),
    offsetof(SegmentHeader, state),
    offsetof(SegmentHeader, heartbeat_ns),
    offsetof(SegmentHeader, table_epoch),
    offsetof(SegmentHeader, decisions_published),
    offsetof(SegmentHeader, workers_seq),
    offsetof(SegmentHeader, worker_count),
    offsetof(SegmentHeader, completes_refused),
    offsetof(SegmentHeader, doorbell),
    offsetof(SegmentHeader, daemon_sleeping),
    offsetof(SegmentHeader, decision_seq),
    offsetof(SegmentHeader, decision_waiters),
    sizeof(ClientRow),
    alignof(ClientRow),
    offsetof(ClientRow, pid),
    offsetof(ClientRow, start_time),
    offsetof(ClientRow, epoch),
    offsetof(ClientRow, heartbeat_ns),
    offsetof(ClientRow, ring_offset),
    offsetof(ClientRow, records),
    offsetof(ClientRow, rejected),
    offsetof(ClientRow, quarantined),
    sizeof(RingControl),
    offsetof(RingControl, producer),
    offsetof(RingControl, consumer),
    sizeof(RecordHeader),
    kRecordAlign,
    offsetof(RecordHeader, type),
    offsetof(RecordHeader, schema),
    offsetof(RecordHeader, sequence),
    offsetof(RecordHeader, epoch),
    offsetof(RecordHeader, checksum),
    offsetof(RecordHeader, flags),
    sizeof(DecisionCell),
    alignof(DecisionCell),
    sizeof(DecisionPayload),
    offsetof(DecisionPayload, status),
    offsetof(DecisionPayload, worker),
    offsetof(DecisionPayload, similarity),
    offsetof(DecisionPayload, band_size),
    offsetof(DecisionPayload, policy),
    offsetof(DecisionPayload, table_epoch),
    offsetof(DecisionPayload, latency_ns),
    offsetof(DecisionPayload, publish_ns),
    offsetof(DecisionPayload, id_hash),
    offsetof(DecisionPayload, completion_token),
    offsetof(DecisionPayload, id),
    kMaxRequestId,
    sizeof(WorkerCell),
    sizeof(WorkerPayload),
    offsetof(WorkerPayload, state),
    offsetof(WorkerPayload, inflight),
    offsetof(WorkerPayload, running),
    offsetof(WorkerPayload, kv_usage),
    offsetof(WorkerPayload, routed),
    kProbe,
    kProbeRuns,
    kPlacementScheme,
    kRecordChecksumScheme,
});

constexpr uint64_t align_up(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

// Offsets of each region for a given configuration.
struct Layout {
  uint64_t clients_offset = 0;
  uint64_t rings_offset = 0;
  uint64_t ring_stride = 0;
  uint64_t decisions_offset = 0;
  uint64_t workers_offset = 0;
  uint64_t segment_size = 0;
};

// Limits (checked before any size is computed, so nothing overflows).
inline constexpr uint32_t kMaxClientsLimit = 4096;
inline constexpr uint32_t kMinRingBytes = 1u << 16;
inline constexpr uint32_t kMaxRingBytes = 1u << 30;
inline constexpr uint32_t kMinDecisionSlots = 64;
inline constexpr uint32_t kMaxDecisionSlots = 1u << 24;
inline constexpr uint32_t kMaxWorkersLimit = 1u << 16;

constexpr Layout compute_layout(uint32_t max_clients, uint32_t ring_bytes, uint32_t decision_slots,
                                uint32_t max_workers) {
  Layout l;
  l.clients_offset = align_up(sizeof(SegmentHeader), kPage);
  l.rings_offset = align_up(l.clients_offset + uint64_t{max_clients} * sizeof(ClientRow), kPage);
  l.ring_stride = align_up(sizeof(RingControl) + uint64_t{ring_bytes}, kPage);
  l.decisions_offset = l.rings_offset + uint64_t{max_clients} * l.ring_stride;
  l.workers_offset =
      align_up(l.decisions_offset + uint64_t{decision_slots} * sizeof(DecisionCell), kPage);
  l.segment_size = align_up(l.workers_offset + uint64_t{max_workers} * sizeof(WorkerCell), kPage);
  return l;
}

// The pieces of a mapped segment. The offsets are the reader's own copies
// (computed from validated capacities), never re-read from shared memory.
struct SegmentView {
  uint8_t* base = nullptr;
  SegmentHeader* header = nullptr;
  Layout layout;
  uint32_t max_clients = 0;
  uint32_t ring_bytes = 0;
  uint32_t decision_slots = 0;
  uint32_t max_workers = 0;

  ClientRow* row(uint32_t slot) const {
    return reinterpret_cast<ClientRow*>(base + layout.clients_offset) + slot;
  }
  RingControl* ring_control(uint32_t slot) const {
    return reinterpret_cast<RingControl*>(base + layout.rings_offset + slot * layout.ring_stride);
  }
  uint8_t* ring_data(uint32_t slot) const {
    return reinterpret_cast<uint8_t*>(ring_control(slot)) + sizeof(RingControl);
  }
  DecisionCell* decisions() const {
    return reinterpret_cast<DecisionCell*>(base + layout.decisions_offset);
  }
  WorkerCell* workers() const {
    return reinterpret_cast<WorkerCell*>(base + layout.workers_offset);
  }
};

}  // namespace eldr::shm::detail
