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
  char buf[ELDRGO_MAX_REQUEST_ID + 1];
  if (!eldrgo_request_id(id, buf)) return eldrgo_fail(ELDR_E_INVALID_ARGUMENT, "bad request id");
  return eldrgo_check(eldr_footprint_push(c, buf, counts, layers, experts));
}

typedef struct { eldrgo_err err; eldr_decision_t decision; } eldrgo_wait_result;

static eldrgo_wait_result eldrgo_wait(eldr_client_t* c, _GoString_ id, uint32_t timeout_ms) {
  eldrgo_wait_result r;
  r.err.message = NULL;
  eldr_decision_init(&r.decision);
  char buf[ELDRGO_MAX_REQUEST_ID + 1];
  if (!eldrgo_request_id(id, buf)) {
    r.err = eldrgo_fail(ELDR_E_INVALID_ARGUMENT, "bad request id");
    return r;
  }
  r.err = eldrgo_check(eldr_decision_wait(c, buf, timeout_ms, &r.decision));
  return r;
}

static eldrgo_wait_result eldrgo_route(eldr_client_t* c, _GoString_ id, const int16_t* counts,
                                       uint32_t layers, uint32_t experts, uint32_t timeout_ms) {
  eldrgo_wait_result r;
  r.err.message = NULL;
  eldr_decision_init(&r.decision);
  char buf[ELDRGO_MAX_REQUEST_ID + 1];
  if (!eldrgo_request_id(id, buf)) {
    r.err = eldrgo_fail(ELDR_E_INVALID_ARGUMENT, "bad request id");
    return r;
  }
  r.err = eldrgo_check(eldr_route(c, buf, counts, layers, experts, timeout_ms, &r.decision));
  return r;
}

static eldrgo_err eldrgo_complete(eldr_client_t* c, _GoString_ id, uint64_t token) {
  char buf[ELDRGO_MAX_REQUEST_ID + 1];
  if (!eldrgo_request_id(id, buf)) return eldrgo_fail(ELDR_E_INVALID_ARGUMENT, "bad request id");
  return eldrgo_check(eldr_request_complete_token(c, buf, token));
}

static eldrgo_err eldrgo_report(eldr_client_t* c, uint32_t worker, uint32_t running, float kv) {
  return eldrgo_check(eldr_worker_report(c, worker, running, kv));
}

static eldrgo_err eldrgo_report_ex(eldr_client_t* c, uint32_t worker, uint32_t running, float kv,
                                    uint32_t batch_size, float step_ms) {
  eldr_worker_report_t r = ELDR_WORKER_REPORT_INIT;
  r.worker = worker;
  r.running = running;
  r.kv_usage = kv;
  r.batch_size = batch_size;
  r.step_ms = step_ms;
  return eldrgo_check(eldr_worker_report_ex(c, &r));
}

static eldrgo_err eldrgo_worker_control(eldr_client_t* c, uint32_t worker, uint32_t op) {
  return eldrgo_check(eldr_worker_control(c, worker, op));
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

// WorkerOp is an admin operation on a daemon's worker.
type WorkerOp uint32

const (
	WorkerAdd    WorkerOp = C.ELDR_WORKER_ADD // routable again
	WorkerDrain  WorkerOp = C.ELDR_WORKER_DRAIN
	WorkerRemove WorkerOp = C.ELDR_WORKER_REMOVE
)

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
	C.eldr_client_close(c.ptr)
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
// as eldr_route returns it; no Decision then.
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
		_ = c.Complete(requestID)
	}
	return d, err
}

// Complete reports that requestID's decode finished: its worker's in-flight
// count drops by one. Without a token the daemon accepts it only from the
// process that pushed the request's footprint: other processes (a gateway,
// a decode engine) use CompleteWithToken.
func (c *Client) Complete(requestID string) error {
	return c.CompleteWithToken(requestID, 0)
}

// CompleteWithToken completes requestID presenting the CompletionToken of
// its Decision; the daemon refuses (and counts) a wrong one.
func (c *Client) CompleteWithToken(requestID string, token uint64) error {
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

// Report is a decode engine's load report: running requests and KV-cache
// usage in [0, 1].
func (c *Client) Report(worker uint32, running uint32, kvUsage float32) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.ptr == nil {
		return closedError("client")
	}
	return toError(C.eldrgo_report(c.ptr, C.uint32_t(worker), C.uint32_t(running),
		C.float(kvUsage)))
}

// WorkerReport is a decode engine's report about one worker, for ReportEx.
// BatchSize and StepMs 0 = not reported.
type WorkerReport struct {
	Worker    uint32
	Running   uint32  // requests running (liveness, as Report)
	KVUsage   float32 // KV-cache usage in [0, 1]
	BatchSize uint32  // requests in its last decode step: replaces the in-flight count
	StepMs    float32 // that step's duration in ms (finite, >= 0): a step-fit sample
}

// ReportEx is Report with the engine's last decode step (eldr_worker_report_ex).
// Without BatchSize and StepMs it sends the plain report, which every eldrd reads.
func (c *Client) ReportEx(r WorkerReport) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.ptr == nil {
		return closedError("client")
	}
	return toError(C.eldrgo_report_ex(c.ptr, C.uint32_t(r.Worker), C.uint32_t(r.Running),
		C.float(r.KVUsage), C.uint32_t(r.BatchSize), C.float(r.StepMs)))
}

// WorkerControl adds, drains or removes a worker of the daemon.
func (c *Client) WorkerControl(worker uint32, op WorkerOp) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.ptr == nil {
		return closedError("client")
	}
	return toError(C.eldrgo_worker_control(c.ptr, C.uint32_t(worker), C.uint32_t(op)))
}

func accepted(requestID string, r C.eldrgo_wait_result) (Decision, error) {
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
