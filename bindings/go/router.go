package eldr

/*
#include "shim.h"

typedef struct { eldrgo_err err; eldr_router_t* router; } eldrgo_router_result;

static eldrgo_router_result eldrgo_router_new(const eldr_table_t* t, uint32_t policy, float tau,
                                              uint32_t min2_band, uint64_t seed,
                                              uint32_t max_workers, double t0_ms, double tseq_ms,
                                              double alpha_us, uint32_t max_batch,
                                              uint32_t fit_step_cost, uint32_t max_inflight) {
  eldrgo_router_result r = {{0, NULL}, NULL};
  eldr_router_options_t opts;
  eldr_router_options_init(&opts);
  opts.policy = policy;
  opts.tau = tau;
  opts.min2_band = min2_band;
  opts.seed = seed;
  if (max_workers != 0) opts.max_workers = max_workers;
  opts.t0_ms = t0_ms;
  opts.tseq_ms = tseq_ms;
  opts.alpha_us = alpha_us;
  opts.max_batch = max_batch;
  opts.fit_step_cost = fit_step_cost;
  opts.max_inflight = max_inflight;
  r.err = eldrgo_check(eldr_router_new(t, &opts, &r.router));
  return r;
}

static eldrgo_decision_result eldrgo_router_route(eldr_router_t* r, const int16_t* counts,
                                                  uint32_t layers, uint32_t experts,
                                                  const uint32_t* loads, uint32_t n_loads) {
  eldrgo_decision_result out = eldrgo_decision_result_new();
  out.err = eldrgo_check(eldr_router_route(r, counts, layers, experts, loads, n_loads,
                                           &out.decision));
  return out;
}

static eldrgo_decision_result eldrgo_router_route_request(eldr_router_t* r, uint64_t request_id,
                                                          const int16_t* counts, uint32_t layers,
                                                          uint32_t experts) {
  eldrgo_decision_result out = eldrgo_decision_result_new();
  out.err = eldrgo_check(eldr_router_route_request(r, request_id, counts, layers, experts,
                                                   &out.decision));
  return out;
}

static eldrgo_err eldrgo_router_complete(eldr_router_t* r, uint64_t request_id) {
  return eldrgo_check(eldr_router_complete(r, request_id));
}

static eldrgo_err eldrgo_router_report(eldr_router_t* r, eldr_worker_report_t report) {
  return eldrgo_check(eldr_router_report(r, &report));
}

typedef struct { eldrgo_err err; eldr_router_stats_t stats; } eldrgo_stats_result;

static eldrgo_stats_result eldrgo_router_stats(const eldr_router_t* r) {
  eldrgo_stats_result out;
  const eldr_router_stats_t init = ELDR_ROUTER_STATS_INIT;
  out.stats = init;
  out.err = eldrgo_check(eldr_router_get_stats(r, &out.stats));
  return out;
}

static eldrgo_err eldrgo_router_scores(eldr_router_t* r, const int16_t* counts, uint32_t layers,
                                       uint32_t experts, float* scores, uint8_t* in_band,
                                       uint32_t n) {
  return eldrgo_check(eldr_router_score(r, counts, layers, experts, scores, in_band, n));
}

typedef struct { eldrgo_err err; uint32_t n; } eldrgo_slots_result;

static eldrgo_slots_result eldrgo_router_worker_slots(const eldr_router_t* r) {
  eldrgo_slots_result out = {{0, NULL}, 0};
  out.err = eldrgo_check(eldr_router_get_worker_slots(r, &out.n));
  return out;
}

static eldrgo_err eldrgo_router_workers(const eldr_router_t* r, int32_t* ids, uint32_t* states,
                                        uint32_t* inflight, uint32_t n) {
  return eldrgo_check(eldr_router_get_workers(r, ids, states, inflight, n));
}

enum { ELDRGO_COMPLETE, ELDRGO_ADD, ELDRGO_DRAIN, ELDRGO_REMOVE };

static eldrgo_err eldrgo_router_worker_op(eldr_router_t* r, int op, int32_t worker) {
  switch (op) {
    case ELDRGO_COMPLETE: return eldrgo_check(eldr_router_complete_worker(r, worker));
    case ELDRGO_ADD: return eldrgo_check(eldr_router_add_worker(r, worker));
    case ELDRGO_DRAIN: return eldrgo_check(eldr_router_drain_worker(r, worker));
    case ELDRGO_REMOVE: return eldrgo_check(eldr_router_remove_worker(r, worker));
  }
  return eldrgo_fail(ELDR_E_INTERNAL, "unknown worker operation");
}

static eldrgo_err eldrgo_router_set_load(eldr_router_t* r, int32_t worker, uint32_t inflight) {
  return eldrgo_check(eldr_router_set_load(r, worker, inflight));
}

static eldrgo_err eldrgo_router_swap_table(eldr_router_t* r, const eldr_table_t* t) {
  return eldrgo_check(eldr_router_swap_table(r, t));
}
*/
import "C"

