package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"eldr.dev/eldr"
)

// tokenIDs deals a footprint's picks over its tokens, topK distinct experts
// per token and layer: ids [tokens][layers][topK] whose bincount is fp.
func tokenIDs(t *testing.T, fp eldr.Footprint) [][][]int32 {
	t.Helper()
	var tokens int
	for e := uint32(0); e < fp.Experts; e++ {
		tokens += int(fp.Counts[e])
	}
	tokens /= topK
	ids := make([][][]int32, tokens)
	for i := range ids {
		ids[i] = make([][]int32, fp.Layers)
	}
	for l := uint32(0); l < fp.Layers; l++ {
		var picks []int32 // sorted by expert: an expert's copies are one run
		for e := uint32(0); e < fp.Experts; e++ {
			for c := int16(0); c < fp.Counts[l*fp.Experts+e]; c++ {
				picks = append(picks, int32(e))
			}
		}
		if len(picks) != tokens*topK {
			t.Fatalf("layer %d has %d picks, want %d", l, len(picks), tokens*topK)
		}
		for p, e := range picks {
			ids[p%tokens][l] = append(ids[p%tokens][l], e)
		}
	}
	return ids
}

// withDense prepends `dense` layers of zeros (a dense layer routes nothing;
// engines still send a row for it, and 0 is a valid expert id).
func withDense(ids [][][]int32, dense int) [][][]int32 {
	out := make([][][]int32, len(ids))
	for i, row := range ids {
		for d := 0; d < dense; d++ {
			out[i] = append(out[i], make([]int32, topK))
		}
		out[i] = append(out[i], row...)
	}
	return out
}

func rawInt32(ids [][][]int32) []byte {
	var b bytes.Buffer
	for _, row := range ids {
		for _, layer := range row {
			_ = binary.Write(&b, binary.LittleEndian, layer)
		}
	}
	return b.Bytes()
}

// npyUint8 writes a .npy v1.0 image of uint8 [rows][layers][k], header and all.
func npyUint8(ids [][][]int32) []byte {
	header := fmt.Sprintf("{'descr': '|u1', 'fortran_order': False, 'shape': (%d, %d, %d), }",
		len(ids), len(ids[0]), len(ids[0][0]))
	for (10+len(header)+1)%64 != 0 {
		header += " "
	}
	header += "\n"
	var b bytes.Buffer
	b.WriteString("\x93NUMPY\x01\x00")
	_ = binary.Write(&b, binary.LittleEndian, uint16(len(header)))
	b.WriteString(header)
	for _, row := range ids {
		for _, layer := range row {
			for _, e := range layer {
				b.WriteByte(byte(e))
			}
		}
	}
	return b.Bytes()
}

// stockEngine emulates a stock prefill server: SGLang's /generate or vLLM's
// /v1/completions with routed experts, for the task footprint that the
// prompt's length names (task = len(prompt) mod 4). `corrupt` answers with a
// payload that is not base64.
type stockEngine struct {
	server  *httptest.Server
	corrupt bool
	dense   int
}

func newStockEngine(t *testing.T, flavor Flavor) *stockEngine {
	s := &stockEngine{}
	s.server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]json.RawMessage
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		var prompt []int64
		var text string
		key := map[Flavor]string{FlavorSGLang: "input_ids", FlavorVLLM: "prompt"}[flavor]
		if flavor == FlavorSGLang && body["text"] != nil {
			key = "text"
		}
		var fp eldr.Footprint
		if json.Unmarshal(body[key], &text) == nil && text != "" {
			fp = taskFootprint(textTask(text), uint64(len(text))) // its words name its task
		} else if err := json.Unmarshal(body[key], &prompt); err != nil || len(prompt) == 0 {
			http.Error(w, "no prompt ids or text in "+key, http.StatusBadRequest)
			return
		} else {
			fp = taskFootprint(uint32(len(prompt))%tasks, uint64(len(prompt)))
		}
		ids := withDense(tokenIDs(t, fp), s.dense)
		// The prompt's rows, then one more for the generated token: an engine
		// sends seqlen - 1 rows, and counting stops at prompt_tokens.
		rows := append(append([][][]int32{}, ids...), ids[0])
		var payload string
		switch flavor {
		case FlavorSGLang:
			payload = base64.StdEncoding.EncodeToString(rawInt32(rows))
		case FlavorVLLM:
			payload = base64.StdEncoding.EncodeToString(npyUint8(rows))
		}
		if s.corrupt {
			payload = "!!not base64!!"
		}
		switch flavor {
		case FlavorSGLang:
			_ = json.NewEncoder(w).Encode(map[string]interface{}{"text": "",
				"meta_info": map[string]interface{}{"prompt_tokens": len(ids), "routed_experts": payload}})
		case FlavorVLLM:
			_ = json.NewEncoder(w).Encode(map[string]interface{}{
				"choices": []interface{}{map[string]interface{}{"text": "", "routed_experts": payload}},
				"usage":   map[string]interface{}{"prompt_tokens": len(ids)}})
		}
	}))
	t.Cleanup(s.server.Close)
	return s
}

