// Command go-gateway is an example eldr-aware serving gateway: a net/http
// reverse proxy for prefill/decode disaggregation that asks the node's eldrd
// which decode worker should take each request.
//
//	go-gateway -listen 127.0.0.1:8080 -instance default \
//	  -prefill http://127.0.0.1:9000/v1/prefill -decode http://127.0.0.1:9001/v1/decode
//
// With a stock SGLang or vLLM prefill server (started with
// --enable-return-routed-experts) the gateway builds the footprint itself:
//
//	go-gateway -flavor sglang -prefill http://127.0.0.1:30000/generate \
//	  -experts 128 -hidden-layers 48 -top-k 8 -decode ...
//	go-gateway -flavor vllm -prefill http://127.0.0.1:8000/v1/completions -experts 128 -decode ...
//
// On a node without eldrd: -instance "" routes by the decision the prefill
// engine returns with its answer; -nats URL -pool NAME routes the stock
// flavors' footprints through any node of an eldrd pool; -table FILE routes
// in the gateway itself (an embedded router).
//
// -order decode-first picks the decode worker from the prompt before prefill
// (llm-d's and SGLang's PD router's order; the table must carry a predictor),
// then runs prefill and decode on the pair, and hands eldr the prefill's real
// footprint to learn from:
//
//	go-gateway -order decode-first -flavor sglang -prefill http://127.0.0.1:30000/generate \
//	  -experts 128 -hidden-layers 48 -top-k 8 -decode ...
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"eldr.dev/eldr"
)

// parseLayers reads "2,3,5" (empty: nil).
func parseLayers(s string) ([]uint32, error) {
	if s == "" {
		return nil, nil
	}
	var out []uint32
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseUint(strings.TrimSpace(f), 10, 32)
		if err != nil {
			return nil, fmt.Errorf("-moe-layers: %q is not a layer index", f)
		}
		out = append(out, uint32(v))
	}
	return out, nil
}