import (
	"fmt"
	"sync"
	"time"
	"unsafe"
)

// Policy is a routing policy (ELDR_POLICY_*).
type Policy uint32

// Routing policies, as in eldr.h.
const (
	PolicyEldr       Policy = C.ELDR_POLICY_ELDR // locality band (tau), least loaded inside it
	PolicyRoundRobin Policy = C.ELDR_POLICY_ROUND_ROBIN
	PolicyRandom     Policy = C.ELDR_POLICY_RANDOM
	PolicyJSQ        Policy = C.ELDR_POLICY_JSQ // join the shortest queue
	PolicyP2C        Policy = C.ELDR_POLICY_P2C // power of two choices
	PolicyDomain     Policy = C.ELDR_POLICY_DOMAIN
	PolicyEldrGuard  Policy = C.ELDR_POLICY_ELDR_GUARD // locality band with a load guard
	// least added decode time under the step model (the library's default)
	PolicyEldrCost Policy = C.ELDR_POLICY_ELDR_COST
)

// String is the library's name of the policy ("eldr", "round_robin", ...).
func (p Policy) String() string {
	name := C.eldr_policy_name(C.uint32_t(p))
	if name == nil {
		return fmt.Sprintf("policy(%d)", uint32(p))
	}
	return C.GoString(name)
}

// ParsePolicy maps a library name ("eldr", "jsq", ...) to its Policy.
func ParsePolicy(name string) (Policy, error) {
	for p := PolicyEldr; p <= PolicyEldrCost; p++ {
		if p.String() == name {
			return p, nil
		}
	}
	return 0, invalid("unknown policy %q", name)
}

// Decision is where a request's decode goes, and why.
type Decision struct {
	Worker     int32   // chosen decode worker id
	Similarity float32 // signature . centroid of the chosen worker
	BandSize   uint32  // workers inside the locality band
	TableEpoch uint64  // cluster table generation used
	Policy     Policy
	Latency    time.Duration // sidecar: push to publish, measured by the daemon
	// sidecar: what Client.Complete presents for this request, from a
	// process other than the one that pushed its footprint.
	CompletionToken uint64
	// Routed from a prompt: how sure the prediction was, in [0, 1] (an
	// unsure prediction pulls the request towards no worker in particular);
	// 1 for a decision from a footprint.
	Confidence float32
}

func decisionFromC(d *C.eldr_decision_t) Decision {
	return Decision{
		Worker: int32(d.worker), Similarity: float32(d.similarity), BandSize: uint32(d.band_size),
		TableEpoch: uint64(d.table_epoch), Policy: Policy(d.policy),
		Latency: time.Duration(d.latency_ns), CompletionToken: uint64(d.completion_token),
		Confidence: float32(d.confidence),
	}
}

// StepCost holds the constants of the decode step model that PolicyEldrCost
// predicts with: one step of a batch costs T0Ms + TSeqMs * batch + AlphaUs /
// 1000 per distinct expert (layer, expert) the batch uses.
type StepCost struct {
	T0Ms     float64 // >= 0
	TSeqMs   float64 // >= 0
	AlphaUs  float64 // >= 0
	MaxBatch uint32  // 0 = default (64)
}

