package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"eldr.dev/eldr"
)

// The example is self-contained, so it carries its own small test workload:
// footprints of 4 tasks, each preferring its own slice of 32 experts.
const (
	layers, experts, topK, tasks = 8, 32, 2, 4
)

func taskFootprint(task uint32, seed uint64) eldr.Footprint {
	x := seed*0x9E3779B97F4A7C15 | 1
	next := func(n uint32) uint32 {
		x ^= x >> 12
		x ^= x << 25
		x ^= x >> 27
		return uint32((x * 0x2545F4914F6CDD1D) % uint64(n))
	}
	slice := uint32(experts / tasks)
	counts := make([]int16, layers*experts)
	for l := uint32(0); l < layers; l++ {
		for t := 0; t < 64; t++ {
			first := int32(-1)
			for k := 0; k < topK; k++ {
				for {
					e := next(experts)
					if next(100) < 85 {
						e = task*slice + next(slice)
					}
					if int32(e) != first {
						first = int32(e)
						counts[l*experts+e]++
						break
					}
				}
			}
		}
	}
	return eldr.Footprint{Counts: counts, Layers: layers, Experts: experts}
}

// startEldrd runs a private eldrd ($ELDRD, set by ctest) with a table fitted
// on the task workload; the test is skipped only when the binary is absent.
// extra: more command-line arguments (a pool's); "--metrics-port" among them
// replaces the default 0.
func startEldrd(t *testing.T, extra ...string) string {
	t.Helper()
	bin := os.Getenv("ELDRD")
	if _, err := os.Stat(bin); bin == "" || err != nil {
		t.Skip("eldrd not built ($ELDRD unset or missing)")
	}
	var prefill []int16
	for i := 0; i < 120; i++ {
		prefill = append(prefill, taskFootprint(uint32(i%tasks), uint64(i+1)).Counts...)
	}
	table, err := eldr.FitTable(eldr.Calibration{Prefill: prefill, N: 120, Layers: layers,
		Experts: experts, TopK: topK}, eldr.FitOptions{NumWorkers: 4, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "table.eldr")
	if err := table.Save(path); err != nil {
		t.Fatal(err)
	}
	table.Close()
	return startEldrdWith(t, path, extra...)
}

// startEldrdWith runs a private eldrd with the table file at path.
func startEldrdWith(t *testing.T, path string, extra ...string) string {
	t.Helper()
	bin := os.Getenv("ELDRD")
	if _, err := os.Stat(bin); bin == "" || err != nil {
		t.Skip("eldrd not built ($ELDRD unset or missing)")
	}
	instance := fmt.Sprintf("gw-%d-%d", os.Getpid(), time.Now().UnixNano()%1000000)
	args := []string{"--instance", instance, "--table", path, "--log-level", "warn"}
	if !containsArg(extra, "--metrics-port") {
		args = append(args, "--metrics-port", "0")
	}
	cmd := exec.Command(bin, append(args, extra...)...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	c, err := eldr.Open(instance, &eldr.ClientOptions{OpenTimeout: 20 * time.Second})
	if err != nil {
		t.Fatalf("eldrd not ready: %v", err)
	}
	c.Close()
	return instance
}

func containsArg(args []string, name string) bool {
	for _, a := range args {
		if a == name {
			return true
		}
	}
	return false
}

// fakeEngines are emulated prefill and decode servers with the API of
// examples/python-engine: prefill pushes the request's footprint to eldr
// (task = prompt_tokens mod 4), as a real prefill engine does; decode records
// which worker each request reached.
type fakeEngines struct {
	prefill, decode *httptest.Server
	push            bool // false: prefill "forgets" to push
	mu              sync.Mutex
	decodedOn       map[string]int32
	decodePeer      map[string]int32 // decode-first: the worker prefill was told
	prefillStatus   int
}

func newFakeEngines(t *testing.T, client *eldr.Client) *fakeEngines {
	f := &fakeEngines{push: true, decodedOn: map[string]int32{}, decodePeer: map[string]int32{},
		prefillStatus: http.StatusOK}
	f.prefill = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			RequestID    string `json:"request_id"`
			PromptTokens uint32 `json:"prompt_tokens"`
			Prompt       string `json:"prompt"`
			DecodeWorker *int32 `json:"decode_worker"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.PromptTokens == 0 {
			http.Error(w, "bad prefill request", http.StatusBadRequest)
			return
		}
		task := req.PromptTokens % tasks
		if req.Prompt != "" { // decode-first: the prompt's words name its task
			task = textTask(req.Prompt)
		}
		f.mu.Lock()
		if req.DecodeWorker != nil {
			f.decodePeer[req.RequestID] = *req.DecodeWorker
		}
		f.mu.Unlock()
		if f.prefillStatus != http.StatusOK {
			http.Error(w, "engine overloaded", f.prefillStatus)
			return
		}
		if f.push {
			fp := taskFootprint(task, uint64(len(req.RequestID)))
			if err := client.Push(req.RequestID, fp); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
		}
		_ = json.NewEncoder(w).Encode(map[string]interface{}{
			"request_id": req.RequestID, "tokens": req.PromptTokens})
	}))
	f.decode = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req decodeRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, "bad decode request", http.StatusBadRequest)
			return
		}
		if r.URL.Query().Get("worker") != fmt.Sprint(req.Worker) {
			http.Error(w, "URL and body name different workers", http.StatusBadRequest)
			return
		}
		f.mu.Lock()
		f.decodedOn[req.RequestID] = req.Worker
		f.mu.Unlock()
		_ = json.NewEncoder(w).Encode(decodeResponse{RequestID: req.RequestID, Worker: req.Worker,
			Text: fmt.Sprintf("%d tokens from worker %d", req.MaxTokens, req.Worker)})
	}))
	t.Cleanup(func() { f.prefill.Close(); f.decode.Close() })
	return f
}

func newGateway(f *fakeEngines, d Decisions) *Gateway {
	return &Gateway{PrefillURL: f.prefill.URL + "/v1/prefill",
		DecodeURL: f.decode.URL + "/v1/decode?worker={worker}", Eldr: d,
		HTTP: &http.Client{Timeout: 10 * time.Second}, DecisionTimeout: 5 * time.Second}
}

func post(t *testing.T, url, body string) (int, map[string]interface{}) {
	t.Helper()
	resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var out map[string]interface{}
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatalf("answer %d is not JSON: %q", resp.StatusCode, data)
	}
	return resp.StatusCode, out
}

func TestCompletionsAreDecodedOnEldrsWorker(t *testing.T) {
	instance := startEldrd(t)
	engine, err := eldr.Open(instance, nil) // the prefill engine's client
	if err != nil {
		t.Fatal(err)
	}
	defer engine.Close()
	gatewayClient, err := eldr.Open(instance, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer gatewayClient.Close()
	engines := newFakeEngines(t, engine)
	gw := newGateway(engines, gatewayClient)
	gw.ReportCompletion = true
	server := httptest.NewServer(gw)
	defer server.Close()

	for i := 0; i < 12; i++ {
		task := i % tasks
		id := fmt.Sprintf("gw-test-%d", i)
		code, out := post(t, server.URL, fmt.Sprintf(
			`{"request_id":%q,"prompt_tokens":%d,"max_tokens":16}`, id, 100+task))
		if code != http.StatusOK {
			t.Fatalf("request %d: %d %v", i, code, out)
		}
		worker := out["worker"].(float64)
		engines.mu.Lock()
		decoded, ok := engines.decodedOn[id]
		engines.mu.Unlock()
		if !ok || float64(decoded) != worker {
			t.Fatalf("gateway says worker %v, decode saw %v (%v)", worker, decoded, ok)
		}
		if out["routed_by"] != "eldr" || out["similarity"].(float64) <= 0 ||
			out["band_size"].(float64) < 1 || out["prefill_tokens"].(float64) != float64(100+task) ||
			out["text"] != fmt.Sprintf("16 tokens from worker %d", int(worker)) {
			t.Fatalf("answer %v", out)
		}
	}

	// No request id: the gateway makes one.
	code, out := post(t, server.URL, `{"prompt_tokens":2,"max_tokens":4}`)
	if code != http.StatusOK || !strings.HasPrefix(out["request_id"].(string), "gw-") {
		t.Fatalf("%d %v", code, out)
	}
}

func TestNoDecisionIsAGatewayTimeoutOrAFallback(t *testing.T) {
	instance := startEldrd(t)
	client, err := eldr.Open(instance, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	engines := newFakeEngines(t, client)
	engines.push = false // eldr never hears of these requests
	gw := newGateway(engines, client)
	gw.DecisionTimeout = 50 * time.Millisecond
	server := httptest.NewServer(gw)
	defer server.Close()
	code, out := post(t, server.URL, `{"request_id":"lost-1","prompt_tokens":1,"max_tokens":4}`)
	if code != http.StatusGatewayTimeout {
		t.Fatalf("%d %v", code, out)
	}
	gw.FallbackWorkers = 4
	code, out = post(t, server.URL, `{"request_id":"lost-2","prompt_tokens":1,"max_tokens":4}`)
	if code != http.StatusOK || out["routed_by"] != "fallback" ||
		out["worker"].(float64) != float64(fallbackWorker("lost-2", 4)) {
		t.Fatalf("%d %v", code, out)
	}
}

// refuse is a Decisions that fails the test when the gateway asks it: the
// requests below must be rejected before eldr is involved.
type refuse struct{ t *testing.T }

func (r refuse) WaitContext(_ context.Context, id string) (eldr.Decision, error) {
	r.t.Errorf("eldr asked about %q", id)
	return eldr.Decision{}, eldr.ErrInternal
}
func (r refuse) RouteContext(_ context.Context, id string, _ eldr.Footprint) (eldr.Decision, error) {
	r.t.Errorf("eldr asked to route %q", id)
	return eldr.Decision{}, eldr.ErrInternal
}
func (r refuse) Complete(id string, _ uint64) error {
	r.t.Errorf("eldr completion for %q", id)
	return nil
}

func TestBadRequestsAndUpstreamFailures(t *testing.T) {
	engines := newFakeEngines(t, nil)
	engines.push = false
	gw := newGateway(engines, refuse{t})
	server := httptest.NewServer(gw)
	defer server.Close()

	for _, body := range []string{
		`not json`,
		`{"prompt_tokens":1,"max_tokens":4,"surprise":1}`,
		`{"max_tokens":4}`,
		`{"prompt_tokens":1,"max_tokens":0}`,
		fmt.Sprintf(`{"request_id":%q,"prompt_tokens":1,"max_tokens":4}`, strings.Repeat("x", 129)),
	} {
		if code, out := post(t, server.URL, body); code != http.StatusBadRequest || out["error"] == "" {
			t.Fatalf("%s: %d %v", body, code, out)
		}
	}
	engines.prefillStatus = http.StatusServiceUnavailable
	code, out := post(t, server.URL, `{"prompt_tokens":1,"max_tokens":4}`)
	if code != http.StatusBadGateway || !strings.Contains(out["error"].(string), "engine overloaded") {
		t.Fatalf("%d %v", code, out)
	}

	resp, err := http.Get(server.URL + "/v1/completions")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET: %d", resp.StatusCode)
	}
	resp, err = http.Get(server.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	var health map[string]interface{}
	_ = json.NewDecoder(resp.Body).Decode(&health)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || health["status"] != "ok" || health["failed"].(float64) != 6 {
		t.Fatalf("healthz: %d %v", resp.StatusCode, health)
	}
	if _, err := http.Post(server.URL+"/nope", "application/json", bytes.NewReader(nil)); err != nil {
		t.Fatal(err)
	}
}
