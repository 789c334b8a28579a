package eldr

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// startNATS runs a nats-server on a free loopback port for the test; skips
// the test when nats-server is not installed.
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
		t.Fatalf("start nats-server: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	return fmt.Sprintf("nats://127.0.0.1:%d", port)
}

func TestPoolRoutesThroughANodeOverNATS(t *testing.T) {
	url := startNATS(t)
	pool := fmt.Sprintf("go%d", os.Getpid())
	startDaemon(t, 4, "--nats", url, "--node", "go", "--pool", pool)
	p, err := OpenPool(url, pool, 2*time.Second)
	var e *Error
	if errors.As(err, &e) && e.Status == ErrUnsupported {
		t.Skip("this build has no NATS support")
	}
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	fp := footprint(newRNG(3), 1, 4)
	var d Decision
	deadline := time.Now().Add(10 * time.Second)
	for {
		d, err = p.Route("go-pool-1", fp, 2*time.Second)
		if err == nil || !errors.As(err, &e) || e.Status != ErrNoDaemon || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond) // the node is still subscribing
	}
	if err != nil {
		t.Fatal(err)
	}
	if d.Worker < 0 || d.CompletionToken == 0 {
		t.Fatalf("decision %+v", d)
	}
	if err := p.Complete("go-pool-1", 0); !errors.As(err, &e) || e.Status != ErrInvalidArgument {
		t.Fatalf("complete without a token: %v", err)
	}
	if err := p.Complete("go-pool-1", d.CompletionToken); err != nil {
		t.Fatal(err)
	}
	if err := p.Complete("go-pool-1", d.CompletionToken); !errors.As(err, &e) || e.Status != ErrNotFound {
		t.Fatalf("second complete: %v", err)
	}
	bad := Footprint{Layers: fp.Layers + 1, Experts: fp.Experts,
		Counts: make([]int16, int(fp.Layers+1)*int(fp.Experts))}
	for i := range bad.Counts {
		bad.Counts[i] = 1
	}
	if _, err := p.Route("go-pool-bad", bad, 2*time.Second); !errors.As(err, &e) || e.Status != ErrShapeMismatch {
		t.Fatalf("a footprint of another shape: %v", err)
	}
	p.Close()
	if _, err := p.Route("go-pool-2", fp, time.Second); err == nil {
		t.Fatal("route after Close succeeded")
	}
}
