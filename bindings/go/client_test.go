package eldr

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestClientRouteGetsADecision(t *testing.T) {
	instance := startDaemon(t, 4)
	sut, err := Open(instance, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sut.Close()
	d, err := sut.Route("go-route-1", footprint(newRNG(1), 2, 4), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if d.Worker < 0 || d.Worker > 3 || d.BandSize < 1 || d.Similarity <= 0 {
		t.Fatalf("decision %+v", d)
	}
	if d.CompletionToken == 0 {
		t.Fatalf("decision without a completion token: %+v", d)
	}
	if err := sut.Complete("go-route-1", d.CompletionToken); err != nil {
		t.Fatal(err)
	}
}

// A footprint of another geometry than the daemon's table: eldrd rejects it,
// and Route returns the daemon's status (eldr_client_route does since the header
// says so), never a decision.
func TestClientRouteReturnsTheDaemonsStatusForARejectedFootprint(t *testing.T) {
	instance := startDaemon(t, 4)
	sut, err := Open(instance, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sut.Close()
	wrong := Footprint{Counts: make([]int16, (testLayers+1)*testExperts), Layers: testLayers + 1,
		Experts: testExperts}
	for i := range wrong.Counts {
		wrong.Counts[i] = 1
	}
	d, err := sut.Route("go-route-rejected", wrong, 5*time.Second)
	var e *Error
	if !errors.As(err, &e) || e.Status != ErrShapeMismatch {
		t.Fatalf("Route of a wrong geometry: %+v, %v (want ErrShapeMismatch)", d, err)
	}
	if !strings.Contains(err.Error(), "go-route-rejected") {
		t.Fatalf("the error does not name the request: %v", err)
	}
	if _, err := sut.Route("go-route-accepted", footprint(newRNG(2), 1, 4), 5*time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestGatewayWaitsForAFootprintPushedByTheEngine(t *testing.T) {
	instance := startDaemon(t, 4)
	engine, err := Open(instance, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer engine.Close()
	gateway, err := Open(instance, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer gateway.Close()
	if err := engine.Push("go-wait-1", footprint(newRNG(2), 1, 4)); err != nil {
		t.Fatal(err)
	}
	d, err := gateway.Wait("go-wait-1", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	again, err := gateway.Wait("go-wait-1", 0)
	if err != nil || again.Worker != d.Worker {
		t.Fatalf("second look: %+v %v, first %+v", again, err, d)
	}
	if _, err := gateway.Wait("never-pushed", 50*time.Millisecond); !errors.Is(err, ErrTimeout) {
		t.Fatalf("unknown request: %v", err)
	}
}

func TestClientRejectsBadArguments(t *testing.T) {
	instance := startDaemon(t, 4)
	sut, err := Open(instance, nil)
	if err != nil {
		t.Fatal(err)
	}
	fp := footprint(newRNG(3), 0, 4)
	for _, id := range []string{"", "has\x00nul", strings.Repeat("x", MaxRequestIDBytes+1)} {
		if err := sut.Push(id, fp); !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("id %q: %v", id, err)
		}
	}
	if err := sut.Push(strings.Repeat("y", MaxRequestIDBytes), fp); err != nil {
		t.Fatal(err)
	}
	if err := sut.Report(WorkerReport{Worker: 0, Running: 1, KVUsage: 2.5}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("kv usage 2.5: %v", err)
	}
	if err := sut.Report(WorkerReport{Worker: 0, Running: 1, KVUsage: 0.25}); err != nil {
		t.Fatal(err)
	}
	if err := sut.Report(WorkerReport{Worker: 0, Running: 2, KVUsage: 0.5, BatchSize: 3,
		StepMs: 4.5}); err != nil {
		t.Fatal(err)
	}
	if err := sut.Report(WorkerReport{Worker: 0, Running: 1, KVUsage: 0.5}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []WorkerReport{{StepMs: -1}, {StepMs: float32(math.NaN())},
		{StepMs: float32(math.Inf(1))}, {KVUsage: 1.5}, {Worker: -1}} {
		if err := sut.Report(bad); !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("report %+v: %v", bad, err)
		}
	}
	if err := sut.DrainWorker(1); err != nil {
		t.Fatal(err)
	}
	if err := sut.AddWorker(1); err != nil {
		t.Fatal(err)
	}
	sut.Close()
	if err := sut.Push("after-close", fp); !errors.Is(err, ErrState) {
		t.Fatalf("push after close: %v", err)
	}
}

func TestClientSharedByGoroutines(t *testing.T) {
	instance := startDaemon(t, 4)
	sut, err := Open(instance, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sut.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for g := 0; g < 3; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			r := newRNG(uint64(50 + g))
			for i := 0; i < 20; i++ {
				id := fmt.Sprintf("g%d-%d", g, i)
				if _, err := sut.Route(id, footprint(r, uint32(g), 4), 5*time.Second); err != nil {
					errs <- err
					return
				}
				if err := sut.Complete(id, 0); err != nil {
					errs <- err
					return
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestOpenWithoutDaemonFails(t *testing.T) {
	_, err := Open(fmt.Sprintf("go-absent-%d", os.Getpid()), &ClientOptions{OpenTimeout: 50 * time.Millisecond})
	var e *Error
	if !errors.As(err, &e) || (e.Status != ErrNoDaemon && e.Status != ErrTimeout) || e.Message == "" {
		t.Fatalf("%#v", err)
	}
}
