// Package enginesim emulates a vLLM or SGLang model server as the picker
// sees one: the OpenAI completions and chat completions routes (and SGLang's
// /generate), streamed (server-sent events) or not, and a Prometheus
// /metrics page with the engine's own metric names whose counts are the
// requests it really holds. For the picker's tests, demo and benchmark;
// it generates no text worth reading.
package enginesim

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Engine is one emulated server.
type Engine struct {
	Kind       string        // "vllm" or "sglang"
	Tokens     int           // output tokens per request
	TokenDelay time.Duration // between tokens

	running    atomic.Int64
	served     atomic.Int64
	metricsOff atomic.Bool
	mu         sync.Mutex
	prefillers map[string]int // x-prefiller-host-port values seen
	srv        *http.Server
	lis        net.Listener
}

// Start serves on a loopback port.
func Start(kind string, tokens int, delay time.Duration) (*Engine, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	e := &Engine{Kind: kind, Tokens: tokens, TokenDelay: delay, lis: lis, prefillers: map[string]int{}}
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/completions", e.generate)
	mux.HandleFunc("/v1/chat/completions", e.generate)
	mux.HandleFunc("/generate", e.generate)
	mux.HandleFunc("/metrics", e.metrics)
	e.srv = &http.Server{Handler: mux}
	go e.srv.Serve(lis)
	return e, nil
}

// Address is "ip:port".
func (e *Engine) Address() string { return e.lis.Addr().String() }

// Running is the requests it holds now.
func (e *Engine) Running() int64 { return e.running.Load() }

// Served is the requests it finished or had cut.
func (e *Engine) Served() int64 { return e.served.Load() }

// Prefillers: how often each prefill endpoint was named to it.
func (e *Engine) Prefillers() map[string]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[string]int{}
	for k, v := range e.prefillers {
		out[k] = v
	}
	return out
}

// FailMetrics makes /metrics answer 500 (an engine going unhealthy).
func (e *Engine) FailMetrics(fail bool) { e.metricsOff.Store(fail) }

// Close stops it; open responses are cut.
func (e *Engine) Close() { e.srv.Close() }

func (e *Engine) generate(w http.ResponseWriter, r *http.Request) {
	e.running.Add(1)
	defer e.running.Add(-1)
	defer e.served.Add(1)
	if p := r.Header.Get("x-prefiller-host-port"); p != "" {
		e.mu.Lock()
		e.prefillers[p]++
		e.mu.Unlock()
	}
	var req struct {
		Stream bool `json:"stream"`
	}
	body, _ := io.ReadAll(r.Body)
	if json.Unmarshal(body, &req) != nil {
		http.Error(w, `{"error":"bad json"}`, http.StatusBadRequest)
		return
	}
	if !req.Stream {
		for i := 0; i < e.Tokens; i++ {
			select {
			case <-r.Context().Done():
				return
			case <-time.After(e.TokenDelay):
			}
		}
		w.Header().Set("content-type", "application/json")
		fmt.Fprintf(w, `{"object":"text_completion","choices":[{"index":0,"text":"%s","finish_reason":"length"}],"usage":{"completion_tokens":%d}}`,
			e.Kind, e.Tokens)
		return
	}
	w.Header().Set("content-type", "text/event-stream")
	f, _ := w.(http.Flusher)
	for i := 0; i < e.Tokens; i++ {
		select {
		case <-r.Context().Done():
			return
		case <-time.After(e.TokenDelay):
		}
		fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"text\":\"t%d\"}]}\n\n", i)
		if f != nil {
			f.Flush()
		}
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

func (e *Engine) metrics(w http.ResponseWriter, _ *http.Request) {
	if e.metricsOff.Load() {
		http.Error(w, "unhealthy", http.StatusInternalServerError)
		return
	}
	n := e.running.Load()
	w.Header().Set("content-type", "text/plain; version=0.0.4")
	switch e.Kind {
	case "sglang":
		fmt.Fprintf(w, "# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{model_name=\"m\"} %d\n", n)
		fmt.Fprintf(w, "# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs{model_name=\"m\"} 0\n")
		fmt.Fprintf(w, "# TYPE sglang:token_usage gauge\nsglang:token_usage{model_name=\"m\"} %g\n", float64(n)/100)
	default:
		fmt.Fprintf(w, "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\",engine=\"0\"} %d\n", n)
		fmt.Fprintf(w, "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"m\",engine=\"0\"} 0\n")
		fmt.Fprintf(w, "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{model_name=\"m\",engine=\"0\"} %g\n", float64(n)/100)
	}
}
