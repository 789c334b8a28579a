package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"eldr.dev/eldr/epp/internal/envoysim"
)

// startEldrd runs this build's eldrd ($ELDRD, set by ctest) over the
// harness's table; skips the test without it.
func startEldrd(t *testing.T, table, instance string, extra ...string) {
	t.Helper()
	bin := os.Getenv("ELDRD")
	if bin == "" {
		t.Skip("eldrd not built ($ELDRD unset)")
	}
	args := append([]string{"--instance", instance, "--table", table, "--log-level", "warn",
		"--metrics-port", "0"}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
}

// startNATS runs a nats-server on a free loopback port; skips without one.
func startNATS(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		bin = "/usr/sbin/nats-server"
		if _, statErr := os.Stat(bin); statErr != nil {
			t.Skip("nats-server is not installed (scripts/install-deps.sh installs it)")
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command(bin, "-a", "127.0.0.1", "-p", fmt.Sprint(port))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	return fmt.Sprintf("nats://127.0.0.1:%d", port)
}

// routesByEldr: 24 requests of four tasks, held open together; each task
// stays on at most two endpoints, all are picked by eldr, and every end
// reaches eldr (no complete refused).
func routesByEldr(t *testing.T, h *harness) {
	t.Helper()
	r := synthRNG(19)
	var held []*envoysim.Result
	byTask := map[int]map[string]int{}
	for i := 0; i < 24; i++ {
		task := i % synthTasks
		res := h.do(envoysim.Request{Body: textBody(&r, task, false), HoldResponse: true})
		if res.Immediate != nil {
			t.Fatal(res.Immediate.GetBody())
		}
		if byTask[task] == nil {
			byTask[task] = map[string]int{}
		}
		byTask[task][res.Destination[0]]++
		if !strings.HasPrefix(res.Headers["x-eldr-request-id"], "epp-") {
			t.Fatalf("no x-eldr-request-id for the engine: %v", res.Headers)
		}
		held = append(held, res)
	}
	if got := h.metric("eldr_epp_picks_total", `by="eldr"`); got != 24 {
		t.Fatalf("picks by eldr = %v of 24 (fallbacks: %v)", got, h.metric("eldr_epp_fallbacks_total"))
	}
	for task, seen := range byTask {
		if len(seen) > 2 {
			t.Errorf("task %d spread over %v", task, seen)
		}
	}
	for _, res := range held {
		if err := res.Finish(); err != nil {
			t.Fatal(err)
		}
	}
	h.noLeaks()
	if n := h.metric("eldr_epp_eldr_complete_errors_total"); n != 0 {
		t.Errorf("eldr refused %v completes", n)
	}
}

// -router eldrd: the node's daemon (its table and predictor) decides.
func TestPicksThroughEldrd(t *testing.T) {
	instance := fmt.Sprintf("epp-%d-%d", os.Getpid(), time.Now().UnixNano()%1000000)
	h := newHarness(t, decodeEngines(4), func(o *Options) { o.Router, o.Instance = "eldrd", instance })
	startEldrd(t, h.tablePath, instance)
	eventually(t, "the picker connects to eldrd", func() bool {
		_, err := h.epp.picker.eldr.(*sidecar).get()
		return err == nil
	})
	routesByEldr(t, h)
}

// -router nats: any node of the pool decides; with NATS gone, least-loaded.
func TestPicksThroughThePoolOverNATS(t *testing.T) {
	url := startNATS(t)
	pool := fmt.Sprintf("epp%d", os.Getpid())
	instance := fmt.Sprintf("eppn-%d-%d", os.Getpid(), time.Now().UnixNano()%1000000)
	h := newHarness(t, decodeEngines(4), func(o *Options) { o.Router, o.NATS, o.PoolName = "nats", url, pool })
	startEldrd(t, h.tablePath, instance, "--nats", url, "--node", "n1", "--pool", pool)
	eventually(t, "the picker joins the pool and a node answers", func() bool {
		if _, err := h.epp.picker.eldr.(*natsPool).get(); err != nil {
			return false
		}
		res := h.do(envoysim.Request{Body: []byte(`{"model":"synth-moe","prompt":"warm up"}`)})
		return res.Immediate == nil && h.metric("eldr_epp_picks_total", `by="eldr"`) == 1
	})
	h.epp.m.picks.Reset()
	routesByEldr(t, h)

	down := newHarness(t, decodeEngines(2), func(o *Options) {
		o.Router, o.NATS, o.PoolName = "nats", "nats://127.0.0.1:1", pool
	})
	if res := down.do(envoysim.Request{Body: []byte(`{"model":"synth-moe","prompt":"hello"}`)}); res.Immediate != nil {
		t.Fatal("refused with NATS down")
	}
	if down.metric("eldr_epp_fallbacks_total", `reason="eldr_down"`) != 1 {
		t.Error("NATS down is not counted")
	}
	down.noLeaks()
}
