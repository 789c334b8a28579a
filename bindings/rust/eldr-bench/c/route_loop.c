/* The C baseline of the binding overhead benchmark: `iterations` calls of
 * eldr_router_route in a plain C loop, timed in C. */
#define _POSIX_C_SOURCE 199309L
#include <eldr/eldr.h>
#include <time.h>

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Returns the elapsed nanoseconds, or 0 when a call failed (*failed = its status). */
uint64_t eldr_bench_route_loop(eldr_router_t* router, const int16_t* counts, uint32_t layers,
                               uint32_t experts, uint64_t iterations, int32_t* failed) {
  eldr_decision_t decision = ELDR_DECISION_INIT;
  uint64_t start = now_ns();
  for (uint64_t i = 0; i < iterations; ++i) {
    eldr_status_t s = eldr_router_route(router, counts, layers, experts, NULL, 0, &decision);
    if (s != ELDR_OK) {
      *failed = s;
      return 0;
    }
  }
  *failed = ELDR_OK;
  return now_ns() - start;
}
