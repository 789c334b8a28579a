package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"eldr.dev/eldr"
)

// Decisions is the part of *eldr.Client the gateway uses (poolDecisions in
// main.go adapts an *eldr.Pool to it). Each call ends with its context: the
// HTTP request's, bounded by DecisionTimeout.
type Decisions interface {
	WaitContext(ctx context.Context, requestID string) (eldr.Decision, error)
	RouteContext(ctx context.Context, requestID string, fp eldr.Footprint) (eldr.Decision, error)
	// The gateway did not push the footprint (the engine did): it presents
	// the decision's completion token, or the daemon refuses the complete.
	Complete(requestID string, token uint64) error
}

// Gateway takes /v1/completions, has the prefill engine run the prompt, asks
// eldr which decode worker should take the request, and forwards it there.
// With FlavorEldr the engine pushes the request's footprint to eldr itself;
// with a stock engine (FlavorSGLang, FlavorVLLM) the gateway builds the
// footprint from the engine's routed experts and routes it (stock.go).
type Gateway struct {
	Flavor Flavor     // "" = FlavorEldr
	Model  StockModel // stock flavors: how to read the routed experts
	// FlavorEldr: POST {"request_id","prompt_tokens"} -> {"request_id","tokens"};
	// stock flavors: the engine's /generate or /v1/completions.
	PrefillURL string
	// DecodeURL is the decode endpoint; "{worker}" in it is replaced by the
	// chosen worker id, so one URL can name a pool of per-worker servers.
	// The body carries the worker too: POST {"request_id","worker","max_tokens"}.
	DecodeURL string
	// Eldr is the node's eldrd, or a pool over NATS. nil: the gateway runs on
	// a node without eldrd and routes by the decision the prefill engine
	// returns (FlavorEldr only).
	Eldr            Decisions
	HTTP            *http.Client
	DecisionTimeout time.Duration // how long to wait for eldr's decision
	// FallbackWorkers > 0: when eldr has no decision (daemon down, timeout),
	// route by request-id hash over this many workers instead of failing.
	FallbackWorkers int
	// ReportCompletion: tell eldr when the decode returns. Off when the
	// decode engine reports completion itself (as examples/python-engine does).
	ReportCompletion bool
	// Order: PrefillFirst ("" too) routes by the prefill's footprint;
	// DecodeFirst routes by the prompt through Prompts before prefill
	// (decode_first.go).
	Order   Order
	Prompts PromptRouter
	Log     *log.Logger

	served, failed, fallbacks atomic.Uint64
}

type completionRequest struct {
	RequestID string `json:"request_id,omitempty"`
	// A count, or the prompt's token ids (decode-first order routes from them).
	PromptTokens json.RawMessage `json:"prompt_tokens"`
	// The prompt's text (decode-first order routes from it without ids).
	Prompt    string `json:"prompt,omitempty"`
	MaxTokens int    `json:"max_tokens"`
}

type completionResponse struct {
	RequestID  string  `json:"request_id"`
	Worker     int32   `json:"worker"`
	Similarity float32 `json:"similarity"`
	BandSize   uint32  `json:"band_size"`
	TableEpoch uint64  `json:"table_epoch"`
	RoutedBy   string  `json:"routed_by"` // "eldr" or "fallback"
	// Where eldr's decision came from: "prefill" (in the prefill engine's
	// answer) or "gateway" (asked by the gateway itself).
	DecidedBy     string          `json:"decided_by,omitempty"`
	PrefillTokens json.RawMessage `json:"prefill_tokens,omitempty"`
	Text          string          `json:"text"`
	Order         string          `json:"order"` // "prefill-first" or "decode-first"
	// Decode-first: how sure eldr's prediction from the prompt was, and
	// whether the gateway handed eldr the real footprint to learn from.
	Confidence *float32 `json:"confidence,omitempty"`
	Learned    bool     `json:"learned,omitempty"`
}

type prefillRequest struct {
	RequestID    string          `json:"request_id"`
	PromptTokens json.RawMessage `json:"prompt_tokens"`
	Prompt       string          `json:"prompt,omitempty"`
	// Decode-first: the decode worker chosen before prefill (its KV goes there).
	DecodeWorker *int32 `json:"decode_worker,omitempty"`
}

type prefillResponse struct {
	RequestID string          `json:"request_id"`
	Tokens    json.RawMessage `json:"tokens"`
	// The engine's eldr decision for the request, when it returns one
	// (examples/python-engine does): the gateway need not reach eldrd.
	Decision *engineDecision `json:"decision,omitempty"`
}

// engineDecision is the decision as the prefill engine returns it.
type engineDecision struct {
	Worker          *int32  `json:"worker"`
	Similarity      float32 `json:"similarity"`
	BandSize        uint32  `json:"band_size"`
	TableEpoch      uint64  `json:"table_epoch"`
	CompletionToken uint64  `json:"completion_token"`
}

