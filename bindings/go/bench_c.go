package eldr

/*
#include "shim.h"
#include <time.h>

// The C baseline of BenchmarkRouteC: n calls of eldr_router_route in a plain
// C loop, in one cgo call (so no cgo transition per iteration).
static int32_t eldrgo_bench_route_loop(eldr_router_t* r, const int16_t* counts, uint32_t layers,
                                       uint32_t experts, int64_t n) {
  eldr_decision_t decision = ELDR_DECISION_INIT;
  for (int64_t i = 0; i < n; ++i) {
    eldr_status_t s = eldr_router_route(r, counts, layers, experts, NULL, 0, &decision);
    if (s != ELDR_OK) return s;
  }
  return ELDR_OK;
}
*/
import "C"

// benchRouteLoopC routes fp n times from C: the reference BenchmarkRoute is
// compared with. Unexported: only the benchmark uses it.
func benchRouteLoopC(r *Router, fp Footprint, n int) error {
	if err := fp.validate(); err != nil {
		return err
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.ptr == nil {
		return closedError("router")
	}
	s := C.eldrgo_bench_route_loop(r.ptr, fp.ptr(), C.uint32_t(fp.Layers), C.uint32_t(fp.Experts),
		C.int64_t(n))
	if s != C.ELDR_OK {
		return Status(s)
	}
	return nil
}
