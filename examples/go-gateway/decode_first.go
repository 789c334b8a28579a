package main

// Decode-first order, the order llm-d and SGLang's PD router use: the gateway
// picks the decode worker from the prompt BEFORE prefill (eldr predicts the
// request's footprint from its prompt with the table's predictor), then runs
// prefill and decode on that pair. When the prefill's real footprint comes
// back (a stock engine's routed experts; an eldr-flavored engine pushes it
// itself), eldr learns from it, so that the next prompts like it are routed
// better. Prefill-first (prefill, footprint, route, decode) stays the default.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"

	"eldr.dev/eldr"
)

// Order is when the gateway picks the decode worker.
type Order string

const (
	// PrefillFirst: prefill, then route the request by its real footprint.
	PrefillFirst Order = "prefill-first"
	// DecodeFirst: route by the prompt, then prefill and decode on the pair.
	DecodeFirst Order = "decode-first"
)

// ParseOrder accepts "prefill-first" or "decode-first".
func ParseOrder(s string) (Order, error) {
	switch o := Order(s); o {
	case PrefillFirst, DecodeFirst:
		return o, nil
	}
	return "", fmt.Errorf("unknown order %q (prefill-first or decode-first)", s)
}

// PromptRouter is eldr as decode-first order uses it: a decision from the
// prompt, the real footprint afterwards, and the end of the request.
type PromptRouter interface {
	RoutePrompt(ctx context.Context, requestID string, p eldr.Prompt) (eldr.Decision, error)
	// Learn hands eldr the request's real footprint (after prefill).
	Learn(requestID string, fp eldr.Footprint) error
	Complete(requestID string, token uint64) error
	// CompletesItself: the gateway completes every request it routed (an
	// embedded router: the decode engines report to no one it hears).
	CompletesItself() bool
}

// clientPrompts: the node's eldrd. The daemon learns when the same request id
// pushes its real footprint.
type clientPrompts struct{ c *eldr.Client }

func (p clientPrompts) RoutePrompt(ctx context.Context, id string, pr eldr.Prompt) (eldr.Decision, error) {
	return p.c.RoutePromptContext(ctx, id, pr)
}
func (p clientPrompts) Learn(id string, fp eldr.Footprint) error { return p.c.Push(id, fp) }
func (p clientPrompts) Complete(id string, token uint64) error   { return p.c.Complete(id, token) }
func (p clientPrompts) CompletesItself() bool                    { return false }

// poolPrompts: any node of an eldrd pool over NATS. A pool has no learn path:
// the nodes learn from what their own engines push.
type poolPrompts struct{ p *eldr.Pool }

func (p poolPrompts) RoutePrompt(ctx context.Context, id string, pr eldr.Prompt) (eldr.Decision, error) {
	return p.p.RoutePromptContext(ctx, id, pr)
}
func (p poolPrompts) Learn(string, eldr.Footprint) error     { return errNoLearnPath }
func (p poolPrompts) Complete(id string, token uint64) error { return p.p.Complete(id, token) }
func (p poolPrompts) CompletesItself() bool                  { return false }

var errNoPromptRouter = errors.New("decode-first order needs eldr to route from the prompt (-instance, -nats or -table)")

var errNoLearnPath = fmt.Errorf("the pool over NATS takes no real footprint from a gateway")

// routerDecisions is an embedded router (-table): the gateway's own eldr. It
// serves both orders: Decisions (prefill-first, stock flavors) and
// PromptRouter (decode-first). Request ids are hashed to the router's uint64 ids.
type routerDecisions struct{ r *eldr.Router }

func routerID(id string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(id))
	return h.Sum64()
}

func (d routerDecisions) WaitContext(_ context.Context, id string) (eldr.Decision, error) {
	return eldr.Decision{}, fmt.Errorf("request %s: %w", id, errNoDecision)
}
func (d routerDecisions) RouteContext(_ context.Context, id string, fp eldr.Footprint) (eldr.Decision, error) {
	return d.r.RouteRequest(routerID(id), fp)
}
func (d routerDecisions) RoutePrompt(_ context.Context, id string, p eldr.Prompt) (eldr.Decision, error) {
	rid := routerID(id)
	return d.r.RoutePrompt(p, &rid)
}
func (d routerDecisions) Learn(id string, fp eldr.Footprint) error {
	return d.r.Learn(routerID(id), fp)
}
func (d routerDecisions) Complete(id string, _ uint64) error { return d.r.Complete(routerID(id)) }
func (d routerDecisions) CompletesItself() bool              { return true }

