package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"eldr.dev/eldr"
)

// A gateway on a node without eldrd, in front of a pool of two eldrd nodes:
// the prefill engine (on node a) returns eldr's decision with its answer, the
// gateway routes by it, and the decode engine (on node b) completes through
// its own node, which forwards the complete to the node that routed it.

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startNATS runs a nats-server on a free loopback port; skips the test when
// nats-server is not installed.
func startNATS(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		if bin = "/usr/sbin/nats-server"; fileMissing(bin) {
			t.Skip("nats-server is not installed (scripts/install-deps.sh installs it)")
		}
	}
	port := freePort(t)
	cmd := exec.Command(bin, "-a", "127.0.0.1", "-p", fmt.Sprint(port), "-js", "-sd", t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatalf("start nats-server: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	return fmt.Sprintf("nats://127.0.0.1:%d", port)
}

func fileMissing(path string) bool {
	_, err := os.Stat(path)
	return err != nil
}

// metric sums the samples of one metric family of an eldrd's /metrics.
func metric(t *testing.T, port int, name string) float64 {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	defer resp.Body.Close()
	sum := 0.0
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() {
		line := lines.Text()
		rest := strings.TrimPrefix(line, name)
		if rest == line || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		v, err := strconv.ParseFloat(rest[strings.LastIndexByte(rest, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		sum += v
	}
	return sum
}

// eventually polls cond for up to 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10 s: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestAGatewayWithoutEldrdRoutesByThePrefillEnginesDecision(t *testing.T) {
	url := startNATS(t)
	pool := fmt.Sprintf("gw%d", os.Getpid())
	portA, portB := freePort(t), freePort(t)
	nodeA := startEldrd(t, "--nats", url, "--node", "a", "--pool", pool, "--metrics-port", fmt.Sprint(portA))
	nodeB := startEldrd(t, "--nats", url, "--node", "b", "--pool", pool, "--metrics-port", fmt.Sprint(portB))
	eventually(t, "the nodes hear of each other", func() bool {
		return metric(t, portA, "eldr_pool_peers") == 1 && metric(t, portB, "eldr_pool_peers") == 1
	})
	prefillNode, err := eldr.Open(nodeA, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer prefillNode.Close()
	decodeNode, err := eldr.Open(nodeB, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer decodeNode.Close()

	// The prefill engine routes the footprint through its node and returns
	// the decision; the decode engine completes with the decision's token.
	decided := map[string]eldr.Decision{}
	prefill := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			RequestID    string `json:"request_id"`
			PromptTokens uint32 `json:"prompt_tokens"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		d, err := prefillNode.Route(req.RequestID, taskFootprint(req.PromptTokens%tasks, 1), time.Second)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		decided[req.RequestID] = d // one request at a time below
		_ = json.NewEncoder(w).Encode(map[string]interface{}{
			"request_id": req.RequestID, "tokens": req.PromptTokens,
			"decision": map[string]interface{}{"worker": d.Worker, "similarity": d.Similarity,
				"band_size": d.BandSize, "table_epoch": d.TableEpoch,
				"completion_token": d.CompletionToken}})
	}))
	defer prefill.Close()
	decode := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req decodeRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		if err := decodeNode.Complete(req.RequestID, req.CompletionToken); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		_ = json.NewEncoder(w).Encode(decodeResponse{RequestID: req.RequestID, Worker: req.Worker})
	}))
	defer decode.Close()
	gw := &Gateway{PrefillURL: prefill.URL, DecodeURL: decode.URL, Eldr: nil,
		HTTP: &http.Client{Timeout: 10 * time.Second}, DecisionTimeout: time.Second}
	server := httptest.NewServer(gw)
	defer server.Close()

	const requests = 12
	for i := 0; i < requests; i++ {
		id := fmt.Sprintf("pool-gw-%d", i)
		code, body := post(t, server.URL,
			fmt.Sprintf(`{"request_id":%q,"prompt_tokens":%d,"max_tokens":4}`, id, 16+i))
		if code != http.StatusOK {
			t.Fatalf("%s: %d %v", id, code, body)
		}
		if body["decided_by"] != "prefill" || int32(body["worker"].(float64)) != decided[id].Worker ||
			uint64(body["table_epoch"].(float64)) != decided[id].TableEpoch {
			t.Fatalf("%s: answered %v, the prefill engine decided %+v", id, body, decided[id])
		}
	}
	// Node b held none of them: it sent each complete to node a, which its
	// token names (not to every node), and a, which routed them, released
	// every one (so did b's view of a's bookings).
	eventually(t, "every request released on both nodes", func() bool {
		return metric(t, portB, "eldr_pool_completes_direct_total") == requests &&
			metric(t, portB, "eldr_pool_completes_forwarded_total") == 0 &&
			metric(t, portA, "eldr_pool_completes_received_total") == requests &&
			metric(t, portA, "eldr_worker_inflight") == 0 && metric(t, portB, "eldr_worker_inflight") == 0
	})
	// A forged token changes nothing anywhere.
	if _, err := prefillNode.Route("pool-gw-forged", taskFootprint(1, 1), time.Second); err != nil {
		t.Fatal(err)
	}
	if err := decodeNode.Complete("pool-gw-forged", 12345); err != nil {
		t.Fatal(err)
	}
	// A token that names no node goes to every node.
	eventually(t, "the forged complete forwarded", func() bool {
		return metric(t, portB, "eldr_pool_completes_forwarded_total") == 1
	})
	time.Sleep(300 * time.Millisecond)
	if got := metric(t, portA, "eldr_worker_inflight"); got != 1 {
		t.Fatalf("a forged token released a request: in flight %v, want 1", got)
	}
	if got := metric(t, portA, "eldr_pool_completes_received_total"); got != requests {
		t.Fatalf("completes from the pool %v, want %d", got, requests)
	}
}

func TestAPrefillDecisionWithoutWorkerOrTokenIsABadGateway(t *testing.T) {
	for _, decision := range []string{`{"completion_token":7}`, `{"worker":-1,"completion_token":7}`,
		`{"worker":2}`} {
		prefill := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, `{"request_id":"x","tokens":1,"decision":%s}`, decision)
		}))
		gw := &Gateway{PrefillURL: prefill.URL, DecodeURL: "http://127.0.0.1:1/unused",
			HTTP: &http.Client{Timeout: 5 * time.Second}, DecisionTimeout: time.Second}
		server := httptest.NewServer(gw)
		code, body := post(t, server.URL, `{"prompt_tokens":3,"max_tokens":1}`)
		server.Close()
		prefill.Close()
		if code != http.StatusBadGateway || !strings.Contains(fmt.Sprint(body["error"]), "decision") {
			t.Fatalf("decision %s: %d %v, want 502 naming the decision", decision, code, body)
		}
	}
	// No decision in the answer and no eldrd of its own: 502 that says so.
	prefill := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"request_id":"x","tokens":1}`)
	}))
	defer prefill.Close()
	server := httptest.NewServer(&Gateway{PrefillURL: prefill.URL, DecodeURL: "http://127.0.0.1:1/",
		HTTP: &http.Client{Timeout: 5 * time.Second}, DecisionTimeout: time.Second})
	defer server.Close()
	code, body := post(t, server.URL, `{"prompt_tokens":3,"max_tokens":1}`)
	if code != http.StatusBadGateway || !strings.Contains(fmt.Sprint(body["error"]), "no eldr decision") {
		t.Fatalf("%d %v, want 502 naming the missing decision", code, body)
	}
}