// RouterOptions configures NewRouter. DefaultRouterOptions gives the library
// defaults. The zero value differs in Policy (0 is PolicyEldr, as a zeroed C
// struct) and Tau (0 = a band of width 0: use DefaultTau for the table's).
type RouterOptions struct {
	Policy     Policy
	Tau        float32 // band width; negative = the table's default
	Min2Band   bool    // the band holds at least two workers
	Seed       uint64  // random / p2c / tie breaks
	MaxWorkers uint32  // worker slots fixed at creation; 0 = default (256)
	// StepCost: the step constants; nil = the table's, else the preset of
	// its geometry.
	StepCost *StepCost
	// NoStepCostFit keeps the step constants as configured; by default they
	// are refined from the step times that Report gives.
	NoStepCostFit bool
	MaxInFlight   uint32 // request records (RouteRequest), fixed at creation; 0 = default (8192)
}

// DefaultTau selects the table's band width in RouterOptions.Tau.
const DefaultTau float32 = -1

// DefaultRouterOptions are the library's defaults.
func DefaultRouterOptions() RouterOptions {
	return RouterOptions{Policy: PolicyEldrCost, Tau: DefaultTau}
}

// RouterStats are a router's counters since creation and the step constants
// in force (configured, or fitted from reports).
type RouterStats struct {
	Routed            uint64
	Rejected          uint64 // route calls that failed
	CompletesRejected uint64 // completes of nothing in flight, unknown ids included
	CompletesUnknown  uint64 // Complete with an id not in flight
	Untracked         uint64 // routes made with every request record in use
	StepSamples       uint64 // reports the step-constant fit used
	T0Ms              float64
	TSeqMs            float64
	AlphaUs           float64
}

// WorkerState is a worker slot's routing state (ELDR_WORKER_STATE_*).
type WorkerState uint32

const (
	WorkerActive   WorkerState = C.ELDR_WORKER_STATE_ACTIVE
	WorkerDraining WorkerState = C.ELDR_WORKER_STATE_DRAINING
	WorkerRemoved  WorkerState = C.ELDR_WORKER_STATE_REMOVED
)

// WorkerSlot is one worker slot of a router. Slots never move: the table's
// workers first in cluster order, runtime additions after them.
type WorkerSlot struct {
	Worker   int32
	State    WorkerState
	InFlight uint32
}

// WorkerScore is one worker slot's similarity and band membership.
type WorkerScore struct {
	Worker     int32
	Similarity float32
	InBand     bool
}

// Router is an embedded router. All methods are safe from any goroutine;
// Close waits for calls in progress.
type Router struct {
	mu  sync.RWMutex
	ptr *C.eldr_router_t
}

// NewRouter builds a router over table; it keeps its own reference to it.
func NewRouter(table *Table, opts RouterOptions) (*Router, error) {
	if abiErr != nil {
		return nil, abiErr
	}
	table.mu.RLock()
	defer table.mu.RUnlock()
	if table.ptr == nil {
		return nil, closedError("table")
	}
	min2 := C.uint32_t(0)
	if opts.Min2Band {
		min2 = 1
	}
	t0, tseq, alpha, maxBatch := -1.0, -1.0, -1.0, uint32(0)
	if c := opts.StepCost; c != nil {
		t0, tseq, alpha, maxBatch = c.T0Ms, c.TSeqMs, c.AlphaUs, c.MaxBatch
	}
	fit := C.uint32_t(1)
	if opts.NoStepCostFit {
		fit = 0
	}
	r := C.eldrgo_router_new(table.ptr, C.uint32_t(opts.Policy), C.float(opts.Tau), min2,
		C.uint64_t(opts.Seed), C.uint32_t(opts.MaxWorkers), C.double(t0), C.double(tseq),
		C.double(alpha), C.uint32_t(maxBatch), fit, C.uint32_t(opts.MaxInFlight))
	if err := toError(r.err); err != nil {
		return nil, err
	}
	return &Router{ptr: r.router}, nil
}

// Close releases the router (idempotent).
func (r *Router) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	C.eldr_router_free(r.ptr)
	r.ptr = nil
	return nil
}

