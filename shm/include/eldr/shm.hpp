// The shared-memory transport between eldrd and its clients (engines,
// gateways, `eldr status`). The daemon (Host) creates one segment per
// instance, which clients map read-only; each client (Client) registers over
// the daemon's Unix socket and gets its own single-producer byte ring, memory
// that only it and the daemon map; decisions go back through a table of
// seqlock cells keyed by request id that only the daemon writes. Nothing on
// the data path takes a lock; every byte a client wrote is treated as hostile.
//
// Layout and protocol details live in shm/internal/eldr/shm/layout.hpp (POD structs,
// static_asserts, layout hash); this header is what the rest of eldr uses.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "eldr/predictor.hpp"
#include "eldr/status.hpp"

namespace eldr::shm {

// In the segment's, the socket's and the lock file's names: v2. Format 2
// gave every writer its own memory (the daemon's segment is read-only to
// clients, each client's ring is a memfd of its own) and registers clients
// over a Unix socket. Minor versions add fields in reserved or padding bytes
// (zero before), with the layout hash unchanged.
inline constexpr uint32_t kFormatMajor = 2;
// 2.1: inflight_local, the pool status. 2.2: prompt records, the
// decision's confidence, the predictor's state in the router row.
inline constexpr uint32_t kFormatMinor = 2;
// The first minor that reads prompt records (a daemon before it quarantines
// a ring that carries one: Client::push_prompt refuses to send it).
inline constexpr uint32_t kPromptFormatMinor = 2;
inline constexpr size_t kMaxRequestId = 128;    // bytes, NUL excluded
inline constexpr size_t kMaxInstanceName = 64;  // [A-Za-z0-9_.-]+

// "/eldr-v2-<instance>": the POSIX shm name of the daemon's segment (file
// under /dev/shm).
std::string segment_name(std::string_view instance);
Status validate_instance_name(std::string_view instance);
Status validate_request_id(std::string_view request_id);

// ---- what flows through a client's ring ---------------------------------

enum class RecordType : uint16_t {
  padding = 0,         // fills the ring's tail end at wrap
  footprint = 1,       // FlatBuffers FootprintMsg (core/schema/footprint_msg.fbs)
  complete = 2,        // request id: the decode finished
  worker_report = 3,   // worker, running, kv_usage; schema 2: + batch_size, step_ms
  worker_control = 4,  // worker, op (add / drain / remove)
  prompt = 5,          // format 2.2: FlatBuffers PromptMsg (shm/schema/prompt_msg.fbs)
};

enum class WorkerOp : uint32_t { add = 1, drain = 2, remove = 3 };

// A footprint as the producer gives it: either dense int16 counts [L][E], or
// per-block uint8 rows with their chained content hashes.
struct FootprintOut {
  std::string_view request_id;
  uint32_t layers = 0;
  uint32_t experts = 0;
  std::span<const int16_t> counts;         // dense, or empty
  std::span<const uint64_t> block_hashes;  // block form: one per block
  std::span<const uint8_t> row_present;    // block form: empty = all present
  std::span<const uint8_t> block_rows;     // present rows only, each L*E bytes
  uint64_t prefill_end_ns = 0;             // CLOCK_REALTIME of the engine, 0 = unknown
};

// A prompt as the producer gives it: token ids or UTF-8 text (prompt.kind).
// push_prompt sends it whole when it fits one record, else its head (three
// quarters of the record) and its tail (the rest).
struct PromptOut {
  std::string_view request_id;
  Prompt prompt;
};

// A decode engine's report about one worker. batch_size and step_ms: 0 = not
// reported (a schema-1 record, which every daemon reads, carries neither).
struct WorkerReportRecord {
  uint32_t worker = 0;
  uint32_t running = 0;
  float kv_usage = 0.0f;  // [0, 1]
  uint32_t batch_size = 0;
  float step_ms = 0.0f;  // finite, >= 0
};

// A decision as the daemon publishes it.
struct DecisionIn {
  int32_t status = 0;  // Errc: ok, or why the daemon rejected the request
  int32_t worker = -1;
  float similarity = 0.0f;
  uint32_t band_size = 0;
  uint32_t policy = 0;
  uint64_t table_epoch = 0;
  uint64_t latency_ns = 0;  // record seen -> decision published
  // What a complete of this request must carry unless it comes from the
  // process that pushed the footprint (0: none issued, e.g. a rejection).
  uint64_t completion_token = 0;
  // Routed from the prompt: how sure the prediction was, in [0, 1]; 1 for
  // a footprint (and from a daemon before format 2.2). Carried in 1/65535
  // steps.
  float confidence = 1.0f;
};

// ---- client side -----------------------------------------------------------

struct ClientOptions {
  std::chrono::milliseconds open_timeout{2000};  // wait for READY
  std::chrono::milliseconds daemon_stale{3000};  // heartbeat age that means "daemon gone"
  bool reattach = true;                          // follow a restarted daemon
  // Longest single sleep of wait_decision before it re-checks the daemon's
  // liveness (a dead daemon wakes nobody).
  std::chrono::milliseconds liveness_interval{100};
};

// One registered client. Thread-safe (calls are serialised by an internal
// mutex: one ring has one producer).
class Client {
 public:
  static Result<std::unique_ptr<Client>> open(std::string_view instance,
                                              const ClientOptions& options = {});
  ~Client();  // unregisters (the daemon reclaims the slot)
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // ring_full: nothing was written. capacity: record larger than ring/8.
  Status push_footprint(const FootprintOut& footprint);
  // completion_token: the one in the request's decision (DecisionIn), which
  // any client may present; 0 = none, accepted only from the process that
  // pushed the request's footprint.
  Status push_complete(std::string_view request_id, uint64_t completion_token = 0);
  Status push_worker_report(uint32_t worker, uint32_t running, float kv_usage);
  // Sends a schema-1 record when batch_size and step_ms are 0 (any daemon
  // reads it), else a schema-2 one (a daemon before it rejects the record).
  Status push_worker_report(const WorkerReportRecord& report);
  Status push_worker_control(uint32_t worker, WorkerOp op);
  // A prompt to route from (the daemon answers with a decision, as for a
  // footprint). Its request id is checked here, the prompt itself by the
  // daemon (a bad prompt gets a rejected decision). unsupported: the daemon
  // is older than format 2.2. `cut`, when given: whether it was cut.
  Status push_prompt(const PromptOut& prompt, bool* cut = nullptr);

