// The client's end: registration over the daemon's socket, the ring's
// producer, decision lookups and bounded waits (on the read-only segment),
// and re-attachment to a restarted daemon.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include "eldr/internal/vector_kernels.hpp"
#include "eldr/shm.hpp"
#include "eldr/shm/channel.hpp"
#include "eldr/shm/decisions.hpp"
#include "eldr/shm/futex.hpp"
#include "eldr/shm/layout.hpp"
#include "eldr/shm/records.hpp"
#include "eldr/shm/ring.hpp"
#include "eldr/shm/segment.hpp"

namespace eldr::shm {

using namespace detail;

namespace {

// How long wait_decision polls before it sleeps on the futex.
constexpr auto kDecisionSpin = std::chrono::microseconds(50);

// One registration: the connection to the daemon (closing it ends the
// registration) and the ring memory the daemon handed over on it. Shared: a
// doorbell callable keeps both alive past the client, so a late commit is
// still read.
struct Registration {
  Fd socket;
  RingMemory ring;
};

struct Attachment {
  std::shared_ptr<Mapping> mapping;  // read-only; shared: a waiter keeps it mapped
  SegmentView view;
  std::shared_ptr<Registration> registration;
  uint32_t slot = 0;
  uint64_t epoch = 0;
  uint64_t generation = 0;
  RingWriter writer;
};

Status no_daemon(const std::string& name, const std::string& why) {
  return {Errc::no_daemon, "eldrd segment " + name + ": " + why};
}

// The daemon's health as the header shows it; empty when healthy.
std::string daemon_problem(const SegmentHeader& h, std::chrono::milliseconds stale) {
  const uint32_t state = h.state.load(std::memory_order_acquire);
  if (state != static_cast<uint32_t>(SegmentState::ready))
    return std::string("daemon state is ") + state_name(state);
  const int64_t age =
      int64_t(monotonic_ns()) - int64_t(h.heartbeat_ns.load(std::memory_order_acquire));
  if (age > std::chrono::nanoseconds(stale).count())
    return "daemon heartbeat is " + std::to_string(age / 1'000'000) + " ms old (pid " +
           std::to_string(h.daemon_pid) + " hung or dead)";
  return {};
}

// Registers over the daemon's socket: hello, then a welcome with the ring's
// memory, or a refusal saying why.
Status register_with(Attachment& a, const std::string& name, std::chrono::milliseconds timeout,
                     bool& retryable) {
  const SegmentHeader& h = *a.view.header;
  const std::string path(h.socket_path, strnlen(h.socket_path, sizeof(h.socket_path)));
  auto socket = connect_to(path);
  if (!socket) {
    retryable = socket.status().code() == Errc::no_daemon;
    return socket.status();
  }
  // Only the daemon that created the segment may hand out rings.
  const auto peer = peer_credentials(socket->get());
  if (!peer || static_cast<uint32_t>(peer->pid) != h.daemon_pid) {
    retryable = true;
    return no_daemon(name, "the socket " + path + " is not the daemon's (peer pid " +
                               std::to_string(peer ? peer->pid : 0) + ", the segment names pid " +
                               std::to_string(h.daemon_pid) + ")");
  }
  HelloMsg hello{};
  std::memcpy(hello.magic, kHelloMagic, sizeof(hello.magic));
  hello.format_major = kFormatMajor;
  hello.format_minor = kFormatMinor;
  hello.layout_hash = kLayoutHash;
  if (const int err = send_message(socket->get(), &hello, sizeof(hello)); err != 0) {
    retryable = true;
    return no_daemon(name, std::string("cannot send the hello: ") + std::strerror(err));
  }
  const int ready =
      wait_readable(socket->get(), static_cast<int>(std::max<int64_t>(1, timeout.count())));
  if (ready <= 0) {
    retryable = true;
    return no_daemon(name, "no answer to the registration within " +
                               std::to_string(timeout.count()) + " ms (daemon busy or hung)");
  }
  WelcomeMsg w{};
  Fd memfd;
  const ssize_t n = receive_message(socket->get(), &w, sizeof(w), &memfd, false);
  if (n == 0 || n == -ECONNRESET) {
    retryable = true;
    return no_daemon(name, "the daemon closed the connection before answering");
  }
  if (n != static_cast<ssize_t>(sizeof(w)) ||
      std::memcmp(w.magic, kWelcomeMagic, sizeof(w.magic)) != 0)
    return {Errc::incompatible, "the daemon's answer to the registration is not an eldr welcome"};
  w.message[sizeof(w.message) - 1] = '\0';
  if (w.status != 0) {
    const auto code = static_cast<Errc>(w.status);
    retryable = code == Errc::no_daemon || (w.flags & kWelcomeRetrySoon) != 0;
    return {code, std::string(w.message)};
  }
  if (w.format_major != kFormatMajor || w.layout_hash != kLayoutHash)
    return {Errc::incompatible, "the daemon welcomed format version " +
                                    std::to_string(w.format_major) + ", this build speaks " +
                                    std::to_string(kFormatMajor)};
  if (w.generation != a.generation) {
    retryable = true;  // the segment was recreated in between
    return no_daemon(name, "the daemon recreated its segment during the registration");
  }
  if (!memfd || w.slot >= a.view.max_clients || w.ring_size != a.view.layout.ring_size ||
      w.ring_bytes != a.view.ring_bytes)
    return {Errc::corrupt, "the daemon's welcome does not match its segment"};
  auto ring = RingMemory::adopt(memfd.release(), w.ring_size, w.ring_bytes);
  if (!ring) return ring.status();
  auto r = std::make_shared<Registration>();
  r->socket = std::move(*socket);
  r->ring = std::move(*ring);
  const RingView& v = r->ring.view();
  a.writer = RingWriter(v.control(), v.data(), v.ring_bytes, static_cast<uint32_t>(w.epoch));
  a.slot = w.slot;
  a.epoch = w.epoch;
  a.registration = std::move(r);
  return Status::ok();
}

// One attempt to attach. `retryable`: waiting may help (not created yet,
// being created, daemon restarting, slots of exited clients not reclaimed).
Result<Attachment> try_attach(const std::string& name, const ClientOptions& options,
                              std::chrono::milliseconds answer_timeout, bool& retryable) {
  retryable = false;
  Attachment a;
  auto mapped = Mapping::open(name, false);
  if (!mapped) {
    retryable =
        mapped.status().code() == Errc::no_daemon || mapped.status().code() == Errc::corrupt;
    return mapped.status();
  }
  a.mapping = std::move(*mapped);
  bool not_ready = false;
  ELDR_TRY(check_header(a.mapping->base(), a.mapping->size(), not_ready));
  if (not_ready) {
    retryable = true;
    return no_daemon(name, "segment is being created");
  }
  a.view = make_view(a.mapping->base());
  const SegmentHeader& h = *a.view.header;
  if (std::string problem = daemon_problem(h, options.daemon_stale); !problem.empty()) {
    retryable = true;
    return no_daemon(name, problem);
  }
  a.generation = h.generation;
  ELDR_TRY(register_with(a, name, answer_timeout, retryable));
  return a;
}

// How long a daemon whose segment is READY and whose heartbeat is fresh gets
// to answer a hello, even when the caller's open timeout is shorter: the open
// timeout bounds the wait for a daemon to exist, and a live daemon's registrar
// may need a scheduler tick or two on a loaded machine.
constexpr auto kAnswerFloor = std::chrono::milliseconds(200);

Result<Attachment> attach(const std::string& name, const ClientOptions& options,
                          std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::microseconds(500);
  for (;;) {
    bool retryable = false;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    auto a = try_attach(name, options, std::max(left, kAnswerFloor), retryable);
    if (a || !retryable || std::chrono::steady_clock::now() >= deadline) return a;
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(20));
  }
}

void ring_doorbell(const SegmentHeader& h, const Registration& r) {
  // Dekker pairing with Host::wait_for_work: publish, then look for a sleeper.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (h.daemon_sleeping.load(std::memory_order_relaxed) != 0) {
    const char bell = 0;
    (void)send_message(r.socket.get(), &bell, 1);  // a full socket buffer: it is awake anyway
  }
}

}  // namespace

