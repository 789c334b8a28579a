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
	"io"
	"log/slog"
	"net"
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
	latencies []time.Duration
	errors    int64
	requests  int64
}

func benchMain(args []string) int {
	fs := flag.NewFlagSet("eldr-epp bench", flag.ContinueOnError)
	streams := fs.Int("streams", 256, "requests open at once, per picker")
	requests := fs.Int("requests", 20000, "requests per picker")
	tokens := fs.Int("tokens", 2000, "prompt length in token ids")
	endpoints := fs.Int("endpoints", 16, "decode endpoints")
	hold := fs.Duration("hold", 100*time.Millisecond, "how long each request keeps its stream (its response)")
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
	bodies := make([][]byte, 64)
	for i := range bodies {
		bodies[i] = synthBody(&r, i%synthTasks, *tokens, false)
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
		Picker   string  `json:"picker"`
		Requests int64   `json:"requests"`
		Errors   int64   `json:"errors"`
		P50us    float64 `json:"pick_p50_us"`
		P99us    float64 `json:"pick_p99_us"`
		Leaked   int64   `json:"leaked_inflight"`
		ByEldr   float64 `json:"picks_by_eldr"`
	}
	var out []sideResult
	failed := false
	for _, s := range sides {
		slices.Sort(s.latencies)
		q := func(f float64) float64 {
			if len(s.latencies) == 0 {
				return 0
			}
			return float64(s.latencies[int(f*float64(len(s.latencies)-1))].Nanoseconds()) / 1e3
		}
		leaked := s.leaked()
		failed = failed || s.errors > 0 || leaked != 0
		out = append(out, sideResult{Picker: s.name, Requests: s.requests, Errors: s.errors,
			P50us: q(0.5), P99us: q(0.99), Leaked: leaked, ByEldr: counterValue(s.epp.m.picks.WithLabelValues("eldr"))})
		s.proxy.Close()
		s.epp.Stop(time.Second)
	}
	if *asJSON {
		b, _ := json.MarshalIndent(map[string]any{"streams": *streams, "tokens": *tokens, "endpoints": *endpoints,
			"hold_ms": hold.Milliseconds(), "results": out}, "", "  ")
		fmt.Println(string(b))
	} else {
		fmt.Printf("eldr-epp bench: %d streams open per picker, %d-token prompts, %d endpoints, hold %v\n",
			*streams, *tokens, *endpoints, *hold)
		fmt.Printf("%-14s %9s %7s %12s %12s %8s %10s\n", "picker", "requests", "errors", "pick p50 us", "pick p99 us", "leaked", "by eldr")
		for _, o := range out {
			fmt.Printf("%-14s %9d %7d %12.0f %12.0f %8d %10.0f\n", o.Picker, o.Requests, o.Errors, o.P50us, o.P99us, o.Leaked, o.ByEldr)
		}
		if len(out) == 2 && out[1].P50us > 0 {
			fmt.Printf("eldr - least-loaded: p50 %+.0f us, p99 %+.0f us\n", out[0].P50us-out[1].P50us, out[0].P99us-out[1].P99us)
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
		o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
		e, err := newEPP(o)
		if err != nil {
			return nil, err
		}
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		go e.Serve(lis, nil)
		p, err := envoysim.Dial(lis.Addr().String())
		if err != nil {
			return nil, err
		}
		name := "eldr"
		if router == "none" {
			name = "least-loaded"
		}
		sides = append(sides, &benchSide{name: name, epp: e, proxy: p})
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
		var n int64
		for _, e := range s.epp.picker.pool.Load().all {
			n += e.inflight.Load() + e.prefilling.Load()
		}
		if emb, ok := s.epp.picker.eldr.(*embedded); ok {
			emb.mu.RLock()
			if emb.router != nil {
				slots, _ := emb.router.Workers()
				for _, sl := range slots {
					n += int64(sl.InFlight)
				}
			}
			emb.mu.RUnlock()
		}
		if n == 0 || time.Now().After(deadline) {
			return n
		}
		time.Sleep(20 * time.Millisecond)
	}
}
