package eldr

import "testing"

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
