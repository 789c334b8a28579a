// Command eldr-epp is an Endpoint Picker for Gateway API Inference Extension
// gateways (Envoy Gateway, kgateway, Istio, GKE): it picks each request's
// decode endpoint by expert locality with eldr, from the prompt in the
// request body, and its prefill endpoint (P/D pools) by load.
//
//	eldr-epp -config endpoints.yaml -table table.eldr      # embedded router
//	eldr-epp -config endpoints.yaml -router eldrd          # the node's eldrd
//	eldr-epp -config endpoints.yaml -router nats -nats nats://... -pool NAME
//	eldr-epp demo                                          # the chain on loopback
//	eldr-epp bench                                         # added latency of the pick
package main

import (
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "demo":
			os.Exit(demoMain(os.Args[2:]))
		case "bench":
			os.Exit(benchMain(os.Args[2:]))
		}
	}
	os.Exit(serveMain(os.Args[1:]))
}

func serveMain(args []string) int {
	o := DefaultOptions()
	fs := flag.NewFlagSet("eldr-epp", flag.ContinueOnError)
	grpcAddr := fs.String("grpc-addr", ":9002", "ext_proc (and gRPC health) listen address")
	healthAddr := fs.String("grpc-health-addr", ":9003", "gRPC health alone, plaintext, for Kubernetes probes (empty: off)")
	fs.BoolVar(&o.SecureServing, "secure-serving", o.SecureServing, "serve ext_proc over TLS, as GIE's picker does")
	fs.StringVar(&o.CertPath, "cert-path", "", "folder with tls.crt and tls.key (empty: a self-signed certificate)")
	metricsAddr := fs.String("metrics-addr", ":9090", "Prometheus /metrics, /healthz and /readyz (empty: off)")
	fs.StringVar(&o.ConfigPath, "config", "", "endpoints file (YAML or JSON), watched (required)")
	fs.StringVar(&o.Router, "router", o.Router, "eldr behind the picker: embedded, eldrd, nats or none (least-loaded only)")
	fs.StringVar(&o.TablePath, "table", "", "embedded: the table file (with a predictor: eldr fit --prompts), watched")
	fs.StringVar(&o.Policy, "policy", o.Policy, "embedded: routing policy")
	fs.StringVar(&o.Instance, "instance", o.Instance, "eldrd: the daemon's instance")
	fs.StringVar(&o.NATS, "nats", "", "nats: server URLs, comma separated")
	fs.StringVar(&o.PoolName, "pool", "", "nats: the pool's name")
	o.NATSAuth.AddFlags(fs) // nats: TLS, credentials and inbox prefix, as eldrd's
	fs.DurationVar(&o.RouteTimeout, "route-timeout", o.RouteTimeout, "longest wait for eldr's decision before least-loaded")
	fs.IntVar(&o.Fallbacks, "fallbacks", o.Fallbacks, "fallback endpoints after the pick, by load")
	fs.DurationVar(&o.ScrapeInterval, "scrape-interval", o.ScrapeInterval, "engine metrics scrape interval (0: off)")
	fs.BoolVar(&o.ReportLoads, "report-loads", o.ReportLoads, "embedded: the engines' scraped loads replace the router's counts (a busy engine's; an idle one cannot be reported)")
	fs.DurationVar(&o.WatchInterval, "watch-interval", o.WatchInterval, "how often the config and table files are checked")
	fs.StringVar(&o.BodyMode, "body-mode", o.BodyMode, "ext_proc body mode when Envoy does not say: full-duplex or buffered")
	fs.IntVar(&o.MaxBodyBytes, "max-body-bytes", o.MaxBodyBytes, "larger request bodies are answered 413")
	fs.Int64Var(&o.MaxBufferedBytes, "max-buffered-bytes", o.MaxBufferedBytes,
		"request body bytes all open requests may hold at once; beyond it requests are answered 429")
	drain := fs.Duration("drain-timeout", 30*time.Second, "on SIGTERM, how long open requests may finish")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(*level)); err != nil {
		fmt.Fprintln(os.Stderr, "eldr-epp: -log-level:", err)
		return 2
	}
	o.Log = slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: lv}))
	if o.ConfigPath == "" {
		fmt.Fprintln(os.Stderr, "eldr-epp: -config is required")
		return 2
	}
	e, err := newEPP(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "eldr-epp:", err)
		return 2
	}
	lis, err := net.Listen("tcp", *grpcAddr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "eldr-epp:", err)
		return 1
	}
	ls := Listeners{ExtProc: lis}
	for _, l := range []struct {
		addr string
		to   *net.Listener
	}{{*metricsAddr, &ls.HTTP}, {*healthAddr, &ls.Health}} {
		if l.addr == "" {
			continue
		}
		if *l.to, err = net.Listen("tcp", l.addr); err != nil {
			fmt.Fprintln(os.Stderr, "eldr-epp:", err)
			return 1
		}
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		s := <-sig
		o.Log.Info("stopping", "signal", s.String(), "drain", *drain)
		e.Stop(*drain)
	}()
	if err := e.Serve(ls); err != nil {
		o.Log.Error("serve", "error", err)
		return 1
	}
	return 0
}