struct Client::Impl {
  std::string name;
  ClientOptions options;
  std::mutex mutex;  // one ring, one producer: calls are serialised
  std::optional<Attachment> att;
  std::deque<RingWriter::Reservation> claims;  // handed out, not yet committed; in ring order
  FootprintEncoder encoder;
  flatbuffers::FlatBufferBuilder prompt_builder{1024};
  uint64_t next_liveness_probe_ns = 0;
  std::atomic<uint32_t> slot{0};
  std::atomic<uint64_t> generation{0};
  std::atomic<uint64_t> reattachments{0};

  void install(Attachment a) {
    slot.store(a.slot, std::memory_order_relaxed);
    generation.store(a.generation, std::memory_order_relaxed);
    att.emplace(std::move(a));
  }
  // Closing the socket ends the registration: the daemon drains what was
  // committed, then reclaims the slot.
  void detach() {
    claims.clear();
    att.reset();
  }
  Status ensure_attached();
  void settle_claims();
  Status no_claims_pending();
  // Pushes one record whose `length` payload bytes fill(payload) writes.
  template <class Fill>
  Status push_record(RecordType type, size_t length, Fill&& fill);
  template <class Fill>
  Status push_record(RecordType type, uint16_t schema, size_t length, Fill&& fill);
  Status push_bytes(RecordType type, std::span<const uint8_t> payload);
  Status push_bytes(RecordType type, uint16_t schema, std::span<const uint8_t> payload);
};