func main() {
	listen := flag.String("listen", "127.0.0.1:8080", "address to serve /v1/completions and /healthz on")
	prefill := flag.String("prefill", "http://127.0.0.1:9000/v1/prefill", "prefill engine endpoint")
	decode := flag.String("decode", "http://127.0.0.1:9001/v1/decode",
		"decode endpoint; {worker} in it is replaced by the chosen worker id")
	instance := flag.String("instance", "default",
		`eldrd instance on this node; "" for none (route by the prefill engine's decision, or -nats)`)
	natsURLs := flag.String("nats", "", "route through an eldrd pool over NATS (needs -instance \"\")")
	poolName := flag.String("pool", "default", "with -nats: the eldrd pool")
	var natsAuth eldr.NatsAuth
	natsAuth.AddFlags(flag.CommandLine) // with -nats: TLS, credentials, inbox prefix
	decisionTimeout := flag.Duration("decision-timeout", time.Second, "longest wait for eldr's decision")
	upstreamTimeout := flag.Duration("upstream-timeout", 60*time.Second, "per-request prefill/decode timeout")
	openTimeout := flag.Duration("open-timeout", 5*time.Second, "how long to wait for eldrd at start")
	fallback := flag.Int("fallback-workers", 0,
		"when eldr has no decision, hash-route over this many workers (0: fail the request)")
	reportCompletion := flag.Bool("report-completion", false,
		"report decode completion to eldr (leave off when the decode engine reports it)")
	flavorName := flag.String("flavor", "eldr",
		"prefill engine: eldr (pushes footprints itself), sglang (/generate) or vllm (/v1/completions)")
	experts := flag.Uint("experts", 0, "sglang/vllm: experts per MoE layer of the model")
	hiddenLayers := flag.Uint("hidden-layers", 0, "sglang: the model's num_hidden_layers")
	topK := flag.Uint("top-k", 0, "sglang: experts per token and layer")
	moeLayers := flag.String("moe-layers", "",
		"sglang/vllm: comma-separated hidden layers that are MoE (empty: all)")
	modelName := flag.String("model", "default", "vllm: the model name sent in requests")
	orderName := flag.String("order", string(PrefillFirst),
		"prefill-first (route by the prefill's footprint) or decode-first (route by the prompt "+
			"before prefill; the table needs a predictor)")
	tablePath := flag.String("table", "",
		`route in this process with this cluster table (an embedded router; needs -instance "")`)
	flag.Parse()

	order, err := ParseOrder(*orderName)
	if err != nil {
		log.Fatal(err)
	}

	flavor, err := ParseFlavor(*flavorName)
	if err != nil {
		log.Fatal(err)
	}
	model := StockModel{Experts: uint32(*experts), HiddenLayers: uint32(*hiddenLayers),
		TopK: uint32(*topK), Name: *modelName}
	if model.MoELayers, err = parseLayers(*moeLayers); err != nil {
		log.Fatal(err)
	}
	if flavor != FlavorEldr && (model.Experts == 0 ||
		(flavor == FlavorSGLang && (model.HiddenLayers == 0 || model.TopK == 0))) {
		log.Fatal("-flavor sglang needs -experts, -hidden-layers and -top-k; vllm needs -experts")
	}

	logger := log.New(os.Stderr, "go-gateway: ", log.LstdFlags)
	var decisions Decisions
	var prompts PromptRouter
	where := "decisions from the prefill engine"
	switch {
	case (*natsURLs != "" || *tablePath != "") && *instance != "":
		log.Fatal(`-nats and -table need -instance "": the gateway asks one eldr`)
	case *natsURLs != "" && *tablePath != "":
		log.Fatal("-nats or -table, not both")
	case *tablePath != "":
		table, err := eldr.LoadTable(*tablePath)
		if err != nil {
			logger.Fatalf("table %s: %v", *tablePath, err)
		}
		router, err := eldr.NewRouter(table, eldr.DefaultRouterOptions())
		table.Close()
		if err != nil {
			logger.Fatalf("router over %s: %v", *tablePath, err)
		}
		defer router.Close()
		decisions, prompts = routerDecisions{router}, routerDecisions{router}
		where = "an embedded router over " + *tablePath
	case *natsURLs != "":
		pool, err := eldr.OpenPoolAuth(*natsURLs, *poolName, natsAuth, *openTimeout)
		if err != nil {
			logger.Fatalf("eldr pool %q at %s: %v", *poolName, *natsURLs, err)
		}
		defer pool.Close()
		decisions, prompts = poolDecisions{pool}, poolPrompts{pool}
		where = fmt.Sprintf("eldr pool %q", *poolName)
	case *instance != "":
		client, err := eldr.Open(*instance, &eldr.ClientOptions{OpenTimeout: *openTimeout})
		if err != nil {
			logger.Fatalf("eldr instance %q: %v", *instance, err)
		}
		defer client.Close()
		decisions, prompts = client, clientPrompts{client}
		where = fmt.Sprintf("eldr instance %q", *instance)
	case order == DecodeFirst:
		log.Fatal(`-order decode-first routes by the prompt: name an -instance, -nats or -table`)
	case flavor != FlavorEldr:
		log.Fatal(`-flavor sglang|vllm builds footprints for eldr to route: name an -instance or -nats`)
	}

	gw := &Gateway{
		Flavor: flavor, Model: model, PrefillURL: *prefill, DecodeURL: *decode, Eldr: decisions,
		HTTP: &http.Client{Timeout: *upstreamTimeout}, DecisionTimeout: *decisionTimeout,
		FallbackWorkers: *fallback, ReportCompletion: *reportCompletion, Log: logger,
		Order: order, Prompts: prompts,
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
	logger.Printf("listening on %s (%s, %s)", *listen, where, order)
	if err := server.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		logger.Fatal(err)
	}
}

// poolDecisions routes through any node of an eldrd pool (eldr.Pool). A pool
// has no decision to wait for: with FlavorEldr the prefill engine returns it.
type poolDecisions struct{ pool *eldr.Pool }

func (p poolDecisions) WaitContext(_ context.Context, requestID string) (eldr.Decision, error) {
	return eldr.Decision{}, fmt.Errorf("request %s: %w", requestID, errNoDecision)
}

func (p poolDecisions) RouteContext(ctx context.Context, requestID string, fp eldr.Footprint) (eldr.Decision, error) {
	return p.pool.RouteContext(ctx, requestID, fp)
}

func (p poolDecisions) Complete(requestID string, token uint64) error {
	return p.pool.Complete(requestID, token)
}
