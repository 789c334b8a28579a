package eldr

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"
)

// The cost of one eldr_router_route through this binding (BenchmarkRoute)
// against the same call in a C loop (BenchmarkRouteC), same router and
// footprint:
//
//	go test -run '^$' -bench 'Route' -benchtime 200000x
func benchRouter(b *testing.B) (*Router, Footprint) {
	sut, err := NewRouter(fittedTable(b, 8), DefaultRouterOptions())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { sut.Close() })
	return sut, footprint(newRNG(3), 1, 4)
}

func BenchmarkRoute(b *testing.B) {
	sut, fp := benchRouter(b)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := sut.Route(fp); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRouteC(b *testing.B) {
	sut, fp := benchRouter(b)
	b.ResetTimer()
	if err := benchRouteLoopC(sut, fp, b.N); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkRouteOverhead interleaves blocks of Go calls and C-loop calls on
// the same router and reports the medians per call and the binding's extra
// cost: robust on a busy machine, where two separate benchmarks drift apart.
//
//	go test -run '^$' -bench RouteOverhead -benchtime 40x
func BenchmarkRouteOverhead(b *testing.B) {
	sut, fp := benchRouter(b)
	const block = 2000
	goNs := make([]float64, 0, b.N)
	cNs := make([]float64, 0, b.N)
	for i := 0; i < b.N; i++ {
		start := time.Now()
		for j := 0; j < block; j++ {
			if _, err := sut.Route(fp); err != nil {
				b.Fatal(err)
			}
		}
		goNs = append(goNs, float64(time.Since(start).Nanoseconds())/block)
		start = time.Now()
		if err := benchRouteLoopC(sut, fp, block); err != nil {
			b.Fatal(err)
		}
		cNs = append(cNs, float64(time.Since(start).Nanoseconds())/block)
	}
	goMedian, cMedian := median(goNs), median(cNs)
	b.ReportMetric(goMedian, "go-ns/call")
	b.ReportMetric(cMedian, "c-ns/call")
	b.ReportMetric(goMedian-cMedian, "extra-ns/call")
}

func median(v []float64) float64 {
	sort.Float64s(v)
	return v[len(v)/2]
}

// BenchmarkClientRouteContext interleaves blocks of Client.Route (one C call:
// push and wait) and Client.RouteContext (a push, then waits of at most
// 10 ms) through a live eldrd, each route completed, and reports the medians
// per route and what the context variant adds:
//
//	ELDRD=build/sidecar/eldrd go test -run '^$' -bench ClientRouteContext -benchtime 21x
func BenchmarkClientRouteContext(b *testing.B) {
	instance := startDaemon(b, 8)
	c, err := Open(instance, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	fp := footprint(newRNG(3), 1, 4)
	const block = 200
	ctx := context.Background()
	routes := 0
	run := func(route func(id string) (Decision, error)) float64 {
		start := time.Now()
		for j := 0; j < block; j++ {
			routes++
			id := fmt.Sprintf("bench-%d", routes)
			d, err := route(id)
			if err != nil {
				b.Fatal(err)
			}
			if err := c.Complete(id, d.CompletionToken); err != nil {
				b.Fatal(err)
			}
		}
		return float64(time.Since(start).Nanoseconds()) / block
	}
	plain := make([]float64, 0, b.N)
	withContext := make([]float64, 0, b.N)
	for i := 0; i < b.N; i++ {
		plain = append(plain, run(func(id string) (Decision, error) {
			return c.Route(id, fp, time.Second)
		}))
		withContext = append(withContext, run(func(id string) (Decision, error) {
			ctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			return c.RouteContext(ctx, id, fp)
		}))
	}
	plainMedian, contextMedian := median(plain), median(withContext)
	b.ReportMetric(plainMedian, "route-ns")
	b.ReportMetric(contextMedian, "route-context-ns")
	b.ReportMetric(contextMedian-plainMedian, "extra-ns")
}