// Route routes one request and counts it in flight on the chosen worker
// (CompleteWorker ends it).
func (r *Router) Route(fp Footprint) (Decision, error) {
	return r.route(fp, nil)
}

// RouteWithLoads is Route with loads replacing every worker slot's in-flight
// count (one entry per slot, Workers order) for this decision only: nothing
// is counted in flight.
func (r *Router) RouteWithLoads(fp Footprint, loads []uint32) (Decision, error) {
	if len(loads) == 0 {
		return Decision{}, invalid("loads is empty: one entry per worker slot")
	}
	return r.route(fp, loads)
}

func (r *Router) route(fp Footprint, loads []uint32) (Decision, error) {
	if err := fp.validate(); err != nil {
		return Decision{}, err
	}
	var loadsPtr *C.uint32_t
	if len(loads) > 0 {
		loadsPtr = (*C.uint32_t)(unsafe.Pointer(&loads[0]))
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.ptr == nil {
		return Decision{}, closedError("router")
	}
	res := C.eldrgo_router_route(r.ptr, fp.ptr(), C.uint32_t(fp.Layers), C.uint32_t(fp.Experts),
		loadsPtr, C.uint32_t(len(loads)))
	if err := toError(res.err); err != nil {
		return Decision{}, err
	}
	return decisionFromC(&res.decision), nil
}

// RouteRequest routes one request as Route and remembers requestID, so that
// Complete takes it, and its experts, out of its worker's batch. ErrState
// when requestID is already in flight.
func (r *Router) RouteRequest(requestID uint64, fp Footprint) (Decision, error) {
	if err := fp.validate(); err != nil {
		return Decision{}, err
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.ptr == nil {
		return Decision{}, closedError("router")
	}
	res := C.eldrgo_router_route_request(r.ptr, C.uint64_t(requestID), fp.ptr(),
		C.uint32_t(fp.Layers), C.uint32_t(fp.Experts))
	if err := toError(res.err); err != nil {
		return Decision{}, err
	}
	return decisionFromC(&res.decision), nil
}

// Complete: the request routed with requestID finished. ErrNotFound for an
// id not in flight (unknown, or completed already): counted in Stats,
// nothing else changes.
func (r *Router) Complete(requestID uint64) error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.ptr == nil {
		return closedError("router")
	}
	return toError(C.eldrgo_router_complete(r.ptr, C.uint64_t(requestID)))
}

// Report is a decode engine's report about a worker (the same WorkerReport
// as Client.Report): BatchSize (its requests running and waiting) replaces
// the router's in-flight count; StepMs, its last step's duration with
// BatchSize requests, is a sample for the fit of the step constants. 0 = not
// reported, for either; Running is not used here.
func (r *Router) Report(report WorkerReport) error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.ptr == nil {
		return closedError("router")
	}
	return toError(C.eldrgo_router_report(r.ptr, report.toC()))
}

// Stats returns the router's counters and the step constants in force.
func (r *Router) Stats() (RouterStats, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.ptr == nil {
		return RouterStats{}, closedError("router")
	}
	res := C.eldrgo_router_stats(r.ptr)
	if err := toError(res.err); err != nil {
		return RouterStats{}, err
	}
	s := &res.stats
	return RouterStats{
		Routed: uint64(s.routed), Rejected: uint64(s.rejected),
		CompletesRejected: uint64(s.completes_rejected), CompletesUnknown: uint64(s.completes_unknown),
		Untracked: uint64(s.untracked), StepSamples: uint64(s.step_samples),
		T0Ms: float64(s.t0_ms), TSeqMs: float64(s.tseq_ms), AlphaUs: float64(s.alpha_us),
	}, nil
}

