package eldr

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// A deterministic synthetic workload with task structure: each task prefers
// its own slice of experts.
const (
	testLayers  = 8
	testExperts = 32
	testTopK    = 2
	testTokens  = 64
)

type rng uint64

func newRNG(seed uint64) *rng { r := rng(seed*0x9E3779B97F4A7C15 | 1); return &r }

func (r *rng) next() uint64 {
	x := uint64(*r)
	x ^= x >> 12
	x ^= x << 25
	x ^= x >> 27
	*r = rng(x)
	return x * 0x2545F4914F6CDD1D
}

func (r *rng) below(n uint32) uint32 { return uint32(r.next() % uint64(n)) }

// footprint: every token picks testTopK distinct experts per layer, 85% of
// picks inside the task's slice.
func footprint(r *rng, task, tasks uint32) Footprint {
	slice := uint32(testExperts) / tasks
	counts := make([]int16, testLayers*testExperts)
	for layer := uint32(0); layer < testLayers; layer++ {
		row := counts[layer*testExperts : (layer+1)*testExperts]
		for t := 0; t < testTokens; t++ {
			var picked [testTopK]int32
			for k := range picked {
				picked[k] = -1
			}
			for k := 0; k < testTopK; k++ {
				for {
					var e uint32
					if r.below(100) < 85 {
						e = (task*slice + (layer+r.below(slice))%slice) % testExperts
					} else {
						e = r.below(testExperts)
					}
					dup := false
					for _, p := range picked {
						dup = dup || p == int32(e)
					}
					if !dup {
						picked[k] = int32(e)
						row[e]++
						break
					}
				}
			}
		}
	}
	return Footprint{Counts: counts, Layers: testLayers, Experts: testExperts}
}

func fittedTable(t testing.TB, workers uint32) *Table {
	t.Helper()
	const n = 200
	r := newRNG(7)
	prefill := make([]int16, 0, n*testLayers*testExperts)
	for i := uint32(0); i < n; i++ {
		prefill = append(prefill, footprint(r, i%4, 4).Counts...)
	}
	table, err := FitTable(Calibration{Prefill: prefill, N: n, Layers: testLayers,
		Experts: testExperts, TopK: testTopK}, FitOptions{NumWorkers: workers, Threads: 1})
	if err != nil {
		t.Fatalf("fit: %v", err)
	}
	t.Cleanup(func() { table.Close() })
	return table
}

// startDaemon runs eldrd ($ELDRD, set by ctest) on a private instance with a
// freshly fitted table, and stops it when the test ends. It skips the test
// only when the binary is absent.
func startDaemon(t testing.TB, workers uint32, extra ...string) string {
	t.Helper()
	instance, _ := startDaemonProcess(t, workers, extra...)
	return instance
}

// startDaemonProcess is startDaemon that also returns the daemon's process.
func startDaemonProcess(t testing.TB, workers uint32, extra ...string) (string, *os.Process) {
	t.Helper()
	return startDaemonWith(t, func() *Table { return fittedTable(t, workers) }, extra...)
}

// startDaemonWith is startDaemonProcess with the table that table() returns.
func startDaemonWith(t testing.TB, table func() *Table, extra ...string) (string, *os.Process) {
	t.Helper()
	bin := os.Getenv("ELDRD")
	if bin == "" {
		t.Skip("eldrd not built ($ELDRD unset)")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("eldrd not built: %v", err)
	}
	dir := t.TempDir()
	tablePath := filepath.Join(dir, "table.eldr")
	if err := table().Save(tablePath); err != nil {
		t.Fatal(err)
	}
	instance := fmt.Sprintf("go-%d-%d", os.Getpid(), time.Now().UnixNano()%1000000)
	args := append([]string{"--instance", instance, "--table", tablePath,
		"--log-level", "warn", "--metrics-port", "0"}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start eldrd: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("eldrd did not stop on SIGTERM within 10 s")
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := Open(instance, &ClientOptions{OpenTimeout: 200 * time.Millisecond})
		if err == nil {
			c.Close()
			return instance, cmd.Process
		}
		select {
		case e := <-exited:
			t.Fatalf("eldrd exited during start: %v", e)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("eldrd not ready after 20 s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// load is the daemon's requests in flight and requests routed, over all its
// workers, from one status snapshot (the CLI's `eldr status --json`,
// $ELDR_CLI, set by ctest); the test is skipped without the CLI.
func load(t *testing.T, instance string) (inflight, routed int) {
	t.Helper()
	cli := os.Getenv("ELDR_CLI")
	if cli == "" {
		t.Skip("the eldr CLI is not built ($ELDR_CLI unset)")
	}
	out, err := exec.Command(cli, "status", "--instance", instance, "--json").Output()
	if err != nil {
		t.Fatalf("eldr status: %v", err)
	}
	var status struct {
		Workers []struct {
			Inflight int `json:"inflight"`
			Routed   int `json:"routed"`
		} `json:"workers"`
	}
	if err := json.Unmarshal(out, &status); err != nil {
		t.Fatalf("eldr status --json: %v: %s", err, out)
	}
	for _, w := range status.Workers {
		inflight += w.Inflight
		routed += w.Routed
	}
	return inflight, routed
}

// eventually polls cond every 20 ms for up to 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10 s: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pause stops a process (SIGSTOP) until the returned resume is called; the
// test's end resumes it in any case.
func pause(t *testing.T, p *os.Process) (resume func()) {
	t.Helper()
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	resume = func() {
		once.Do(func() {
			if err := p.Signal(syscall.SIGCONT); err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(resume)
	return resume
}
