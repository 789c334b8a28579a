package main

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"eldr.dev/eldr"
	"eldr.dev/eldr/epp/internal/envoysim"
)

// Requests of a task share a worker (its experts), whichever engine flavor
// and API they come by, while the load stays even; each holds its pick until
// its response ends.
func TestPicksByPromptAcrossVLLMAndSGLang(t *testing.T) {
	h := newHarness(t, decodeEngines(4), nil)
	h.routerReady()
	r := synthRNG(11)
	byTask := map[int]map[string]int{}
	paths := []string{"/v1/completions", "/v1/chat/completions", "/generate"}
	var held []*envoysim.Result
	for i := 0; i < 48; i++ {
		task := i % synthTasks
		var body []byte
		switch path := paths[i%3]; path {
		case "/v1/chat/completions":
			body = []byte(`{"model":"synth-moe","messages":[{"role":"system","content":"be brief"},` +
				`{"role":"user","content":[{"type":"text","text":` + strconv.Quote(synthText(&r, task)) + `}]}]}`)
		case "/generate":
			body = []byte(`{"model":"synth-moe","text":` + strconv.Quote(synthText(&r, task)) + `}`)
		default:
			body = synthBody(&r, task, 200, false)
		}
		res := h.do(envoysim.Request{Path: paths[i%3], Body: body, Forward: true, HoldResponse: true})
		if res.Immediate != nil {
			t.Fatalf("request %d refused: %d %s", i, res.Immediate.GetStatus().GetCode(), res.Immediate.GetBody())
		}
		if !bytes.Equal(res.Body, body) {
			t.Fatalf("request %d: the body streamed back differs", i)
		}
		if res.Metadata != strings.Join(res.Destination, ",") || len(res.Destination) != 3 {
			t.Fatalf("header %v and metadata %q differ, or not 1 pick + 2 fallbacks", res.Destination, res.Metadata)
		}
		if byTask[task] == nil {
			byTask[task] = map[string]int{}
		}
		byTask[task][res.Destination[0]]++
		held = append(held, res)
	}
	if got := h.metric("eldr_epp_inflight_requests"); got != 48 {
		t.Errorf("in flight = %v, want 48", got)
	}
	endpoints := map[string]bool{}
	for task, seen := range byTask {
		best, n := "", 0
		for a, c := range seen {
			if c > n {
				best, n = a, c
			}
		}
		if n < 9 { // of 12
			t.Errorf("task %d spread over %v", task, seen)
		}
		endpoints[best] = true
	}
	if len(endpoints) < 3 {
		t.Errorf("four tasks share %d endpoints: %v", len(endpoints), byTask)
	}
	for _, res := range held {
		if err := res.Finish(); err != nil || res.Status != 200 {
			t.Fatalf("response: %v (status %d)", err, res.Status)
		}
	}
	if got := h.metric("eldr_epp_picks_total", `by="eldr"`); got != 48 {
		t.Errorf("picks by eldr = %v, want 48", got)
	}
	h.noLeaks()
	if got := h.metric("eldr_epp_requests_total", `outcome="completed"`); got != 48 {
		t.Errorf("completed = %v, want 48", got)
	}
}

// Streamed responses relay chunk by chunk; a client that goes away mid
// stream releases its pick as well.
func TestStreamedAndCancelledResponsesRelease(t *testing.T) {
	h := newHarness(t, decodeEngines(3), nil)
	h.routerReady()
	r := synthRNG(12)
	for i := 0; i < 12; i++ {
		req := envoysim.Request{Body: textBody(&r, i%synthTasks, true), Forward: true}
		if i%2 == 1 {
			req.CancelAfter = 2
		}
		res := h.do(req)
		if res.Immediate != nil || res.Chunks < 2 {
			t.Fatalf("request %d: %+v", i, res)
		}
	}
	h.noLeaks()
	if c := h.metric("eldr_epp_requests_total", `outcome="cancelled"`); c != 6 {
		t.Errorf("cancelled = %v, want 6", c)
	}
	if c := h.metric("eldr_epp_requests_total", `outcome="completed"`); c != 6 {
		t.Errorf("completed = %v, want 6", c)
	}
}

