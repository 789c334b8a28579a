/* eldr_prompt.h: routing from the prompt, for gateways that pick the decode
 * worker before prefill runs (llm-d, SGLang's PD router) and so have no
 * footprint yet (docs/design.md §5.6). Part of the stable ABI 2 (symbols
 * ELDR_2); include it instead of, or after, eldr.h. The conventions of
 * eldr.h hold here (status codes, names, ownership, growing structs).
 *
 * A table carries a footprint predictor when it was fitted with prompts
 * (eldr_table_fit_predictor, `eldr fit --prompts`). The router predicts the
 * request's footprint from its prompt and routes it as it routes a pushed
 * footprint; an unsure prediction is shrunk towards the average request, so
 * it pulls the request towards no worker in particular. When the request's
 * real footprint arrives later (after prefill), eldr_router_learn hands it to
 * the predictor, which learns from it; eldr_table_save writes what it learned.
 *
 * A prompt is token ids (each < ELDR_MAX_VOCABULARY) or UTF-8 text (the
 * tokenizer-free input: words and code points). Errors for a bad prompt:
 * INVALID_ARGUMENT (empty, longer than the limits below, an id past the
 * vocabulary, invalid UTF-8), counted in eldr_prompt_stats_t.
 */
#ifndef ELDR_ELDR_PROMPT_H
#define ELDR_ELDR_PROMPT_H

#include "eldr.h"

/* clang-format off */

