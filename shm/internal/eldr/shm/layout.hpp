// The transport's shared byte layouts (format v2). Everything here crosses
// process (and language) boundaries: plain structs of fixed-width integers and
// lock-free atomics, integer offsets, no pointers. Every struct's size and
// field offsets are pinned by static_asserts and folded into kLayoutHash,
// which the header and the registration messages carry: a client built
// against a different layout refuses the daemon (and is refused) instead of
// misreading it.
//
// Two kinds of memory, each with one writer (docs/design.md §8):
//   the daemon's segment, written by the daemon only and mapped read-only
//   (PROT_READ, group mode r--) by every client and `eldr status`:
//     [SegmentHeader][ClientRow x max_clients][DecisionCell x decision_slots]
//     [WorkerCell x max_workers]
//   one ring per registered client: a sealed memfd the daemon creates at
//   registration and passes over the client's Unix socket (SCM_RIGHTS); only
//   that client and the daemon map it:
//     [RingControl][data x ring_bytes]
//   The client writes the producer position, its waiter count and the data;
//   the daemon writes the consumer position and trusts none of the rest.
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
  // major, minor, header size) keep their place in every format.
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
  uint64_t ring_size;           // each client's ring memory: RingControl + ring_bytes, page aligned
  uint64_t pool_status_offset;  // format 2.1: the pool status text (kPoolStatusBytes)
  uint64_t decisions_offset;
  uint64_t workers_offset;
  uint64_t generation;  // random per daemon start (and per recreation)
  uint32_t daemon_pid;  // a client checks its socket's peer against it (SO_PEERCRED)
  uint32_t reserved1;
  uint64_t daemon_start_time;  // /proc/<pid>/stat field 22, clock ticks since boot
  // Format 2.2 (reserved, zero, before): the predictor's records learned,
  // published with the router's state (inside workers_seq).
  std::atomic<uint64_t> predictor_learned;
  uint64_t reserved2;
  char socket_path[256];  // NUL-terminated: where clients register

  // ---- daemon liveness
  alignas(kBlock) std::atomic<uint32_t> state;  // SegmentState; READY stored last
  uint32_t reserved3;
  std::atomic<uint64_t> heartbeat_ns;  // CLOCK_MONOTONIC

  // ---- published state (eldr status)
  alignas(kBlock) std::atomic<uint64_t> table_epoch;
  std::atomic<uint64_t> decisions_published;
  std::atomic<uint64_t> workers_seq;  // seqlock over worker_count + the worker cells
  std::atomic<uint32_t> worker_count;
  std::atomic<uint32_t> predictor_prototypes;  // format 2.2 (reserved, zero, before)
  // The router's state, written inside the workers' seqlock. Doubles as their bits.
  std::atomic<uint32_t> router_policy;  // eldr::Policy + 1; 0 = not published
  std::atomic<uint32_t> step_max_batch;
  std::atomic<uint64_t> step_t0_ms;  // the step constants in force (bit_cast<double>)
  std::atomic<uint64_t> step_tseq_ms;
  std::atomic<uint64_t> step_alpha_us;
  std::atomic<uint64_t> step_samples;       // reports the online fit used
  std::atomic<uint64_t> completes_unknown;  // completes of a request not in flight
  std::atomic<uint64_t> untracked;          // routes the router kept no record of
  std::atomic<uint64_t> completes_refused;  // completes without the token, not from the pusher
  // Format 2.1: the pool status (a JSON object, eldr status prints it
  // as it is), under a seqlock of its own; 0 bytes when not in a pool.
  std::atomic<uint64_t> pool_status_seq;
  std::atomic<uint32_t> pool_status_bytes;
  // Format 2.2 (reserved, zero, before): bit k = the table's predictor
  // predicts from PromptKind k; 0: no predictor. Inside workers_seq.
  std::atomic<uint32_t> predictor_kinds;

  // ---- doorbell: a producer that sees the daemon asleep sends one byte on
  // its socket (the daemon waits in epoll on every client's socket)
  alignas(kBlock) std::atomic<uint32_t> daemon_sleeping;
  uint32_t reserved5;
  std::atomic<uint64_t> clients_quarantined;    // since start
  std::atomic<uint64_t> registrations_refused;  // hellos refused (version, capacity, garbage)

  // ---- decisions: waiters sleep on decision_seq (FUTEX_WAIT reads only;
  // it works on this read-only mapping) and announce themselves in their own
  // ring's decision_waiters
  alignas(kBlock) std::atomic<uint32_t> decision_seq;  // futex word
};

// A registered client as the daemon saw it; daemon-written only.
struct alignas(kBlock) ClientRow {
  std::atomic<uint32_t> state;  // RowState
  std::atomic<uint32_t> pid;    // SO_PEERCRED at registration
  std::atomic<uint32_t> uid;
  std::atomic<uint32_t> quarantined;  // ring skipped after a protocol violation
  std::atomic<uint64_t> epoch;        // bumped on every registration of the slot
  std::atomic<uint64_t> records;      // records accepted
  std::atomic<uint64_t> rejected;     // records rejected
  std::atomic<uint64_t> ring_used;    // bytes committed, not consumed (at the last maintain)
  uint64_t reserved[2];
};

