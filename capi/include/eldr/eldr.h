/* eldr.h: the one public C API of eldr, expert-locality-aware routing for
 * Mixture-of-Experts serving.
 *
 * Two ways to use it:
 *   - Sidecar client (eldr_client_*): talk to the node's eldrd daemon through
 *     shared memory. Engines push prefill footprints, gateways wait for the
 *     decode worker chosen for a request id, decode engines report load.
 *   - Embedded router (eldr_table_*, eldr_router_*): the same router in this
 *     process, no daemon.
 *
 * Conventions
 *   - Every fallible call returns eldr_status_t: ELDR_OK (0) or a negative
 *     ELDR_E_* code. Codes are pinned forever. On failure, out-params are left
 *     untouched and eldr_last_error_message() holds a detail message for the
 *     calling thread.
 *   - Any pointer argument may be NULL and any size may be wrong: the call
 *     returns ELDR_E_INVALID_ARGUMENT (or ELDR_E_SHAPE_MISMATCH) with a message.
 *     No C++ exception crosses this API.
 *   - Names: eldr_<object>_<verb> for every call on an object (client, pool,
 *     table, router, routed_experts, gpu_footprints); a constructor is _new,
 *     _open, _load or _fit, the destructor is always _free (NULL is fine).
 *     A call's one output is named `out`.
 *   - Types: a worker id is int32_t everywhere (-1: none); every enum-valued
 *     argument or field (ELDR_POLICY_*, ELDR_DTYPE_*, ELDR_WORKER_STATE_*) is
 *     uint32_t; a status is eldr_status_t.
 *   - Ownership: arguments are borrowed for the duration of the call only,
 *     unless the call's comment says otherwise; objects returned through
 *     `**out` are owned by the caller and released with the matching _free.
 *   - Growing structs: the first field is `uint32_t version`; set it with the
 *     *_INIT macro or the *_init() function. A struct grows only by taking
 *     space from its trailing `reserved` array for new fields and bumping its
 *     VERSION, so its size never changes within an ABI; the library reads the
 *     fields that the caller's version has and defaults the rest. Unknown
 *     (newer) versions are rejected with ELDR_E_UNSUPPORTED; version 0 (a
 *     struct never initialised) with ELDR_E_INVALID_ARGUMENT.
 *   - Footprint: int16 counts, row-major [layers][experts]: for each MoE layer,
 *     how many prefill tokens routed to each expert.
 *
 * Thread safety
 *   - eldr_table_t is immutable once created: share a const pointer freely.
 *   - eldr_router_t: every call is thread-safe.
 *   - eldr_client_t: calls are serialised internally; one handle may be used
 *     from several threads. Pushes from one handle go into one ring in call
 *     order.
 *   - eldr_last_error_message() is per thread.
 */
#ifndef ELDR_ELDR_H
#define ELDR_ELDR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Hand-aligned for reading (struct initialiser macros, column comments). */
/* clang-format off */

