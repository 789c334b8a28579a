package eldr

/*
#include <stdlib.h>
#include "shim.h"

typedef struct { eldrgo_err err; eldr_pool_t* pool; } eldrgo_pool_result;

static eldrgo_pool_result eldrgo_pool_open(const char* nats, const char* pool,
                                           const eldr_nats_auth_t* auth, uint32_t timeout_ms) {
  eldrgo_pool_result r = {{0, NULL}, NULL};
  r.err = eldrgo_check(eldr_pool_open_auth(nats, pool, auth, timeout_ms, &r.pool));
  return r;
}

static eldrgo_decision_result eldrgo_pool_route(eldr_pool_t* p, _GoString_ id,
                                                const int16_t* counts, uint32_t layers,
                                                uint32_t experts, uint32_t timeout_ms) {
  eldrgo_decision_result r = eldrgo_decision_result_new();
  eldrgo_request_id rid = eldrgo_request_id_of(id);
  if (rid.err.status != ELDR_OK) r.err = rid.err;
  else r.err = eldrgo_check(eldr_pool_route(p, rid.id, counts, layers, experts, timeout_ms,
                                            &r.decision));
  return r;
}

static eldrgo_err eldrgo_pool_complete(eldr_pool_t* p, _GoString_ id, uint64_t token) {
  eldrgo_request_id rid = eldrgo_request_id_of(id);
  if (rid.err.status != ELDR_OK) return rid.err;
  return eldrgo_check(eldr_pool_complete(p, rid.id, token));
}
*/
import "C"

import (
	"context"
	"flag"
	"fmt"
	"sync"
	"time"
	"unsafe"
)

// Pool routes through any eldrd node of a pool over NATS (eldrd --nats ...
// --pool NAME), for a gateway with no eldrd on its node. Safe for concurrent
// use; Close waits for calls in progress.
type Pool struct {
	mu  sync.RWMutex
	ptr *C.eldr_pool_t
}

// OpenPool connects to the pool's NATS servers ("nats://a:4222,nats://b:4222").
// A build without NATS support returns an error with ErrUnsupported.
func OpenPool(natsURLs, pool string, timeout time.Duration) (*Pool, error) {
	return OpenPoolAuth(natsURLs, pool, NatsAuth{}, timeout)
}

// NatsAuth is how a pool client proves itself to a secured pool's NATS
// servers, by file (eldr_nats_auth_t): CAFile turns TLS on (the CAs of the
// servers' certificates), CertFile with KeyFile is a client certificate, and
// then at most one kind of credentials: CredsFile (JWT and nkey seed), User
// with PasswordFile, or TokenFile. Secrets stay in their files. InboxPrefix
// ("": libnats' _INBOX) is where the answers come ("<prefix>.<random>"):
// give each gateway user a prefix of its own ("_INBOX.gw-a") and subscribe
// rights on it alone, so that no other gateway can read its answers.
type NatsAuth struct {
	CAFile, CertFile, KeyFile, CredsFile, User, PasswordFile, TokenFile string
	InboxPrefix                                                         string
}

// OpenPoolAuth is OpenPool with TLS and credentials.
func OpenPoolAuth(natsURLs, pool string, auth NatsAuth, timeout time.Duration) (*Pool, error) {
	if abiErr != nil {
		return nil, abiErr
	}
	curls := C.CString(natsURLs)
	defer C.free(unsafe.Pointer(curls))
	cpool := C.CString(pool)
	defer C.free(unsafe.Pointer(cpool))
	var cauth C.eldr_nats_auth_t
	cauth.version = C.ELDR_NATS_AUTH_VERSION
	for _, f := range []struct {
		value string
		to    **C.char
	}{{auth.CAFile, &cauth.ca_file}, {auth.CertFile, &cauth.cert_file},
		{auth.KeyFile, &cauth.key_file}, {auth.CredsFile, &cauth.creds_file},
		{auth.User, &cauth.user}, {auth.PasswordFile, &cauth.password_file},
		{auth.TokenFile, &cauth.token_file}, {auth.InboxPrefix, &cauth.inbox_prefix}} {
		if f.value != "" {
			*f.to = C.CString(f.value)
			defer C.free(unsafe.Pointer(*f.to))
		}
	}
	r := C.eldrgo_pool_open(curls, cpool, &cauth, millis(timeout))
	if err := toError(r.err); err != nil {
		return nil, err
	}
	return &Pool{ptr: r.pool}, nil
}

