package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"eldr.dev/eldr"
)

// Decode-first order: the decode worker from the prompt before prefill, then
// prefill and decode on the pair, and the prefill's real footprint handed to
// eldr to learn from. A prompt of task t uses the words of domain t; token-id
// prompts of task t are 60+t ids long (the fake stock engines pick the task
// from the prompt's length or words).

var domainWords = [tasks][3]string{
	{"integral", "derivative", "theorem"},
	{"function", "compile", "pointer"},
	{"court", "statute", "plaintiff"},
	{"patient", "dose", "diagnosis"},
}

func taskText(task, variant int) string {
	w := domainWords[task]
	return fmt.Sprintf("You are a helpful assistant. %s %s %s %s please %d",
		w[variant%3], w[(variant+1)%3], w[(variant+2)%3], w[variant%3], variant)
}

// textTask is the task whose words a prompt uses (the fake engines' view).
func textTask(text string) uint32 {
	for task, words := range domainWords {
		if strings.Contains(text, words[0]) || strings.Contains(text, words[1]) {
			return uint32(task)
		}
	}
	return 0
}

func taskIDs(task, variant int) []int64 {
	ids := make([]int64, 60+task)
	for i := range ids {
		ids[i] = int64(1000*(task+1) + (i*7+variant)%40)
	}
	return ids
}

