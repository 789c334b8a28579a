package eldr

import (
	"context"
	"fmt"
	"time"
)

// The C calls take a timeout, not a cancellation. The ...Context variants
// bound every blocking C call by the context's deadline and make it
// cancellable one of two ways:
//   - waits on the node's decision table (Client.WaitContext, RouteContext)
//     run as waits of at most waitSlice each, so a cancelled context is
//     noticed within waitSlice and a decision as soon as it is published;
//   - one-shot calls (OpenContext, OpenPoolContext, Pool.RouteContext) run on
//     a goroutine; the caller returns as soon as the context is done, and
//     whatever the call still produces is released (a handle closed, a
//     routed request completed), so nothing leaks.
//
// A call ended by its context returns an error for which
// errors.Is(err, context.Canceled) or errors.Is(err, context.DeadlineExceeded)
// holds, as nats.go and gRPC callers expect.

// waitSlice is the longest one C wait runs inside a ...Context call.
const waitSlice = 10 * time.Millisecond

// defaultCallTimeout bounds a one-shot call whose context has no deadline:
// the library's own default (eldr.h: a timeout of 0 is 2000 ms).
const defaultCallTimeout = 2 * time.Second

// contextError is ctx's error, saying what was given up.
func contextError(err error, what string) error {
	return fmt.Errorf("eldr: %s: %w", what, err)
}

// nextSlice is the length of the next C wait: waitSlice, or less up to
// ctx's deadline.
func nextSlice(ctx context.Context) (time.Duration, error) {
	return untilDeadline(ctx, waitSlice)
}

// callTimeout is the timeout of a one-shot C call under ctx: fallback
// (defaultCallTimeout when 0), or less up to ctx's deadline.
func callTimeout(ctx context.Context, fallback time.Duration) (time.Duration, error) {
	if fallback <= 0 {
		fallback = defaultCallTimeout
	}
	return untilDeadline(ctx, fallback)
}

// untilDeadline is d, or what is left before ctx's deadline when that comes
// first; an error once ctx is done or its deadline has passed.
func untilDeadline(ctx context.Context, d time.Duration) (time.Duration, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if deadline, ok := ctx.Deadline(); ok {
		left := time.Until(deadline)
		if left <= 0 {
			return 0, context.DeadlineExceeded
		}
		if left < d {
			return left, nil
		}
	}
	return d, nil
}

// cancellable runs call (a C call bounded by its own timeout) and returns its
// result, or ctx's error as soon as ctx is done. A result that arrives after
// the caller gave up goes to release, so that what it holds is let go.
func cancellable[T any](ctx context.Context, what string, call func() (T, error),
	release func(T)) (T, error) {
	if ctx.Done() == nil { // never cancelled: no goroutine needed
		return call()
	}
	type result struct {
		value T
		err   error
	}
	done := make(chan result)
	gaveUp := make(chan struct{})
	go func() {
		value, err := call()
		select {
		case done <- result{value, err}:
		case <-gaveUp:
			if err == nil {
				release(value)
			}
			if abandonedHook != nil {
				abandonedHook(what, err)
			}
		}
	}()
	select {
	case r := <-done:
		return r.value, r.err
	case <-ctx.Done():
		close(gaveUp)
		var zero T
		return zero, contextError(ctx.Err(), what)
	}
}

// abandonedHook, when set (by tests), learns of each result released after
// its caller gave up.
var abandonedHook func(what string, err error)