#ifdef __cplusplus
extern "C" {
#endif

#define ELDR_MAX_VOCABULARY (1u << 20)       /* token ids are < 2^20 */
#define ELDR_MAX_PROMPT_TOKENS 131072u       /* a longer prompt is refused */
#define ELDR_MAX_PROMPT_BYTES (512u << 10)   /* text: 512 KiB */

/* One prompt: token ids (tokens != NULL, n_tokens > 0, text NULL) or text
 * (text != NULL, text_len bytes of UTF-8, no NUL needed, tokens NULL). A view:
 * it never grows, so it has no version. */
typedef struct eldr_prompt {
  const uint32_t* tokens;
  size_t n_tokens;
  const char* text;
  size_t text_len;
} eldr_prompt_t;

/* ---- the predictor in a table --------------------------------------------- */

#define ELDR_PREDICTOR_OPTIONS_VERSION 1

typedef struct eldr_predictor_options {
  uint32_t version;      /* ELDR_PREDICTOR_OPTIONS_VERSION */
  uint32_t capacity;     /* prototypes kept, oldest replaced first; default 4096 */
  uint32_t neighbours;   /* prototypes averaged per prediction; default 16 */
  float bandwidth;       /* softmax temperature over cosines; default 0.05 */
  uint32_t max_features; /* per prototype; default 256 */
  uint32_t reserved0;
  uint64_t reserved[4];
} eldr_predictor_options_t;

#define ELDR_PREDICTOR_OPTIONS_INIT {ELDR_PREDICTOR_OPTIONS_VERSION, 4096, 16, 0.05f, 256, 0, {0, 0, 0, 0}}
ELDR_API void eldr_predictor_options_init(eldr_predictor_options_t* options);

/* A copy of `table` with a predictor fitted on n records: prompts[i]
 * produced footprints[i] (int16 [n][layers][experts], the table's geometry:
 * the request's prefill footprint, or its decode counts where prefill is
 * not recorded). options NULL = defaults. Invalid records are skipped and
 * counted in *out_skipped (NULL = not wanted); INVALID_ARGUMENT when none is
 * usable, SHAPE_MISMATCH for another geometry. */
ELDR_API eldr_status_t eldr_table_fit_predictor(const eldr_table_t* table,
                                                const eldr_prompt_t* prompts,
                                                const int16_t* footprints, uint64_t n,
                                                uint32_t layers, uint32_t experts,
                                                const eldr_predictor_options_t* options,
                                                uint64_t* out_skipped, eldr_table_t** out);

#define ELDR_PREDICTOR_INFO_VERSION 1
#define ELDR_PROMPT_KIND_TOKENS 1u /* eldr_predictor_info_t.kinds bits */
#define ELDR_PROMPT_KIND_TEXT 2u

typedef struct eldr_predictor_info {
  uint32_t version;        /* in: ELDR_PREDICTOR_INFO_VERSION */
  uint32_t prototypes;
  uint32_t kinds;          /* ELDR_PROMPT_KIND_* it predicts from */
  uint32_t reserved0;
  uint64_t learned;        /* records learned (calibration included) */
  uint64_t demand_bytes;   /* memory, per component */
  uint64_t feature_bytes;
  uint64_t index_bytes;
  uint64_t reserved[4];
} eldr_predictor_info_t;

#define ELDR_PREDICTOR_INFO_INIT {ELDR_PREDICTOR_INFO_VERSION, 0, 0, 0, 0, 0, 0, 0, {0, 0, 0, 0}}
/* NOT_FOUND: the table has no predictor. out->version must be set. */
ELDR_API eldr_status_t eldr_table_get_predictor_info(const eldr_table_t* table,
                                                     eldr_predictor_info_t* out);

/* ---- embedded router --------------------------------------------------------- */

/* One decision from the prompt; out->confidence says how sure the
 * prediction was. request_id NULL: no id (complete with
 * eldr_router_complete_worker); else the request is tracked as
 * eldr_router_route_request tracks it and its prompt is kept (the oldest of
 * max_inflight prompts dropped first) for eldr_router_learn.
 * UNSUPPORTED: the table has no predictor, or none for this kind of prompt. */
ELDR_API eldr_status_t eldr_router_route_tokens(eldr_router_t* router, const uint32_t* tokens,
                                                size_t n_tokens, const uint64_t* request_id,
                                                eldr_decision_t* out);
ELDR_API eldr_status_t eldr_router_route_text(eldr_router_t* router, const char* text,
                                              size_t text_len, const uint64_t* request_id,
                                              eldr_decision_t* out);
/* As the two calls above (prompt: tokens or text, one of them), choosing
 * only among `workers` (n_workers ids; NULL: every active worker): a
 * gateway's candidates for this request, as the Gateway API Inference
 * Extension's subset hint names them. Ids not active, or unknown, are
 * skipped; NO_WORKER when none is left (an empty set included). */
ELDR_API eldr_status_t eldr_router_route_prompt_among(eldr_router_t* router,
                                                      const eldr_prompt_t* prompt,
                                                      const uint64_t* request_id,
                                                      const int32_t* workers, uint32_t n_workers,
                                                      eldr_decision_t* out);
/* The real footprint of a request routed from its prompt with this id: the
 * predictor learns from the pair (routing never waits for it). NOT_FOUND: no
 * prompt kept for the id. */
ELDR_API eldr_status_t eldr_router_learn(eldr_router_t* router, uint64_t request_id,
                                         const int16_t* counts, uint32_t layers,
                                         uint32_t experts);

#define ELDR_PROMPT_STATS_VERSION 1

typedef struct eldr_prompt_stats {
  uint32_t version;          /* in: ELDR_PROMPT_STATS_VERSION */
  uint32_t reserved0;
  uint64_t routed;           /* decisions made from a prompt */
  uint64_t rejected;         /* bad prompts, or no predictor */
  uint64_t learned;          /* real footprints learned from */
  uint64_t learn_rejected;   /* eldr_router_learn for an unknown id, or a bad footprint */
  uint64_t dropped;          /* kept prompts dropped before their footprint came */
  uint64_t reserved[4];
} eldr_prompt_stats_t;

#define ELDR_PROMPT_STATS_INIT {ELDR_PROMPT_STATS_VERSION, 0, 0, 0, 0, 0, 0, {0, 0, 0, 0}}
ELDR_API eldr_status_t eldr_router_get_prompt_stats(const eldr_router_t* router,
                                                    eldr_prompt_stats_t* out);

/* ---- sidecar client and pool --------------------------------------------------
 * The prompt travels to eldrd in the client's ring: token ids, or text bytes.
 * A prompt longer than one ring record (ring_bytes / 8, less 32 bytes and
 * the id: 128 KiB of eldrd's default ring) keeps its head (three quarters of
 * the record) and its tail (the rest; a text keeps whole code points): the
 * predictor reads a long prompt's head and tail only, so routing is the same;
 * eldrd counts the cut (eldr_prompt_cut_total). The daemon learns when the
 * same request id later pushes its real footprint (eldr_client_push or
 * eldr_client_push_blocks, after prefill): that push is learned from, not
 * routed again, and its request is not counted twice. Errors: as
 * eldr_client_push (tokens/text NULL with a length: INVALID_ARGUMENT;
 * n_tokens/text_len 0 is an empty prompt, for the daemon to reject);
 * UNSUPPORTED: eldrd is older than prompts (shared-memory format 2.2).
 * The daemon's verdict (no predictor: UNSUPPORTED; a bad prompt, or longer
 * than the limits above as a whole: INVALID_ARGUMENT) arrives in the
 * decision, and is the result of the route calls. */
ELDR_API eldr_status_t eldr_client_push_tokens(eldr_client_t* client, const char* request_id,
                                               const uint32_t* tokens, size_t n_tokens);
ELDR_API eldr_status_t eldr_client_push_text(eldr_client_t* client, const char* request_id,
                                             const char* text, size_t text_len);
/* Push then wait, as eldr_client_route. */
ELDR_API eldr_status_t eldr_client_route_tokens(eldr_client_t* client, const char* request_id,
                                                const uint32_t* tokens, size_t n_tokens,
                                                uint32_t timeout_ms, eldr_decision_t* out);
ELDR_API eldr_status_t eldr_client_route_text(eldr_client_t* client, const char* request_id,
                                              const char* text, size_t text_len,
                                              uint32_t timeout_ms, eldr_decision_t* out);
/* The pool over NATS, as eldr_pool_route (the prompt is sent whole, up to
 * the limits above: a longer one is INVALID_ARGUMENT here, sent nowhere).
 * The node's verdict is the call's result; an eldrd older than prompts
 * answers CORRUPT. */
ELDR_API eldr_status_t eldr_pool_route_tokens(eldr_pool_t* pool, const char* request_id,
                                              const uint32_t* tokens, size_t n_tokens,
                                              uint32_t timeout_ms, eldr_decision_t* out);
ELDR_API eldr_status_t eldr_pool_route_text(eldr_pool_t* pool, const char* request_id,
                                            const char* text, size_t text_len,
                                            uint32_t timeout_ms, eldr_decision_t* out);

#ifdef __cplusplus
}
#endif

/* clang-format on */

#endif /* ELDR_ELDR_PROMPT_H */
