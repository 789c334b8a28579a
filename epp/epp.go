package main

// EPP is the picker as a service: the ext_proc and health services on one
// gRPC listener, metrics and HTTP health on another, and the loops that
// watch the config, scrape the engines and keep eldr connected.

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	"eldr.dev/eldr"
)

// Options configure an EPP (the command's flags).
type Options struct {
	ConfigPath     string
	Router         string // embedded, eldrd, nats or none
	TablePath      string
	Policy         string
	Instance       string
	NATS, PoolName string
	NATSAuth       eldr.NatsAuth // nats: TLS, credentials, inbox prefix
	RouteTimeout   time.Duration
	Fallbacks      int
	ScrapeInterval time.Duration // 0: no scraping
	ReportLoads    bool          // embedded: scraped loads replace the router's counts
	WatchInterval  time.Duration
	// SecureServing serves ext_proc over TLS (GIE's default): the key pair
	// in CertPath (tls.crt, tls.key), or a self-signed one.
	SecureServing bool
	CertPath      string
	BodyMode      string
	MaxBodyBytes  int
	// MaxBufferedBytes bounds the request bodies all streams hold at once.
	MaxBufferedBytes int64
	Log              *slog.Logger
}

// DefaultOptions are the command's defaults.
func DefaultOptions() Options {
	return Options{SecureServing: true, Router: "embedded", Policy: "eldr_cost", Instance: "default", RouteTimeout: 20 * time.Millisecond,
		Fallbacks: 2, ScrapeInterval: time.Second, WatchInterval: time.Second,
		BodyMode: "full-duplex", MaxBodyBytes: 8 << 20, MaxBufferedBytes: 512 << 20}
}

// Health service names, beside "" (the whole server): Kubernetes probes
// ask liveness and readiness, Envoy's health checks the ext_proc service.
var healthServices = []string{"liveness", "readiness", extprocv3.ExternalProcessor_ServiceDesc.ServiceName}

type EPP struct {
	o      Options
	log    *slog.Logger
	m      *metrics
	picker *Picker
	cfg    atomic.Pointer[Config]
	stamp  fileStamp
	grpc   *grpc.Server
	// healthGRPC serves the health service alone, in plaintext.
	healthGRPC *grpc.Server
	ext        *server
	health     *health.Server
	http       *http.Server
	ctx        context.Context
	cancel     context.CancelFunc
	loops      sync.WaitGroup
}

