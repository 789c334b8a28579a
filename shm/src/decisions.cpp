#include "eldr/shm/decisions.hpp"

#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <thread>

namespace eldr::shm::detail {

namespace {

constexpr int kReadTries = 256;  // torn reads retried before giving up on a cell

// The id's candidate cells: kProbeRuns runs of kProbe consecutive cells, the
// runs' homes taken from the two halves of one XXH3 hash (independent bits).
// Runs that overlap repeat a cell; that is harmless for both ends.
static_assert(kProbeRuns == 2, "the runs' homes are the two halves of one 64-bit hash");
struct Candidates {
  uint32_t cell[kProbeRuns * kProbe];
};

uint64_t id_hash(std::string_view id) { return XXH3_64bits(id.data(), id.size()); }

Candidates candidate_cells(uint64_t hash, uint32_t slots) {
  Candidates c;
  for (uint32_t run = 0; run < kProbeRuns; ++run) {
    const auto home = static_cast<uint32_t>(hash >> (32 * run));
    for (uint32_t i = 0; i < kProbe; ++i) c.cell[run * kProbe + i] = (home + i) & (slots - 1);
  }
  return c;
}

template <size_t N>
void store_words(std::atomic<uint64_t> (&words)[N], const void* pod) {
  uint64_t tmp[N];
  std::memcpy(tmp, pod, sizeof(tmp));
  for (size_t i = 0; i < N; ++i) words[i].store(tmp[i], std::memory_order_relaxed);
}

// Words [first, last) of a cell into the same bytes of a payload.
template <size_t N>
void load_words(const std::atomic<uint64_t> (&words)[N], void* pod, size_t first = 0,
                size_t last = N) {
  uint64_t tmp[N];
  for (size_t i = first; i < last; ++i) tmp[i] = words[i].load(std::memory_order_relaxed);
  std::memcpy(static_cast<uint8_t*>(pod) + first * 8, tmp + first, (last - first) * 8);
}

// Seqlock write: seq odd, payload, seq even (release).
template <class Cell, class Pod>
void seqlock_write(std::atomic<uint64_t>& seq, Cell& words, const Pod& pod) {
  const uint64_t s = seq.load(std::memory_order_relaxed);
  seq.store(s + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  store_words(words, &pod);
  seq.store(s + 2, std::memory_order_release);
}

// Seqlock read of request id `hash`'s decision from one cell: false when the
// cell is empty, holds another id, or no consistent copy was read. A cell of
// another id is dismissed on its head words (its first cache line).
bool read_cell(const DecisionCell& cell, uint64_t hash, DecisionPayload& out) {
  for (int attempt = 0; attempt < kReadTries; ++attempt) {
    const uint64_t before = cell.seq.load(std::memory_order_acquire);
    if (before == 0) return false;
    if (before & 1) {
      if (attempt > 16) std::this_thread::yield();
      continue;
    }
    load_words(cell.words, &out, 0, kDecisionHeadWords);
    const bool ours = out.id_hash == hash;
    if (ours) load_words(cell.words, &out, kDecisionHeadWords, kDecisionWords);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (cell.seq.load(std::memory_order_relaxed) == before) return ours;
  }
  return false;
}

// Format 2.2's publish stamp: the publish time in microseconds (48 bits:
// 8.9 years of CLOCK_MONOTONIC) above the confidence in 1/65535 steps.
uint64_t publish_stamp(uint64_t publish_ns, float confidence) {
  const float c = std::isfinite(confidence) ? std::clamp(confidence, 0.0f, 1.0f) : 0.0f;
  return (publish_ns / 1000) << 16 | static_cast<uint64_t>(std::lround(c * 65535.0f));
}
uint64_t stamp_ns(uint64_t stamp) { return (stamp >> 16) * 1000; }

bool same_id(const DecisionPayload& p, std::string_view id) {
  return p.id_length == id.size() && std::memcmp(p.id, id.data(), id.size()) == 0;
}

}  // namespace

std::optional<uint64_t> publish_decision(DecisionCell* cells, uint32_t slots,
                                         std::string_view request_id, const DecisionIn& decision,
                                         uint64_t publish_ns) {
  // The id's own cell if it has one, else the first empty candidate, else the
  // oldest of all candidates (two runs: see kProbeRuns).
  const uint64_t hash = id_hash(request_id);
  const Candidates candidates = candidate_cells(hash, slots);
  uint32_t target = candidates.cell[0];
  bool have_empty = false, own = false;
  uint64_t oldest = UINT64_MAX;
  for (uint32_t c : candidates.cell) {
    // The single writer reads its own cells: no torn read possible.
    if (cells[c].seq.load(std::memory_order_relaxed) == 0) {
      if (!have_empty) target = c;
      have_empty = true;
      continue;
    }
    DecisionPayload p;
    load_words(cells[c].words, &p, 0, kDecisionHeadWords);
    if (p.id_hash == hash) {
      load_words(cells[c].words, &p, kDecisionHeadWords, kDecisionWords);
      if (same_id(p, request_id)) {
        target = c;
        own = true;
        break;
      }
    }
    if (!have_empty && stamp_ns(p.publish_stamp) < oldest) {
      oldest = stamp_ns(p.publish_stamp);
      target = c;
    }
  }
  DecisionPayload p{};
  p.id_length = static_cast<uint16_t>(std::min(request_id.size(), kMaxRequestId));
  std::memcpy(p.id, request_id.data(), p.id_length);
  p.status = decision.status;
  p.worker = decision.worker;
  p.similarity = decision.similarity;
  p.band_size = decision.band_size;
  p.policy = static_cast<uint16_t>(std::min<uint32_t>(decision.policy, UINT16_MAX));
  p.table_epoch = decision.table_epoch;
  p.latency_ns = static_cast<uint32_t>(std::min<uint64_t>(decision.latency_ns, UINT32_MAX));
  p.publish_stamp = publish_stamp(publish_ns, decision.confidence);
  p.completion_token = decision.completion_token;
  p.id_hash = hash;
  seqlock_write(cells[target].seq, cells[target].words, p);
  if (own || have_empty) return std::nullopt;
  return oldest;
}

std::optional<DecisionIn> lookup_decision(const DecisionCell* cells, uint32_t slots,
                                          std::string_view request_id, bool with_confidence) {
  const uint64_t hash = id_hash(request_id);
  for (uint32_t c : candidate_cells(hash, slots).cell) {
    DecisionPayload p;
    if (!read_cell(cells[c], hash, p) || !same_id(p, request_id)) continue;
    DecisionIn d;
    d.status = p.status;
    d.worker = p.worker;
    d.similarity = p.similarity;
    d.band_size = p.band_size;
    d.policy = p.policy;
    d.table_epoch = p.table_epoch;
    d.latency_ns = p.latency_ns;
    d.completion_token = p.completion_token;
    if (with_confidence) d.confidence = static_cast<float>(p.publish_stamp & 0xffff) / 65535.0f;
    return d;
  }
  return std::nullopt;
}

void write_workers(SegmentHeader& header, WorkerCell* cells, uint32_t capacity,
                   std::span<const Host::WorkerRow> rows, uint64_t table_epoch,
                   const Host::RouterRow* router) {
  const uint32_t n = static_cast<uint32_t>(std::min<size_t>(rows.size(), capacity));
  const uint64_t s = header.workers_seq.load(std::memory_order_relaxed);
  header.workers_seq.store(s + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  for (uint32_t i = 0; i < n; ++i) {
    WorkerPayload p{};
    p.worker = rows[i].worker;
    p.state = rows[i].state;
    p.healthy = rows[i].healthy;
    p.inflight = rows[i].inflight;
    p.running = rows[i].running;
    p.kv_usage = rows[i].kv_usage;
    p.batch_experts = rows[i].batch_experts;
    p.routed = rows[i].routed;
    p.inflight_local = rows[i].inflight_local;
    store_words(cells[i].words, &p);
  }
  header.worker_count.store(n, std::memory_order_relaxed);
  header.table_epoch.store(table_epoch, std::memory_order_relaxed);
  if (router) {
    constexpr auto r = std::memory_order_relaxed;
    header.router_policy.store(router->policy + 1, r);
    header.step_max_batch.store(router->max_batch, r);
    header.step_t0_ms.store(std::bit_cast<uint64_t>(router->t0_ms), r);
    header.step_tseq_ms.store(std::bit_cast<uint64_t>(router->tseq_ms), r);
    header.step_alpha_us.store(std::bit_cast<uint64_t>(router->alpha_us), r);
    header.step_samples.store(router->step_samples, r);
    header.completes_unknown.store(router->completes_unknown, r);
    header.completes_refused.store(router->completes_refused, r);
    header.untracked.store(router->untracked, r);
    header.predictor_prototypes.store(router->predictor_prototypes, r);
    header.predictor_kinds.store(router->predictor_kinds, r);
    header.predictor_learned.store(router->predictor_learned, r);
  }
  header.workers_seq.store(s + 2, std::memory_order_release);
}

bool read_workers(const SegmentHeader& header, const WorkerCell* cells, uint32_t capacity,
                  std::vector<Host::WorkerRow>& out, std::optional<Host::RouterRow>* router) {
  for (int attempt = 0; attempt < kReadTries; ++attempt) {
    const uint64_t before = header.workers_seq.load(std::memory_order_acquire);
    if (before & 1) {
      std::this_thread::yield();
      continue;
    }
    const uint32_t n = std::min(header.worker_count.load(std::memory_order_relaxed), capacity);
    out.resize(n);
    for (uint32_t i = 0; i < n; ++i) {
      WorkerPayload p;
      load_words(cells[i].words, &p);
      out[i] = {p.worker,   p.state,  p.healthy,       p.inflight,      p.running,
                p.kv_usage, p.routed, p.batch_experts, p.inflight_local};
    }
    if (router) {
      constexpr auto r = std::memory_order_relaxed;
      const uint32_t policy = header.router_policy.load(r);
      router->reset();
      if (policy != 0) {
        Host::RouterRow row;
        row.policy = policy - 1;
        row.max_batch = header.step_max_batch.load(r);
        row.t0_ms = std::bit_cast<double>(header.step_t0_ms.load(r));
        row.tseq_ms = std::bit_cast<double>(header.step_tseq_ms.load(r));
        row.alpha_us = std::bit_cast<double>(header.step_alpha_us.load(r));
        row.step_samples = header.step_samples.load(r);
        row.completes_unknown = header.completes_unknown.load(r);
        row.completes_refused = header.completes_refused.load(r);
        row.untracked = header.untracked.load(r);
        row.predictor_prototypes = header.predictor_prototypes.load(r);
        row.predictor_kinds = header.predictor_kinds.load(r);
        row.predictor_learned = header.predictor_learned.load(r);
        *router = row;
      }
    }
    std::atomic_thread_fence(std::memory_order_acquire);
    if (header.workers_seq.load(std::memory_order_relaxed) == before) return true;
  }
  out.clear();
  return false;
}

void write_pool_status(SegmentHeader& header, PoolStatusCell& cell, std::string_view json) {
  if (json.size() > kPoolStatusBytes) json = "{}";
  uint64_t words[kPoolStatusBytes / 8] = {};
  std::memcpy(words, json.data(), json.size());
  const uint64_t s = header.pool_status_seq.load(std::memory_order_relaxed);
  header.pool_status_seq.store(s + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  const size_t n = (json.size() + 7) / 8;
  for (size_t i = 0; i < n; ++i) cell.words[i].store(words[i], std::memory_order_relaxed);
  header.pool_status_bytes.store(static_cast<uint32_t>(json.size()), std::memory_order_relaxed);
  header.pool_status_seq.store(s + 2, std::memory_order_release);
}

bool read_pool_status(const SegmentHeader& header, const PoolStatusCell& cell, std::string& out) {
  for (int attempt = 0; attempt < kReadTries; ++attempt) {
    const uint64_t before = header.pool_status_seq.load(std::memory_order_acquire);
    if (before & 1) {
      std::this_thread::yield();
      continue;
    }
    const uint32_t bytes = std::min<uint32_t>(
        header.pool_status_bytes.load(std::memory_order_relaxed), kPoolStatusBytes);
    uint64_t words[kPoolStatusBytes / 8];
    const size_t n = (bytes + 7) / 8;
    for (size_t i = 0; i < n; ++i) words[i] = cell.words[i].load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (header.pool_status_seq.load(std::memory_order_relaxed) == before) {
      out.assign(reinterpret_cast<const char*>(words), bytes);
      return true;
    }
  }
  out.clear();
  return false;
}

}  // namespace eldr::shm::detail