// taskTable is a table fitted on the task workload for 4 workers.
func taskTable(t *testing.T) *eldr.Table {
	t.Helper()
	var prefill []int16
	for i := 0; i < 120; i++ {
		prefill = append(prefill, taskFootprint(uint32(i%tasks), uint64(i+1)).Counts...)
	}
	table, err := eldr.FitTable(eldr.Calibration{Prefill: prefill, N: 120, Layers: layers,
		Experts: experts, TopK: topK}, eldr.FitOptions{NumWorkers: 4, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { table.Close() })
	return table
}

// predictorTable is taskTable with a predictor fitted on 6 text and 6
// token-id prompts per task of tasksKnown tasks.
func predictorTable(t *testing.T, tasksKnown int) *eldr.Table {
	t.Helper()
	table := taskTable(t)
	var prompts []eldr.Prompt
	var footprints []int16
	for task := 0; task < tasksKnown; task++ {
		for v := 0; v < 6; v++ {
			ids := taskIDs(task, v)
			tokens := make([]uint32, len(ids))
			for i, id := range ids {
				tokens[i] = uint32(id)
			}
			prompts = append(prompts, eldr.TextPrompt(taskText(task, v)), eldr.TokensPrompt(tokens))
			fp := taskFootprint(uint32(task), uint64(100+v)).Counts
			footprints = append(append(footprints, fp...), fp...)
		}
	}
	out, _, err := table.FitPredictor(prompts, footprints, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { out.Close() })
	return out
}

// bestWorker is the worker the table routes task's footprints to.
func bestWorker(t *testing.T, table *eldr.Table, task int) int32 {
	t.Helper()
	scores, err := table.Scores(taskFootprint(uint32(task), 999))
	if err != nil {
		t.Fatal(err)
	}
	best := 0
	for i := range scores {
		if scores[i] > scores[best] {
			best = i
		}
	}
	ids, _ := table.WorkerIDs()
	return ids[best]
}

// embedded is a router over table, as -table gives the gateway.
func embedded(t *testing.T, table *eldr.Table) (*eldr.Router, routerDecisions) {
	t.Helper()
	r, err := eldr.NewRouter(table, eldr.RouterOptions{Policy: eldr.PolicyEldr, Tau: 0})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r, routerDecisions{r}
}

func inFlight(t *testing.T, r *eldr.Router) uint32 {
	t.Helper()
	slots, err := r.Workers()
	if err != nil {
		t.Fatal(err)
	}
	var n uint32
	for _, s := range slots {
		n += s.InFlight
	}
	return n
}

func TestParseOrder(t *testing.T) {
	for _, s := range []string{"prefill-first", "decode-first"} {
		if o, err := ParseOrder(s); err != nil || string(o) != s {
			t.Fatalf("%s: %v %v", s, o, err)
		}
	}
	if _, err := ParseOrder("decode"); err == nil {
		t.Fatal("ParseOrder accepted an unknown order")
	}
}

// With a stock engine and the embedded router (-table): the worker picked
// from the prompt is the one its task's footprints go to, decode runs there,
// the engine's real footprint is learned, and nothing stays in flight.
func TestDecodeFirstRoutesByThePromptAndLearnsTheRealFootprint(t *testing.T) {
	table := predictorTable(t, tasks)
	engines := newFakeEngines(t, nil) // its decode server
	for _, flavor := range []Flavor{FlavorSGLang, FlavorVLLM} {
		router, prompts := embedded(t, table)
		engine := newStockEngine(t, flavor)
		gw := stockGateway(t, flavor, engine, engines.decode.URL+"/v1/decode?worker={worker}",
			prompts, 0)
		gw.Order, gw.Prompts = DecodeFirst, prompts
		server := httptest.NewServer(gw)
		n := 0
		for task := 0; task < tasks; task++ {
			ids, _ := json.Marshal(taskIDs(task, 9))
			for i, body := range []string{
				fmt.Sprintf(`{"request_id":"df-%s-%d-text","prompt":%q,"max_tokens":4}`,
					flavor, task, taskText(task, 7)),
				fmt.Sprintf(`{"request_id":"df-%s-%d-ids","prompt_tokens":%s,"max_tokens":4}`,
					flavor, task, ids),
			} {
				code, out := post(t, server.URL, body)
				want := bestWorker(t, table, task)
				if code != http.StatusOK || out["order"] != "decode-first" || out["routed_by"] != "eldr" ||
					out["worker"].(float64) != float64(want) || out["learned"] != true ||
					out["confidence"].(float64) <= 0.5 {
					t.Fatalf("%s task %d prompt %d: %d %v (want worker %d)", flavor, task, i, code, out, want)
				}
				engines.mu.Lock()
				decoded := engines.decodedOn[out["request_id"].(string)]
				engines.mu.Unlock()
				if decoded != want {
					t.Fatalf("decoded on %d, want %d", decoded, want)
				}
				n++
			}
		}
		st, err := router.PromptStats()
		if err != nil || st.Routed != uint64(n) || st.Learned != uint64(n) || st.LearnRejected != 0 {
			t.Fatalf("%s: prompt stats %+v, %v (%d requests)", flavor, st, err, n)
		}
		if f := inFlight(t, router); f != 0 {
			t.Fatalf("%s: %d requests still in flight", flavor, f)
		}
		server.Close()
	}
}

// A task the predictor never saw is routed unsure; the real footprints the
// gateway hands back teach it, and its prompts then reach their worker.
func TestDecodeFirstLearnsANewDomain(t *testing.T) {
	table := predictorTable(t, tasks-1) // no prompts of the last task
	engines := newFakeEngines(t, nil)
	router, prompts := embedded(t, table)
	engine := newStockEngine(t, FlavorSGLang)
	gw := stockGateway(t, FlavorSGLang, engine, engines.decode.URL+"/v1/decode?worker={worker}",
		prompts, 0)
	gw.Order, gw.Prompts = DecodeFirst, prompts
	server := httptest.NewServer(gw)
	defer server.Close()
	last := tasks - 1
	send := func(id string, v int) map[string]interface{} {
		code, out := post(t, server.URL, fmt.Sprintf(`{"request_id":%q,"prompt":%q,"max_tokens":4}`,
			id, taskText(last, v)))
		if code != http.StatusOK {
			t.Fatalf("%s: %d %v", id, code, out)
		}
		return out
	}
	before := send("new-before", 40)
	for v := 0; v < 8; v++ {
		send(fmt.Sprintf("new-%d", v), v)
	}
	after := send("new-after", 40)
	if after["worker"].(float64) != float64(bestWorker(t, table, last)) ||
		after["confidence"].(float64) <= before["confidence"].(float64) {
		t.Fatalf("before %v, after %v", before, after)
	}
	if st, _ := router.PromptStats(); st.Learned != 10 {
		t.Fatalf("learned %d, want 10", st.Learned)
	}
}

// The eldr-flavored prefill engine is told its decode peer and pushes the
// real footprint itself; the gateway routes through eldrd (Client.RoutePromptContext).
func TestDecodeFirstThroughEldrd(t *testing.T) {
	table := predictorTable(t, tasks)
	path := filepath.Join(t.TempDir(), "predictor.eldr")
	if err := table.Save(path); err != nil {
		t.Fatal(err)
	}
	// The paper's rule: each domain's worker wins while loads are equal.
	instance := startEldrdWith(t, path, "--policy", "eldr")
	engineClient, err := eldr.Open(instance, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer engineClient.Close()
	gatewayClient, err := eldr.Open(instance, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer gatewayClient.Close()
	engines := newFakeEngines(t, engineClient)
	gw := newGateway(engines, gatewayClient)
	gw.Order, gw.Prompts, gw.ReportCompletion = DecodeFirst, clientPrompts{gatewayClient}, true
	server := httptest.NewServer(gw)
	defer server.Close()
	for task := 0; task < tasks; task++ {
		id := fmt.Sprintf("dfe-%d", task)
		code, out := post(t, server.URL, fmt.Sprintf(`{"request_id":%q,"prompt":%q,"max_tokens":4}`,
			id, taskText(task, 3)))
		want := bestWorker(t, table, task)
		if code != http.StatusOK || out["worker"].(float64) != float64(want) || out["order"] != "decode-first" {
			t.Fatalf("task %d: %d %v (want worker %d)", task, code, out, want)
		}
		engines.mu.Lock()
		peer, decoded := engines.decodePeer[id], engines.decodedOn[id]
		engines.mu.Unlock()
		if peer != want || decoded != want {
			t.Fatalf("prefill was told worker %d, decode ran on %d, want %d", peer, decoded, want)
		}
	}
	// A daemon table without a predictor: eldr cannot route from the prompt.
	plain := startEldrd(t)
	c, err := eldr.Open(plain, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	gw.Prompts = clientPrompts{c}
	code, out := post(t, server.URL, fmt.Sprintf(`{"prompt":%q,"max_tokens":4}`, taskText(0, 1)))
	if code != http.StatusServiceUnavailable || !strings.Contains(out["error"].(string), "UNSUPPORTED") {
		t.Fatalf("no predictor: %d %v", code, out)
	}
}

func TestDecodeFirstBadRequestsAndFailures(t *testing.T) {
	table := predictorTable(t, tasks)
	engines := newFakeEngines(t, nil)
	engines.push = false
	router, prompts := embedded(t, table)
	gw := newGateway(engines, refuse{t})
	gw.Order, gw.Prompts = DecodeFirst, prompts
	server := httptest.NewServer(gw)
	defer server.Close()
	for _, body := range []string{
		`{"max_tokens":4}`,                             // no prompt at all
		`{"prompt_tokens":12,"max_tokens":4}`,          // a count is no prompt
		`{"prompt_tokens":[1,1048576],"max_tokens":4}`, // an id past the vocabulary
		`{"prompt_tokens":[],"max_tokens":4}`,          // no token
		`{"prompt_tokens":[-1],"max_tokens":4}`,        // not a token id
	} {
		if code, out := post(t, server.URL, body); code != http.StatusBadRequest {
			t.Fatalf("%s: %d %v", body, code, out)
		}
	}
	// The eldr-flavored engine gets the prompt's word count and its decode peer.
	code, out := post(t, server.URL, fmt.Sprintf(`{"request_id":"ok-1","prompt":%q,"max_tokens":4}`,
		taskText(2, 1)))
	engines.mu.Lock()
	peer := engines.decodePeer["ok-1"]
	engines.mu.Unlock()
	if code != http.StatusOK || out["worker"].(float64) != float64(peer) || out["learned"] == true {
		t.Fatalf("%d %v, prefill told worker %d", code, out, peer)
	}
	// A failed prefill releases the worker eldr picked.
	engines.prefillStatus = http.StatusServiceUnavailable
	if code, out := post(t, server.URL, fmt.Sprintf(`{"prompt":%q,"max_tokens":4}`, taskText(1, 1))); code != http.StatusBadGateway {
		t.Fatalf("prefill down: %d %v", code, out)
	}
	if f := inFlight(t, router); f != 0 {
		t.Fatalf("%d requests in flight after a failed prefill", f)
	}
	engines.prefillStatus = http.StatusOK
	// No predictor: 503, or the fallback route.
	_, gw.Prompts = embedded(t, taskTable(t))
	if code, out := post(t, server.URL, fmt.Sprintf(`{"prompt":%q,"max_tokens":4}`, taskText(1, 1))); code != http.StatusServiceUnavailable {
		t.Fatalf("no predictor: %d %v", code, out)
	}
	gw.FallbackWorkers = 4
	code, out = post(t, server.URL, fmt.Sprintf(`{"request_id":"fb-1","prompt":%q,"max_tokens":4}`, taskText(1, 1)))
	if code != http.StatusOK || out["routed_by"] != "fallback" {
		t.Fatalf("fallback: %d %v", code, out)
	}
	// No eldr to route from the prompt at all.
	gw.FallbackWorkers, gw.Prompts = 0, nil
	if code, out := post(t, server.URL, fmt.Sprintf(`{"prompt":%q,"max_tokens":4}`, taskText(1, 1))); code != http.StatusBadGateway {
		t.Fatalf("no prompt router: %d %v", code, out)
	}
}