// Every bad request gets a clear ImmediateResponse and a counter; nothing
// stays in flight.
func TestBadRequestsAreAnsweredAndCounted(t *testing.T) {
	h := newHarness(t, decodeEngines(2), func(o *Options) { o.MaxBodyBytes = 4 << 20 })
	h.routerReady()
	huge := append([]byte(`{"model":"synth-moe","prompt":"`), bytes.Repeat([]byte("a"), 16<<20)...)
	huge = append(huge, `"}`...)
	cases := []struct {
		name   string
		body   []byte
		subset []string
		code   int32
		reason string
	}{
		{"not JSON", []byte("this is not json"), nil, 400, "bad_json"},
		{"no prompt", []byte(`{"model":"synth-moe","max_tokens":3}`), nil, 400, "no_prompt"},
		{"empty prompt", []byte(`{"model":"synth-moe","prompt":"  "}`), nil, 400, "no_prompt"},
		{"prompt of objects", []byte(`{"model":"synth-moe","prompt":{"a":1}}`), nil, 400, "no_prompt"},
		{"16 MiB body", huge, nil, 413, "too_large"},
		{"unknown model", []byte(`{"model":"gpt-17","prompt":"hi"}`), nil, 404, "unknown_model"},
		{"subset of strangers", []byte(`{"model":"synth-moe","prompt":"hi"}`), []string{"10.9.9.9:1"}, 503, "no_endpoint"},
		{"empty subset", []byte(`{"model":"synth-moe","prompt":"hi"}`), []string{}, 503, "no_endpoint"},
	}
	for _, c := range cases {
		res := h.do(envoysim.Request{Body: c.body, Subset: c.subset})
		if res.Immediate == nil {
			t.Errorf("%s: picked %v, want %d", c.name, res.Destination, c.code)
			continue
		}
		if got := int32(res.Immediate.GetStatus().GetCode()); got != c.code {
			t.Errorf("%s: status %d, want %d (%s)", c.name, got, c.code, res.Immediate.GetBody())
		}
		if !strings.Contains(string(res.Immediate.GetBody()), c.reason) {
			t.Errorf("%s: body %s does not say %s", c.name, res.Immediate.GetBody(), c.reason)
		}
		if h.metric("eldr_epp_rejected_total", `reason="`+c.reason+`"`) == 0 {
			t.Errorf("%s: eldr_epp_rejected_total{reason=%q} not counted", c.name, c.reason)
		}
	}
	if h.epp.ext.buffered.Load() != 0 {
		t.Errorf("%d body bytes still counted after the refusals", h.epp.ext.buffered.Load())
	}
	// Invalid UTF-8 inside a JSON string is replaced, not refused.
	res := h.do(envoysim.Request{Body: []byte("{\"model\":\"synth-moe\",\"prompt\":\"caf\xc3\x28 integral matrix\"}")})
	if res.Immediate != nil {
		t.Errorf("invalid UTF-8 refused: %s", res.Immediate.GetBody())
	}
	// The subset hint is honoured, by eldr itself (no fallback).
	one := h.engines[1].Address()
	for i := 0; i < 4; i++ {
		res := h.do(envoysim.Request{Body: []byte(`{"model":"synth-moe","prompt":"integral matrix"}`), Subset: []string{one}})
		if res.Immediate != nil || res.Destination[0] != one || len(res.Destination) != 1 {
			t.Fatalf("subset [%s]: picked %v", one, res.Destination)
		}
	}
	if n := h.metric("eldr_epp_fallbacks_total"); n != 0 {
		t.Errorf("%v picks fell back under a subset hint", n)
	}
	h.noLeaks()
}

// Bodies held at once are bounded: beyond the budget a request is shed with
// 429, and the budget returns as requests are picked.
func TestBodyBudgetShedsWith429(t *testing.T) {
	h := newHarness(t, decodeEngines(2), func(o *Options) { o.MaxBodyBytes, o.MaxBufferedBytes = 1<<20, 1<<20 })
	h.routerReady()
	big := append([]byte(`{"model":"synth-moe","prompt":"`), bytes.Repeat([]byte("a "), 300<<10)...)
	big = append(big, `"}`...)        // 600 KiB: two do not fit at once
	h.epp.ext.buffered.Add(600 << 10) // as if another stream held one
	res := h.do(envoysim.Request{Body: big})
	if res.Immediate == nil || res.Immediate.GetStatus().GetCode() != 429 {
		t.Fatalf("over the budget: %+v", res)
	}
	h.epp.ext.buffered.Add(-600 << 10)
	if res := h.do(envoysim.Request{Body: big}); res.Immediate != nil {
		t.Fatalf("within the budget: %s", res.Immediate.GetBody())
	}
	if h.metric("eldr_epp_rejected_total", `reason="overloaded"`) != 1 || h.epp.ext.buffered.Load() != 0 {
		t.Errorf("overloaded %v, still held %d", h.metric("eldr_epp_rejected_total", `reason="overloaded"`),
			h.epp.ext.buffered.Load())
	}
	h.noLeaks()
}

