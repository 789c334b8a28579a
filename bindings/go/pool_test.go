package eldr

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
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

// Pool.RouteContext: as Route, nothing sent on a done context, and a decision
// that arrives after its caller gave up is completed at once: here the node
// is stopped (SIGSTOP) while the request waits, the caller cancels, and the
// node answers when it resumes.
func TestPoolRouteContextReleasesADecisionItGaveUpOn(t *testing.T) {
	url := startNATS(t)
	pool := fmt.Sprintf("goctx%d", os.Getpid())
	instance, node := startDaemonProcess(t, 4, "--nats", url, "--node", "go", "--pool", pool)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p, err := OpenPoolContext(ctx, url, pool)
	var e *Error
	if errors.As(err, &e) && e.Status == ErrUnsupported {
		t.Skip("this build has no NATS support")
	}
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	fp := footprint(newRNG(6), 2, 4)
	var d Decision
	for {
		d, err = p.RouteContext(ctx, "go-pctx-1", fp)
		if err == nil || !errors.Is(err, ErrNoDaemon) || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond) // the node is still subscribing
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Complete("go-pctx-1", d.CompletionToken); err != nil {
		t.Fatal(err)
	}

	done, stop := context.WithCancel(context.Background())
	stop()
	if _, err := p.RouteContext(done, "go-pctx-unsent", fp); !errors.Is(err, context.Canceled) {
		t.Fatalf("route on a cancelled context: %v", err)
	}

	released := make(chan error, 1)
	abandonedHook = func(what string, err error) { released <- err }
	defer func() { abandonedHook = nil }()
	resume := pause(t, node)
	gaveUp, giveUp := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, giveUp)
	if _, err := p.RouteContext(gaveUp, "go-pctx-stopped", fp); !errors.Is(err, context.Canceled) {
		t.Fatalf("route while the node is stopped: %v", err)
	}
	resume()
	select {
	case err := <-released:
		if err != nil {
			t.Fatalf("the node did not answer the given-up request: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the given-up route never returned")
	}
	eventually(t, "the given-up request routed, then released", func() bool {
		inflight, routed := load(t, instance)
		return routed == 2 && inflight == 0
	})
}

func TestOpenPoolAuthChecksCredentialFilesBeforeConnecting(t *testing.T) {
	dir := t.TempDir()
	url := "nats://127.0.0.1:1"
	_, err := OpenPoolAuth(url, "p", NatsAuth{User: "gw", PasswordFile: dir + "/nope"}, 200*time.Millisecond)
	if errors.Is(err, ErrUnsupported) {
		t.Skip("this build has no NATS support")
	}
	if !errors.Is(err, ErrIO) || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("a missing password file: %v", err)
	}
	if _, err := OpenPoolAuth(url, "p", NatsAuth{User: "gw"}, 200*time.Millisecond); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("a user without a password file: %v", err)
	}
	pw := dir + "/pw"
	if err := os.WriteFile(pw, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = OpenPoolAuth(url, "p", NatsAuth{User: "gw", PasswordFile: pw}, 200*time.Millisecond)
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("no server there: %v", err)
	}
	// An inbox prefix under the pool's own subjects is no inbox.
	_, err = OpenPoolAuth(url, "p", NatsAuth{InboxPrefix: "eldr.p"}, 200*time.Millisecond)
	if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "inbox prefix") {
		t.Fatalf("inbox prefix eldr.p: %v", err)
	}
}

func TestNatsAuthFlagsAreEldrdsNames(t *testing.T) {
	var a NatsAuth
	fs := flag.NewFlagSet("gw", flag.ContinueOnError)
	a.AddFlags(fs)
	err := fs.Parse([]string{"-nats-ca", "ca.pem", "-nats-cert", "c.pem", "-nats-key", "c.key",
		"-nats-user", "gw-a", "-nats-password-file", "gw-a.pw", "-nats-inbox-prefix", "_INBOX.gw-a"})
	if err != nil {
		t.Fatal(err)
	}
	want := NatsAuth{CAFile: "ca.pem", CertFile: "c.pem", KeyFile: "c.key", User: "gw-a",
		PasswordFile: "gw-a.pw", InboxPrefix: "_INBOX.gw-a"}
	if a != want {
		t.Fatalf("parsed %+v, want %+v", a, want)
	}
}
