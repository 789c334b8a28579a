// Command go-gateway is an example eldr-aware serving gateway: a net/http
// reverse proxy for prefill/decode disaggregation that asks the node's eldrd
// which decode worker should take each request.
//
//	go-gateway -listen 127.0.0.1:8080 -instance default \
//	  -prefill http://127.0.0.1:9000/v1/prefill -decode http://127.0.0.1:9001/v1/decode
package main

import (
	"context"
	"errors"
	"flag"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"eldr.dev/eldr"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8080", "address to serve /v1/completions and /healthz on")
	prefill := flag.String("prefill", "http://127.0.0.1:9000/v1/prefill", "prefill engine endpoint")
	decode := flag.String("decode", "http://127.0.0.1:9001/v1/decode",
		"decode endpoint; {worker} in it is replaced by the chosen worker id")
	instance := flag.String("instance", "default", "eldrd instance")
	decisionTimeout := flag.Duration("decision-timeout", time.Second, "longest wait for eldr's decision")
	upstreamTimeout := flag.Duration("upstream-timeout", 60*time.Second, "per-request prefill/decode timeout")
	openTimeout := flag.Duration("open-timeout", 5*time.Second, "how long to wait for eldrd at start")
	fallback := flag.Int("fallback-workers", 0,
		"when eldr has no decision, hash-route over this many workers (0: fail the request)")
	reportCompletion := flag.Bool("report-completion", false,
		"report decode completion to eldr (leave off when the decode engine reports it)")
	flag.Parse()

	logger := log.New(os.Stderr, "go-gateway: ", log.LstdFlags)
	client, err := eldr.Open(*instance, &eldr.ClientOptions{OpenTimeout: *openTimeout})
	if err != nil {
		logger.Fatalf("eldr instance %q: %v", *instance, err)
	}
	defer client.Close()

	gw := &Gateway{
		PrefillURL: *prefill, DecodeURL: *decode, Eldr: client,
		HTTP: &http.Client{Timeout: *upstreamTimeout}, DecisionTimeout: *decisionTimeout,
		FallbackWorkers: *fallback, ReportCompletion: *reportCompletion, Log: logger,
	}
	server := &http.Server{Addr: *listen, Handler: gw, ReadHeaderTimeout: 10 * time.Second}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = server.Shutdown(shutdown)
	}()
	logger.Printf("listening on %s (eldr instance %q)", *listen, *instance)
	if err := server.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		logger.Fatal(err)
	}
}
