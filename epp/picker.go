package main

// The pick: the decode endpoint by eldr (from the prompt), an ordered list of
// fallbacks by load, and in a P/D pool the prefill endpoint by load. When
// eldr cannot decide (no table yet, eldrd or NATS down, a prompt it refuses,
// a pick outside the candidates) the pick is least-loaded and the reason is
// counted: the gateway never fails because of eldr.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"eldr.dev/eldr"
)

// unreadyAfter consecutive failed scrapes take an endpoint out of the picks
// until one succeeds.
const unreadyAfter = 3

func (e *Endpoint) ready() bool { return !e.removed.Load() && e.failures.Load() < unreadyAfter }

// Picker picks endpoints; safe for concurrent use.
type Picker struct {
	pool      atomic.Pointer[Pool]
	eldr      decider // nil: least-loaded only (-router none)
	timeout   time.Duration
	fallbacks int
	fresh     time.Duration // a scrape older than this is not load
	m         *metrics
	log       *slog.Logger
	ids       atomic.Uint64
	rotate    atomic.Uint64 // spreads ties between equally loaded endpoints
	breaker   breaker
}

// pick is one request's endpoints, held until the request ends.
type pick struct {
	endpoint  *Endpoint   // primary
	fallbacks []*Endpoint // in order
	prefill   *Endpoint   // P/D pools: where prefill runs (nil: the decode endpoint does it)
	byEldr    bool
	decision  eldr.Decision
	id        uint64
	key       string
	picker    *Picker

	mu            sync.Mutex
	released      bool
	prefillClosed bool
}

// destination is the Endpoint Picker Protocol's value: primary first, then
// the fallbacks, comma separated.
func (p *pick) destination() string {
	s := p.endpoint.Address
	for _, f := range p.fallbacks {
		s += "," + f.Address
	}
	return s
}

// Pick chooses for one request. prompt nil: a request without one (least
// loaded). subset non-nil: only those addresses may be picked.
func (pk *Picker) Pick(ctx context.Context, prompt *eldr.Prompt, subset []string) (*pick, error) {
	pool := pk.pool.Load()
	if pool == nil {
		return nil, errNoEndpoint
	}
	candidates := pk.candidates(pool, subset)
	if len(candidates) == 0 {
		return nil, errNoEndpoint
	}
	p := &pick{picker: pk, id: pk.ids.Add(1)}
	p.key = fmt.Sprintf("epp-%016x", p.id)
	if prompt != nil && pk.eldr != nil {
		var among []int32 // a subset hint narrows eldr's choice itself
		if subset != nil {
			among = make([]int32, len(candidates))
			for i, e := range candidates {
				among[i] = e.worker()
			}
		}
		p.endpoint = pk.byEldr(ctx, p, *prompt, among, pool, candidates)
	}
	byLoad := pk.byLoad(candidates)
	if p.endpoint == nil {
		p.endpoint = byLoad[0]
		pk.m.picks.WithLabelValues("least_loaded").Inc()
	} else {
		pk.m.picks.WithLabelValues("eldr").Inc()
	}
	for _, e := range byLoad {
		if len(p.fallbacks) == pk.fallbacks {
			break
		}
		if e != p.endpoint {
			p.fallbacks = append(p.fallbacks, e)
		}
	}
	p.prefill = pk.prefillFor(pool)
	p.endpoint.inflight.Add(1)
	if p.prefill != nil {
		p.prefill.prefilling.Add(1)
	}
	pk.m.inflight.Inc()
	return p, nil
}

// byEldr asks eldr; nil when it cannot decide (counted by reason).
func (pk *Picker) byEldr(ctx context.Context, p *pick, prompt eldr.Prompt, among []int32, pool *Pool,
	candidates []*Endpoint) *Endpoint {
	if !pk.breaker.allow() {
		pk.m.fallbacks.WithLabelValues("eldr_down").Inc()
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, pk.timeout)
	d, err := pk.eldr.decide(ctx, p.id, p.key, prompt, among)
	cancel()
	if err != nil {
		reason := fallbackReason(err)
		pk.m.fallbacks.WithLabelValues(reason).Inc()
		if reason == "timeout" {
			pk.breaker.fail()
		}
		return nil
	}
	pk.breaker.ok()
	e := pool.byWorker[d.Worker]
	if e == nil || !slices.Contains(candidates, e) {
		// eldr's worker is not one this request may go to (not in the
		// config, not ready, outside the subset hint for eldrd and the
		// pool, which take no candidate set): undo its count.
		if err := pk.eldr.complete(p.id, p.key, d); err != nil {
			pk.m.eldrCompleteErrors.Inc()
		}
		pk.m.fallbacks.WithLabelValues("pick_not_candidate").Inc()
		return nil
	}
	p.byEldr, p.decision = true, d
	return e
}

