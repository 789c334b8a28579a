package main

// eldr-epp demo: the chain on loopback. Four emulated engines (two vLLM, two
// SGLang), an eldr picker over them and a least-loaded one, and the
// stand-in Envoy (no Envoy binary is installed here: it sends what Envoy's
// ext_proc filter sends, then forwards each request to the pick and relays
// the response through the picker). Requests of four task domains arrive
// and stay open a while, as decoding requests do; the table shows where
// each domain's requests went under each picker.

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"eldr.dev/eldr/epp/internal/enginesim"
	"eldr.dev/eldr/epp/internal/envoysim"
)

func demoMain(args []string) int {
	fs := flag.NewFlagSet("eldr-epp demo", flag.ContinueOnError)
	requests := fs.Int("requests", 64, "requests per picker")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := runDemo(*requests); err != nil {
		fmt.Fprintln(os.Stderr, "eldr-epp demo:", err)
		return 1
	}
	return 0
}

func runDemo(requests int) error {
	dir, err := os.MkdirTemp("", "eldr-epp-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var engines []*enginesim.Engine
	cfg := "models: [synth-moe]\nendpoints:\n"
	for i, kind := range []string{"vllm", "sglang", "vllm", "sglang"} {
		e, err := enginesim.Start(kind, 8, 5*time.Millisecond)
		if err != nil {
			return err
		}
		defer e.Close()
		engines = append(engines, e)
		cfg += fmt.Sprintf("  - {address: %q, worker: %d, engine: %s}\n", e.Address(), i, kind)
	}
	table, err := synthTable(len(engines))
	if err != nil {
		return err
	}
	tablePath := filepath.Join(dir, "table.eldr")
	err = table.Save(tablePath)
	table.Close()
	if err != nil {
		return err
	}
	cfgPath := filepath.Join(dir, "endpoints.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return err
	}
	fmt.Println("eldr-epp demo: Envoy's part is played by a stand-in ext_proc client (internal/envoysim;")
	fmt.Println("no Envoy binary here): request headers, body chunks, response headers and body, end of stream.")
	fmt.Printf("engines: %d emulated (vLLM and SGLang metric names, scraped); %d requests per picker,\n", len(engines), requests)
	fmt.Println("4 task domains, half of them streamed; each response decodes 8 tokens at 5 ms.")
	for _, router := range []string{"embedded", "none"} {
		o := DefaultOptions()
		o.ConfigPath, o.TablePath, o.Router = cfgPath, tablePath, router
		o.ScrapeInterval = 100 * time.Millisecond
		e, proxy, err := serveLocal(o)
		if err != nil {
			return err
		}
		counts := make([][synthTasks]int, len(engines))
		var mu sync.Mutex
		var wg sync.WaitGroup
		var failed error
		r := synthRNG(0xde70)
		for i := 0; i < requests; i++ {
			task := r.below(synthTasks) // arrivals in no order
			body := synthBody(&r, task, 0, i%2 == 0)
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				res, err := proxy.Do(ctx, envoysim.Request{Path: "/v1/completions", Body: body, Forward: true})
				mu.Lock()
				defer mu.Unlock()
				if err != nil || res.Immediate != nil || res.Status != 200 {
					failed = fmt.Errorf("request failed: %v", err)
					return
				}
				for k, eng := range engines {
					if eng.Address() == res.Served {
						counts[k][task]++
					}
				}
			}()
			time.Sleep(2 * time.Millisecond) // arrivals, while earlier ones decode
		}
		wg.Wait()
		proxy.Close()
		name := "eldr (embedded router, from the prompt)"
		if router == "none" {
			name = "least-loaded"
		}
		fmt.Printf("\n%s: requests per engine and task domain\n", name)
		fmt.Printf("  %-22s %-7s %6s %6s %6s %6s\n", "endpoint", "engine", "math", "code", "poetry", "health")
		for k, eng := range engines {
			c := counts[k]
			fmt.Printf("  %-22s %-7s %6d %6d %6d %6d\n", eng.Address(), eng.Kind, c[0], c[1], c[2], c[3])
		}
		main := 0
		for _, c := range counts {
			main += max(c[0], c[1], c[2], c[3])
		}
		fmt.Printf("  requests on their engine's main domain: %d of %d (%.0f %%)\n", main, requests,
			100*float64(main)/float64(requests))
		fmt.Printf("  picks by eldr %.0f, least-loaded %.0f; in flight after the run: %.0f\n",
			counterValue(e.m.picks.WithLabelValues("eldr")), counterValue(e.m.picks.WithLabelValues("least_loaded")),
			float64(e.heldCounts()))
		e.Stop(time.Second)
		if failed != nil {
			return failed
		}
	}
	return nil
}

// serveLocal starts a picker with o on a loopback port, in plaintext and
// quiet, and the stand-in Envoy connected to it (the demo and the bench).
func serveLocal(o Options) (*EPP, *envoysim.Proxy, error) {
	o.SecureServing = false
	o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	e, err := newEPP(o)
	if err != nil {
		return nil, nil, err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		e.Stop(0)
		return nil, nil, err
	}
	go e.Serve(Listeners{ExtProc: lis})
	p, err := envoysim.Dial(lis.Addr().String(), nil)
	if err != nil {
		e.Stop(0)
		return nil, nil, err
	}
	return e, p, nil
}