#ifdef __cplusplus
extern "C" {
#endif

#if defined(ELDR_BUILDING_LIBRARY)
#define ELDR_API __attribute__((visibility("default")))
#else
#define ELDR_API
#endif

/* ---- version and ABI ------------------------------------------------------ */

/* The project's version: the one place it is written. CMake, the Python
 * package, the Rust crates and the Go module read these three lines. */
#define ELDR_VERSION_MAJOR 0
#define ELDR_VERSION_MINOR 1
#define ELDR_VERSION_PATCH 0
#define ELDR_VERSION_NUMBER (ELDR_VERSION_MAJOR * 10000 + ELDR_VERSION_MINOR * 100 + ELDR_VERSION_PATCH)
/* Bumped on any incompatible change of a function signature or struct layout. */
#define ELDR_ABI_VERSION 2

/* The library's ELDR_VERSION_NUMBER and ELDR_ABI_VERSION. Bindings compare the
 * ABI version with the header's at load time. */
ELDR_API uint32_t eldr_version_number(void);
ELDR_API uint32_t eldr_abi_version(void);
/* "0.1.0": static storage. */
ELDR_API const char* eldr_version_string(void);

/* ---- status codes --------------------------------------------------------- */

typedef int32_t eldr_status_t;

#define ELDR_OK 0
#define ELDR_E_INVALID_ARGUMENT (-1) /* NULL, bad size or bad value from the caller */
#define ELDR_E_SHAPE_MISMATCH (-2)   /* footprint shape disagrees with the table / geometry */
#define ELDR_E_OUT_OF_RANGE (-3)     /* a value outside its legal range (count, expert id) */
#define ELDR_E_IO (-4)               /* a file could not be opened, read or written */
#define ELDR_E_CORRUPT (-5)          /* malformed or truncated data */
#define ELDR_E_UNSUPPORTED (-6)      /* version or feature this build does not handle */
#define ELDR_E_NOT_FOUND (-7)        /* unknown worker or request id */
#define ELDR_E_NO_WORKER (-8)        /* no routable worker (all draining, removed or stale) */
#define ELDR_E_CAPACITY (-9)         /* a bounded structure is full or a record too large */
#define ELDR_E_STATE (-10)           /* call not valid in the object's current state */
#define ELDR_E_INTERNAL (-11)        /* a bug: an invariant broke */
#define ELDR_E_RING_FULL (-12)       /* the client's ring has no room now; nothing written */
#define ELDR_E_TIMEOUT (-13)         /* a bounded wait ended first */
#define ELDR_E_NO_DAEMON (-14)       /* no ready eldrd for this instance */
#define ELDR_E_INCOMPATIBLE (-15)    /* segment of another format (magic, ABI, layout) */
#define ELDR_E_OUT_OF_MEMORY (-16)   /* host, shared or device memory exhausted */
#define ELDR_E_CUDA (-17)            /* a CUDA runtime call failed */
#define ELDR_E_PERMISSION (-18)      /* the OS refused access (mode, group, socket) */

/* "ELDR_E_TIMEOUT" style name, or "ELDR_E_UNKNOWN". Static storage. */
ELDR_API const char* eldr_status_name(eldr_status_t status);
/* One-line English description. Static storage. */
ELDR_API const char* eldr_status_string(eldr_status_t status);
/* Detail message of the calling thread's last failed call ("" if none). Valid
 * until the next eldr call on this thread. */
ELDR_API const char* eldr_last_error_message(void);

/* ---- policies -------------------------------------------------------------- */

#define ELDR_POLICY_ELDR 0        /* locality band (tau), least loaded inside it */
#define ELDR_POLICY_ROUND_ROBIN 1
#define ELDR_POLICY_RANDOM 2
#define ELDR_POLICY_JSQ 3         /* join the shortest queue */
#define ELDR_POLICY_P2C 4         /* power of two choices */
#define ELDR_POLICY_DOMAIN 5      /* label pools from the table */
#define ELDR_POLICY_ELDR_GUARD 6  /* locality band with a load guard */
#define ELDR_POLICY_ELDR_COST 7   /* least added decode time under the step model (default) */

/* "eldr", "round_robin", ... or NULL for an unknown policy. */
ELDR_API const char* eldr_policy_name(uint32_t policy);

/* ---- decisions -------------------------------------------------------------- */

#define ELDR_DECISION_VERSION 2 /* 2: confidence */
typedef struct eldr_decision {
  uint32_t version;     /* in: ELDR_DECISION_VERSION */
  int32_t worker;       /* chosen decode worker id */
  float similarity;     /* signature . centroid of the chosen worker */
  uint32_t band_size;   /* workers inside the locality band */
  uint64_t table_epoch; /* cluster table generation used */
  uint32_t policy;      /* ELDR_POLICY_* */
  eldr_status_t status; /* sidecar: ELDR_OK, or why the daemon rejected this request */
  uint64_t latency_ns;  /* sidecar: push to publish, measured by the daemon */
  uint64_t completion_token; /* sidecar, pool: for eldr_*_complete (0: rejected) */
  float confidence;     /* routed from a prompt: how sure the prediction was, [0, 1]; else 1 */
  uint32_t reserved0;
  uint64_t reserved[2];
} eldr_decision_t;

#define ELDR_DECISION_INIT {ELDR_DECISION_VERSION, -1, 0.0f, 0, 0, 0, 0, 0, 0, 1.0f, 0, {0, 0}}
ELDR_API void eldr_decision_init(eldr_decision_t* decision);

/* ---- sidecar client ----------------------------------------------------------
 * A client registers with the daemon of `instance` and gets its own
 * single-producer ring. If the daemon restarts, the client re-attaches by
 * itself on its next call. Request ids: 1..128 bytes, any bytes except NUL.
 */

typedef struct eldr_client eldr_client_t;

#define ELDR_CLIENT_OPTIONS_VERSION 1

typedef struct eldr_client_options {
  uint32_t version;           /* ELDR_CLIENT_OPTIONS_VERSION */
  uint32_t open_timeout_ms;   /* how long open waits for a READY segment (default 2000); a
                                 live daemon still gets 200 ms to answer the registration */
  uint32_t daemon_stale_ms;   /* daemon heartbeat older than this = daemon gone (default 3000) */
  uint32_t reattach;          /* nonzero: re-attach to a restarted daemon (default 1) */
  uint64_t reserved[4];
} eldr_client_options_t;

#define ELDR_CLIENT_OPTIONS_INIT {ELDR_CLIENT_OPTIONS_VERSION, 2000, 3000, 1, {0, 0, 0, 0}}
ELDR_API void eldr_client_options_init(eldr_client_options_t* options);

/* Opens and registers. opts may be NULL (defaults).
 * Errors: INVALID_ARGUMENT, NO_DAEMON, INCOMPATIBLE, CAPACITY (no free client
 * slot), PERMISSION, TIMEOUT. */
ELDR_API eldr_status_t eldr_client_open(const char* instance, const eldr_client_options_t* opts,
                                        eldr_client_t** out);
/* Unregisters and releases. NULL is fine. A client that an experimental GPU
 * hand-off still uses keeps its ring until that hand-off has committed. */
ELDR_API void eldr_client_free(eldr_client_t* client);

/* Pushes one footprint for request_id. Returns as soon as the record is in the
 * ring. Errors: INVALID_ARGUMENT, SHAPE_MISMATCH, OUT_OF_RANGE, RING_FULL
 * (nothing written: retry), CAPACITY (record larger than the ring allows),
 * NO_DAEMON. The daemon validates again; a rejected footprint gets a decision
 * whose status says why. */
ELDR_API eldr_status_t eldr_client_push(eldr_client_t* client, const char* request_id,
                                        const int16_t* counts, uint32_t layers,
                                        uint32_t experts);

/* Pushes a footprint as per-KV-block rows keyed by each block's chained
 * content hash (from the engine's prefix cache). rows holds n_blocks rows of
 * [layers][experts] uint8 counts; a block whose row_present[i] is 0 has no row
 * in `rows` (its slot is skipped) and is looked up in the daemon's signature
 * cache. row_present NULL = every row present. Errors: as eldr_client_push,
 * and NOT_FOUND in the decision when a hash-only block is unknown. */
ELDR_API eldr_status_t eldr_client_push_blocks(eldr_client_t* client, const char* request_id,
                                               const uint64_t* block_hashes,
                                               const uint8_t* row_present, const uint8_t* rows,
                                               uint32_t n_blocks, uint32_t layers,
                                               uint32_t experts);

/* Waits up to timeout_ms (0 = just look) for the decision for request_id,
 * pushed by any client of this daemon. out->version must be set.
 * Errors: INVALID_ARGUMENT, TIMEOUT, NO_DAEMON, UNSUPPORTED (out->version). */
ELDR_API eldr_status_t eldr_client_wait(eldr_client_t* client, const char* request_id,
                                        uint32_t timeout_ms, eldr_decision_t* out);

/* eldr_client_push then eldr_client_wait, and the daemon's verdict: when
 * the daemon rejected the footprint (a geometry other than its table's, a
 * count it refuses, an unknown block), eldr_client_route returns that status
 * (out->status, e.g. SHAPE_MISMATCH) with a message naming the request, and
 * out is filled all the same (out->worker = -1): the one call whose out-param
 * is written on failure. Other errors: as the two calls (out untouched).
 * eldr_client_wait itself returns OK for a rejected request's decision: a
 * gateway reads out->status. */
ELDR_API eldr_status_t eldr_client_route(eldr_client_t* client, const char* request_id,
                                         const int16_t* counts, uint32_t layers, uint32_t experts,
                                         uint32_t timeout_ms, eldr_decision_t* out);

/* The request's decode has finished: its worker's in-flight count drops by one.
 * Who may complete a request: whoever presents its completion token (from its
 * decision: a gateway or decode engine in another process), or, without a
 * token, the process that pushed its footprint. The daemon refuses any other
 * complete and counts it (eldr_complete_refused_total); nothing else changes,
 * so a client cannot complete requests it was never given.
 * completion_token 0 = "this process pushed the request's footprint".
 * Errors: INVALID_ARGUMENT, RING_FULL, NO_DAEMON. (An unknown request id is
 * counted by the daemon in its metrics.) */
ELDR_API eldr_status_t eldr_client_complete(eldr_client_t* client, const char* request_id,
                                            uint64_t completion_token);

#define ELDR_WORKER_REPORT_VERSION 1

/* A decode engine's report about one worker, for eldr_client_report
 * (daemon) and eldr_router_report (embedded). A worker that stops reporting
 * is taken out of the daemon's routing after its report timeout and put
 * back on its next report. batch_size takes precedence
 * over the router's own in-flight count; step_ms with batch_size is a sample
 * for the online fit of the step constants that ELDR_POLICY_ELDR_COST
 * predicts with. 0 = not reported, for batch_size and step_ms. */
typedef struct eldr_worker_report {
  uint32_t version;     /* ELDR_WORKER_REPORT_VERSION */
  int32_t worker;       /* worker id */
  uint32_t running;     /* requests running (the daemon's liveness signal) */
  float kv_usage;       /* KV-cache usage in [0, 1] */
  uint32_t batch_size;  /* requests in its last decode step (running + waiting) */
  float step_ms;        /* that step's duration in ms (finite, >= 0) */
  uint64_t reserved[4];
} eldr_worker_report_t;

#define ELDR_WORKER_REPORT_INIT {ELDR_WORKER_REPORT_VERSION, 0, 0, 0.0f, 0, 0.0f, {0, 0, 0, 0}}
ELDR_API void eldr_worker_report_init(eldr_worker_report_t* report);
/* Errors: INVALID_ARGUMENT (NULL, a bad field), UNSUPPORTED (version),
 * RING_FULL, NO_DAEMON. */
ELDR_API eldr_status_t eldr_client_report(eldr_client_t* client,
                                          const eldr_worker_report_t* report);

/* Admin, through the daemon: add (routable again), drain (no new requests)
 * or remove a worker. Errors: INVALID_ARGUMENT, RING_FULL, NO_DAEMON. */
ELDR_API eldr_status_t eldr_client_add_worker(eldr_client_t* client, int32_t worker);
ELDR_API eldr_status_t eldr_client_drain_worker(eldr_client_t* client, int32_t worker);
ELDR_API eldr_status_t eldr_client_remove_worker(eldr_client_t* client, int32_t worker);

/* ---- pool over NATS: routing without a local sidecar --------------------------
 * A gateway that has a footprint but no eldrd on its node routes through any
 * node of a pool (eldrd --nats ... --pool NAME): request/reply on
 * eldr.<pool>.route, answered by one node, which counts the request in flight
 * like its own until eldr_pool_complete. The handle is thread-safe. A build
 * without libnats returns UNSUPPORTED from each call. */
typedef struct eldr_pool eldr_pool_t;
/* Connects to nats_urls ("nats://a:4222,nats://b:4222"); reconnects by itself.
 * A thread of the handle beats on eldr.<pool>.gateway every second: a node
 * releases the requests a handle routed through it once it stops hearing it
 * (the gateway died; [pool] gateway_timeout_ms, 10 s by default).
 * Errors: INVALID_ARGUMENT, IO (no server), TIMEOUT, UNSUPPORTED. */
ELDR_API eldr_status_t eldr_pool_open(const char* nats_urls, const char* pool, uint32_t timeout_ms,
                                      eldr_pool_t** out);

/* TLS and credentials for a secured pool (docs/design.md section 10). Each
 * field a file path, or NULL: ca_file (PEM, the CAs of the servers'
 * certificates; turns TLS on), cert_file and key_file (PEM, a client
 * certificate, together), then at most one kind of credentials: creds_file
 * (JWT and nkey seed), user with password_file, or token_file. Secrets are
 * read from their files when connecting and never appear in errors.
 * inbox_prefix (version 2; NULL: libnats' "_INBOX"): the handle's answers
 * come to "<inbox_prefix>.<random>": give each gateway user a prefix of its
 * own ("_INBOX.gw-a") and subscribe rights on it alone, so that no other
 * gateway can read its answers. Nodes answer under "_INBOX" by default
 * ([pool] reply_prefixes). Version 1 structs are still read. */
#define ELDR_NATS_AUTH_VERSION 2
typedef struct eldr_nats_auth {
  uint32_t version; /* ELDR_NATS_AUTH_VERSION */
  const char* ca_file;
  const char* cert_file;
  const char* key_file;
  const char* creds_file;
  const char* user;
  const char* password_file;
  const char* token_file;
  const char* inbox_prefix; /* version 2 */
} eldr_nats_auth_t;
#define ELDR_NATS_AUTH_INIT {ELDR_NATS_AUTH_VERSION, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL}
/* eldr_pool_open with TLS and credentials (auth NULL: none). Errors as
 * eldr_pool_open, and INVALID_ARGUMENT (an inconsistent auth, an inbox
 * prefix that is not dot-separated tokens of [A-Za-z0-9_-] or lies under
 * "eldr", a version other than 1 or 2), IO (a file that cannot be read, a
 * certificate libnats refuses). */
ELDR_API eldr_status_t eldr_pool_open_auth(const char* nats_urls, const char* pool,
                                           const eldr_nats_auth_t* auth, uint32_t timeout_ms,
                                           eldr_pool_t** out);
/* Requests it routed and did not complete can never complete now: the nodes
 * release them at once. NULL is fine. */
ELDR_API void eldr_pool_free(eldr_pool_t* pool);
/* Routes one dense footprint (int16 [layers][experts]); waits at most
 * timeout_ms (0: 2000) for the answer. out->completion_token is what
 * eldr_pool_complete presents. The request is this handle's: a node refuses
 * the same id from another gateway while it is in flight (STATE), and
 * releases it only on this handle's complete (which presents the route's
 * own key), cancel, leaving or silence. Errors: INVALID_ARGUMENT,
 * SHAPE_MISMATCH, OUT_OF_RANGE, NO_WORKER, STATE and the others a node
 * answers with, TIMEOUT (with what the server said, when it refused this
 * user the inbox: a permissions violation), NO_DAEMON (no node subscribed),
 * CORRUPT (an answer that does not verify).
 * When no answer came (TIMEOUT, a lost server, CORRUPT), a node may have
 * booked the request: it is cancelled there (eldr.<pool>.cancel, with the
 * route's own key) before the error returns, which takes at most timeout_ms
 * more; the request id may then be routed again. */
ELDR_API eldr_status_t eldr_pool_route(eldr_pool_t* pool, const char* request_id,
                                       const int16_t* counts, uint32_t layers, uint32_t experts,
                                       uint32_t timeout_ms, eldr_decision_t* out);
/* The request has finished: sent to the node that routed it (the handle keeps
 * the last 65,536 routed requests' nodes). Returns once that node has it (it
 * answers: one round trip to it), sending it again until then for up to 5 s,
 * because a lost complete keeps the request in flight at its node; to a node
 * from before such answers, once a NATS server has it.
 * Errors: INVALID_ARGUMENT (token 0), NOT_FOUND (not routed by this handle),
 * TIMEOUT or IO (no answer within 5 s), NO_DAEMON (nobody listened on the
 * node's subject for 1 s, or at once when nobody did last time either: the
 * node is gone, and its lease releases its requests), CORRUPT (an answer
 * that is not the token). */
ELDR_API eldr_status_t eldr_pool_complete(eldr_pool_t* pool, const char* request_id,
                                          uint64_t completion_token);

/* ---- embedded: cluster tables ------------------------------------------------ */

typedef struct eldr_table eldr_table_t;

#define ELDR_TABLE_INFO_VERSION 1

typedef struct eldr_table_info {
  uint32_t version; /* ELDR_TABLE_INFO_VERSION */
  uint32_t layers;
  uint32_t experts;
  uint32_t top_k;
  uint32_t num_workers;   /* clusters = workers */
  uint32_t num_selected_layers;
  float default_tau;
  uint32_t reserved0;
  uint64_t reserved[4];
} eldr_table_info_t;

#define ELDR_TABLE_INFO_INIT {ELDR_TABLE_INFO_VERSION, 0, 0, 0, 0, 0, 0.0f, 0, {0, 0, 0, 0}}
ELDR_API void eldr_table_info_init(eldr_table_info_t* info);

/* Loads and verifies a FlatBuffers cluster table file.
 * Errors: INVALID_ARGUMENT, IO, CORRUPT, UNSUPPORTED. */
ELDR_API eldr_status_t eldr_table_load(const char* path, eldr_table_t** out);
ELDR_API void eldr_table_free(eldr_table_t* table);
/* Atomic write (temporary file + rename). Errors: INVALID_ARGUMENT, IO. */
ELDR_API eldr_status_t eldr_table_save(const eldr_table_t* table, const char* path);
/* out->version must be set. Errors: INVALID_ARGUMENT, UNSUPPORTED. */
ELDR_API eldr_status_t eldr_table_get_info(const eldr_table_t* table, eldr_table_info_t* out);
/* Worker id owning each cluster: out[n] with n == num_workers. */
ELDR_API eldr_status_t eldr_table_get_worker_ids(const eldr_table_t* table, int32_t* out,
                                                 uint32_t n);

#define ELDR_FIT_OPTIONS_VERSION 1

typedef struct eldr_fit_options {
  uint32_t version;        /* ELDR_FIT_OPTIONS_VERSION */
  uint32_t num_workers;    /* K (required) */
  uint64_t seed;           /* default 1 */
  uint32_t select_layers;  /* nonzero: greedy layer selection (needs decode counts); default 1 */
  uint32_t max_iterations; /* k-means iterations, default 50 */
  uint32_t threads;        /* 0 = all cores */
  uint32_t reserved0;
  uint64_t reserved[4];
} eldr_fit_options_t;

#define ELDR_FIT_OPTIONS_INIT {ELDR_FIT_OPTIONS_VERSION, 0, 1, 1, 50, 0, 0, {0, 0, 0, 0}}
ELDR_API void eldr_fit_options_init(eldr_fit_options_t* options);

/* Fits a table from calibration footprints: prefill[n][layers][experts] and
 * optionally decode[n][layers][experts] (NULL: no layer selection).
 * Errors: INVALID_ARGUMENT, SHAPE_MISMATCH, OUT_OF_RANGE. */
ELDR_API eldr_status_t eldr_table_fit(const int16_t* prefill, const int16_t* decode, uint64_t n,
                                      uint32_t layers, uint32_t experts, uint32_t top_k,
                                      const eldr_fit_options_t* options, eldr_table_t** out);

/* The request's signature (count * IDF over the selected layers, unit L2):
 * out[n] with n == num_selected_layers * experts. */
ELDR_API eldr_status_t eldr_table_compute_signature(const eldr_table_t* table, const int16_t* counts,
                                                    uint32_t layers, uint32_t experts, float* out,
                                                    uint64_t n);
/* Similarity to each cluster centroid: out[n] with n == num_workers, in
 * cluster order (see eldr_table_get_worker_ids). */
ELDR_API eldr_status_t eldr_table_score(const eldr_table_t* table, const int16_t* counts,
                                        uint32_t layers, uint32_t experts, float* out,
                                        uint32_t n);

/* ---- embedded: router ----------------------------------------------------------- */

typedef struct eldr_router eldr_router_t;

#define ELDR_ROUTER_OPTIONS_VERSION 1

/* A zeroed struct with only `version` set routes with ELDR_POLICY_ELDR (0);
 * the INIT macro and eldr_router_options_init() select ELDR_POLICY_ELDR_COST. */
typedef struct eldr_router_options {
  uint32_t version;     /* ELDR_ROUTER_OPTIONS_VERSION */
  uint32_t policy;      /* ELDR_POLICY_*, default ELDR_POLICY_ELDR_COST */
  float tau;            /* band width; < 0 = the table's default (0.1) */
  uint32_t min2_band;   /* nonzero: the band holds at least two workers */
  uint64_t seed;        /* random / p2c / tie breaks */
  uint32_t max_workers; /* worker slots, fixed at creation (default 256) */
  uint32_t max_inflight;  /* request records, fixed at creation; 0 = 8192 */
  /* The step model of ELDR_POLICY_ELDR_COST, step = t0_ms + tseq_ms * batch
   * + alpha_us / 1000 * distinct experts. All three < 0 (the default): the
   * table's constants, else the preset of its geometry; all three >= 0:
   * these; a mix (or a NaN) is INVALID_ARGUMENT. */
  double t0_ms;
  double tseq_ms;
  double alpha_us;
  uint32_t max_batch;     /* with the constants above (else must be 0); 0 = 64 */
  uint32_t fit_step_cost; /* nonzero (default): refine them from reports */
  uint64_t reserved[4];
} eldr_router_options_t;

#define ELDR_ROUTER_OPTIONS_INIT \
  {ELDR_ROUTER_OPTIONS_VERSION, ELDR_POLICY_ELDR_COST, -1.0f, 0, 0, 256, 0, \
   -1.0, -1.0, -1.0, 0, 1, {0, 0, 0, 0}}
ELDR_API void eldr_router_options_init(eldr_router_options_t* options);

/* The router keeps its own reference to the table (shared, immutable): the
 * caller may free its handle at once.
 * opts may be NULL. Errors: INVALID_ARGUMENT, UNSUPPORTED. */
ELDR_API eldr_status_t eldr_router_new(const eldr_table_t* table, const eldr_router_options_t* opts,
                                       eldr_router_t** out);
ELDR_API void eldr_router_free(eldr_router_t* router);

/* Routes one request. loads NULL (n_loads 0): the pick is counted in flight
 * on its worker (completed with eldr_router_complete_worker). loads given
 * (n_loads == eldr_router_get_worker_slots(), eldr_router_get_workers order):
 * they replace the in-flight counts for this decision only and nothing is
 * counted. Errors: INVALID_ARGUMENT, SHAPE_MISMATCH, OUT_OF_RANGE, NO_WORKER. */
ELDR_API eldr_status_t eldr_router_route(eldr_router_t* router, const int16_t* counts,
                                         uint32_t layers, uint32_t experts,
                                         const uint32_t* loads, uint32_t n_loads,
                                         eldr_decision_t* out);
/* Every worker's similarity and band membership, one entry per worker slot
 * (eldr_router_get_workers order: the table's workers first, in cluster order, so
 * on a router without runtime membership changes this is cluster order and
 * n is the table's num_workers). n must equal eldr_router_get_worker_slots().
 * Draining and removed slots: 0 and not in band.
 * Nothing is counted in flight. */
ELDR_API eldr_status_t eldr_router_score(eldr_router_t* router, const int16_t* counts,
                                         uint32_t layers, uint32_t experts, float* out_scores,
                                         uint8_t* out_in_band, uint32_t n);
/* As eldr_router_route (no loads), remembering request_id so that
 * eldr_router_complete takes this request, and its expert footprint, out of
 * its worker's batch. Errors as eldr_router_route; STATE when request_id is
 * already in flight. */
ELDR_API eldr_status_t eldr_router_route_request(eldr_router_t* router, uint64_t request_id,
                                                 const int16_t* counts, uint32_t layers,
                                                 uint32_t experts, eldr_decision_t* out);
/* The request routed with this id has finished. NOT_FOUND for an id not in
 * flight (unknown, or completed already): counted, nothing else changes. */
ELDR_API eldr_status_t eldr_router_complete(eldr_router_t* router, uint64_t request_id);
/* The oldest request still in flight on `worker` has finished (for callers
 * that keep no ids). Errors: INVALID_ARGUMENT, NOT_FOUND; STATE when the
 * worker has nothing in flight (a count never goes below 0). */
ELDR_API eldr_status_t eldr_router_complete_worker(eldr_router_t* router, int32_t worker);
/* A decode engine's report (report->worker names it). The embedded router
 * keeps no liveness: `running` is not read, kv_usage only checked. Errors:
 * INVALID_ARGUMENT (NULL, kv_usage outside [0, 1], step_ms negative or not
 * finite, worker < 0), UNSUPPORTED (version), NOT_FOUND. */
ELDR_API eldr_status_t eldr_router_report(eldr_router_t* router, const eldr_worker_report_t* report);

#define ELDR_ROUTER_STATS_VERSION 1

typedef struct eldr_router_stats {
  uint32_t version;            /* in: ELDR_ROUTER_STATS_VERSION */
  uint32_t reserved0;
  uint64_t routed;
  uint64_t rejected;           /* route calls that failed */
  uint64_t completes_rejected; /* completes of nothing in flight, unknown ids included */
  uint64_t completes_unknown;  /* eldr_router_complete with an id not in flight */
  uint64_t untracked;          /* routes made with every request record in use */
  uint64_t step_samples;       /* reports the step-constant fit used */
  double t0_ms;                /* the step constants in force (configured or fitted) */
  double tseq_ms;
  double alpha_us;
  uint64_t reserved[4];
} eldr_router_stats_t;

#define ELDR_ROUTER_STATS_INIT {ELDR_ROUTER_STATS_VERSION, 0, 0, 0, 0, 0, 0, 0, 0.0, 0.0, 0.0, {0, 0, 0, 0}}
/* Counters since creation and the step constants in force. out->version
 * must be set. Errors: INVALID_ARGUMENT, UNSUPPORTED. */
ELDR_API eldr_status_t eldr_router_get_stats(const eldr_router_t* router, eldr_router_stats_t* out);
ELDR_API eldr_status_t eldr_router_set_load(eldr_router_t* router, int32_t worker,
                                            uint32_t inflight);
ELDR_API eldr_status_t eldr_router_add_worker(eldr_router_t* router, int32_t worker);
ELDR_API eldr_status_t eldr_router_drain_worker(eldr_router_t* router, int32_t worker);
ELDR_API eldr_status_t eldr_router_remove_worker(eldr_router_t* router, int32_t worker);
/* Hot swap: later decisions carry the new epoch; the router keeps its own reference. */
ELDR_API eldr_status_t eldr_router_swap_table(eldr_router_t* router, const eldr_table_t* table);

#define ELDR_WORKER_STATE_ACTIVE 0
#define ELDR_WORKER_STATE_DRAINING 1
#define ELDR_WORKER_STATE_REMOVED 2
/* Worker slots: fixed positions, in order of addition (the table's workers
 * first); a removed worker keeps its slot, so positions never shift. */
ELDR_API eldr_status_t eldr_router_get_worker_slots(const eldr_router_t* router, uint32_t* out);
/* Per slot: worker id, and optionally (NULL = skip) its ELDR_WORKER_STATE_*
 * and in-flight count. n must equal eldr_router_get_worker_slots() (a
 * concurrent add_worker can change it: query again on INVALID_ARGUMENT). */
ELDR_API eldr_status_t eldr_router_get_workers(const eldr_router_t* router, int32_t* out_ids,
                                               uint32_t* out_states, uint32_t* out_inflight,
                                               uint32_t n);

/* ---- footprints from engines' routed-expert payloads -------------------------
 * Stock engines can return, per request, the experts each token was routed to:
 * ids [rows][num_hidden_layers][top_k], one row per token. SGLang sends them
 * base64-encoded raw (meta_info.routed_experts: int32, or the dtype named in
 * meta_info.routed_experts_dtype); vLLM a base64 .npy (choices[i].routed_experts,
 * uint8 up to 256 experts, else uint16). These calls count them into a
 * footprint int16 [layers][experts], layers being the MoE layers among the
 * hidden layers. Stateless and thread-safe; no allocation is kept.
 * Every malformed payload is an error, never a wrong footprint: CORRUPT (bad
 * base64, a length that is not whole rows, a bad .npy header or data length),
 * UNSUPPORTED (a .npy dtype that is not u1/u2/i2/i4/i8, big-endian, Fortran
 * order), SHAPE_MISMATCH (out_len, or a .npy whose shape or dtype disagrees
 * with the options), OUT_OF_RANGE (an id outside [0, num_experts), a cell past
 * 32767, rows past the payload, a MoE layer past num_hidden_layers),
 * INVALID_ARGUMENT (NULL, options, dtype).
 */

/* Element types of ids. INT16 reserves -1 for a prefix-cache hit (vLLM
 * v0.21): such entries are skipped, counted in info.cached_entries. */
#define ELDR_DTYPE_AUTO 0   /* .npy only: whatever its header says */
#define ELDR_DTYPE_UINT8 1
#define ELDR_DTYPE_UINT16 2
#define ELDR_DTYPE_INT16 3
#define ELDR_DTYPE_INT32 4
#define ELDR_DTYPE_INT64 5

/* row_count value: every row from first_row to the end of the payload. */
#define ELDR_ALL_ROWS UINT64_MAX

#define ELDR_ROUTED_EXPERTS_OPTIONS_VERSION 1

typedef struct eldr_routed_experts_options {
  uint32_t version;            /* ELDR_ROUTED_EXPERTS_OPTIONS_VERSION */
  uint32_t num_experts;        /* E (required) */
  /* The payload's layer and top-k axes: required for raw ids; for a .npy,
   * 0 takes them from its shape and a nonzero value must match it. */
  uint32_t num_hidden_layers;
  uint32_t top_k;
  /* Hidden layers that are MoE, ascending, unique (borrowed for the call);
   * NULL = every hidden layer. Dense layers' entries are not checked. */
  const uint32_t* moe_layers;
  uint32_t num_moe_layers;     /* entries in moe_layers */
  uint32_t reserved0;
  /* Count rows [first_row, first_row + row_count); ELDR_ALL_ROWS = to the
   * end. Rows past the payload: OUT_OF_RANGE. */
  uint64_t first_row;
  uint64_t row_count;
  uint64_t reserved[4];
} eldr_routed_experts_options_t;

#define ELDR_ROUTED_EXPERTS_OPTIONS_INIT \
  {ELDR_ROUTED_EXPERTS_OPTIONS_VERSION, 0, 0, 0, NULL, 0, 0, 0, ELDR_ALL_ROWS, {0, 0, 0, 0}}
ELDR_API void eldr_routed_experts_options_init(eldr_routed_experts_options_t* options);

#define ELDR_ROUTED_EXPERTS_INFO_VERSION 1

typedef struct eldr_routed_experts_info {
  uint32_t version;            /* in: ELDR_ROUTED_EXPERTS_INFO_VERSION */
  uint32_t dtype;              /* the payload's ELDR_DTYPE_* */
  uint32_t num_hidden_layers;  /* the payload's layer axis */
  uint32_t top_k;              /* the payload's top-k axis */
  uint32_t layers;             /* footprint layers (num_moe_layers, or num_hidden_layers) */
  uint32_t reserved0;
  uint64_t rows_in_payload;
  uint64_t rows_counted;
  uint64_t cached_entries;     /* int16 -1 entries skipped in the counted rows */
  uint64_t reserved[4];
} eldr_routed_experts_info_t;

#define ELDR_ROUTED_EXPERTS_INFO_INIT \
  {ELDR_ROUTED_EXPERTS_INFO_VERSION, 0, 0, 0, 0, 0, 0, 0, 0, {0, 0, 0, 0}}
ELDR_API void eldr_routed_experts_info_init(eldr_routed_experts_info_t* info);

/* Raw, flat, little-endian ids of `dtype` (not AUTO), `bytes` long. out holds
 * out_len int16 cells == layers * num_experts. out_info: NULL, or with its
 * version set. On failure out and out_info are untouched. */
ELDR_API eldr_status_t eldr_routed_experts_decode_ids(const void* ids, size_t bytes, uint32_t dtype,
                                                      const eldr_routed_experts_options_t* options,
                                                      int16_t* out, size_t out_len,
                                                      eldr_routed_experts_info_t* out_info);
/* The same ids as base64 text (standard alphabet, padded; `len` characters,
 * no NUL needed): SGLang's meta_info.routed_experts. */
ELDR_API eldr_status_t eldr_routed_experts_decode_base64_ids(const char* base64, size_t len,
                                                             uint32_t dtype,
                                                             const eldr_routed_experts_options_t* options,
                                                             int16_t* out, size_t out_len,
                                                             eldr_routed_experts_info_t* out_info);
/* A base64 .npy of shape [rows][num_hidden_layers][top_k]: vLLM's
 * choices[i].routed_experts. dtype: ELDR_DTYPE_AUTO, or the dtype the .npy
 * must have (SHAPE_MISMATCH otherwise). */
ELDR_API eldr_status_t eldr_routed_experts_decode_base64_npy(const char* base64, size_t len,
                                                             uint32_t dtype,
                                                             const eldr_routed_experts_options_t* options,
                                                             int16_t* out, size_t out_len,
                                                             eldr_routed_experts_info_t* out_info);

/* The header of a base64 .npy alone, checked as eldr_routed_experts_decode_base64_npy
 * checks it (data length included), nothing counted: out gets its dtype,
 * rows_in_payload, num_hidden_layers and top_k (layers = num_hidden_layers),
 * so a caller can size the decode's out first. out->version must be set. */
ELDR_API eldr_status_t eldr_routed_experts_inspect_base64_npy(const char* base64, size_t len,
                                                              eldr_routed_experts_info_t* out);

/* ---- GPU: whether this library was built with the CUDA kernels. The GPU
 * footprint calls are experimental, off the stable ABI, in eldr/eldr_gpu.h
 * (included here when ELDR_EXPERIMENTAL_GPU is defined before this header). */
ELDR_API bool eldr_gpu_available(void);


#ifdef __cplusplus
} /* extern "C" */
#endif

/* clang-format on */

#if defined(ELDR_EXPERIMENTAL_GPU)
#include "eldr_gpu.h"
#endif

#endif /* ELDR_ELDR_H */