// promptOf is the prompt eldr routes from: the token ids when the request
// carries them (prompt_tokens as a list), else the text (prompt).
func promptOf(req *completionRequest) (eldr.Prompt, bool) {
	var ids []int64
	if err := json.Unmarshal(req.PromptTokens, &ids); err == nil && len(ids) > 0 {
		tokens := make([]uint32, len(ids))
		for i, id := range ids {
			if id < 0 || id >= int64(eldr.MaxVocabulary) {
				tokens[i] = eldr.MaxVocabulary // eldr refuses it: a 400
			} else {
				tokens[i] = uint32(id)
			}
		}
		return eldr.TokensPrompt(tokens), true
	}
	if req.Prompt != "" {
		return eldr.TextPrompt(req.Prompt), true
	}
	return eldr.Prompt{}, false
}

// completeDecodeFirst: 1. the decode worker from the prompt; 2. prefill, told
// its decode peer, and eldr learns from the real footprint; 3. decode.
func (g *Gateway) completeDecodeFirst(ctx context.Context, req *completionRequest) (*completionResponse, error) {
	prompt, ok := promptOf(req)
	if !ok {
		return nil, fail(400, "decode-first order routes from the prompt: send its text "+
			"(prompt) or its token ids (prompt_tokens as a list)")
	}
	resp := &completionResponse{RequestID: req.RequestID, RoutedBy: "eldr", DecidedBy: "gateway",
		Order: string(DecodeFirst)}
	var d eldr.Decision
	err := errNoPromptRouter
	if g.Prompts != nil {
		d, err = g.decide(ctx, func(ctx context.Context) (eldr.Decision, error) {
			return g.Prompts.RoutePrompt(ctx, req.RequestID, prompt)
		})
	}
	if err != nil && isInvalid(err) && g.FallbackWorkers == 0 {
		return nil, fail(400, "eldr refused the prompt: %v", err)
	}
	if err := g.decided(ctx, req.RequestID, d, err, resp); err != nil {
		return nil, err
	}
	routed := resp.RoutedBy == "eldr"
	release := func() { // the request will not run: it holds no slot on its worker
		if routed {
			if cerr := g.Prompts.Complete(req.RequestID, d.CompletionToken); cerr != nil {
				g.logf("request %s: eldr complete: %v", req.RequestID, cerr)
			}
		}
	}

	// 2. Prefill on the pair.
	worker := resp.Worker
	if g.Flavor == "" || g.Flavor == FlavorEldr {
		// The engine is told its decode peer; it pushes the real footprint
		// to eldrd under the request's id itself: the daemon learns from it.
		count := req.PromptTokens
		if len(count) == 0 || string(count) == "null" {
			count = json.RawMessage(fmt.Sprint(max(1, len(strings.Fields(req.Prompt)))))
		}
		var pre prefillResponse
		err = g.post(ctx, g.PrefillURL, prefillRequest{RequestID: req.RequestID, PromptTokens: count,
			Prompt: req.Prompt, DecodeWorker: &worker}, &pre)
		if err != nil {
			release()
			return nil, fail(502, "prefill: %v", err)
		}
		resp.PrefillTokens = pre.Tokens
	} else {
		var fp eldr.Footprint
		fp, resp.PrefillTokens, err = g.stockPrefill(ctx, req.RequestID, req.PromptTokens, req.Prompt)
		var bad *badRoutedExperts
		switch {
		case err != nil && !errors.As(err, &bad):
			release()
			return nil, err
		case err != nil: // the prefill ran; only learning lacks its input
			g.logf("request %s: no footprint to learn from: %v", req.RequestID, err)
		case routed:
			if lerr := g.Prompts.Learn(req.RequestID, fp); lerr != nil {
				g.logf("request %s: eldr learn: %v", req.RequestID, lerr)
			} else {
				resp.Learned = true
			}
		}
	}

	// 3. Decode on the chosen worker.
	if err := g.decodeOn(ctx, req, resp, d, g.Prompts, completesItself(g.Prompts)); err != nil {
		return nil, err
	}
	return resp, nil
}