// Envoy's other body modes: BUFFERED (the pick rides on the body response)
// and NONE (no body: the pick is by load, at the headers).
func TestBufferedAndNoBodyModes(t *testing.T) {
	h := newHarness(t, decodeEngines(3), nil)
	h.routerReady()
	r := synthRNG(20)
	var held []*envoysim.Result
	for i := 0; i < 6; i++ {
		res := h.do(envoysim.Request{Body: textBody(&r, i%synthTasks, false), BodyMode: "buffered", HoldResponse: true})
		if res.Immediate != nil || len(res.Destination) == 0 || res.Metadata != strings.Join(res.Destination, ",") {
			t.Fatalf("buffered: %+v", res)
		}
		held = append(held, res)
	}
	if got := h.metric("eldr_epp_picks_total", `by="eldr"`); got != 6 {
		t.Errorf("buffered picks by eldr = %v, want 6", got)
	}
	res := h.do(envoysim.Request{Body: []byte("not json"), BodyMode: "buffered"})
	if res.Immediate == nil || res.Immediate.GetStatus().GetCode() != 400 {
		t.Errorf("buffered bad body: %+v", res)
	}
	res = h.do(envoysim.Request{Body: textBody(&r, 0, false), BodyMode: "none"})
	if res.Immediate != nil || len(res.Destination) == 0 {
		t.Fatalf("no body: %+v", res)
	}
	if got := h.metric("eldr_epp_picks_total", `by="least_loaded"`); got != 1 {
		t.Errorf("no-body picks by load = %v, want 1", got)
	}
	for _, res := range held {
		if err := res.Finish(); err != nil {
			t.Fatal(err)
		}
	}
	h.noLeaks()
}

// An endpoint that leaves the config mid-request: its request still
// releases, and no new one goes there. A config with errors keeps the last.
func TestEndpointLeavesMidRequestAndBadConfigKeepsTheLast(t *testing.T) {
	h := newHarness(t, decodeEngines(3), nil)
	h.routerReady()
	r := synthRNG(13)
	held := h.do(envoysim.Request{Body: textBody(&r, 0, false), HoldResponse: true})
	gone := h.engineOf(held.Destination[0])
	h.writeConfig(h.configText(map[int]bool{gone: true}))
	eventually(t, "the new config is in force", func() bool { return len(h.epp.picker.pool.Load().all) == 2 })
	for i := 0; i < 12; i++ {
		res := h.do(envoysim.Request{Body: textBody(&r, i%synthTasks, false)})
		for _, d := range res.Destination {
			if d == held.Destination[0] {
				t.Fatalf("picked the endpoint that left: %v", res.Destination)
			}
		}
	}
	if err := held.Finish(); err != nil {
		t.Fatal(err)
	}
	errorsBefore := h.metric("eldr_epp_config_loads_total", `result="error"`)
	h.writeConfig("endpoints: [ {address: not-an-address} ]\n")
	eventually(t, "the bad config is counted", func() bool {
		return h.metric("eldr_epp_config_loads_total", `result="error"`) > errorsBefore
	})
	h.writeConfig("endpoints: {{{ not yaml")
	eventually(t, "the unparsable config is counted", func() bool {
		return h.metric("eldr_epp_config_loads_total", `result="error"`) > errorsBefore+1
	})
	if n := len(h.epp.picker.pool.Load().all); n != 2 {
		t.Fatalf("the last good config has %d endpoints, want 2", n)
	}
	if res := h.do(envoysim.Request{Body: textBody(&r, 1, false)}); res.Immediate != nil {
		t.Fatalf("picks stopped after a bad config: %s", res.Immediate.GetBody())
	}
	h.noLeaks()
}