  // Bounded wait for the decision for request_id (from any client). timeout 0
  // = look once. Errc::timeout when it is not there in time.
  Result<DecisionIn> wait_decision(std::string_view request_id, uint32_t timeout_ms);

  // Two-phase push for writers that fill the payload themselves (the GPU
  // hand-off): claim returns the payload bytes of a record of `type` inside
  // the ring (mapped memory; valid until commit or abort), commit_position the
  // 64-bit value that publishes it when stored to commit_word(). The CPU path
  // calls commit(); a GPU writes the payload, fences (system scope) and stores
  // the commit itself. Claims follow one another in the ring and several may
  // be pending: storing a later claim's commit_position publishes the earlier
  // ones too, so the writer commits them in order. While claims are pending,
  // the push_* calls of this client return Errc::state (their record would
  // publish the claims unfilled): a GPU hand-off uses a client of its own.
  struct Claim {
    std::span<uint8_t> payload;
    uint64_t* commit_word = nullptr;  // the ring's producer position
    uint64_t commit_position = 0;
    // This client's whole ring memory (positions and data; page aligned),
    // which holds payload and commit_word: what a GPU writer page-locks. It
    // is all the shared memory this client can write.
    std::span<uint8_t> ring;
  };
  Result<Claim> claim(RecordType type, size_t payload_bytes);
  // Stores commit_position (release) and rings the doorbell. The claim must
  // be the oldest pending one.
  Status commit(const Claim& claim);
  // Drops the claim and every later one, unpublished (e.g. the GPU kernel
  // could not be launched). None of them may have been handed to a writer.
  Status abort(const Claim& claim);
  // Wakes a sleeping daemon to look at the rings, for writers that commit
  // without this client (a CUDA host function after the GPU's commit). The
  // callable keeps this registration's ring mapped and its socket open, so
  // it may run after the client re-attached or closed, and until it is
  // destroyed the daemon keeps reading that ring (a late commit is not lost).
  std::function<void()> doorbell();

  uint32_t slot() const noexcept;
  uint32_t ring_bytes() const;  // of this client's ring (0 while detached)
  uint64_t daemon_generation() const noexcept;
  uint64_t reattachments() const noexcept;