// OpenPoolContext is OpenPool bounded by ctx: the connection attempt lasts
// until ctx's deadline (2 s without one), and the call returns ctx's error as
// soon as ctx is done; a connection made after that is closed again.
func OpenPoolContext(ctx context.Context, natsURLs, pool string) (*Pool, error) {
	return OpenPoolAuthContext(ctx, natsURLs, pool, NatsAuth{})
}

// OpenPoolAuthContext is OpenPoolContext with TLS and credentials.
func OpenPoolAuthContext(ctx context.Context, natsURLs, pool string, auth NatsAuth) (*Pool, error) {
	what := "connecting to pool " + pool
	timeout, err := callTimeout(ctx, 0)
	if err != nil {
		return nil, contextError(err, what)
	}
	return cancellable(ctx, what,
		func() (*Pool, error) { return OpenPoolAuth(natsURLs, pool, auth, timeout) },
		func(p *Pool) { p.Close() })
}

// AddFlags registers a's fields on fs under the names eldrd and the eldr CLI
// give them: -nats-ca, -nats-cert, -nats-key, -nats-creds, -nats-user,
// -nats-password-file, -nats-token-file, -nats-inbox-prefix.
func (a *NatsAuth) AddFlags(fs *flag.FlagSet) {
	for _, f := range []struct {
		name, help string
		to         *string
	}{
		{"nats-ca", "PEM file of the CAs that sign the NATS servers (TLS)", &a.CAFile},
		{"nats-cert", "PEM client certificate for NATS (TLS, with -nats-key)", &a.CertFile},
		{"nats-key", "PEM key of -nats-cert", &a.KeyFile},
		{"nats-creds", "NATS .creds file (user JWT and nkey seed)", &a.CredsFile},
		{"nats-user", "NATS user (with -nats-password-file)", &a.User},
		{"nats-password-file", "file holding the NATS user's password", &a.PasswordFile},
		{"nats-token-file", "file holding a NATS token", &a.TokenFile},
		{"nats-inbox-prefix", "prefix of this client's NATS reply inboxes (default _INBOX): one per gateway user, which alone may subscribe to it", &a.InboxPrefix},
	} {
		fs.StringVar(f.to, f.name, *f.to, f.help)
	}
}

// Close disconnects; the nodes release at once the requests routed through
// the Pool and not completed. Calling it again is a no-op.
func (p *Pool) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ptr != nil {
		C.eldr_pool_free(p.ptr)
		p.ptr = nil
	}
	return nil
}

// Route sends the footprint to one node of the pool and returns its
// decision; a footprint the node rejects is an error carrying its status.
func (p *Pool) Route(requestID string, fp Footprint, timeout time.Duration) (Decision, error) {
	if err := validateRequestID(requestID); err != nil {
		return Decision{}, err
	}
	if err := fp.validate(); err != nil {
		return Decision{}, err
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.ptr == nil {
		return Decision{}, closedError("pool")
	}
	r := C.eldrgo_pool_route(p.ptr, requestID, fp.ptr(), C.uint32_t(fp.Layers),
		C.uint32_t(fp.Experts), millis(timeout))
	if err := toError(r.err); err != nil {
		return Decision{}, err
	}
	return decisionFromC(&r.decision), nil
}

// RouteContext is Route bounded by ctx: the request waits for a node's answer
// until ctx's deadline (2 s without one), and the call returns ctx's error as
// soon as ctx is done. A decision that arrives after that is completed at
// once with its token, so the abandoned request holds no slot on its worker.
// fp is copied when ctx can be cancelled: the caller may reuse it on return.
func (p *Pool) RouteContext(ctx context.Context, requestID string, fp Footprint) (Decision, error) {
	if err := validateRequestID(requestID); err != nil {
		return Decision{}, err
	}
	if err := fp.validate(); err != nil {
		return Decision{}, err
	}
	what := fmt.Sprintf("routing %q through the pool", requestID)
	timeout, err := callTimeout(ctx, 0)
	if err != nil {
		return Decision{}, contextError(err, what)
	}
	if ctx.Done() != nil {
		fp.Counts = append([]int16(nil), fp.Counts...)
	}
	return cancellable(ctx, what,
		func() (Decision, error) { return p.Route(requestID, fp, timeout) },
		func(d Decision) { _ = p.Complete(requestID, d.CompletionToken) })
}

// Complete tells the node that routed requestID that it finished; token is
// the decision's CompletionToken (required over NATS).
func (p *Pool) Complete(requestID string, token uint64) error {
	if err := validateRequestID(requestID); err != nil {
		return err
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.ptr == nil {
		return closedError("pool")
	}
	return toError(C.eldrgo_pool_complete(p.ptr, requestID, C.uint64_t(token)))
}
