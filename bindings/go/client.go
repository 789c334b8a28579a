package eldr

/*
#include "shim.h"

typedef struct { eldrgo_err err; eldr_client_t* client; } eldrgo_client_result;

static eldrgo_client_result eldrgo_client_open(const char* instance, uint32_t open_timeout_ms,
                                               uint32_t daemon_stale_ms, uint32_t reattach) {
  eldrgo_client_result r = {{0, NULL}, NULL};
  eldr_client_options_t opts;
  eldr_client_options_init(&opts);
  if (open_timeout_ms != 0) opts.open_timeout_ms = open_timeout_ms;
  if (daemon_stale_ms != 0) opts.daemon_stale_ms = daemon_stale_ms;
  opts.reattach = reattach;
  r.err = eldrgo_check(eldr_client_open(instance, &opts, &r.client));
  return r;
}

static eldrgo_err eldrgo_push(eldr_client_t* c, _GoString_ id, const int16_t* counts,
                              uint32_t layers, uint32_t experts) {
  eldrgo_request_id rid = eldrgo_request_id_of(id);
  if (rid.err.status != ELDR_OK) return rid.err;
  return eldrgo_check(eldr_client_push(c, rid.id, counts, layers, experts));
}

static eldrgo_decision_result eldrgo_wait(eldr_client_t* c, _GoString_ id, uint32_t timeout_ms) {
  eldrgo_decision_result r = eldrgo_decision_result_new();
  eldrgo_request_id rid = eldrgo_request_id_of(id);
  if (rid.err.status != ELDR_OK) r.err = rid.err;
  else r.err = eldrgo_check(eldr_client_wait(c, rid.id, timeout_ms, &r.decision));
  return r;
}

static eldrgo_decision_result eldrgo_route(eldr_client_t* c, _GoString_ id, const int16_t* counts,
                                           uint32_t layers, uint32_t experts,
                                           uint32_t timeout_ms) {
  eldrgo_decision_result r = eldrgo_decision_result_new();
  eldrgo_request_id rid = eldrgo_request_id_of(id);
  if (rid.err.status != ELDR_OK) r.err = rid.err;
  else r.err = eldrgo_check(eldr_client_route(c, rid.id, counts, layers, experts, timeout_ms,
                                              &r.decision));
  return r;
}

static eldrgo_err eldrgo_complete(eldr_client_t* c, _GoString_ id, uint64_t token) {
  eldrgo_request_id rid = eldrgo_request_id_of(id);
  if (rid.err.status != ELDR_OK) return rid.err;
  return eldrgo_check(eldr_client_complete(c, rid.id, token));
}

static eldrgo_err eldrgo_report(eldr_client_t* c, eldr_worker_report_t r) {
  return eldrgo_check(eldr_client_report(c, &r));
}

static eldrgo_err eldrgo_add_worker(eldr_client_t* c, int32_t w) {
  return eldrgo_check(eldr_client_add_worker(c, w));
}
static eldrgo_err eldrgo_drain_worker(eldr_client_t* c, int32_t w) {
  return eldrgo_check(eldr_client_drain_worker(c, w));
}
static eldrgo_err eldrgo_remove_worker(eldr_client_t* c, int32_t w) {
  return eldrgo_check(eldr_client_remove_worker(c, w));
}
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
	"unsafe"
)

// ClientOptions configures Open; zero fields take the library defaults.
type ClientOptions struct {
	OpenTimeout time.Duration // how long Open waits for a READY segment (default 2 s)
	DaemonStale time.Duration // heartbeat older than this = daemon gone (default 3 s)
	NoReattach  bool          // do not re-attach to a restarted daemon
}

// Client is a registered client of one eldrd instance, with its own
// footprint ring. Its methods may be called from any goroutine: the library
// serialises the calls of one handle, and pushes enter the ring in call
// order. Close unregisters (and waits for calls in progress).
type Client struct {
	mu  sync.RWMutex
	ptr *C.eldr_client_t
}

// Open registers with the eldrd of instance; opts may be nil.
func Open(instance string, opts *ClientOptions) (*Client, error) {
	var o ClientOptions
	if opts != nil {
		o = *opts
	}
	return open(instance, o)
}

// OpenContext is Open bounded by ctx: it waits for the daemon at most until
// ctx's deadline (or opts.OpenTimeout, whichever comes first) and returns
// ctx's error as soon as ctx is done; a registration that completes after
// that is closed again.
func OpenContext(ctx context.Context, instance string, opts *ClientOptions) (*Client, error) {
	var o ClientOptions
	if opts != nil {
		o = *opts
	}
	timeout, err := callTimeout(ctx, o.OpenTimeout)
	if err != nil {
		return nil, contextError(err, "opening instance "+instance)
	}
	o.OpenTimeout = timeout
	return cancellable(ctx, "opening instance "+instance,
		func() (*Client, error) { return open(instance, o) },
		func(c *Client) { c.Close() })
}

func open(instance string, o ClientOptions) (*Client, error) {
	if abiErr != nil {
		return nil, abiErr
	}
	if containsNUL(instance) {
		return nil, invalid("instance name contains a NUL byte")
	}
	reattach := C.uint32_t(1)
	if o.NoReattach {
		reattach = 0
	}
	cinstance := C.CString(instance)
	defer C.free(unsafe.Pointer(cinstance))
	r := C.eldrgo_client_open(cinstance, millis(o.OpenTimeout), millis(o.DaemonStale), reattach)
	if err := toError(r.err); err != nil {
		return nil, err
	}
	return &Client{ptr: r.client}, nil
}

// Close unregisters and releases the client (idempotent).
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	C.eldr_client_free(c.ptr)
	c.ptr = nil
	return nil
}

// Push sends one footprint for requestID; it returns once the record is in
// the ring. ErrRingFull means nothing was written: retry later.
func (c *Client) Push(requestID string, fp Footprint) error {
	if err := validateRequestID(requestID); err != nil {
		return err
	}
	if err := fp.validate(); err != nil {
		return err
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.ptr == nil {
		return closedError("client")
	}
	return toError(C.eldrgo_push(c.ptr, requestID, fp.ptr(), C.uint32_t(fp.Layers),
		C.uint32_t(fp.Experts)))
}

// Wait waits up to timeout (0 = just look) for the decision on requestID,
// pushed by any client of the daemon. A request the daemon rejected comes
// back as an *Error with the daemon's status.
func (c *Client) Wait(requestID string, timeout time.Duration) (Decision, error) {
	if err := validateRequestID(requestID); err != nil {
		return Decision{}, err
	}
	d, _, err := c.wait(requestID, timeout)
	return d, err
}

// WaitContext is Wait until ctx is done instead of a timeout: the decision on
// requestID as soon as it is published, or ctx's error once ctx is done
// first. A Close meanwhile ends it with ErrState.
func (c *Client) WaitContext(ctx context.Context, requestID string) (Decision, error) {
	if err := validateRequestID(requestID); err != nil {
		return Decision{}, err
	}
	for {
		slice, err := nextSlice(ctx)
		if err != nil {
			return Decision{}, contextError(err, fmt.Sprintf("waiting for the decision on %q", requestID))
		}
		d, timedOut, err := c.wait(requestID, slice)
		if !timedOut {
			return d, err
		}
	}
}

// wait is one C wait; timedOut says it ended with no decision yet. The read
// lock is held only for it, so Close never waits longer than one wait.
func (c *Client) wait(requestID string, timeout time.Duration) (d Decision, timedOut bool, err error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.ptr == nil {
		return Decision{}, false, closedError("client")
	}
	r := C.eldrgo_wait(c.ptr, requestID, millis(timeout))
	if r.err.status == C.ELDR_E_TIMEOUT {
		return Decision{}, true, toError(r.err)
	}
	d, err = accepted(requestID, r)
	return d, false, err
}

// Route pushes fp and waits for its decision: one round trip through the daemon.
// A footprint the daemon rejected (another geometry than its table's, a count
// it refuses) is an *Error whose Status is the daemon's (e.g. ErrShapeMismatch),
// as eldr_client_route returns it; no Decision then.
func (c *Client) Route(requestID string, fp Footprint, timeout time.Duration) (Decision, error) {
	if err := validateRequestID(requestID); err != nil {
		return Decision{}, err
	}
	if err := fp.validate(); err != nil {
		return Decision{}, err
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.ptr == nil {
		return Decision{}, closedError("client")
	}
	r := C.eldrgo_route(c.ptr, requestID, fp.ptr(), C.uint32_t(fp.Layers), C.uint32_t(fp.Experts),
		millis(timeout))
	return accepted(requestID, r)
}

// RouteContext is Route until ctx is done: it pushes fp (unless ctx is done
// already: then nothing is pushed) and waits for the decision with
// WaitContext. When ctx ends the wait, the request is completed on the
// caller's behalf, so that a decision nobody will use does not hold a slot
// on its worker.
func (c *Client) RouteContext(ctx context.Context, requestID string, fp Footprint) (Decision, error) {
	if err := ctx.Err(); err != nil {
		return Decision{}, contextError(err, fmt.Sprintf("routing %q", requestID))
	}
	if err := c.Push(requestID, fp); err != nil {
		return Decision{}, err
	}
	d, err := c.WaitContext(ctx, requestID)
	if err != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		// Behind the footprint in this client's ring: the daemon routes, then
		// releases. The pusher's own complete needs no token.
		_ = c.Complete(requestID, 0)
	}
	return d, err
}

// Complete reports that requestID's decode finished: its worker's in-flight
// count drops by one. token is the CompletionToken of its Decision; 0 means
// "this process pushed the request's footprint" (the daemon refuses, and
// counts, a complete it cannot match).
func (c *Client) Complete(requestID string, token uint64) error {
	if err := validateRequestID(requestID); err != nil {
		return err
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.ptr == nil {
		return closedError("client")
	}
	return toError(C.eldrgo_complete(c.ptr, requestID, C.uint64_t(token)))
}

// WorkerReport is a decode engine's report about one worker, for
// Client.Report and Router.Report. BatchSize and StepMs 0 = not reported.
type WorkerReport struct {
	Worker    int32
	Running   uint32  // requests running (the daemon's liveness signal)
	KVUsage   float32 // KV-cache usage in [0, 1]
	BatchSize uint32  // requests in its last decode step: replaces the in-flight count
	StepMs    float32 // that step's duration in ms (finite, >= 0): a step-fit sample
}

// Report is a decode engine's report about one worker. Without BatchSize and
// StepMs it is the plain liveness and KV report.
func (c *Client) Report(r WorkerReport) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.ptr == nil {
		return closedError("client")
	}
	return toError(C.eldrgo_report(c.ptr, r.toC()))
}

// toC is the report as the C struct, at this binding's version (passed by
// value: no Go pointer reaches C).
func (r WorkerReport) toC() C.eldr_worker_report_t {
	return C.eldr_worker_report_t{
		version:    C.ELDR_WORKER_REPORT_VERSION,
		worker:     C.int32_t(r.Worker),
		running:    C.uint32_t(r.Running),
		kv_usage:   C.float(r.KVUsage),
		batch_size: C.uint32_t(r.BatchSize),
		step_ms:    C.float(r.StepMs),
	}
}

// AddWorker makes a worker of the daemon routable again (admin).
func (c *Client) AddWorker(worker int32) error {
	return c.workerOp(func(p *C.eldr_client_t) C.eldrgo_err {
		return C.eldrgo_add_worker(p, C.int32_t(worker))
	})
}

// DrainWorker stops new requests going to a worker of the daemon (admin).
func (c *Client) DrainWorker(worker int32) error {
	return c.workerOp(func(p *C.eldr_client_t) C.eldrgo_err {
		return C.eldrgo_drain_worker(p, C.int32_t(worker))
	})
}

// RemoveWorker takes a worker out of the daemon's routing (admin).
func (c *Client) RemoveWorker(worker int32) error {
	return c.workerOp(func(p *C.eldr_client_t) C.eldrgo_err {
		return C.eldrgo_remove_worker(p, C.int32_t(worker))
	})
}

func (c *Client) workerOp(call func(*C.eldr_client_t) C.eldrgo_err) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.ptr == nil {
		return closedError("client")
	}
	return toError(call(c.ptr))
}

func accepted(requestID string, r C.eldrgo_decision_result) (Decision, error) {
	if err := toError(r.err); err != nil {
		return Decision{}, err
	}
	if r.decision.status != C.ELDR_OK {
		s := Status(r.decision.status)
		return Decision{}, &Error{Status: s, Message: fmt.Sprintf(
			"eldrd rejected request %q: %s", requestID, s.Description())}
	}
	return decisionFromC(&r.decision), nil
}

// millis converts a timeout to the C API's uint32 milliseconds (saturating).
func millis(d time.Duration) C.uint32_t {
	if d <= 0 {
		return 0
	}
	ms := d.Milliseconds()
	if ms == 0 {
		ms = 1 // a positive timeout below 1 ms still waits a little
	}
	if ms > math.MaxUint32 {
		ms = math.MaxUint32
	}
	return C.uint32_t(ms)
}