func stockGateway(t *testing.T, flavor Flavor, engine *stockEngine, decode string, d Decisions,
	dense int) *Gateway {
	model := StockModel{Experts: experts, HiddenLayers: uint32(layers + dense), TopK: topK,
		Name: "test-moe"}
	for l := 0; l < layers; l++ {
		model.MoELayers = append(model.MoELayers, uint32(dense+l))
	}
	path := map[Flavor]string{FlavorSGLang: "/generate", FlavorVLLM: "/v1/completions"}[flavor]
	return &Gateway{Flavor: flavor, Model: model, PrefillURL: engine.server.URL + path,
		DecodeURL: decode, Eldr: d, HTTP: &http.Client{Timeout: 10 * time.Second},
		DecisionTimeout: 5 * time.Second}
}

// The footprint the gateway builds from a stock engine's answer is exactly
// the task footprint the engine's ids were dealt from, dense layers dropped.
func TestStockPrefillBuildsTheEnginesFootprint(t *testing.T) {
	for _, flavor := range []Flavor{FlavorSGLang, FlavorVLLM} {
		for _, dense := range []int{0, 2} {
			engine := newStockEngine(t, flavor)
			engine.dense = dense
			gw := stockGateway(t, flavor, engine, "", refuse{t}, dense)
			for task := 0; task < tasks; task++ {
				prompt := json.RawMessage(fmt.Sprint(64 + task)) // len(prompt) mod 4 = task
				fp, tokens, err := gw.stockPrefill(context.Background(), "r", prompt, "")
				if err != nil {
					t.Fatalf("%s dense=%d: %v", flavor, dense, err)
				}
				want := taskFootprint(uint32(64+task)%tasks, uint64(64+task))
				if fp.Layers != layers || fp.Experts != experts ||
					fmt.Sprint(fp.Counts) != fmt.Sprint(want.Counts) || string(tokens) != "64" {
					t.Fatalf("%s dense=%d task %d: footprint %dx%d, tokens %s differs from the engine's",
						flavor, dense, task, fp.Layers, fp.Experts, tokens)
				}
			}
		}
	}
}

func TestStockEnginesRouteThroughEldrd(t *testing.T) {
	instance := startEldrd(t)
	client, err := eldr.Open(instance, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	engines := newFakeEngines(t, nil) // for its decode server
	for _, flavor := range []Flavor{FlavorSGLang, FlavorVLLM} {
		engine := newStockEngine(t, flavor)
		gw := stockGateway(t, flavor, engine, engines.decode.URL+"/v1/decode?worker={worker}",
			client, 0)
		gw.ReportCompletion = true
		server := httptest.NewServer(gw)
		for i := 0; i < 8; i++ {
			id := fmt.Sprintf("stock-%s-%d", flavor, i)
			code, out := post(t, server.URL, fmt.Sprintf(
				`{"request_id":%q,"prompt_tokens":%d,"max_tokens":4}`, id, 64+i%tasks))
			if code != http.StatusOK || out["routed_by"] != "eldr" ||
				out["similarity"].(float64) <= 0 || out["prefill_tokens"].(float64) != 64 {
				t.Fatalf("%s request %d: %d %v", flavor, i, code, out)
			}
			engines.mu.Lock()
			decoded := engines.decodedOn[id]
			engines.mu.Unlock()
			if float64(decoded) != out["worker"].(float64) {
				t.Fatalf("%s: gateway says worker %v, decode saw %v", flavor, out["worker"], decoded)
			}
		}

		// A payload that does not decode: 502 naming it, or the fallback.
		engine.corrupt = true
		code, out := post(t, server.URL, `{"request_id":"bad-1","prompt_tokens":64,"max_tokens":4}`)
		if code != http.StatusBadGateway || !strings.Contains(out["error"].(string), "routed experts") {
			t.Fatalf("%s corrupt payload: %d %v", flavor, code, out)
		}
		gw.FallbackWorkers = 4
		code, out = post(t, server.URL, `{"request_id":"bad-2","prompt_tokens":64,"max_tokens":4}`)
		if code != http.StatusOK || out["routed_by"] != "fallback" {
			t.Fatalf("%s corrupt payload with fallback: %d %v", flavor, code, out)
		}
		server.Close()
	}
}