func fallbackReason(err error) string {
	switch {
	case errors.Is(err, errNotReady):
		return "eldr_down"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, eldr.ErrTimeout):
		return "timeout"
	case errors.Is(err, eldr.ErrUnsupported):
		return "no_predictor"
	case errors.Is(err, eldr.ErrInvalidArgument):
		return "prompt_refused"
	case errors.Is(err, eldr.ErrNoWorker):
		return "no_worker"
	case errors.Is(err, eldr.ErrState):
		return "eldr_down"
	}
	return "eldr_error"
}

// candidates: decode endpoints that are ready, within the subset hint.
func (pk *Picker) candidates(pool *Pool, subset []string) []*Endpoint {
	out := make([]*Endpoint, 0, len(pool.all))
	for _, e := range pool.all {
		if !e.decodes() || !e.ready() {
			continue
		}
		if subset != nil && !slices.Contains(subset, e.Address) {
			continue
		}
		out = append(out, e)
	}
	return out
}

// byLoad orders endpoints by load, then KV cache use; equal ones in a
// rotating order, so that ties do not all land on the first.
func (pk *Picker) byLoad(es []*Endpoint) []*Endpoint {
	now := time.Now()
	type keyed struct {
		e    *Endpoint
		load int64
		kv   float64
		tie  int
	}
	ks := make([]keyed, len(es))
	r := int(pk.rotate.Add(1))
	for i, e := range es {
		ks[i] = keyed{e: e, load: e.load(pk.fresh, now), tie: (i + r) % len(es)}
		if s := e.scraped.Load(); s != nil && now.Sub(s.at) <= pk.fresh {
			ks[i].kv = s.kvUsage
		}
	}
	slices.SortFunc(ks, func(a, b keyed) int {
		switch {
		case a.load != b.load:
			return int(a.load - b.load)
		case a.kv < b.kv:
			return -1
		case a.kv > b.kv:
			return 1
		}
		return a.tie - b.tie
	})
	out := make([]*Endpoint, len(ks))
	for i := range ks {
		out[i] = ks[i].e
	}
	return out
}

// prefillFor: in a P/D pool (one with prefill-only endpoints) the least
// loaded ready prefill endpoint; nil in an aggregated pool, or when none is
// ready (the decode endpoint then prefills itself, as llm-d's sidecar does
// without a prefiller header).
func (pk *Picker) prefillFor(pool *Pool) *Endpoint {
	var ps []*Endpoint
	for _, e := range pool.all {
		if e.Role == RolePrefill && e.ready() {
			ps = append(ps, e)
		}
	}
	if len(ps) == 0 {
		for _, e := range pool.all {
			if e.Role == RolePrefill {
				pk.m.fallbacks.WithLabelValues("no_prefill_ready").Inc()
				break
			}
		}
		return nil
	}
	return pk.byLoad(ps)[0]
}

// prefillDone: the prefill endpoint's part is over (the response started).
func (p *pick) prefillDone() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.prefill != nil && !p.prefillClosed {
		p.prefillClosed = true
		p.prefill.prefilling.Add(-1)
	}
}

// servedBy: the data plane reports which endpoint served (a fallback, when
// the primary was unreachable): the in-flight count moves there.
func (p *pick) servedBy(address string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.released || address == "" || address == p.endpoint.Address {
		return
	}
	for _, f := range p.fallbacks {
		if f.Address == address {
			p.endpoint.inflight.Add(-1)
			f.inflight.Add(1)
			p.endpoint = f
			p.picker.m.servedElsewhere.Inc()
			return
		}
	}
}

// release ends the request: its counts return, and eldr is told. Once.
func (p *pick) release(outcome string) {
	p.prefillDone()
	p.mu.Lock()
	if p.released {
		p.mu.Unlock()
		return
	}
	p.released = true
	p.mu.Unlock()
	p.endpoint.inflight.Add(-1)
	pk := p.picker
	pk.m.inflight.Dec()
	pk.m.requests.WithLabelValues(outcome).Inc()
	if p.byEldr {
		if err := pk.eldr.complete(p.id, p.key, p.decision); err != nil {
			pk.m.eldrCompleteErrors.Inc()
			pk.log.Debug("eldr complete failed", "request", p.key, "error", err)
		}
	}
}

// breaker stops asking an eldr that keeps timing out (a daemon that hangs,
// NATS without a responder; one that is down answers at once): after 3 in
// a row, requests go least-loaded for a second, then one is tried again.
type breaker struct {
	mu       sync.Mutex
	failures int
	until    time.Time
}

func (b *breaker) allow() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.failures < 3 || time.Now().After(b.until)
}

func (b *breaker) fail() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failures++
	if b.failures >= 3 {
		b.until = time.Now().Add(time.Second)
	}
}

func (b *breaker) ok() {
	b.mu.Lock()
	b.failures = 0
	b.mu.Unlock()
}