// decision checks what the engine sent: a worker, and the token the decode
// engine completes with (it did not push the footprint).
func (e *engineDecision) decision() (eldr.Decision, error) {
	if e.Worker == nil || *e.Worker < 0 || e.CompletionToken == 0 {
		return eldr.Decision{}, errors.New("the prefill engine's decision has no worker or no completion_token")
	}
	return eldr.Decision{Worker: *e.Worker, Similarity: e.Similarity, BandSize: e.BandSize,
		TableEpoch: e.TableEpoch, CompletionToken: e.CompletionToken}, nil
}

type decodeRequest struct {
	RequestID string `json:"request_id"`
	Worker    int32  `json:"worker"`
	MaxTokens int    `json:"max_tokens"`
	// The decision's token: the decode engine completes the request with it
	// (eldr refuses completes from a process that neither pushed the
	// footprint nor holds the token).
	CompletionToken uint64 `json:"completion_token,omitempty"`
}

type decodeResponse struct {
	RequestID string `json:"request_id"`
	Worker    int32  `json:"worker"`
	Text      string `json:"text"`
}

// httpError is a failure with the status code the client should see.
type httpError struct {
	code int
	msg  string
}

func (e *httpError) Error() string { return e.msg }

func fail(code int, format string, args ...interface{}) error {
	return &httpError{code: code, msg: fmt.Sprintf(format, args...)}
}

const maxBodyBytes = 8 << 20

// errNoDecision: the prefill engine returned no decision and the gateway has
// no eldrd of its own to ask.
var errNoDecision = errors.New("the prefill engine returned no eldr decision, and this gateway has no eldrd (-instance) to ask")

func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/healthz":
		g.healthz(w, r)
	case "/v1/completions":
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "use POST"})
			return
		}
		resp, err := g.complete(r.Context(), http.MaxBytesReader(w, r.Body, maxBodyBytes))
		if err != nil {
			g.failed.Add(1)
			var he *httpError
			if !errors.As(err, &he) {
				he = &httpError{code: http.StatusInternalServerError, msg: err.Error()}
			}
			g.logf("completion failed (%d): %s", he.code, he.msg)
			writeJSON(w, he.code, map[string]string{"error": he.msg})
			return
		}
		g.served.Add(1)
		writeJSON(w, http.StatusOK, resp)
	default:
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "not found"})
	}
}

func (g *Gateway) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]interface{}{
		"status": "ok", "served": g.served.Load(), "failed": g.failed.Load(),
		"fallbacks": g.fallbacks.Load(),
	})
}

func (g *Gateway) complete(ctx context.Context, body io.Reader) (*completionResponse, error) {
	var req completionRequest
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return nil, fail(http.StatusBadRequest, "bad request body: %v", err)
	}
	noTokens := len(req.PromptTokens) == 0 || string(req.PromptTokens) == "null"
	if noTokens && (g.Order != DecodeFirst || req.Prompt == "") {
		return nil, fail(http.StatusBadRequest, "prompt_tokens is required (or, in decode-first order, prompt)")
	}
	if req.MaxTokens <= 0 {
		return nil, fail(http.StatusBadRequest, "max_tokens must be positive")
	}
	if req.RequestID == "" {
		req.RequestID = newRequestID()
	} else if len(req.RequestID) > eldr.MaxRequestIDBytes || strings.IndexByte(req.RequestID, 0) >= 0 {
		return nil, fail(http.StatusBadRequest, "request_id must be 1..%d bytes without NUL",
			eldr.MaxRequestIDBytes)
	}

	if g.Order == DecodeFirst {
		return g.completeDecodeFirst(ctx, &req)
	}

	// 1. Prefill, and 2. the decode worker: eldr's decision for this request.
	resp := &completionResponse{RequestID: req.RequestID, RoutedBy: "eldr", DecidedBy: "gateway",
		Order: string(PrefillFirst)}
	var d eldr.Decision
	var err error
	if g.Flavor == "" || g.Flavor == FlavorEldr {
		// The engine pushes the footprint to eldr as it finishes, and may
		// return eldr's decision with its answer.
		var pre prefillResponse
		if err := g.post(ctx, g.PrefillURL, prefillRequest{RequestID: req.RequestID,
			PromptTokens: req.PromptTokens, Prompt: req.Prompt}, &pre); err != nil {
			return nil, fail(http.StatusBadGateway, "prefill: %v", err)
		}
		resp.PrefillTokens = pre.Tokens
		switch {
		case pre.Decision != nil:
			resp.DecidedBy = "prefill"
			if d, err = pre.Decision.decision(); err != nil {
				return nil, fail(http.StatusBadGateway, "prefill: %v", err)
			}
		case g.Eldr != nil:
			d, err = g.decide(ctx, func(ctx context.Context) (eldr.Decision, error) {
				return g.Eldr.WaitContext(ctx, req.RequestID)
			})
		default:
			err = errNoDecision
		}
	} else {
		var fp eldr.Footprint
		fp, resp.PrefillTokens, err = g.stockPrefill(ctx, req.RequestID, req.PromptTokens, "")
		var bad *badRoutedExperts
		if err != nil && !errors.As(err, &bad) {
			return nil, err
		}
		if err == nil {
			d, err = g.decide(ctx, func(ctx context.Context) (eldr.Decision, error) {
				return g.Eldr.RouteContext(ctx, req.RequestID, fp)
			})
		}
	}
	if err := g.decided(ctx, req.RequestID, d, err, resp); err != nil {
		return nil, err
	}
	// 3. Decode on the chosen worker.
	if err := g.decodeOn(ctx, &req, resp, d, g.Eldr, completesItself(g.Eldr)); err != nil {
		return nil, err
	}
	return resp, nil
}