func newEPP(o Options) (*EPP, error) {
	if o.Log == nil {
		o.Log = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	mode, err := parseBodyMode(o.BodyMode)
	if err != nil {
		return nil, err
	}
	if o.MaxBodyBytes <= 0 || o.MaxBufferedBytes < int64(o.MaxBodyBytes) || o.Fallbacks < 0 || o.RouteTimeout <= 0 || o.WatchInterval <= 0 || o.ScrapeInterval < 0 {
		return nil, errors.New("max body, route timeout and watch interval must be positive, max buffered at least max body; fallbacks and scrape interval not negative")
	}
	e := &EPP{o: o, log: o.Log}
	e.picker = &Picker{timeout: o.RouteTimeout, fallbacks: o.Fallbacks, log: o.Log,
		fresh: 3 * max(o.ScrapeInterval, o.WatchInterval)}
	e.m = newMetrics(o.Log, e.picker.pool.Load)
	e.picker.m = e.m
	if e.picker.eldr, err = e.newDecider(); err != nil {
		return nil, err
	}
	e.ctx, e.cancel = context.WithCancel(context.Background())
	e.health = health.NewServer()
	serverOpts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(o.MaxBodyBytes + (1 << 20)),
		grpc.MaxConcurrentStreams(1 << 16),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
	}
	if o.SecureServing {
		cert, err := serverCertificate(o.CertPath)
		if err != nil {
			return nil, err
		}
		serverOpts = append(serverOpts, grpc.Creds(credentials.NewTLS(&tls.Config{
			Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})))
	}
	e.grpc = grpc.NewServer(serverOpts...)
	// Kubernetes' gRPC probes speak no TLS: health has its own plaintext server too.
	e.healthGRPC = grpc.NewServer()
	e.ext = &server{picker: e.picker, config: e.cfg.Load, mode: mode, maxBody: o.MaxBodyBytes,
		maxBuffered: o.MaxBufferedBytes, m: e.m}
	extprocv3.RegisterExternalProcessorServer(e.grpc, e.ext)
	healthpb.RegisterHealthServer(e.grpc, e.health)
	healthpb.RegisterHealthServer(e.healthGRPC, e.health)
	for _, s := range append([]string{""}, healthServices[1:]...) {
		e.health.SetServingStatus(s, healthpb.HealthCheckResponse_NOT_SERVING) // until a config loads
	}
	e.health.SetServingStatus("liveness", healthpb.HealthCheckResponse_SERVING)
	e.reloadConfig()
	e.picker.eldr.maintain(e.ctx, e.picker.pool.Load(), e.picker.fresh)
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(e.m.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if e.cfg.Load() == nil {
			http.Error(w, "no config loaded", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	e.http = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	return e, nil
}

func (e *EPP) newDecider() (decider, error) {
	switch e.o.Router {
	case "embedded":
		if e.o.TablePath == "" {
			return nil, errors.New("-router embedded needs -table")
		}
		policy, err := eldr.ParsePolicy(e.o.Policy)
		if err != nil {
			return nil, err
		}
		opts := eldr.DefaultRouterOptions()
		opts.Policy = policy
		return &embedded{path: e.o.TablePath, opts: opts, report: e.o.ReportLoads, log: e.log, m: e.m}, nil
	case "eldrd":
		return &sidecar{instance: e.o.Instance, log: e.log}, nil
	case "nats":
		if e.o.NATS == "" || e.o.PoolName == "" {
			return nil, errors.New("-router nats needs -nats and -pool")
		}
		return &natsPool{urls: e.o.NATS, pool: e.o.PoolName, auth: e.o.NATSAuth, log: e.log}, nil
	case "none":
		return noDecider{}, nil
	}
	return nil, fmt.Errorf("-router %q: embedded, eldrd, nats or none", e.o.Router)
}

// heldCounts is everything still counted in flight: the picker's own counts
// per endpoint and the embedded router's per worker (0 once every request
// ended; a leak otherwise).
func (e *EPP) heldCounts() int64 {
	var n int64
	if p := e.picker.pool.Load(); p != nil {
		for _, ep := range p.all {
			n += ep.inflight.Load() + ep.prefilling.Load()
		}
	}
	if emb, ok := e.picker.eldr.(*embedded); ok {
		emb.mu.RLock()
		defer emb.mu.RUnlock()
		if emb.router != nil {
			slots, err := emb.router.Workers()
			if err != nil {
				return n + 1 // cannot tell: not known to be free
			}
			for _, sl := range slots {
				n += int64(sl.InFlight)
			}
		}
	}
	return n
}

// noDecider: least-loaded only (the baseline the benchmark compares with).
type noDecider struct{}

func (noDecider) name() string { return "none" }
func (noDecider) decide(context.Context, uint64, string, eldr.Prompt, []int32) (eldr.Decision, error) {
	return eldr.Decision{}, errNotReady
}
func (noDecider) complete(uint64, string, eldr.Decision) error   { return nil }
func (noDecider) maintain(context.Context, *Pool, time.Duration) {}
func (noDecider) close()                                         {}

// reloadConfig reads the config file when it changed; one with errors keeps
// the last good one (logged, counted).
func (e *EPP) reloadConfig() {
	st, err := stampOf(e.o.ConfigPath)
	if err != nil {
		if e.stamp != (fileStamp{}) || e.cfg.Load() == nil {
			e.m.configLoads.WithLabelValues("error").Inc()
			e.log.Error("config not readable; keeping the last good one", "path", e.o.ConfigPath, "error", err)
			e.stamp = fileStamp{ino: 1} // log once until it is back
		}
		return
	}
	if st == e.stamp {
		return
	}
	e.stamp = st
	data, err := os.ReadFile(e.o.ConfigPath)
	var cfg *Config
	if err == nil {
		cfg, err = parseConfig(data)
	}
	if err != nil {
		e.m.configLoads.WithLabelValues("error").Inc()
		e.log.Error("config has errors; keeping the last good one", "path", e.o.ConfigPath, "error", err)
		return
	}
	e.picker.pool.Store(newPool(cfg, e.picker.pool.Load()))
	e.cfg.Store(cfg)
	e.m.configLoads.WithLabelValues("ok").Inc()
	e.log.Info("config loaded", "path", e.o.ConfigPath, "endpoints", len(cfg.Endpoints))
	for _, s := range append([]string{""}, healthServices[1:]...) {
		e.health.SetServingStatus(s, healthpb.HealthCheckResponse_SERVING)
	}
}

// Listeners are where an EPP serves; nil ones are off.
type Listeners struct {
	ExtProc net.Listener // ext_proc and health (TLS with SecureServing)
	Health  net.Listener // health alone, plaintext (Kubernetes gRPC probes)
	HTTP    net.Listener // /metrics, /healthz, /readyz
}

// Serve runs until Stop.
func (e *EPP) Serve(l Listeners) error {
	e.loops.Add(1)
	go func() {
		defer e.loops.Done()
		t := time.NewTicker(e.o.WatchInterval)
		defer t.Stop()
		for {
			select {
			case <-e.ctx.Done():
				return
			case <-t.C:
			}
			e.reloadConfig()
			e.picker.eldr.maintain(e.ctx, e.picker.pool.Load(), e.picker.fresh)
		}
	}()
	if e.o.ScrapeInterval > 0 {
		e.loops.Add(1)
		go func() {
			defer e.loops.Done()
			newScraper(e.o.ScrapeInterval, e.m).run(e.ctx, func() *Pool {
				if p := e.picker.pool.Load(); p != nil {
					return p
				}
				return &Pool{}
			})
		}()
	}
	if l.HTTP != nil {
		go e.http.Serve(l.HTTP)
	}
	if l.Health != nil {
		go e.healthGRPC.Serve(l.Health)
	}
	e.log.Info("eldr-epp serving", "ext_proc", l.ExtProc.Addr().String(), "tls", e.o.SecureServing,
		"router", e.picker.eldr.name())
	return e.grpc.Serve(l.ExtProc)
}

// Stop drains: health says NOT_SERVING, no new streams are taken, open ones
// run until their responses end or drain passes; then every stream still
// open is cut (its pick released) and eldr is closed.
func (e *EPP) Stop(drain time.Duration) {
	for _, s := range append([]string{""}, healthServices...) {
		e.health.SetServingStatus(s, healthpb.HealthCheckResponse_NOT_SERVING)
	}
	done := make(chan struct{})
	go func() { e.grpc.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(drain):
		e.log.Warn("drain timed out; cutting the open streams", "after", drain)
		e.grpc.Stop()
		<-done
	}
	e.healthGRPC.Stop()
	e.cancel()
	e.loops.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	e.http.Shutdown(ctx)
	cancel()
	e.picker.eldr.close()
	e.log.Info("eldr-epp stopped")
}