// No table yet, or a router that is down: least-loaded, counted; the table
// arriving later is picked up.
func TestFallsBackToLeastLoadedWhenEldrCannotDecide(t *testing.T) {
	h := newHarness(t, decodeEngines(3), func(o *Options) { o.TablePath = o.TablePath + ".later" })
	r := synthRNG(14)
	var held []*envoysim.Result
	seen := map[string]int{}
	for i := 0; i < 6; i++ {
		res := h.do(envoysim.Request{Body: textBody(&r, 0, false), HoldResponse: true})
		if res.Immediate != nil {
			t.Fatalf("refused without a table: %s", res.Immediate.GetBody())
		}
		seen[res.Destination[0]]++
		held = append(held, res)
	}
	for a, n := range seen { // least-loaded spreads one task evenly
		if n != 2 {
			t.Errorf("least-loaded put %d of 6 on %s: %v", n, a, seen)
		}
	}
	if got := h.metric("eldr_epp_fallbacks_total", `reason="eldr_down"`); got != 6 {
		t.Errorf("fallbacks{eldr_down} = %v, want 6", got)
	}
	for _, res := range held {
		if err := res.Finish(); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(h.tablePath)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, h.tablePath+".later", data)
	h.routerReady()
	if res := h.do(envoysim.Request{Body: textBody(&r, 0, false)}); res.Immediate != nil {
		t.Fatal("refused after the table came")
	}
	if h.metric("eldr_epp_picks_total", `by="eldr"`) != 1 {
		t.Error("the table that came later is not used")
	}
	h.noLeaks()

	// eldrd that is not running: least-loaded too.
	h2 := newHarness(t, decodeEngines(2), func(o *Options) { o.Router = "eldrd"; o.Instance = "no-such-eldrd" })
	if res := h2.do(envoysim.Request{Body: textBody(&r, 0, false)}); res.Immediate != nil {
		t.Fatal("refused with eldrd down")
	}
	if h2.metric("eldr_epp_fallbacks_total", `reason="eldr_down"`) != 1 {
		t.Error("eldrd down is not counted")
	}
	h2.noLeaks()
}

// P/D: decode by eldr, prefill by load, passed in llm-d's sidecar header.
func TestPDPoolPicksPrefillByLoad(t *testing.T) {
	specs := []engineSpec{{"vllm", RoleDecode}, {"sglang", RoleDecode}, {"vllm", RolePrefill}, {"sglang", RolePrefill}}
	h := newHarness(t, specs, nil)
	h.routerReady()
	r := synthRNG(15)
	var held []*envoysim.Result
	prefills := map[string]int{}
	for i := 0; i < 4; i++ {
		res := h.do(envoysim.Request{Body: textBody(&r, i%synthTasks, false), HoldResponse: true})
		if res.Immediate != nil {
			t.Fatal(res.Immediate.GetBody())
		}
		if h.roles[h.engineOf(res.Destination[0])] != RoleDecode {
			t.Fatalf("destination %s is not a decode endpoint", res.Destination[0])
		}
		if res.Prefill == "" || h.roles[h.engineOf(res.Prefill)] != RolePrefill {
			t.Fatalf("prefill %q is not a prefill endpoint", res.Prefill)
		}
		prefills[res.Prefill]++
		held = append(held, res)
	}
	if len(prefills) != 2 || prefills[h.engines[2].Address()] != 2 {
		t.Errorf("prefill not by load: %v", prefills)
	}
	for _, res := range held {
		if err := res.Finish(); err != nil {
			t.Fatal(err)
		}
	}
	res := h.do(envoysim.Request{Body: textBody(&r, 0, false), Forward: true})
	decode := h.engines[h.engineOf(res.Served)]
	if decode.Prefillers()[res.Prefill] != 1 {
		t.Errorf("the decode engine did not get %s: %v", res.Prefill, decode.Prefillers())
	}
	h.noLeaks()
}