// decided fills resp from eldr's decision, or from the fallback route when
// eldr has none; else it is the error the client sees.
func (g *Gateway) decided(ctx context.Context, requestID string, d eldr.Decision, err error,
	resp *completionResponse) error {
	switch {
	case err == nil:
		resp.Worker, resp.Similarity, resp.BandSize, resp.TableEpoch =
			d.Worker, d.Similarity, d.BandSize, d.TableEpoch
		if resp.Order == string(DecodeFirst) {
			confidence := d.Confidence
			resp.Confidence = &confidence
		}
	case g.FallbackWorkers > 0:
		g.fallbacks.Add(1)
		g.logf("request %s: no eldr decision (%v): fallback routing", requestID, err)
		resp.Worker, resp.RoutedBy = fallbackWorker(requestID, g.FallbackWorkers), "fallback"
	case errors.Is(err, errNoDecision) || errors.Is(err, errNoPromptRouter):
		return fail(http.StatusBadGateway, "%v", err)
	case ctx.Err() != nil: // the client went away: nobody reads the answer
		return fail(499, "request cancelled while waiting for eldr: %v", ctx.Err())
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, eldr.ErrTimeout):
		return fail(http.StatusGatewayTimeout, "no eldr decision within %v", g.DecisionTimeout)
	default:
		var bad *badRoutedExperts
		if errors.As(err, &bad) {
			return fail(http.StatusBadGateway, "%v", err)
		}
		return fail(http.StatusServiceUnavailable, "eldr: %v", err)
	}
	return nil
}

// completer is where a request routed by eldr ends (Decisions or PromptRouter).
type completer interface {
	Complete(requestID string, token uint64) error
}

// decodeOn runs the decode on resp.Worker; a request eldr routed is then
// completed through c when ReportCompletion (or always) says so.
func (g *Gateway) decodeOn(ctx context.Context, req *completionRequest, resp *completionResponse,
	d eldr.Decision, c completer, always bool) error {
	url := strings.ReplaceAll(g.DecodeURL, "{worker}", strconv.Itoa(int(resp.Worker)))
	var out decodeResponse
	err := g.post(ctx, url, decodeRequest{req.RequestID, resp.Worker, req.MaxTokens, d.CompletionToken}, &out)
	if (g.ReportCompletion || always) && c != nil && resp.RoutedBy == "eldr" {
		// Finished or failed, the request no longer runs on the worker.
		if cerr := c.Complete(req.RequestID, d.CompletionToken); cerr != nil {
			g.logf("request %s: eldr complete: %v", req.RequestID, cerr)
		}
	}
	if err != nil {
		return fail(http.StatusBadGateway, "decode on worker %d: %v", resp.Worker, err)
	}
	if out.RequestID != req.RequestID {
		return fail(http.StatusBadGateway, "decode answered for request %q, not %q",
			out.RequestID, req.RequestID)
	}
	resp.Text = out.Text
	return nil
}

// completesItself: eldr is the gateway's own (an embedded router), so the
// gateway completes every request it routed.
func completesItself(e interface{}) bool {
	c, ok := e.(interface{ CompletesItself() bool })
	return ok && c.CompletesItself()
}

// isInvalid: eldr refused its input (a prompt past the vocabulary, ...).
func isInvalid(err error) bool { return errors.Is(err, eldr.ErrInvalidArgument) }

// post sends v as JSON and decodes a 200 answer into out.
// decide asks eldr under the request's context, for DecisionTimeout at most.
func (g *Gateway) decide(ctx context.Context,
	ask func(context.Context) (eldr.Decision, error)) (eldr.Decision, error) {
	ctx, cancel := context.WithTimeout(ctx, g.DecisionTimeout)
	defer cancel()
	return ask(ctx)
}

func (g *Gateway) post(ctx context.Context, url string, v, out interface{}) error {
	body, err := json.Marshal(v)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := g.HTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBodyBytes))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %d: %s", url, resp.StatusCode, strings.TrimSpace(string(data)))
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s: bad JSON answer: %v", url, err)
	}
	return nil
}

func (g *Gateway) logf(format string, args ...interface{}) {
	if g.Log != nil {
		g.Log.Printf(format, args...)
	}
}

func writeJSON(w http.ResponseWriter, code int, v interface{}) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func newRequestID() string {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return fmt.Sprintf("gw-%d", time.Now().UnixNano())
	}
	return "gw-" + hex.EncodeToString(b[:])
}

// fallbackWorker spreads requests evenly and stably when eldr is unavailable.
func fallbackWorker(requestID string, workers int) int32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(requestID))
	return int32(h.Sum32() % uint32(workers))
}
