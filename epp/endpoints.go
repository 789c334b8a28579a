package main

// The pool's endpoints and their load. Load is the larger of the picker's
// own count (picks not yet released) and what the engine last said it runs
// and queues (its Prometheus endpoint, scraped on an interval): the own
// count is exact and immediate for this picker's traffic, the engine's view
// also holds other gateways' requests.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// engineLoad is one scrape of an engine's metrics.
type engineLoad struct {
	running float64
	waiting float64
	kvUsage float64 // [0, 1]
	at      time.Time
}

// Endpoint is one model server. The pool keeps the same *Endpoint across
// config reloads while its entry is unchanged, so in-flight counts survive
// an edit of other entries.
type Endpoint struct {
	EndpointConfig
	inflight   atomic.Int64 // decode (or aggregated) picks not yet released
	prefilling atomic.Int64 // prefill picks not yet released
	failures   atomic.Int32 // consecutive failed scrapes
	removed    atomic.Bool  // gone from the config
	scraped    atomic.Pointer[engineLoad]
}

func (e *Endpoint) worker() int32 {
	if e.Worker == nil {
		return -1
	}
	return *e.Worker
}

func (e *Endpoint) decodes() bool { return e.Role != RolePrefill }

// load is what least-loaded compares: requests on the endpoint.
func (e *Endpoint) load(fresh time.Duration, now time.Time) int64 {
	own := e.inflight.Load() + e.prefilling.Load()
	if s := e.scraped.Load(); s != nil && now.Sub(s.at) <= fresh {
		if engine := int64(s.running + s.waiting); engine > own {
			return engine
		}
	}
	return own
}

// Pool is one generation of the config: immutable, swapped whole.
type Pool struct {
	cfg       *Config
	all       []*Endpoint
	byAddress map[string]*Endpoint
	byWorker  map[int32]*Endpoint
}

// newPool builds the next generation, reusing the endpoints of prev whose
// entry did not change, and marks those that left as removed.
func newPool(cfg *Config, prev *Pool) *Pool {
	p := &Pool{cfg: cfg, byAddress: map[string]*Endpoint{}, byWorker: map[int32]*Endpoint{}}
	for _, ec := range cfg.Endpoints {
		var e *Endpoint
		if prev != nil {
			if old := prev.byAddress[ec.Address]; old != nil && sameEntry(old.EndpointConfig, ec) {
				e = old
			}
		}
		if e == nil {
			e = &Endpoint{EndpointConfig: ec}
		}
		p.all = append(p.all, e)
		p.byAddress[e.Address] = e
		if e.decodes() {
			p.byWorker[e.worker()] = e
		}
	}
	if prev != nil {
		for _, old := range prev.all {
			if p.byAddress[old.Address] != old {
				old.removed.Store(true)
			}
		}
	}
	return p
}

func sameEntry(a, b EndpointConfig) bool {
	return a.Address == b.Address && a.Role == b.Role && a.Engine == b.Engine &&
		a.Metrics == b.Metrics && a.worker() == b.worker()
}

func (c EndpointConfig) worker() int32 {
	if c.Worker == nil {
		return -1
	}
	return *c.Worker
}

// scraper reads every endpoint's Prometheus metrics on an interval.
type scraper struct {
	client   *http.Client
	interval time.Duration
	metrics  *metrics
	parser   sync.Pool // expfmt.TextParser (not safe for concurrent use)
}

// maxScrapeBytes bounds one metrics page: an engine that sends more is
// counted as a failed scrape, not read into memory.
const maxScrapeBytes = 8 << 20

func newScraper(interval time.Duration, m *metrics) *scraper {
	timeout := interval
	if timeout > 2*time.Second {
		timeout = 2 * time.Second
	}
	return &scraper{
		client:   &http.Client{Timeout: timeout},
		interval: interval,
		metrics:  m,
	}
}

// run scrapes the current pool until ctx ends.
func (s *scraper) run(ctx context.Context, pool func() *Pool) {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		s.scrapeAll(ctx, pool())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *scraper) scrapeAll(ctx context.Context, p *Pool) {
	var wg sync.WaitGroup
	for _, e := range p.all {
		if e.Metrics == "none" {
			continue
		}
		wg.Add(1)
		go func(e *Endpoint) {
			defer wg.Done()
			l, err := s.scrape(ctx, e)
			if err != nil {
				if n := e.failures.Add(1); n == 1 || n%60 == 0 {
					s.metrics.log.Warn("scrape failed", "endpoint", e.Address, "url", e.Metrics,
						"consecutive", n, "error", err)
				}
				s.metrics.scrapes.WithLabelValues("error").Inc()
				return
			}
			if e.failures.Swap(0) > 0 {
				s.metrics.log.Info("scrape recovered", "endpoint", e.Address)
			}
			e.scraped.Store(l)
			s.metrics.scrapes.WithLabelValues("ok").Inc()
		}(e)
	}
	wg.Wait()
}

// Metric names, per engine: requests running, requests queued, KV cache use.
var engineMetrics = map[Engine][3][]string{
	EngineVLLM: {
		{"vllm:num_requests_running"},
		{"vllm:num_requests_waiting"},
		{"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"}, // V1 name first, V0's second
	},
	EngineSGLang: {
		{"sglang:num_running_reqs"},
		{"sglang:num_queue_reqs"},
		{"sglang:token_usage"},
	},
}

func (s *scraper) scrape(ctx context.Context, e *Endpoint) (*engineLoad, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.Metrics, nil)
	if err != nil {
		return nil, err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	body := io.LimitReader(resp.Body, maxScrapeBytes+1)
	parser, _ := s.parser.Get().(*expfmt.TextParser)
	if parser == nil {
		p := expfmt.NewTextParser(model.UTF8Validation)
		parser = &p
	}
	families, err := parser.TextToMetricFamilies(body)
	s.parser.Put(parser)
	if err != nil {
		return nil, fmt.Errorf("metrics do not parse: %w", err)
	}
	names := engineMetrics[e.Engine]
	l := &engineLoad{at: time.Now()}
	found := false
	for i, dst := range []*float64{&l.running, &l.waiting, &l.kvUsage} {
		for _, name := range names[i] {
			if f := families[name]; f != nil {
				v := 0.0
				for _, m := range f.Metric {
					if g := m.GetGauge(); g != nil {
						v += g.GetValue()
					} else if c := m.GetCounter(); c != nil {
						v += c.GetValue()
					} else if u := m.GetUntyped(); u != nil {
						v += u.GetValue()
					}
				}
				*dst = v
				found = found || i < 2
				break
			}
		}
	}
	if !found {
		return nil, fmt.Errorf("no %s load metric (%s)", e.Engine, names[0][0])
	}
	if l.running < 0 || l.waiting < 0 || l.running > 1e6 || l.waiting > 1e6 {
		return nil, fmt.Errorf("load out of range (running %g, waiting %g)", l.running, l.waiting)
	}
	if l.kvUsage < 0 || l.kvUsage > 1 {
		l.kvUsage = 0
	}
	return l, nil
}
