package eldr

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// within fails unless d is in [lo, hi].
func within(t *testing.T, what string, d, lo, hi time.Duration) {
	t.Helper()
	if d < lo || d > hi {
		t.Fatalf("%s took %v, want %v..%v", what, d, lo, hi)
	}
}

func TestWaitContextEndsWhenItsContextDoes(t *testing.T) {
	instance := startDaemon(t, 4)
	c, err := Open(instance, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	if _, err := c.WaitContext(ctx, "go-ctx-never"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait: %v", err)
	}
	within(t, "a wait cancelled at 50 ms", time.Since(start), 50*time.Millisecond, 500*time.Millisecond)

	ctx, cancel = context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	start = time.Now()
	_, err = c.WaitContext(ctx, "go-ctx-never")
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		t.Fatalf("wait past its deadline: %v", err)
	}
	within(t, "a wait with a 30 ms deadline", time.Since(start), 30*time.Millisecond, 500*time.Millisecond)

	// Done before the call: no wait at all.
	if _, err := c.WaitContext(ctx, "go-ctx-never"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait on a done context: %v", err)
	}
}

func TestWaitContextGetsADecisionPublishedWhileItWaits(t *testing.T) {
	instance := startDaemon(t, 4)
	gateway, err := Open(instance, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer gateway.Close()
	engine, err := Open(instance, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer engine.Close()
	pushed := make(chan error, 1)
	time.AfterFunc(60*time.Millisecond, func() {
		pushed <- engine.Push("go-ctx-late", footprint(newRNG(4), 0, 4))
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d, err := gateway.WaitContext(ctx, "go-ctx-late")
	if err != nil {
		t.Fatal(err)
	}
	if err := <-pushed; err != nil {
		t.Fatal(err)
	}
	if d.Worker < 0 || d.CompletionToken == 0 {
		t.Fatalf("decision %+v", d)
	}
	if err := gateway.Complete("go-ctx-late", d.CompletionToken); err != nil {
		t.Fatal(err)
	}
}

func TestCloseEndsAWaitContext(t *testing.T) {
	instance := startDaemon(t, 4)
	c, err := Open(instance, nil)
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(50*time.Millisecond, func() { c.Close() })
	start := time.Now()
	if _, err := c.WaitContext(context.Background(), "go-ctx-never"); !errors.Is(err, ErrState) {
		t.Fatalf("wait across Close: %v", err)
	}
	within(t, "a wait ended by Close at 50 ms", time.Since(start), 50*time.Millisecond, 500*time.Millisecond)
}

// RouteContext pushes nothing for a done context, routes as Route does
// otherwise, and completes a request whose wait its context ended: here the
// daemon is stopped (SIGSTOP) while the route waits, routes the request when
// it resumes, then releases it, so nothing stays in flight.
func TestRouteContextReleasesARequestItGaveUpOn(t *testing.T) {
	instance, daemon := startDaemonProcess(t, 4)
	c, err := Open(instance, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fp := footprint(newRNG(5), 1, 4)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d, err := c.RouteContext(ctx, "go-rctx-1", fp)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Complete("go-rctx-1", d.CompletionToken); err != nil {
		t.Fatal(err)
	}

	done, stop := context.WithCancel(context.Background())
	stop()
	if _, err := c.RouteContext(done, "go-rctx-unsent", fp); !errors.Is(err, context.Canceled) {
		t.Fatalf("route on a cancelled context: %v", err)
	}
	if _, err := c.Wait("go-rctx-unsent", 100*time.Millisecond); !errors.Is(err, ErrTimeout) {
		t.Fatalf("a route on a cancelled context pushed its footprint: %v", err)
	}
	eventually(t, "the first route counted and released", func() bool {
		inflight, routed := load(t, instance)
		return routed == 1 && inflight == 0
	})

	resume := pause(t, daemon)
	short, cancelShort := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancelShort()
	if _, err := c.RouteContext(short, "go-rctx-stopped", fp); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("route while the daemon is stopped: %v", err)
	}
	resume()
	if _, err := c.Wait("go-rctx-stopped", 5*time.Second); err != nil {
		t.Fatalf("the daemon did not route the request once resumed: %v", err)
	}
	// The daemon's status is published at its maintenance tick: read the
	// request's route and its release in one snapshot.
	eventually(t, "the given-up request routed, then released", func() bool {
		inflight, routed := load(t, instance)
		return routed == 2 && inflight == 0
	})
}

func TestOpenContext(t *testing.T) {
	absent := fmt.Sprintf("absent-%d", os.Getpid())
	done, stop := context.WithCancel(context.Background())
	stop()
	if _, err := OpenContext(done, absent, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("open on a cancelled context: %v", err)
	}
	// The context's deadline bounds the wait for a daemon.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := OpenContext(ctx, absent, &ClientOptions{OpenTimeout: 10 * time.Second})
	if err == nil {
		t.Fatal("opened an instance no daemon serves")
	}
	within(t, "an open with a 100 ms deadline", time.Since(start), 0, time.Second)
	// Cancelled while it waits: it returns at once.
	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	start = time.Now()
	if _, err := OpenContext(ctx, absent, &ClientOptions{OpenTimeout: 3 * time.Second}); !errors.Is(err, context.Canceled) {
		t.Fatalf("open cancelled at 50 ms: %v", err)
	}
	within(t, "an open cancelled at 50 ms", time.Since(start), 50*time.Millisecond, time.Second)

	instance := startDaemon(t, 2)
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := OpenContext(ctx, instance, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

// The context variants check their arguments before anything blocks or is
// sent: bad request ids, a footprint whose counts do not fill its shape, an
// instance name with a NUL.
func TestContextVariantsRejectBadArguments(t *testing.T) {
	instance := startDaemon(t, 4)
	c, err := Open(instance, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	fp := footprint(newRNG(7), 0, 4)
	short := Footprint{Counts: fp.Counts[:len(fp.Counts)-1], Layers: fp.Layers, Experts: fp.Experts}
	for _, id := range []string{"", "has\x00nul", strings.Repeat("x", MaxRequestIDBytes+1)} {
		if _, err := c.WaitContext(ctx, id); !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("WaitContext id %q: %v", id, err)
		}
		if _, err := c.RouteContext(ctx, id, fp); !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("RouteContext id %q: %v", id, err)
		}
	}
	if _, err := c.RouteContext(ctx, "go-ctx-short", short); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("RouteContext of a short footprint: %v", err)
	}
	if _, err := OpenContext(ctx, "bad\x00instance", nil); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("OpenContext of a NUL name: %v", err)
	}
	// A pool handle checks the same before any NATS traffic (a closed one
	// still says what is wrong with the arguments first).
	var p Pool
	if _, err := p.RouteContext(ctx, "", fp); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("Pool.RouteContext of an empty id: %v", err)
	}
	if _, err := p.RouteContext(ctx, "go-ctx-short", short); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("Pool.RouteContext of a short footprint: %v", err)
	}
}
