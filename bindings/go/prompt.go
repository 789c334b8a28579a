package eldr

/*
#include "shim.h"

// An empty Go slice or string has no data pointer: the C API still sees a
// valid pointer, so it (not the binding) answers an empty prompt.
static const uint32_t eldrgo_no_tokens[1] = {0};
static const char eldrgo_no_text[1] = {0};

static const uint32_t* eldrgo_tokens_or_empty(const uint32_t* tokens) {
  return tokens ? tokens : eldrgo_no_tokens;
}
static const char* eldrgo_text_of(_GoString_ text) {
  return _GoStringLen(text) > 0 ? _GoStringPtr(text) : eldrgo_no_text;
}

static eldr_predictor_options_t eldrgo_predictor_options(uint32_t capacity, uint32_t neighbours,
                                                        float bandwidth, uint32_t max_features) {
  eldr_predictor_options_t o;
  eldr_predictor_options_init(&o);
  o.capacity = capacity;
  o.neighbours = neighbours;
  o.bandwidth = bandwidth;
  o.max_features = max_features;
  return o;
}

typedef struct { eldrgo_err err; eldr_table_t* table; uint64_t skipped; } eldrgo_fit_result;

static eldrgo_fit_result eldrgo_table_fit_predictor(const eldr_table_t* t,
                                                    const eldr_prompt_t* prompts,
                                                    const int16_t* footprints, uint64_t n,
                                                    uint32_t layers, uint32_t experts,
                                                    eldr_predictor_options_t opts) {
  eldrgo_fit_result r = {{0, NULL}, NULL, 0};
  r.err = eldrgo_check(eldr_table_fit_predictor(t, prompts, footprints, n, layers, experts, &opts,
                                                &r.skipped, &r.table));
  return r;
}

typedef struct { eldrgo_err err; eldr_predictor_info_t info; } eldrgo_predictor_info_result;

static eldrgo_predictor_info_result eldrgo_table_predictor_info(const eldr_table_t* t) {
  eldrgo_predictor_info_result r;
  const eldr_predictor_info_t init = ELDR_PREDICTOR_INFO_INIT;
  r.info = init;
  r.err = eldrgo_check(eldr_table_get_predictor_info(t, &r.info));
  return r;
}

static eldrgo_decision_result eldrgo_router_route_tokens(eldr_router_t* r, const uint32_t* tokens,
                                                         size_t n, int has_id, uint64_t id) {
  eldrgo_decision_result out = eldrgo_decision_result_new();
  out.err = eldrgo_check(eldr_router_route_tokens(r, eldrgo_tokens_or_empty(tokens), n,
                                                  has_id ? &id : NULL, &out.decision));
  return out;
}

static eldrgo_decision_result eldrgo_router_route_text(eldr_router_t* r, _GoString_ text,
                                                       int has_id, uint64_t id) {
  eldrgo_decision_result out = eldrgo_decision_result_new();
  out.err = eldrgo_check(eldr_router_route_text(r, eldrgo_text_of(text), _GoStringLen(text),
                                                has_id ? &id : NULL, &out.decision));
  return out;
}

static const int32_t eldrgo_no_workers[1] = {0};

static eldrgo_decision_result eldrgo_router_route_prompt_among(
    eldr_router_t* r, const uint32_t* tokens, size_t n, _GoString_ text, int is_tokens, int has_id,
    uint64_t id, const int32_t* workers, int has_workers, uint32_t n_workers) {
  eldrgo_decision_result out = eldrgo_decision_result_new();
  eldr_prompt_t p = {NULL, 0, NULL, 0};
  if (is_tokens) {
    p.tokens = eldrgo_tokens_or_empty(tokens);
    p.n_tokens = n;
  } else {
    p.text = eldrgo_text_of(text);
    p.text_len = _GoStringLen(text);
  }
  const int32_t* ws = has_workers ? (workers ? workers : eldrgo_no_workers) : NULL;
  out.err = eldrgo_check(eldr_router_route_prompt_among(r, &p, has_id ? &id : NULL, ws, n_workers,
                                                        &out.decision));
  return out;
}

static eldrgo_err eldrgo_router_learn(eldr_router_t* r, uint64_t id, const int16_t* counts,
                                      uint32_t layers, uint32_t experts) {
  return eldrgo_check(eldr_router_learn(r, id, counts, layers, experts));
}

typedef struct { eldrgo_err err; eldr_prompt_stats_t stats; } eldrgo_prompt_stats_result;

static eldrgo_prompt_stats_result eldrgo_router_prompt_stats(const eldr_router_t* r) {
  eldrgo_prompt_stats_result out;
  const eldr_prompt_stats_t init = ELDR_PROMPT_STATS_INIT;
  out.stats = init;
  out.err = eldrgo_check(eldr_router_get_prompt_stats(r, &out.stats));
  return out;
}

static eldrgo_err eldrgo_client_push_tokens(eldr_client_t* c, _GoString_ id,
                                            const uint32_t* tokens, size_t n) {
  eldrgo_request_id rid = eldrgo_request_id_of(id);
  if (rid.err.status != ELDR_OK) return rid.err;
  return eldrgo_check(eldr_client_push_tokens(c, rid.id, eldrgo_tokens_or_empty(tokens), n));
}

static eldrgo_err eldrgo_client_push_text(eldr_client_t* c, _GoString_ id, _GoString_ text) {
  eldrgo_request_id rid = eldrgo_request_id_of(id);
  if (rid.err.status != ELDR_OK) return rid.err;
  return eldrgo_check(eldr_client_push_text(c, rid.id, eldrgo_text_of(text), _GoStringLen(text)));
}

static eldrgo_decision_result eldrgo_client_route_tokens(eldr_client_t* c, _GoString_ id,
                                                         const uint32_t* tokens, size_t n,
                                                         uint32_t timeout_ms) {
  eldrgo_decision_result r = eldrgo_decision_result_new();
  eldrgo_request_id rid = eldrgo_request_id_of(id);
  if (rid.err.status != ELDR_OK) r.err = rid.err;
  else r.err = eldrgo_check(eldr_client_route_tokens(c, rid.id, eldrgo_tokens_or_empty(tokens), n,
                                                     timeout_ms, &r.decision));
  return r;
}

static eldrgo_decision_result eldrgo_client_route_text(eldr_client_t* c, _GoString_ id,
                                                       _GoString_ text, uint32_t timeout_ms) {
  eldrgo_decision_result r = eldrgo_decision_result_new();
  eldrgo_request_id rid = eldrgo_request_id_of(id);
  if (rid.err.status != ELDR_OK) r.err = rid.err;
  else r.err = eldrgo_check(eldr_client_route_text(c, rid.id, eldrgo_text_of(text),
                                                   _GoStringLen(text), timeout_ms, &r.decision));
  return r;
}

static eldrgo_decision_result eldrgo_pool_route_tokens(eldr_pool_t* p, _GoString_ id,
                                                       const uint32_t* tokens, size_t n,
                                                       uint32_t timeout_ms) {
  eldrgo_decision_result r = eldrgo_decision_result_new();
  eldrgo_request_id rid = eldrgo_request_id_of(id);
  if (rid.err.status != ELDR_OK) r.err = rid.err;
  else r.err = eldrgo_check(eldr_pool_route_tokens(p, rid.id, eldrgo_tokens_or_empty(tokens), n,
                                                   timeout_ms, &r.decision));
  return r;
}

static eldrgo_decision_result eldrgo_pool_route_text(eldr_pool_t* p, _GoString_ id,
                                                     _GoString_ text, uint32_t timeout_ms) {
  eldrgo_decision_result r = eldrgo_decision_result_new();
  eldrgo_request_id rid = eldrgo_request_id_of(id);
  if (rid.err.status != ELDR_OK) r.err = rid.err;
  else r.err = eldrgo_check(eldr_pool_route_text(p, rid.id, eldrgo_text_of(text),
                                                 _GoStringLen(text), timeout_ms, &r.decision));
  return r;
}
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unsafe"
)

// Routing from the prompt (eldr_prompt.h), for gateways that pick the decode
// worker before prefill runs (llm-d, SGLang's PD router) and so have no
// footprint yet. A table fitted with prompts carries a footprint predictor
// (Table.FitPredictor); the router predicts the request's footprint from its
// prompt and routes it (Router.RouteTokens, Router.RouteText, and the
// Client's and Pool's); the real footprint, once prefill has run, teaches
// the predictor (Router.Learn, or Client.Push under the same request id).

// Limits of a prompt, as in eldr_prompt.h.
const (
	MaxVocabulary    = uint32(C.ELDR_MAX_VOCABULARY)     // token ids are below it (2^20)
	MaxPromptTokens  = int(C.ELDR_MAX_PROMPT_TOKENS)     // a longer prompt is refused
	MaxPromptBytes   = int(C.ELDR_MAX_PROMPT_BYTES)      // text: 512 KiB
	PromptKindTokens = uint32(C.ELDR_PROMPT_KIND_TOKENS) // PredictorInfo.Kinds bits
	PromptKindText   = uint32(C.ELDR_PROMPT_KIND_TEXT)
)

// Prompt is one request's prompt: its token ids (Tokens non-nil, each below
// MaxVocabulary) or else its UTF-8 Text (the tokenizer-free input: words and
// code points). TokensPrompt and TextPrompt build one.
type Prompt struct {
	Tokens []uint32
	Text   string
}

// TokensPrompt is a prompt of token ids.
func TokensPrompt(tokens []uint32) Prompt {
	if tokens == nil {
		tokens = []uint32{}
	}
	return Prompt{Tokens: tokens}
}

// TextPrompt is a prompt of text.
func TextPrompt(text string) Prompt { return Prompt{Text: text} }

// IsTokens says whether the prompt is token ids (else text).
func (p Prompt) IsTokens() bool { return p.Tokens != nil }

func tokensPtr(tokens []uint32) *C.uint32_t {
	if len(tokens) == 0 {
		return nil
	}
	return (*C.uint32_t)(unsafe.Pointer(&tokens[0]))
}

// PredictorOptions tunes Table.FitPredictor; DefaultPredictorOptions gives
// the library's.
type PredictorOptions struct {
	Capacity    uint32  // prototypes kept, the oldest replaced first (4096)
	Neighbours  uint32  // prototypes averaged per prediction (16)
	Bandwidth   float32 // softmax temperature over cosines (0.05)
	MaxFeatures uint32  // features kept per prototype (256)
}

// DefaultPredictorOptions are the library's defaults.
func DefaultPredictorOptions() PredictorOptions {
	var o C.eldr_predictor_options_t
	C.eldr_predictor_options_init(&o)
	return PredictorOptions{Capacity: uint32(o.capacity), Neighbours: uint32(o.neighbours),
		Bandwidth: float32(o.bandwidth), MaxFeatures: uint32(o.max_features)}
}

// PredictorInfo describes the predictor a table carries.
type PredictorInfo struct {
	Prototypes   uint32
	Kinds        uint32 // PromptKindTokens | PromptKindText: what it predicts from
	Learned      uint64 // records learned, calibration included
	DemandBytes  uint64 // memory, per component
	FeatureBytes uint64
	IndexBytes   uint64
}

// PromptStats are a router's prompt counters since creation.
type PromptStats struct {
	Routed        uint64 // decisions made from a prompt
	Rejected      uint64 // bad prompts, or no predictor
	Learned       uint64 // real footprints learned from
	LearnRejected uint64 // Learn for an unknown id, or a bad footprint
	Dropped       uint64 // kept prompts dropped before their footprint came
}

// FitPredictor returns a copy of the table with a footprint predictor fitted
// on prompts: prompts[i] produced footprint i of footprints ([n][Layers][Experts]
// int16 counts in the table's geometry, concatenated: the request's prefill
// footprint, or its decode counts where prefill is not recorded). It also
// returns how many records were skipped as invalid (an empty prompt, an id
// past the vocabulary, ...); ErrInvalidArgument when none is usable. opts
// nil: the library's defaults.
func (t *Table) FitPredictor(prompts []Prompt, footprints []int16,
	opts *PredictorOptions) (*Table, uint64, error) {
	o := DefaultPredictorOptions()
	if opts != nil {
		o = *opts
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	info, err := t.infoLocked()
	if err != nil {
		return nil, 0, err
	}
	n := len(prompts)
	cells := uint64(info.Layers) * uint64(info.Experts)
	if n == 0 {
		return nil, 0, invalid("no prompts")
	}
	if uint64(len(footprints)) != uint64(n)*cells {
		return nil, 0, invalid("footprints holds %d counts, %d prompts of [%d][%d] need %d",
			len(footprints), n, info.Layers, info.Experts, uint64(n)*cells)
	}
	// The prompt views go to C in C memory, pointing at copies in C memory
	// (cgo: C memory may not hold Go pointers).
	var nTokens, nBytes int
	for _, p := range prompts {
		nTokens += len(p.Tokens)
		nBytes += len(p.Text)
	}
	views := (*[1 << 30]C.eldr_prompt_t)(C.calloc(C.size_t(n), C.sizeof_eldr_prompt_t))[:n:n]
	defer C.free(unsafe.Pointer(&views[0]))
	tokens := (*C.uint32_t)(C.malloc(C.size_t(nTokens+1) * 4))
	defer C.free(unsafe.Pointer(tokens))
	text := (*C.char)(C.malloc(C.size_t(nBytes + 1)))
	defer C.free(unsafe.Pointer(text))
	tokenBuf := unsafe.Slice((*uint32)(unsafe.Pointer(tokens)), nTokens+1)
	textBuf := unsafe.Slice((*byte)(unsafe.Pointer(text)), nBytes+1)
	var ti, bi int
	for i, p := range prompts {
		if p.IsTokens() {
			copy(tokenBuf[ti:], p.Tokens)
			views[i].tokens = (*C.uint32_t)(unsafe.Pointer(&tokenBuf[ti]))
			views[i].n_tokens = C.size_t(len(p.Tokens))
			ti += len(p.Tokens)
		} else {
			copy(textBuf[bi:], p.Text)
			views[i].text = (*C.char)(unsafe.Pointer(&textBuf[bi]))
			views[i].text_len = C.size_t(len(p.Text))
			bi += len(p.Text)
		}
	}
	r := C.eldrgo_table_fit_predictor(t.ptr, &views[0], (*C.int16_t)(unsafe.Pointer(&footprints[0])),
		C.uint64_t(n), C.uint32_t(info.Layers), C.uint32_t(info.Experts),
		C.eldrgo_predictor_options(C.uint32_t(o.Capacity), C.uint32_t(o.Neighbours),
			C.float(o.Bandwidth), C.uint32_t(o.MaxFeatures)))
	if err := toError(r.err); err != nil {
		return nil, 0, err
	}
	return &Table{ptr: r.table}, uint64(r.skipped), nil
}

// PredictorInfo describes the table's predictor; ErrNotFound when it has none
// (it was not fitted with prompts).
func (t *Table) PredictorInfo() (PredictorInfo, error) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.ptr == nil {
		return PredictorInfo{}, closedError("table")
	}
	r := C.eldrgo_table_predictor_info(t.ptr)
	if err := toError(r.err); err != nil {
		return PredictorInfo{}, err
	}
	i := &r.info
	return PredictorInfo{Prototypes: uint32(i.prototypes), Kinds: uint32(i.kinds),
		Learned: uint64(i.learned), DemandBytes: uint64(i.demand_bytes),
		FeatureBytes: uint64(i.feature_bytes), IndexBytes: uint64(i.index_bytes)}, nil
}

// RouteTokens makes one decision from the prompt's token ids, for a gateway
// that picks the decode worker before prefill; Decision.Confidence says how
// sure the prediction was. requestID nil: the request is counted in flight
// on its worker (CompleteWorker ends it); else it is tracked as RouteRequest
// tracks it and its prompt is kept for Learn. ErrUnsupported: the table has
// no predictor, or none for token ids; ErrInvalidArgument: an empty or too
// long prompt, an id past MaxVocabulary.
func (r *Router) RouteTokens(tokens []uint32, requestID *uint64) (Decision, error) {
	return r.RoutePrompt(TokensPrompt(tokens), requestID)
}

// RouteText is RouteTokens from the prompt's UTF-8 text (no tokenizer needed).
func (r *Router) RouteText(text string, requestID *uint64) (Decision, error) {
	return r.RoutePrompt(TextPrompt(text), requestID)
}

// RoutePrompt is RouteTokens or RouteText.
func (r *Router) RoutePrompt(p Prompt, requestID *uint64) (Decision, error) {
	hasID, id := C.int(0), C.uint64_t(0)
	if requestID != nil {
		hasID, id = 1, C.uint64_t(*requestID)
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.ptr == nil {
		return Decision{}, closedError("router")
	}
	var res C.eldrgo_decision_result
	if p.IsTokens() {
		res = C.eldrgo_router_route_tokens(r.ptr, tokensPtr(p.Tokens), C.size_t(len(p.Tokens)), hasID, id)
	} else {
		res = C.eldrgo_router_route_text(r.ptr, p.Text, hasID, id)
	}
	if err := toError(res.err); err != nil {
		return Decision{}, err
	}
	return decisionFromC(&res.decision), nil
}

// RoutePromptAmong is RoutePrompt choosing only among workers: a gateway's
// candidates for this request (the Gateway API Inference Extension's subset
// hint, the endpoints it holds ready). nil: every active worker. Ids not
// active, or unknown, are skipped; ErrNoWorker when none is left (an empty,
// non-nil slice included).
func (r *Router) RoutePromptAmong(p Prompt, requestID *uint64, workers []int32) (Decision, error) {
	hasID, id := C.int(0), C.uint64_t(0)
	if requestID != nil {
		hasID, id = 1, C.uint64_t(*requestID)
	}
	hasWorkers := C.int(0)
	var ws *C.int32_t
	if workers != nil {
		hasWorkers = 1
		if len(workers) > 0 {
			ws = (*C.int32_t)(unsafe.Pointer(&workers[0]))
		}
	}
	isTokens := C.int(0)
	if p.IsTokens() {
		isTokens = 1
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.ptr == nil {
		return Decision{}, closedError("router")
	}
	res := C.eldrgo_router_route_prompt_among(r.ptr, tokensPtr(p.Tokens), C.size_t(len(p.Tokens)), p.Text,
		isTokens, hasID, id, ws, hasWorkers, C.uint32_t(len(workers)))
	if err := toError(res.err); err != nil {
		return Decision{}, err
	}
	return decisionFromC(&res.decision), nil
}

// Learn hands the predictor the real footprint (after prefill) of the
// request routed from its prompt with requestID; routing never waits for it.
// ErrNotFound: no prompt is kept for the id (never routed from a prompt with
// it, learned already, or dropped).
func (r *Router) Learn(requestID uint64, fp Footprint) error {
	if err := fp.validate(); err != nil {
		return err
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.ptr == nil {
		return closedError("router")
	}
	return toError(C.eldrgo_router_learn(r.ptr, C.uint64_t(requestID), fp.ptr(),
		C.uint32_t(fp.Layers), C.uint32_t(fp.Experts)))
}

// PromptStats returns the router's prompt counters.
func (r *Router) PromptStats() (PromptStats, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.ptr == nil {
		return PromptStats{}, closedError("router")
	}
	res := C.eldrgo_router_prompt_stats(r.ptr)
	if err := toError(res.err); err != nil {
		return PromptStats{}, err
	}
	s := &res.stats
	return PromptStats{Routed: uint64(s.routed), Rejected: uint64(s.rejected),
		Learned: uint64(s.learned), LearnRejected: uint64(s.learn_rejected),
		Dropped: uint64(s.dropped)}, nil
}

// PushTokens sends the prompt's token ids for requestID: eldrd routes the
// request from its prompt with its table's predictor, and learns when the
// same id later pushes its real footprint (Push). Errors as Push; the
// daemon's verdict (no predictor, a bad prompt) arrives in the decision.
func (c *Client) PushTokens(requestID string, tokens []uint32) error {
	return c.PushPrompt(requestID, TokensPrompt(tokens))
}

// PushText is PushTokens with the prompt's UTF-8 text.
func (c *Client) PushText(requestID string, text string) error {
	return c.PushPrompt(requestID, TextPrompt(text))
}

// PushPrompt is PushTokens or PushText.
func (c *Client) PushPrompt(requestID string, p Prompt) error {
	if err := validateRequestID(requestID); err != nil {
		return err
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.ptr == nil {
		return closedError("client")
	}
	if p.IsTokens() {
		return toError(C.eldrgo_client_push_tokens(c.ptr, requestID, tokensPtr(p.Tokens),
			C.size_t(len(p.Tokens))))
	}
	return toError(C.eldrgo_client_push_text(c.ptr, requestID, p.Text))
}

// RouteTokens pushes the prompt's token ids and waits for the decision, as
// Route. A prompt the daemon refused (no predictor in its table:
// ErrUnsupported; a bad prompt: ErrInvalidArgument) is an *Error with the
// daemon's status.
func (c *Client) RouteTokens(requestID string, tokens []uint32, timeout time.Duration) (Decision, error) {
	return c.RoutePrompt(requestID, TokensPrompt(tokens), timeout)
}

// RouteText is RouteTokens with the prompt's UTF-8 text.
func (c *Client) RouteText(requestID string, text string, timeout time.Duration) (Decision, error) {
	return c.RoutePrompt(requestID, TextPrompt(text), timeout)
}

// RoutePrompt is RouteTokens or RouteText.
func (c *Client) RoutePrompt(requestID string, p Prompt, timeout time.Duration) (Decision, error) {
	if err := validateRequestID(requestID); err != nil {
		return Decision{}, err
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.ptr == nil {
		return Decision{}, closedError("client")
	}
	var r C.eldrgo_decision_result
	if p.IsTokens() {
		r = C.eldrgo_client_route_tokens(c.ptr, requestID, tokensPtr(p.Tokens),
			C.size_t(len(p.Tokens)), millis(timeout))
	} else {
		r = C.eldrgo_client_route_text(c.ptr, requestID, p.Text, millis(timeout))
	}
	return accepted(requestID, r)
}

// RoutePromptContext is RoutePrompt until ctx is done, as RouteContext: it
// pushes the prompt (unless ctx is done already) and waits with WaitContext;
// a decision nobody will use is completed on the caller's behalf.
func (c *Client) RoutePromptContext(ctx context.Context, requestID string, p Prompt) (Decision, error) {
	if err := ctx.Err(); err != nil {
		return Decision{}, contextError(err, fmt.Sprintf("routing %q", requestID))
	}
	if err := c.PushPrompt(requestID, p); err != nil {
		return Decision{}, err
	}
	d, err := c.WaitContext(ctx, requestID)
	if err != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		_ = c.Complete(requestID, 0)
	}
	return d, err
}

// RouteTokens routes from the prompt's token ids through a node of the pool
// (the prompt is sent whole, up to MaxPromptTokens), as Client.RouteTokens.
func (p *Pool) RouteTokens(requestID string, tokens []uint32, timeout time.Duration) (Decision, error) {
	return p.RoutePrompt(requestID, TokensPrompt(tokens), timeout)
}

// RouteText is RouteTokens with the prompt's UTF-8 text.
func (p *Pool) RouteText(requestID string, text string, timeout time.Duration) (Decision, error) {
	return p.RoutePrompt(requestID, TextPrompt(text), timeout)
}

// RoutePrompt is RouteTokens or RouteText.
func (p *Pool) RoutePrompt(requestID string, prompt Prompt, timeout time.Duration) (Decision, error) {
	if err := validateRequestID(requestID); err != nil {
		return Decision{}, err
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.ptr == nil {
		return Decision{}, closedError("pool")
	}
	var r C.eldrgo_decision_result
	if prompt.IsTokens() {
		r = C.eldrgo_pool_route_tokens(p.ptr, requestID, tokensPtr(prompt.Tokens),
			C.size_t(len(prompt.Tokens)), millis(timeout))
	} else {
		r = C.eldrgo_pool_route_text(p.ptr, requestID, prompt.Text, millis(timeout))
	}
	return accepted(requestID, r)
}

// RoutePromptContext is RoutePrompt bounded by ctx, as Pool.RouteContext; a
// decision that arrives after ctx is done is completed at once with its token.
func (p *Pool) RoutePromptContext(ctx context.Context, requestID string, prompt Prompt) (Decision, error) {
	if err := validateRequestID(requestID); err != nil {
		return Decision{}, err
	}
	what := fmt.Sprintf("routing %q through the pool", requestID)
	timeout, err := callTimeout(ctx, 0)
	if err != nil {
		return Decision{}, contextError(err, what)
	}
	if ctx.Done() != nil && prompt.IsTokens() { // the call may outlive this one: own the ids
		prompt.Tokens = append(make([]uint32, 0, len(prompt.Tokens)), prompt.Tokens...)
	}
	return cancellable(ctx, what,
		func() (Decision, error) { return p.RoutePrompt(requestID, prompt, timeout) },
		func(d Decision) { _ = p.Complete(requestID, d.CompletionToken) })
}
