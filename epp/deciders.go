package main

// eldr behind the picker, one of three (-router): an embedded router over a
// table file, the node's eldrd (C API client over shared memory), or the
// pool over NATS. Each gives a decision from the prompt and takes the
// request's end; only the embedded router is told the pool's membership
// (eldrd and the pool learn it from the engines' own reports).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"eldr.dev/eldr"
)

type decider interface {
	name() string
	// among: the workers this request may go to (the subset hint's); nil:
	// any. Only the embedded router takes it; the others may answer
	// outside it (the picker then falls back).
	decide(ctx context.Context, id uint64, key string, p eldr.Prompt, among []int32) (eldr.Decision, error)
	complete(id uint64, key string, d eldr.Decision) error
	// maintain runs on the picker's tick: reload a changed table, reconnect,
	// follow the pool's membership and loads.
	maintain(ctx context.Context, p *Pool, fresh time.Duration)
	close()
}

var errNotReady = errors.New("eldr is not ready")

// embedded is an eldr router in this process over a watched table file
// (with a predictor: `eldr fit --prompts`). A table that appears later, or
// changes, is loaded on the next tick; one that does not load keeps the last.
type embedded struct {
	path   string
	opts   eldr.RouterOptions
	report bool // hand the engines' scraped loads to the router
	log    *slog.Logger
	m      *metrics

	mu     sync.RWMutex
	router *eldr.Router
	stamp  fileStamp
}

func (e *embedded) name() string { return "embedded" }

func (e *embedded) decide(_ context.Context, id uint64, _ string, p eldr.Prompt, among []int32) (eldr.Decision, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.router == nil {
		return eldr.Decision{}, fmt.Errorf("%w: no table loaded from %s", errNotReady, e.path)
	}
	return e.router.RoutePromptAmong(p, &id, among)
}

func (e *embedded) complete(id uint64, _ string, _ eldr.Decision) error {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.router == nil {
		return errNotReady
	}
	return e.router.Complete(id)
}

func (e *embedded) maintain(_ context.Context, p *Pool, fresh time.Duration) {
	e.reload()
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.router == nil || p == nil {
		return
	}
	e.syncWorkers(p, fresh)
}

func (e *embedded) reload() {
	st, err := stampOf(e.path)
	if err != nil {
		return // not there (yet): the last table stays
	}
	e.mu.RLock()
	same := st == e.stamp
	e.mu.RUnlock()
	if same {
		return
	}
	table, err := eldr.LoadTable(e.path)
	if err != nil {
		e.m.tableLoads.WithLabelValues("error").Inc()
		e.log.Error("table does not load; keeping the last", "path", e.path, "error", err)
		e.mu.Lock()
		e.stamp = st // retried when the file changes again
		e.mu.Unlock()
		return
	}
	defer table.Close()
	e.mu.Lock()
	defer e.mu.Unlock()
	e.stamp = st
	if e.router == nil {
		r, err := eldr.NewRouter(table, e.opts)
		if err != nil {
			e.m.tableLoads.WithLabelValues("error").Inc()
			e.log.Error("router over the table failed", "path", e.path, "error", err)
			return
		}
		e.router = r
	} else if err := e.router.SwapTable(table); err != nil {
		e.m.tableLoads.WithLabelValues("error").Inc()
		e.log.Error("table swap refused; keeping the last", "path", e.path, "error", err)
		return
	}
	e.m.tableLoads.WithLabelValues("ok").Inc()
	info, _ := table.Info()
	e.log.Info("table loaded", "path", e.path, "workers", info.NumWorkers,
		"layers", info.Layers, "experts", info.Experts)
}

