package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"eldr.dev/eldr/epp/internal/enginesim"
	"eldr.dev/eldr/epp/internal/envoysim"
)

// harness: emulated engines, a picker on loopback over them, and the
// stand-in Envoy connected to it.
type harness struct {
	t         *testing.T
	dir       string
	engines   []*enginesim.Engine
	roles     []Role
	epp       *EPP
	proxy     *envoysim.Proxy
	metrics   string // http://.../metrics
	addr      string // ext_proc
	health    string // the plaintext health listener
	tablePath string
}

type engineSpec struct {
	kind string
	role Role
}

func decodeEngines(n int) []engineSpec {
	var s []engineSpec
	for i := 0; i < n; i++ {
		kind := "vllm"
		if i%2 == 1 {
			kind = "sglang"
		}
		s = append(s, engineSpec{kind: kind, role: RoleBoth})
	}
	return s
}

func newHarness(t *testing.T, specs []engineSpec, tune func(*Options)) *harness {
	t.Helper()
	h := &harness{t: t, dir: t.TempDir()}
	for _, s := range specs {
		e, err := enginesim.Start(s.kind, 4, time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(e.Close)
		h.engines = append(h.engines, e)
		h.roles = append(h.roles, s.role)
	}
	decoders := 0
	for _, r := range h.roles {
		if r != RolePrefill {
			decoders++
		}
	}
	h.tablePath = filepath.Join(h.dir, "table.eldr")
	table, err := synthTable(decoders)
	if err != nil {
		t.Fatal(err)
	}
	if err := table.Save(h.tablePath); err != nil {
		t.Fatal(err)
	}
	table.Close()
	h.writeConfig(h.configText(nil))
	o := DefaultOptions()
	o.ConfigPath = filepath.Join(h.dir, "endpoints.yaml")
	o.TablePath = h.tablePath
	o.ScrapeInterval = 50 * time.Millisecond
	o.WatchInterval = 20 * time.Millisecond
	o.RouteTimeout = time.Second
	o.SecureServing = false
	o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		o.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	if tune != nil {
		tune(&o)
	}
	h.epp, err = newEPP(o)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mlis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hlis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.addr, h.health = lis.Addr().String(), hlis.Addr().String()
	h.metrics = "http://" + mlis.Addr().String() + "/metrics"
	go h.epp.Serve(Listeners{ExtProc: lis, Health: hlis, HTTP: mlis})
	t.Cleanup(func() { h.epp.Stop(2 * time.Second) })
	var clientTLS *tls.Config
	if o.SecureServing {
		clientTLS = &tls.Config{InsecureSkipVerify: true} // a self-signed picker, as GIE's gateways take it
	}
	if h.proxy, err = envoysim.Dial(lis.Addr().String(), clientTLS); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.proxy.Close() })
	return h
}

// configText lists the engines (skip: indexes left out), with models.
func (h *harness) configText(skip map[int]bool) string {
	var b strings.Builder
	b.WriteString("models: [synth-moe]\nendpoints:\n")
	for i, e := range h.engines {
		if skip[i] {
			continue
		}
		fmt.Fprintf(&b, "  - address: %s\n    role: %s\n    engine: %s\n", e.Address(), h.roles[i], e.Kind)
		if h.roles[i] != RolePrefill {
			fmt.Fprintf(&b, "    worker: %d\n", i)
		}
	}
	return b.String()
}

func (h *harness) writeConfig(text string) {
	h.t.Helper()
	path := filepath.Join(h.dir, "endpoints.yaml")
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
		h.t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) do(r envoysim.Request) *envoysim.Result {
	h.t.Helper()
	ctx := context.Background() // a held request outlives this call
	if !r.HoldResponse {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	if r.Path == "" {
		r.Path = "/v1/completions"
	}
	res, err := h.proxy.Do(ctx, r)
	if err != nil {
		h.t.Fatalf("request: %v", err)
	}
	return res
}

// engineOf: the engine index behind an address.
func (h *harness) engineOf(addr string) int {
	for i, e := range h.engines {
		if e.Address() == addr {
			return i
		}
	}
	h.t.Fatalf("%q is no engine's address", addr)
	return -1
}

// metric sums the samples of a metric whose line has every given fragment.
func (h *harness) metric(name string, fragments ...string) float64 {
	h.t.Helper()
	resp, err := http.Get(h.metrics)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	sum := 0.0
next:
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, name+" ") && !strings.HasPrefix(line, name+"{") {
			continue
		}
		for _, f := range fragments {
			if !strings.Contains(line, f) {
				continue next
			}
		}
		var v float64
		fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v)
		sum += v
	}
	return sum
}

// noLeaks: every count the picker keeps is back to zero, and the embedded
// router has nothing in flight.
func (h *harness) noLeaks() {
	h.t.Helper()
	eventually(h.t, "in-flight counts return to zero", func() bool {
		if h.metric("eldr_epp_inflight_requests") != 0 || h.metric("eldr_epp_endpoint_inflight") != 0 {
			return false
		}
		if h.epp.heldCounts() != 0 {
			return false
		}
		for _, e := range h.engines {
			if e.Running() != 0 {
				return false
			}
		}
		return true
	})
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10 s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// routerReady waits for the embedded router's table.
func (h *harness) routerReady() {
	h.t.Helper()
	eventually(h.t, "the table is loaded", func() bool {
		emb := h.epp.picker.eldr.(*embedded)
		emb.mu.RLock()
		defer emb.mu.RUnlock()
		return emb.router != nil
	})
}

func textBody(r *synthRNG, task int, stream bool) []byte { return synthBody(r, task, 0, stream) }