// Scores is every worker slot's similarity and band membership, in slot
// order. Nothing is counted in flight.
func (r *Router) Scores(fp Footprint) ([]WorkerScore, error) {
	if err := fp.validate(); err != nil {
		return nil, err
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	for attempt := 0; ; attempt++ {
		slots, err := r.workersLocked()
		if err != nil {
			return nil, err
		}
		n := len(slots)
		if n == 0 {
			return nil, &Error{Status: ErrNoWorker, Message: "router has no worker slots"}
		}
		scores := make([]float32, n)
		inBand := make([]uint8, n)
		res := C.eldrgo_router_scores(r.ptr, fp.ptr(), C.uint32_t(fp.Layers), C.uint32_t(fp.Experts),
			(*C.float)(unsafe.Pointer(&scores[0])), (*C.uint8_t)(unsafe.Pointer(&inBand[0])),
			C.uint32_t(n))
		if err := toError(res); err != nil {
			// A worker added in between changes the slot count: ask again.
			if now, serr := r.slotsLocked(); attempt < 2 && serr == nil && now != n {
				continue
			}
			return nil, err
		}
		out := make([]WorkerScore, n)
		for i := range out {
			out[i] = WorkerScore{Worker: slots[i].Worker, Similarity: scores[i], InBand: inBand[i] != 0}
		}
		return out, nil
	}
}

// Workers lists every worker slot: id, state and in-flight count.
func (r *Router) Workers() ([]WorkerSlot, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.workersLocked()
}

func (r *Router) slotsLocked() (int, error) {
	if r.ptr == nil {
		return 0, closedError("router")
	}
	res := C.eldrgo_router_worker_slots(r.ptr)
	if err := toError(res.err); err != nil {
		return 0, err
	}
	return int(res.n), nil
}

func (r *Router) workersLocked() ([]WorkerSlot, error) {
	for attempt := 0; ; attempt++ {
		n, err := r.slotsLocked()
		if err != nil || n == 0 {
			return nil, err
		}
		ids := make([]int32, n)
		states := make([]uint32, n)
		inflight := make([]uint32, n)
		res := C.eldrgo_router_workers(r.ptr, (*C.int32_t)(unsafe.Pointer(&ids[0])),
			(*C.uint32_t)(unsafe.Pointer(&states[0])), (*C.uint32_t)(unsafe.Pointer(&inflight[0])),
			C.uint32_t(n))
		if err := toError(res); err != nil {
			if now, serr := r.slotsLocked(); attempt < 2 && serr == nil && now != n {
				continue
			}
			return nil, err
		}
		out := make([]WorkerSlot, n)
		for i := range out {
			out[i] = WorkerSlot{Worker: ids[i], State: WorkerState(states[i]), InFlight: inflight[i]}
		}
		return out, nil
	}
}

func (r *Router) workerOp(op C.int, worker int32) error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.ptr == nil {
		return closedError("router")
	}
	return toError(C.eldrgo_router_worker_op(r.ptr, op, C.int32_t(worker)))
}

// CompleteWorker: the oldest request still in flight on worker finished;
// its in-flight count drops by one (ErrState when it has nothing in flight).
func (r *Router) CompleteWorker(worker int32) error {
	return r.workerOp(C.ELDRGO_COMPLETE, worker)
}

// AddWorker makes worker routable (again), in a new slot if it is new.
func (r *Router) AddWorker(worker int32) error { return r.workerOp(C.ELDRGO_ADD, worker) }

// DrainWorker stops new requests to worker; in-flight ones finish.
func (r *Router) DrainWorker(worker int32) error { return r.workerOp(C.ELDRGO_DRAIN, worker) }

// RemoveWorker takes worker out of routing (its slot stays).
func (r *Router) RemoveWorker(worker int32) error { return r.workerOp(C.ELDRGO_REMOVE, worker) }

// SetLoad sets worker's in-flight count.
func (r *Router) SetLoad(worker int32, inflight uint32) error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.ptr == nil {
		return closedError("router")
	}
	return toError(C.eldrgo_router_set_load(r.ptr, C.int32_t(worker), C.uint32_t(inflight)))
}

// SwapTable hot-swaps the cluster table; later decisions carry the new epoch.
func (r *Router) SwapTable(table *Table) error {
	table.mu.RLock()
	defer table.mu.RUnlock()
	if table.ptr == nil {
		return closedError("table")
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.ptr == nil {
		return closedError("router")
	}
	return toError(C.eldrgo_router_swap_table(r.ptr, table.ptr))
}