// Every call starts here: the daemon must be alive, ready and the same one.
Status Client::Impl::ensure_attached() {
  std::string problem;
  if (att) {
    problem = daemon_problem(*att->view.header, options.daemon_stale);
    const ClientRow* row = att->view.row(att->slot);
    if (problem.empty() && row->quarantined.load(std::memory_order_relaxed) != 0 &&
        row->epoch.load(std::memory_order_relaxed) == att->epoch)
      problem = "the daemon quarantined this client's ring after a protocol violation";
    // The heartbeat needs daemon_stale to show a crash; the socket's hang-up
    // and the segment's link count show it at once. Probed once per
    // liveness_interval (two syscalls) to keep pushes cheap.
    if (problem.empty()) {
      const uint64_t now = monotonic_ns();
      if (now >= next_liveness_probe_ns) {
        next_liveness_probe_ns =
            now + uint64_t(std::chrono::nanoseconds(options.liveness_interval).count());
        if (peer_closed(att->registration->socket.get()))
          problem = "the daemon closed this client's connection (it exited or restarted)";
        if (problem.empty() && att->mapping->unlinked())
          problem = "the segment was removed (daemon restarted or stopped)";
      }
    }
    if (problem.empty()) return Status::ok();
    if (!options.reattach) return no_daemon(name, problem);
    detach();
  } else if (!options.reattach) {
    return no_daemon(name, "not attached");
  }
  // One attempt, no waiting: a call never stalls for a daemon that is down.
  bool retryable = false;
  auto a = try_attach(name, options, kAnswerFloor, retryable);
  if (!a) {
    Status s = a.status();
    if (!problem.empty()) s = Status{s.code(), problem + "; re-attach failed: " + s.message()};
    return s;
  }
  install(std::move(*a));
  reattachments.fetch_add(1, std::memory_order_relaxed);
  return Status::ok();
}

// Drops the claims their writer has committed (the GPU stores the commit
// word itself): positions only grow, so every claim up to the word's is done.
void Client::Impl::settle_claims() {
  if (claims.empty()) return;
  const auto* word = reinterpret_cast<const std::atomic<uint64_t>*>(att->writer.commit_word());
  const uint64_t committed = word->load(std::memory_order_acquire);
  while (!claims.empty() && claims.front().commit_position <= committed) claims.pop_front();
}

// A CPU record may only follow published ones: committing it would publish
// the pending claims before their writer has filled them.
Status Client::Impl::no_claims_pending() {
  settle_claims();
  if (claims.empty()) return Status::ok();
  return {Errc::state, std::to_string(claims.size()) +
                           " claimed record(s) of this client are neither committed nor aborted "
                           "(a GPU hand-off still in flight?): push from another client, or "
                           "after the claims are committed"};
}