// An engine whose metrics fail is taken out of the picks, and back in when
// they recover.
func TestUnhealthyEngineIsNotPicked(t *testing.T) {
	h := newHarness(t, decodeEngines(2), nil)
	h.routerReady()
	h.engines[0].FailMetrics(true)
	eventually(t, "the engine is not ready", func() bool {
		return h.metric("eldr_epp_endpoint_ready", h.engines[0].Address()) == 0
	})
	r := synthRNG(16)
	for i := 0; i < 8; i++ {
		res := h.do(envoysim.Request{Body: textBody(&r, i%synthTasks, false)})
		if len(res.Destination) != 1 || res.Destination[0] != h.engines[1].Address() {
			t.Fatalf("picked %v with engine 0 down", res.Destination)
		}
	}
	h.engines[0].FailMetrics(false)
	eventually(t, "the engine is ready again", func() bool {
		return h.metric("eldr_epp_endpoint_ready", h.engines[0].Address()) == 1
	})
	h.noLeaks()
}

// Health services for Kubernetes probes and Envoy; metrics on HTTP; a stop
// drains, then cuts what is still open and releases it.
func TestHealthAndGracefulStop(t *testing.T) {
	h := newHarness(t, decodeEngines(2), nil)
	h.routerReady()
	conn, err := grpc.NewClient(h.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	for _, s := range append([]string{""}, healthServices...) {
		resp, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: s})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health %q: %v %v", s, resp.GetStatus(), err)
		}
	}
	r := synthRNG(17)
	held := h.do(envoysim.Request{Body: textBody(&r, 0, false), HoldResponse: true})
	if h.metric("eldr_epp_inflight_requests") != 1 {
		t.Fatal("the held request is not in flight")
	}
	h.epp.Stop(200 * time.Millisecond)
	if testutil.ToFloat64(h.epp.m.inflight) != 0 {
		t.Error("a stream cut at stop still holds its pick")
	}
	_ = held.Finish() // the stream is gone: an error, not a hang
}

// Same table, same requests, same ends: the picker's decisions are the
// embedded router's, one for one.
func TestDecisionsEqualTheEmbeddedRouters(t *testing.T) {
	h := newHarness(t, decodeEngines(6), func(o *Options) { o.ScrapeInterval = 0 })
	h.routerReady()
	table, err := eldr.LoadTable(h.tablePath)
	if err != nil {
		t.Fatal(err)
	}
	defer table.Close()
	router, err := eldr.NewRouter(table, eldr.DefaultRouterOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer router.Close()
	r := synthRNG(18)
	const window = 12 // requests open at once
	var open []*envoysim.Result
	var ids []uint64
	same := 0
	for i := 0; i < 240; i++ {
		task := r.below(synthTasks)
		var prompt eldr.Prompt
		var body []byte
		if i%2 == 0 {
			text := synthText(&r, task)
			prompt, body = eldr.TextPrompt(text), []byte(`{"model":"synth-moe","prompt":`+strconv.Quote(text)+`}`)
		} else {
			tokens := synthTokenIDs(&r, task, 300)
			prompt = eldr.TokensPrompt(tokens)
			body = []byte(`{"model":"synth-moe","input_ids":` + jsonIDs(tokens) + `}`)
		}
		id := uint64(i + 1)
		want, err := router.RoutePrompt(prompt, &id)
		if err != nil {
			t.Fatal(err)
		}
		res := h.do(envoysim.Request{Body: body, HoldResponse: true})
		if res.Immediate != nil {
			t.Fatalf("request %d refused: %s", i, res.Immediate.GetBody())
		}
		if got := int32(h.engineOf(res.Destination[0])); got != want.Worker {
			t.Fatalf("request %d: picker chose worker %d, the embedded router %d", i, got, want.Worker)
		}
		same++
		open, ids = append(open, res), append(ids, id)
		if len(open) > window { // the oldest ends, on both
			k := r.below(len(open))
			if err := open[k].Finish(); err != nil {
				t.Fatal(err)
			}
			if err := router.Complete(ids[k]); err != nil {
				t.Fatal(err)
			}
			open, ids = append(open[:k], open[k+1:]...), append(ids[:k], ids[k+1:]...)
			// The picker releases when the response ends: wait for it, so
			// both routers see the same loads at the next decision.
			eventually(t, "the release", func() bool {
				return h.metric("eldr_epp_inflight_requests") == float64(len(open))
			})
		}
	}
	for _, res := range open {
		res.Finish()
	}
	t.Logf("%d of 240 decisions equal", same)
	h.noLeaks()
}

func writeFile(t *testing.T, p string, data []byte) {
	t.Helper()
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
}