// The head of a client's ring memory. Positions count bytes since
// registration and only grow; index = pos & (cap-1).
struct RingControl {
  alignas(kBlock) std::atomic<uint64_t> producer;  // client: release-stored commit
  std::atomic<uint32_t> decision_waiters;          // client: threads asleep on decision_seq
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
  // Format 2.2: the publish time in CLOCK_MONOTONIC microseconds (strictly
  // increasing per daemon) << 16 | the decision's confidence in 1/65535
  // steps (format 2.1: the ns; readers never read it then). Only the daemon
  // orders cells by it: the oldest of a probe run is evicted.
  uint64_t publish_stamp;
  uint64_t id_hash;  // XXH3_64bits(id): a probe dismisses other ids on the first cache line
  uint64_t completion_token;  // what a complete of this request presents
  char id[kMaxRequestId];
};
// The words before the id: all a probe reads of a cell that holds another id.
inline constexpr size_t kDecisionHeadWords = offsetof(DecisionPayload, id) / 8;

inline constexpr size_t kWorkerWords = 5;
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
  uint32_t inflight_local;  // format 2.1: of `inflight`, this node's own requests
  uint32_t reserved2;
};

// Format 2.1: the pool status text, as words (readers copy it under the seqlock).
inline constexpr size_t kPoolStatusBytes = 16384;
struct PoolStatusCell {
  std::atomic<uint64_t> words[kPoolStatusBytes / 8];
};

// ---- registration (SOCK_SEQPACKET on SegmentHeader::socket_path) ----------
// client -> daemon, once, right after connect. Anything it sends after the
// welcome is a doorbell: its content is never read.
inline constexpr char kHelloMagic[8] = {'E', 'L', 'D', 'R', 'H', 'E', 'L', 'O'};
inline constexpr char kWelcomeMagic[8] = {'E', 'L', 'D', 'R', 'W', 'E', 'L', 'C'};
struct HelloMsg {
  char magic[8];
  uint32_t format_major;
  uint32_t format_minor;
  uint64_t layout_hash;
  uint64_t reserved[2];
};
// daemon -> client: status 0 with the ring's memfd attached, or a refusal
// (Errc) and why; kWelcomeRetrySoon on a refusal that waiting ends (slots
// that exited clients hold, reclaimed within the daemon's maintenance).
inline constexpr uint32_t kWelcomeRetrySoon = 1;
struct WelcomeMsg {
  char magic[8];
  int32_t status;
  uint32_t slot;
  uint64_t epoch;
  uint64_t generation;
  uint64_t ring_size;
  uint32_t ring_bytes;
  uint32_t format_major;
  uint64_t layout_hash;
  uint32_t flags;
  uint32_t reserved;
  char message[192];  // NUL-terminated
};

// ---- pinned layout ----------------------------------------------------------
static_assert(offsetof(SegmentHeader, magic) == 0 && offsetof(SegmentHeader, format_major) == 8 &&
              offsetof(SegmentHeader, format_minor) == 12 &&
              offsetof(SegmentHeader, header_size) == 16);
static_assert(offsetof(SegmentHeader, segment_size) == 24 &&
              offsetof(SegmentHeader, layout_hash) == 32 &&
              offsetof(SegmentHeader, generation) == 96 &&
              offsetof(SegmentHeader, socket_path) == 136);
static_assert(offsetof(SegmentHeader, state) == 512 &&
              offsetof(SegmentHeader, heartbeat_ns) == 520 &&
              offsetof(SegmentHeader, table_epoch) == 640 &&
              offsetof(SegmentHeader, daemon_sleeping) == 768 &&
              offsetof(SegmentHeader, decision_seq) == 896);
static_assert(offsetof(SegmentHeader, router_policy) == 672 &&
              offsetof(SegmentHeader, step_t0_ms) == 680 &&
              offsetof(SegmentHeader, untracked) == 720 &&
              offsetof(SegmentHeader, completes_refused) + 8 <=
                  offsetof(SegmentHeader, daemon_sleeping));
static_assert(sizeof(SegmentHeader) == 1024 && alignof(SegmentHeader) == kBlock);
static_assert(sizeof(ClientRow) == 128 && offsetof(ClientRow, epoch) == 16 &&
              offsetof(ClientRow, ring_used) == 40);
static_assert(sizeof(RingControl) == 256 && offsetof(RingControl, decision_waiters) == 8 &&
              offsetof(RingControl, consumer) == 128);
static_assert(sizeof(RecordHeader) == kRecordAlign && offsetof(RecordHeader, sequence) == 8 &&
              offsetof(RecordHeader, epoch) == 16 && offsetof(RecordHeader, checksum) == 20 &&
              offsetof(RecordHeader, flags) == 24);
static_assert(sizeof(DecisionPayload) == kDecisionWords * 8);
static_assert(sizeof(DecisionCell) == 192);
static_assert(sizeof(WorkerPayload) == kWorkerWords * 8 && sizeof(WorkerCell) == 40 &&
              offsetof(WorkerPayload, batch_experts) == 20 &&
              offsetof(WorkerPayload, inflight_local) == 32);