 private:
  struct Impl;
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> m_impl;
};

// ---- daemon side -------------------------------------------------------------

struct SegmentConfig {
  std::string instance = "default";
  uint32_t max_clients = 32;
  uint32_t ring_bytes = 1u << 20;  // per client, power of two, >= 64 KiB
  // Power of two. The daemon never waits for a reader: a decision stays
  // readable for about decision_slots / 3 later publishes, so a gateway that
  // falls further behind (a stall) loses its oldest unread decisions.
  uint32_t decision_slots = 1u << 16;
  uint32_t max_workers = 256;  // worker table rows (status)
  // Who may register: the socket gets this mode, the segment the same with
  // every write bit cleared (0660 -> 0440: clients map it read-only).
  uint32_t mode = 0660;
  std::string group;  // empty: the daemon's group
  // Where the daemon's lock file (0600) and the registration socket
  // eldr-v2-<instance>.sock live.
  std::string lock_dir = "/dev/shm";
};

// Why a record was rejected (Prometheus label, status output).
enum class RejectReason : uint8_t {
  bad_header = 0,  // length, type or sequence out of protocol
  bad_checksum = 1,
  bad_payload = 2,  // FlatBuffers verifier or semantic check failed
  too_large = 3,
  count_ = 4,
};
const char* reject_reason_name(RejectReason reason) noexcept;

// Parsed records handed to the daemon. Spans point into a private copy: valid
// during the callback only.
struct FootprintIn {
  uint32_t client = 0;
  std::string_view request_id;
  uint32_t layers = 0;
  uint32_t experts = 0;
  std::span<const int16_t> counts;
  std::span<const uint64_t> block_hashes;
  std::span<const uint8_t> row_present;
  std::span<const uint8_t> block_rows;
  uint64_t prefill_end_ns = 0;
  uint64_t seen_ns = 0;     // CLOCK_MONOTONIC when the daemon read it
  uint32_t client_pid = 0;  // the pushing process, as the kernel names it (SO_PEERCRED)
};

// A prompt record, as the daemon reads it: `prompt` holds the units kept
// (the head, then the tail when it was cut), unchecked beyond the framing.
struct PromptIn {
  uint32_t client = 0;
  std::string_view request_id;
  Prompt prompt;
  uint64_t prompt_units = 0;  // the whole prompt's length (tokens, or bytes of text)
  uint32_t head_units = 0;    // of the units kept, those from the prompt's start
  uint64_t seen_ns = 0;       // CLOCK_MONOTONIC when the daemon read it
  uint32_t client_pid = 0;    // SO_PEERCRED
  uint64_t units() const noexcept {
    return prompt.kind == PromptKind::tokens ? prompt.tokens.size() : prompt.text.size();
  }
  bool cut() const noexcept { return prompt_units > units(); }
};

// A complete record: who sent it and the token it carries (0 = none).
struct CompleteIn {
  uint32_t client = 0;
  uint32_t client_pid = 0;  // SO_PEERCRED, as FootprintIn::client_pid
  std::string_view request_id;
  uint64_t completion_token = 0;
};

class RecordHandler {
 public:
  virtual ~RecordHandler() = default;
  virtual void on_footprint(const FootprintIn& footprint) = 0;
  virtual void on_complete(uint32_t client, std::string_view request_id) = 0;
  // Every complete, with its sender and token. The default forwards to
  // on_complete (for handlers that do not check ownership).
  virtual void on_complete_ex(const CompleteIn& complete) {
    on_complete(complete.client, complete.request_id);
  }
  virtual void on_worker_report(uint32_t client, uint32_t worker, uint32_t running,
                                float kv_usage) = 0;
  // Every worker report, with the schema-2 fields (0 in a schema-1 record).
  // The default forwards to on_worker_report.
  virtual void on_worker_report_ex(uint32_t client, const WorkerReportRecord& report) {
    on_worker_report(client, report.worker, report.running, report.kv_usage);
  }
  virtual void on_worker_control(uint32_t client, uint32_t worker, WorkerOp op) = 0;
  // A prompt to route from. The default rejects it (unsupported), so a
  // handler that does not route prompts still answers each one.
  virtual void on_prompt(const PromptIn& prompt) {
    on_rejected(prompt.client, RejectReason::bad_payload, prompt.request_id,
                Status{Errc::unsupported, "this daemon does not route prompts"});
  }
  // A record that failed validation. If it carried a readable request id the
  // daemon should still publish an error decision for it.
  virtual void on_rejected(uint32_t client, RejectReason reason, std::string_view request_id,
                           const Status& why) = 0;
};

struct ClientInfo {
  uint32_t slot = 0;
  uint32_t pid = 0;  // SO_PEERCRED at registration
  uint32_t uid = 0;
  uint64_t epoch = 0;
  uint64_t ring_used = 0;  // bytes written, not yet consumed
  uint64_t ring_capacity = 0;
  uint64_t records = 0;
  uint64_t rejected = 0;
  bool quarantined = false;
};

// The daemon's end. Single-threaded: one consumer thread calls poll(),
// publish() and maintain().
class Host {
 public:
  // Takes the instance lock (Errc::state if another daemon holds it), removes
  // a crashed daemon's leftovers, creates the segment exclusively, allocates it
  // fully (a full /dev/shm is Errc::out_of_memory here, never SIGBUS later),
  // initialises it, stores READY last, then listens on the registration
  // socket. Registrations are answered by a thread of the Host's own, so a
  // client can register while the consumer thread is busy (or not running).
  static Result<std::unique_ptr<Host>> create(const SegmentConfig& config);
  ~Host();  // state DRAINING, wake waiters, unlink segment, socket and lock
  Host(const Host&) = delete;
  Host& operator=(const Host&) = delete;