Result<std::unique_ptr<Client>> Client::open(std::string_view instance,
                                             const ClientOptions& options) {
  ELDR_TRY(validate_instance_name(instance));
  auto impl = std::make_unique<Impl>();
  impl->name = segment_name(instance);
  impl->options = options;
  auto a = attach(impl->name, options, options.open_timeout);
  if (!a) return a.status();
  impl->install(std::move(*a));
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

Client::Client(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
Client::~Client() = default;

template <class Fill>
Status Client::Impl::push_record(RecordType type, size_t length, Fill&& fill) {
  return push_record(type, current_schema(type), length, std::forward<Fill>(fill));
}

template <class Fill>
Status Client::Impl::push_record(RecordType type, uint16_t schema, size_t length, Fill&& fill) {
  ELDR_TRY(no_claims_pending());
  ELDR_TRY(att->writer.push_with(type, schema, length, fill));
  ring_doorbell(*att->view.header, *att->registration);
  return Status::ok();
}

Status Client::Impl::push_bytes(RecordType type, std::span<const uint8_t> payload) {
  return push_bytes(type, current_schema(type), payload);
}

Status Client::Impl::push_bytes(RecordType type, uint16_t schema,
                                std::span<const uint8_t> payload) {
  return push_record(type, schema, payload.size(),
                     [&](uint8_t* to) { kernels::copy_bytes(to, payload.data(), payload.size()); });
}

Status Client::push_footprint(const FootprintOut& footprint) {
  Impl& m = *m_impl;
  std::lock_guard lock(m.mutex);
  ELDR_TRY(m.encoder.encode(footprint));  // validates first: bad input never hits the ring
  ELDR_TRY(m.ensure_attached());
  return m.push_record(RecordType::footprint, m.encoder.size(),
                       [&](uint8_t* to) { m.encoder.write_to(to); });
}

Status Client::push_complete(std::string_view request_id, uint64_t completion_token) {
  ELDR_TRY(validate_request_id(request_id));
  Impl& m = *m_impl;
  std::lock_guard lock(m.mutex);
  ELDR_TRY(m.ensure_attached());
  const std::span<const uint8_t> id(reinterpret_cast<const uint8_t*>(request_id.data()),
                                    request_id.size());
  if (completion_token == 0) return m.push_bytes(RecordType::complete, kCompleteSchemaV1, id);
  const CompleteMsgHead head{completion_token};
  return m.push_record(RecordType::complete, kCompleteSchema, sizeof(head) + id.size(),
                       [&](uint8_t* to) {
                         std::memcpy(to, &head, sizeof(head));
                         kernels::copy_bytes(to + sizeof(head), id.data(), id.size());
                       });
}

Status Client::push_worker_report(uint32_t worker, uint32_t running, float kv_usage) {
  return push_worker_report(WorkerReportRecord{worker, running, kv_usage, 0, 0.0f});
}

Status Client::push_worker_report(const WorkerReportRecord& r) {
  // Schema 1 when there is no step to report: daemons before schema 2 read it.
  const bool v1 = r.batch_size == 0 && r.step_ms == 0.0f;
  WorkerReportMsg2 msg{{r.worker, r.running, r.kv_usage, 0}, r.batch_size, r.step_ms, 0};
  const uint16_t schema = v1 ? kWorkerReportSchemaV1 : kWorkerReportSchema;
  const std::span<const uint8_t> payload(reinterpret_cast<const uint8_t*>(&msg),
                                         v1 ? sizeof(msg.v1) : sizeof(msg));
  DecodedRecord check;  // the daemon's rules, applied before anything is written
  ELDR_TRY(decode_record(RecordType::worker_report, schema, payload, check));
  Impl& m = *m_impl;
  std::lock_guard lock(m.mutex);
  ELDR_TRY(m.ensure_attached());
  return m.push_bytes(RecordType::worker_report, schema, payload);
}

Status Client::push_worker_control(uint32_t worker, WorkerOp op) {
  WorkerControlMsg msg{worker, static_cast<uint32_t>(op)};
  DecodedRecord check;
  ELDR_TRY(decode_record(RecordType::worker_control, kWorkerControlSchema,
                         {reinterpret_cast<const uint8_t*>(&msg), sizeof(msg)}, check));
  Impl& m = *m_impl;
  std::lock_guard lock(m.mutex);
  ELDR_TRY(m.ensure_attached());
  return m.push_bytes(RecordType::worker_control,
                      {reinterpret_cast<const uint8_t*>(&msg), sizeof(msg)});
}

Status Client::push_prompt(const PromptOut& prompt, bool* cut) {
  ELDR_TRY(validate_request_id(prompt.request_id));
  Impl& m = *m_impl;
  std::lock_guard lock(m.mutex);
  ELDR_TRY(m.ensure_attached());
  // A daemon before format 2.2 knows no prompt record: it would quarantine the ring.
  const uint32_t minor = m.att->view.header->format_minor;
  if (minor < kPromptFormatMinor)
    return {Errc::unsupported, "eldrd speaks format " + std::to_string(kFormatMajor) + "." +
                                   std::to_string(minor) + ", prompts need " +
                                   std::to_string(kFormatMajor) + "." +
                                   std::to_string(kPromptFormatMinor) + ": upgrade the daemon"};
  ELDR_TRY(encode_prompt(prompt, max_payload(m.att->view.ring_bytes), m.prompt_builder, cut));
  const flatbuffers::FlatBufferBuilder& fbb = m.prompt_builder;
  return m.push_bytes(RecordType::prompt, {fbb.GetBufferPointer(), fbb.GetSize()});
}

Result<DecisionIn> Client::wait_decision(std::string_view request_id, uint32_t timeout_ms) {
  ELDR_TRY(validate_request_id(request_id));
  Impl& m = *m_impl;
  // Waiting does not hold the mutex (the producer side stays usable); only
  // the attachment bookkeeping does.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  bool spun = false;
  for (;;) {
    std::shared_ptr<Mapping> keep_mapped;
    std::shared_ptr<Registration> keep_ring;
    SegmentHeader* h = nullptr;
    const DecisionCell* cells = nullptr;
    uint32_t slots = 0;
    bool with_confidence = false;
    {
      std::lock_guard lock(m.mutex);
      ELDR_TRY(m.ensure_attached());
      keep_mapped = m.att->mapping;
      keep_ring = m.att->registration;
      h = m.att->view.header;
      cells = m.att->view.decisions();
      slots = m.att->view.decision_slots;
      with_confidence = h->format_minor >= kPromptFormatMinor;
    }
    // Load the word before looking: a publish after this load changes it,
    // so the futex wait below returns at once instead of missing it.
    const uint32_t seen = h->decision_seq.load(std::memory_order_seq_cst);
    if (auto d = lookup_decision(cells, slots, request_id, with_confidence)) return *d;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline)
      return Status{Errc::timeout, "no decision for request \"" + std::string(request_id) +
                                       "\" within " + std::to_string(timeout_ms) + " ms"};
    // Spin first, once per wait: a decision usually lands within tens of
    // microseconds, and a futex sleep plus the daemon's wake syscall cost more
    // than that (they were most of the round trip). The daemon skips the wake
    // syscall while nobody is counted as waiting.
    if (!spun) {
      spun = true;
      const auto spin_until = std::min(deadline, now + kDecisionSpin);
      uint32_t polls = 0;
      while (h->decision_seq.load(std::memory_order_acquire) == seen) {
        cpu_relax();
        if (++polls % 64 == 0 && std::chrono::steady_clock::now() >= spin_until) break;
      }
      if (h->decision_seq.load(std::memory_order_acquire) != seen) continue;
    }
    const auto slice = std::min<std::chrono::nanoseconds>(
        deadline - now, std::max(m.options.liveness_interval, std::chrono::milliseconds(1)));
    // Counted in our own ring (the daemon's memory is read-only here); the
    // futex wait itself only reads the word.
    std::atomic<uint32_t>& waiters = keep_ring->ring.view().control()->decision_waiters;
    waiters.fetch_add(1, std::memory_order_seq_cst);
    futex_wait(&h->decision_seq, seen, slice);
    waiters.fetch_sub(1, std::memory_order_seq_cst);
  }
}

Result<Client::Claim> Client::claim(RecordType type, size_t payload_bytes) {
  Impl& m = *m_impl;
  std::lock_guard lock(m.mutex);
  if (type == RecordType::padding || type == RecordType::prompt || current_schema(type) == 0)
    return Status{Errc::invalid_argument, "cannot claim a record of that type"};
  ELDR_TRY(m.ensure_attached());
  m.settle_claims();
  // A claimed complete is the id alone (schema 1): a claim carries no token.
  const uint16_t schema = type == RecordType::complete ? kCompleteSchemaV1 : current_schema(type);
  auto r = m.att->writer.reserve(type, schema, payload_bytes);
  if (!r) return r.status();
  m.claims.push_back(*r);
  Claim c;
  c.payload = {r->payload, r->length};
  c.commit_word = m.att->writer.commit_word();
  c.commit_position = r->commit_position;
  const RingView& v = m.att->registration->ring.view();
  c.ring = {v.base, v.size};
  return c;
}

namespace {

// The pending claim `c` names, or end() when it is not pending (committed,
// aborted, or made on a ring this client no longer writes: re-attachment).
auto find_claim(std::deque<RingWriter::Reservation>& claims, const RingWriter& writer,
                const Client::Claim& c) {
  if (c.commit_word != writer.commit_word()) return claims.end();
  return std::find_if(claims.begin(), claims.end(), [&](const RingWriter::Reservation& r) {
    return r.commit_position == c.commit_position && r.payload == c.payload.data();
  });
}

}  // namespace

Status Client::commit(const Claim& claim) {
  Impl& m = *m_impl;
  std::lock_guard lock(m.mutex);
  if (!m.att) return {Errc::state, "no such pending claim (dropped by a re-attachment)"};
  m.settle_claims();
  const auto it = find_claim(m.claims, m.att->writer, claim);
  if (it == m.claims.end())
    return {Errc::state,
            "no such pending claim (already committed, aborted, or dropped by a re-attachment)"};
  if (it != m.claims.begin())
    return {Errc::state, "claims are committed in the order they were made: " +
                             std::to_string(it - m.claims.begin()) + " earlier one(s) pending"};
  m.att->writer.commit(*it);
  m.claims.pop_front();
  ring_doorbell(*m.att->view.header, *m.att->registration);
  return Status::ok();
}

Status Client::abort(const Claim& claim) {
  Impl& m = *m_impl;
  std::lock_guard lock(m.mutex);
  if (!m.att) return {Errc::state, "no such pending claim (dropped by a re-attachment)"};
  m.settle_claims();
  const auto it = find_claim(m.claims, m.att->writer, claim);
  if (it == m.claims.end()) return {Errc::state, "no such pending claim"};
  // Nothing past the commit word was published: the bytes stay invisible.
  m.att->writer.rollback(*it);
  m.claims.erase(it, m.claims.end());
  return Status::ok();
}

std::function<void()> Client::doorbell() {
  Impl& m = *m_impl;
  std::lock_guard lock(m.mutex);
  if (!m.att) return [] {};
  // The closure keeps the segment mapped and the registration open: it may
  // run after this client re-attached or closed, and until it is destroyed
  // the daemon keeps reading the ring under the writer's late commit.
  return [mapping = m.att->mapping, registration = m.att->registration,
          header = m.att->view.header] { ring_doorbell(*header, *registration); };
}

uint32_t Client::slot() const noexcept { return m_impl->slot.load(std::memory_order_relaxed); }
uint32_t Client::ring_bytes() const {
  std::lock_guard lock(m_impl->mutex);
  return m_impl->att ? m_impl->att->view.ring_bytes : 0;
}
uint64_t Client::daemon_generation() const noexcept {
  return m_impl->generation.load(std::memory_order_relaxed);
}
uint64_t Client::reattachments() const noexcept {
  return m_impl->reattachments.load(std::memory_order_relaxed);
}

}  // namespace eldr::shm
