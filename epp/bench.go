package main

// eldr-epp bench: the latency the pick adds to a request, eldr beside
// least-loaded in the same run. Two pickers on loopback (an embedded eldr
// router, and -router none), the stand-in Envoy keeping -streams requests
// open at once on each (every request holds its stream for -hold, as a
// response would, then ends); rounds alternate between the two so that
// both see the same machine. The pick latency is the stand-in's first
// request message to the picker's header response (the whole body, a
// -tokens-token prompt, is sent in between). After the run every in-flight
// count must be zero.

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"eldr.dev/eldr/epp/internal/envoysim"
)

type benchSide struct {
	name      string
	epp       *EPP
	proxy     *envoysim.Proxy
	latencies []time.Duration // the stand-in's: first request message to the pick
	inPicker  []time.Duration // the picker's own: request headers in to the pick out
	mu        sync.Mutex
	errors    int64
	requests  int64
}

func benchMain(args []string) int {
	fs := flag.NewFlagSet("eldr-epp bench", flag.ContinueOnError)
	streams := fs.Int("streams", 256, "requests open at once, per picker")
	requests := fs.Int("requests", 20000, "requests per picker")
	tokens := fs.Int("tokens", 2000, "prompt length in tokens")
	promptKind := fs.String("prompt", "text", "text (words, as most clients send) or tokens (token ids)")
	endpoints := fs.Int("endpoints", 16, "decode endpoints")
	hold := fs.Duration("hold", 250*time.Millisecond, "how long each request keeps its stream (its response)")
	rounds := fs.Int("rounds", 4, "alternations between the two pickers")
	asJSON := fs.Bool("json", false, "print JSON")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the run (picker and stand-in together)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer f.Close()
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	dir, err := os.MkdirTemp("", "eldr-epp-bench-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	sides, err := startBenchPickers(dir, *endpoints)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	r := synthRNG(0xbe7c)
	n := *tokens
	switch *promptKind {
	case "text":
		n = -n
	case "tokens":
	default:
		fmt.Fprintln(os.Stderr, "bench: -prompt is text or tokens")
		return 2
	}
	bodies := make([][]byte, 64)
	for i := range bodies {
		bodies[i] = synthBody(&r, i%synthTasks, n, false)
	}
	perRound := *requests / *rounds
	for round := 0; round < *rounds; round++ {
		order := []*benchSide{sides[0], sides[1]}
		if round%2 == 1 {
			order[0], order[1] = order[1], order[0]
		}
		for _, s := range order {
			s.run(bodies, perRound, *streams, *hold)
		}
	}
	type sideResult struct {
		Picker        string  `json:"picker"`
		Requests      int64   `json:"requests"`
		Errors        int64   `json:"errors"`
		P50us         float64 `json:"pick_p50_us"`
		P99us         float64 `json:"pick_p99_us"`
		InPickerP50us float64 `json:"in_picker_p50_us"`
		InPickerP99us float64 `json:"in_picker_p99_us"`
		Leaked        int64   `json:"leaked_inflight"`
		ByEldr        float64 `json:"picks_by_eldr"`
	}
	var out []sideResult
	failed := false
	for _, s := range sides {
		q := func(d []time.Duration, f float64) float64 {
			if len(d) == 0 {
				return 0
			}
			slices.Sort(d)
			return float64(d[int(f*float64(len(d)-1))].Nanoseconds()) / 1e3
		}
		leaked := s.leaked()
		failed = failed || s.errors > 0 || leaked != 0
		out = append(out, sideResult{Picker: s.name, Requests: s.requests, Errors: s.errors,
			P50us: q(s.latencies, 0.5), P99us: q(s.latencies, 0.99),
			InPickerP50us: q(s.inPicker, 0.5), InPickerP99us: q(s.inPicker, 0.99), Leaked: leaked, ByEldr: counterValue(s.epp.m.picks.WithLabelValues("eldr"))})
		s.proxy.Close()
		s.epp.Stop(time.Second)
	}
	if *asJSON {
		b, _ := json.MarshalIndent(map[string]any{"streams": *streams, "tokens": *tokens, "prompt": *promptKind,
			"body_bytes": len(bodies[0]), "endpoints": *endpoints,
			"hold_ms": hold.Milliseconds(), "results": out}, "", "  ")
		fmt.Println(string(b))
	} else {
		fmt.Printf("eldr-epp bench: %d streams open per picker, %d-token prompts (%s, %d-byte bodies), %d endpoints, hold %v\n",
			*streams, *tokens, *promptKind, len(bodies[0]), *endpoints, *hold)
		fmt.Println("pick: the stand-in Envoy's first request message to the pick; in picker: the picker's own")
		fmt.Println("time, request headers received to the pick sent (body read, parsed and routed). Microseconds.")
		fmt.Printf("%-13s %8s %6s %9s %9s %10s %10s %7s %8s\n", "picker", "requests", "errors",
			"pick p50", "pick p99", "in p50", "in p99", "leaked", "by eldr")
		for _, o := range out {
			fmt.Printf("%-13s %8d %6d %9.0f %9.0f %10.0f %10.0f %7d %8.0f\n", o.Picker, o.Requests, o.Errors,
				o.P50us, o.P99us, o.InPickerP50us, o.InPickerP99us, o.Leaked, o.ByEldr)
		}
		if len(out) == 2 {
			fmt.Printf("eldr - least-loaded: pick p50 %+.0f, p99 %+.0f; in picker p50 %+.0f, p99 %+.0f\n",
				out[0].P50us-out[1].P50us, out[0].P99us-out[1].P99us,
				out[0].InPickerP50us-out[1].InPickerP50us, out[0].InPickerP99us-out[1].InPickerP99us)
		}
	}
	if failed {
		fmt.Fprintln(os.Stderr, "bench: errors or leaked in-flight counts")
		return 1
	}
	return 0
}

// startBenchPickers: an eldr picker over a synthetic table, and a
// least-loaded one, over the same endpoints (never contacted: the stand-in
// answers the response phase itself).
func startBenchPickers(dir string, endpoints int) ([]*benchSide, error) {
	table, err := synthTable(endpoints)
	if err != nil {
		return nil, err
	}
	tablePath := filepath.Join(dir, "table.eldr")
	err = table.Save(tablePath)
	table.Close()
	if err != nil {
		return nil, err
	}
	cfg := "endpoints:\n"
	for i := 0; i < endpoints; i++ {
		cfg += fmt.Sprintf("  - {address: \"127.0.0.1:%d\", worker: %d, metrics: none}\n", 20000+i, i)
	}
	cfgPath := filepath.Join(dir, "endpoints.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	var sides []*benchSide
	for _, router := range []string{"embedded", "none"} {
		o := DefaultOptions()
		o.ConfigPath, o.TablePath, o.Router, o.ScrapeInterval = cfgPath, tablePath, router, 0
		e, p, err := serveLocal(o)
		if err != nil {
			return nil, err
		}
		name := "eldr"
		if router == "none" {
			name = "least-loaded"
		}
		side := &benchSide{name: name, epp: e, proxy: p}
		e.ext.onPick = func(d time.Duration) {
			side.mu.Lock()
			side.inPicker = append(side.inPicker, d)
			side.mu.Unlock()
		}
		sides = append(sides, side)
	}
	return sides, nil
}

// run sends n requests from `streams` concurrent senders.
func (s *benchSide) run(bodies [][]byte, n, streams int, hold time.Duration) {
	var next atomic.Int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := 0; w < streams; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			// Steady state, not bursts: the senders start spread over one
			// hold, and each hold varies by +-25 %.
			time.Sleep(hold * time.Duration(w) / time.Duration(streams))
			rng := synthRNG(uint64(w)*0x9E3779B97F4A7C15 | 1)
			var lat []time.Duration
			var errs int64
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					break
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				res, err := s.proxy.Do(ctx, envoysim.Request{Path: "/v1/completions",
					Body: bodies[int(i)%len(bodies)], HoldResponse: true})
				if err == nil && res.Immediate == nil {
					lat = append(lat, res.PickLatency)
					time.Sleep(hold*3/4 + time.Duration(rng.below(int(hold/2)+1)))
					err = res.Finish()
				} else if err == nil {
					err = fmt.Errorf("refused: %s", res.Immediate.GetBody())
				}
				cancel()
				if err != nil {
					errs++
				}
			}
			mu.Lock()
			s.latencies = append(s.latencies, lat...)
			s.errors += errs
			mu.Unlock()
		}(w)
	}
	wg.Wait()
	s.requests += int64(n)
}

// leaked: what is still counted in flight anywhere, once every request ended.
func (s *benchSide) leaked() int64 {
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := s.epp.heldCounts()
		if n == 0 || time.Now().After(deadline) {
			return n
		}
		time.Sleep(20 * time.Millisecond)
	}
}