  // Reads at most max_records committed records across all clients (fairly),
  // validates each and calls the handler. Returns how many were consumed.
  size_t poll(RecordHandler& handler, size_t max_records = 256);
  // Publishes (or overwrites) the decision for request_id and wakes waiters.
  // Returns the age (ns) of another request's decision it overwrote, if the
  // table was full around this id: a gateway that had not read that one yet
  // never will (see SegmentConfig::decision_slots).
  std::optional<uint64_t> publish(std::string_view request_id, const DecisionIn& decision);
  // Heartbeat; reclaims the rings of dead clients (socket closed) and returns
  // their slots; recreates the segment (or the socket) if it was unlinked
  // under us.
  std::vector<uint32_t> maintain();
  // Blocks up to timeout for a client's doorbell or hang-up (after the
  // caller's own spin/yield back-off found nothing to do).
  void wait_for_work(std::chrono::microseconds timeout);
  // Any thread: ends a wait_for_work now or, if none runs, the next one at
  // once (work that arrives from elsewhere than the rings).
  void wake() noexcept;

  std::vector<ClientInfo> clients() const;
  // Since this Host started (metrics; also in the segment for `eldr status`).
  struct Counters {
    uint64_t clients_quarantined = 0;    // rings dropped after a protocol violation
    uint64_t registrations_refused = 0;  // hellos refused: version, capacity, not an eldr hello
  };
  Counters counters() const noexcept;
  uint64_t generation() const noexcept;
  // Ok while the segment is mapped; after maintain() found it unlinked and
  // could not recreate it (e.g. /dev/shm full), why (retried every maintain()).
  Status segment_status() const;
  const SegmentConfig& config() const noexcept;
  // Worker rows and counters published for `eldr status` (read-only readers).
  struct WorkerRow {
    int32_t worker = -1;
    uint8_t state = 0;      // eldr::WorkerState
    uint8_t healthy = 1;    // reports fresh
    uint32_t inflight = 0;  // every router of the pool's requests, as this one counts them
    uint32_t running = 0;   // last report
    float kv_usage = 0.0f;
    uint64_t routed = 0;
    float batch_experts = 0.0f;   // eldr_cost: expected distinct experts of its batch
    uint32_t inflight_local = 0;  // of inflight: the requests this daemon routed
  };
  // The router's state for `eldr status`.
  struct RouterRow {
    uint32_t policy = 0;                                // eldr::Policy
    double t0_ms = 0.0, tseq_ms = 0.0, alpha_us = 0.0;  // step constants in force
    uint32_t max_batch = 0;
    uint64_t step_samples = 0;
    uint64_t completes_unknown = 0;
    uint64_t untracked = 0;
    uint64_t completes_refused = 0;  // without the request's token, not from its pusher
    // Format 2.2: the table's footprint predictor (kinds 0: none).
    uint32_t predictor_prototypes = 0;
    uint32_t predictor_kinds = 0;  // bit k: fitted for PromptKind k
    uint64_t predictor_learned = 0;
  };
  void publish_workers(std::span<const WorkerRow> rows, uint64_t table_epoch);
  void publish_workers(std::span<const WorkerRow> rows, uint64_t table_epoch,
                       const RouterRow& router);
  // The pool status (a JSON object of at most 16 KiB, longer is cut to
  // "{}"), or "" when the daemon is in no pool.
  void publish_pool_status(std::string_view json);

 private:
  struct Impl;
  explicit Host(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> m_impl;
};

// ---- read-only view (eldr status) ----------------------------------------------

struct SegmentSnapshot {
  uint32_t format_major = 0, format_minor = 0;
  uint64_t generation = 0;
  uint32_t daemon_pid = 0;
  uint64_t heartbeat_age_ms = 0;
  std::string state;  // creating / ready / draining
  uint64_t table_epoch = 0;
  uint64_t decisions_published = 0;
  uint64_t clients_quarantined = 0;    // since the daemon started
  uint64_t registrations_refused = 0;  // hellos refused: version, capacity, not an eldr hello
  std::vector<ClientInfo> clients;
  std::vector<Host::WorkerRow> workers;
  std::optional<Host::RouterRow> router;  // once published
  std::string pool;                       // the pool status JSON; empty: in no pool
};
Result<SegmentSnapshot> read_snapshot(std::string_view instance);

}  // namespace eldr::shm