// syncWorkers: a worker is active while its endpoint is in the config,
// decodes and is ready; else draining (its in-flight requests finish, it
// takes no new ones). Endpoints with ids the table does not have are added.
func (e *embedded) syncWorkers(p *Pool, fresh time.Duration) {
	slots, err := e.router.Workers()
	if err != nil {
		return
	}
	known := map[int32]bool{}
	now := time.Now()
	for _, s := range slots {
		known[s.Worker] = true
		ep := p.byWorker[s.Worker]
		want := ep != nil && ep.ready()
		switch {
		case want && s.State != eldr.WorkerActive:
			_ = e.router.AddWorker(s.Worker)
		case !want && s.State == eldr.WorkerActive:
			_ = e.router.DrainWorker(s.Worker)
		}
		if want && e.report {
			if l := ep.scraped.Load(); l != nil && now.Sub(l.at) <= fresh {
				_ = e.router.Report(eldr.WorkerReport{Worker: s.Worker,
					BatchSize: uint32(l.running + l.waiting), KVUsage: float32(l.kvUsage)})
			}
		}
	}
	for id, ep := range p.byWorker {
		if !known[id] && ep.ready() {
			if err := e.router.AddWorker(id); err != nil {
				e.log.Warn("worker not added", "worker", id, "endpoint", ep.Address, "error", err)
			}
		}
	}
}

func (e *embedded) close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.router != nil {
		e.router.Close()
		e.router = nil
	}
}

// sidecar is the node's eldrd, through the C API. The client is opened on
// the first tick that finds the daemon, and again after it went away.
type sidecar struct {
	instance string
	log      *slog.Logger

	mu     sync.RWMutex
	client *eldr.Client
}

func (s *sidecar) name() string { return "eldrd" }

func (s *sidecar) get() (*eldr.Client, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.client == nil {
		return nil, fmt.Errorf("%w: eldrd %q is not connected", errNotReady, s.instance)
	}
	return s.client, nil
}

func (s *sidecar) decide(ctx context.Context, _ uint64, key string, p eldr.Prompt, _ []int32) (eldr.Decision, error) {
	c, err := s.get()
	if err != nil {
		return eldr.Decision{}, err
	}
	d, err := c.RoutePromptContext(ctx, key, p)
	if errors.Is(err, eldr.ErrState) {
		s.drop(c) // the daemon restarted or went away: reopen on the next tick
	}
	return d, err
}

func (s *sidecar) complete(_ uint64, key string, d eldr.Decision) error {
	c, err := s.get()
	if err != nil {
		return err
	}
	return c.Complete(key, d.CompletionToken)
}

func (s *sidecar) drop(c *eldr.Client) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client == c {
		s.client = nil
		go c.Close()
	}
}

func (s *sidecar) maintain(ctx context.Context, _ *Pool, _ time.Duration) {
	if _, err := s.get(); err == nil {
		return
	}
	octx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	c, err := eldr.OpenContext(octx, s.instance, nil)
	if err != nil {
		return
	}
	s.mu.Lock()
	s.client = c
	s.mu.Unlock()
	s.log.Info("connected to eldrd", "instance", s.instance)
}

func (s *sidecar) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client != nil {
		s.client.Close()
		s.client = nil
	}
}

// natsPool is any node of an eldrd pool over NATS.
type natsPool struct {
	urls, pool string
	auth       eldr.NatsAuth
	log        *slog.Logger

	mu sync.RWMutex
	p  *eldr.Pool
}

func (n *natsPool) name() string { return "nats" }

func (n *natsPool) get() (*eldr.Pool, error) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	if n.p == nil {
		return nil, fmt.Errorf("%w: pool %q over NATS is not connected", errNotReady, n.pool)
	}
	return n.p, nil
}

func (n *natsPool) decide(ctx context.Context, _ uint64, key string, pr eldr.Prompt, _ []int32) (eldr.Decision, error) {
	p, err := n.get()
	if err != nil {
		return eldr.Decision{}, err
	}
	return p.RoutePromptContext(ctx, key, pr)
}

func (n *natsPool) complete(_ uint64, key string, d eldr.Decision) error {
	p, err := n.get()
	if err != nil {
		return err
	}
	return p.Complete(key, d.CompletionToken)
}

func (n *natsPool) maintain(ctx context.Context, _ *Pool, _ time.Duration) {
	if _, err := n.get(); err == nil {
		return
	}
	octx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	p, err := eldr.OpenPoolAuthContext(octx, n.urls, n.pool, n.auth)
	if err != nil {
		return
	}
	n.mu.Lock()
	n.p = p
	n.mu.Unlock()
	n.log.Info("joined the pool over NATS", "pool", n.pool)
}

func (n *natsPool) close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.p != nil {
		n.p.Close()
		n.p = nil
	}
}