static_assert(offsetof(SegmentHeader, pool_status_offset) == 72 &&
              offsetof(SegmentHeader, pool_status_seq) == 736 &&
              offsetof(SegmentHeader, pool_status_bytes) == 744);
static_assert(sizeof(HelloMsg) == 40 && sizeof(WelcomeMsg) == 256 &&
              offsetof(WelcomeMsg, flags) == 56 && offsetof(WelcomeMsg, message) == 64);

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
    offsetof(SegmentHeader, ring_size),
    offsetof(SegmentHeader, decisions_offset),
    offsetof(SegmentHeader, workers_offset),
    offsetof(SegmentHeader, generation),
    offsetof(SegmentHeader, daemon_pid),
    offsetof(SegmentHeader, socket_path),
    offsetof(SegmentHeader, state),
    offsetof(SegmentHeader, heartbeat_ns),
    offsetof(SegmentHeader, table_epoch),
    offsetof(SegmentHeader, decisions_published),
    offsetof(SegmentHeader, workers_seq),
    offsetof(SegmentHeader, worker_count),
    offsetof(SegmentHeader, completes_refused),
    offsetof(SegmentHeader, daemon_sleeping),
    offsetof(SegmentHeader, clients_quarantined),
    offsetof(SegmentHeader, registrations_refused),
    offsetof(SegmentHeader, decision_seq),
    sizeof(ClientRow),
    alignof(ClientRow),
    offsetof(ClientRow, pid),
    offsetof(ClientRow, uid),
    offsetof(ClientRow, quarantined),
    offsetof(ClientRow, epoch),
    offsetof(ClientRow, records),
    offsetof(ClientRow, rejected),
    offsetof(ClientRow, ring_used),
    sizeof(RingControl),
    offsetof(RingControl, producer),
    offsetof(RingControl, decision_waiters),
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
    offsetof(DecisionPayload, publish_stamp),
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
    offsetof(WorkerPayload, inflight_local),
    offsetof(SegmentHeader, pool_status_offset),
    offsetof(SegmentHeader, pool_status_seq),
    offsetof(SegmentHeader, pool_status_bytes),
    kPoolStatusBytes,
    kProbe,
    kProbeRuns,
    kPlacementScheme,
    kRecordChecksumScheme,
    sizeof(HelloMsg),
    offsetof(HelloMsg, layout_hash),
    sizeof(WelcomeMsg),
    offsetof(WelcomeMsg, status),
    offsetof(WelcomeMsg, epoch),
    offsetof(WelcomeMsg, generation),
    offsetof(WelcomeMsg, ring_size),
    offsetof(WelcomeMsg, ring_bytes),
    offsetof(WelcomeMsg, layout_hash),
    offsetof(WelcomeMsg, flags),
    offsetof(WelcomeMsg, message),
    kWelcomeRetrySoon,
});

constexpr uint64_t align_up(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

// Offsets of each region of the daemon's segment for a given configuration.
struct Layout {
  uint64_t clients_offset = 0;
  uint64_t decisions_offset = 0;
  uint64_t workers_offset = 0;
  uint64_t pool_status_offset = 0;
  uint64_t segment_size = 0;
  uint64_t ring_size = 0;  // one client's ring memory (a memfd of its own)
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
  l.decisions_offset =
      align_up(l.clients_offset + uint64_t{max_clients} * sizeof(ClientRow), kPage);
  l.workers_offset =
      align_up(l.decisions_offset + uint64_t{decision_slots} * sizeof(DecisionCell), kPage);
  l.pool_status_offset =
      align_up(l.workers_offset + uint64_t{max_workers} * sizeof(WorkerCell), kPage);
  l.segment_size = align_up(l.pool_status_offset + sizeof(PoolStatusCell), kPage);
  l.ring_size = align_up(sizeof(RingControl) + uint64_t{ring_bytes}, kPage);
  return l;
}

// The pieces of a mapped daemon segment (read-only in clients: the pointers
// are non-const for the daemon, and a client that writes through one faults
// in its own process). The offsets are the reader's own copies (computed
// from validated capacities), never re-read from shared memory.
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
  DecisionCell* decisions() const {
    return reinterpret_cast<DecisionCell*>(base + layout.decisions_offset);
  }
  WorkerCell* workers() const {
    return reinterpret_cast<WorkerCell*>(base + layout.workers_offset);
  }
  PoolStatusCell* pool_status() const {
    return reinterpret_cast<PoolStatusCell*>(base + layout.pool_status_offset);
  }
};

// A client's ring memory: the control block, then the data.
struct RingView {
  uint8_t* base = nullptr;
  uint64_t size = 0;  // Layout::ring_size
  uint32_t ring_bytes = 0;
  RingControl* control() const { return reinterpret_cast<RingControl*>(base); }
  uint8_t* data() const { return base + sizeof(RingControl); }
};

}  // namespace eldr::shm::detail
