package eldr

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
)

func TestABIAndVersion(t *testing.T) {
	if err := CheckABI(); err != nil {
		t.Fatal(err)
	}
	// The loaded library is the one this package was built for (eldr.h).
	number := uint32(VersionMajor*10000 + VersionMinor*100 + VersionPatch)
	if Version() != BindingVersion || VersionNumber() != number || BindingVersion == "0.0.0" {
		t.Fatalf("library %q (%d), binding %q (%d)", Version(), VersionNumber(), BindingVersion, number)
	}
}

func TestFitReportsTheCalibrationShape(t *testing.T) {
	sut := fittedTable(t, 4)
	info, err := sut.Info()
	if err != nil {
		t.Fatal(err)
	}
	if info.Layers != testLayers || info.Experts != testExperts || info.TopK != testTopK ||
		info.NumWorkers != 4 {
		t.Fatalf("info %+v", info)
	}
	ids, err := sut.WorkerIDs()
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	if len(ids) != 4 || ids[0] != 0 || ids[3] != 3 {
		t.Fatalf("worker ids %v", ids)
	}
}

func TestSaveLoadRoundTripKeepsScores(t *testing.T) {
	original := fittedTable(t, 4)
	path := filepath.Join(t.TempDir(), "t.eldr")
	if err := original.Save(path); err != nil {
		t.Fatal(err)
	}
	sut, err := LoadTable(path)
	if err != nil {
		t.Fatal(err)
	}
	defer sut.Close()
	fp := footprint(newRNG(11), 2, 4)
	a, err := original.Scores(fp)
	if err != nil {
		t.Fatal(err)
	}
	b, err := sut.Scores(fp)
	if err != nil {
		t.Fatal(err)
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("scores differ: %v vs %v", a, b)
		}
	}
	sig, err := sut.Signature(fp)
	if err != nil {
		t.Fatal(err)
	}
	var norm float64
	for _, x := range sig {
		norm += float64(x) * float64(x)
	}
	if math.Abs(math.Sqrt(norm)-1) > 1e-4 {
		t.Fatalf("signature norm %v", math.Sqrt(norm))
	}
}

func TestRequestsOfOneTaskGoToTheirBestWorker(t *testing.T) {
	table := fittedTable(t, 4)
	sut, err := NewRouter(table, RouterOptions{Policy: PolicyEldr, Tau: 0})
	if err != nil {
		t.Fatal(err)
	}
	defer sut.Close()
	ids, _ := table.WorkerIDs()
	r := newRNG(99)
	for task := uint32(0); task < 4; task++ {
		first := int32(-1)
		for i := 0; i < 5; i++ {
			fp := footprint(r, task, 4)
			scores, err := table.Scores(fp)
			if err != nil {
				t.Fatal(err)
			}
			best := 0
			for j := range scores {
				if scores[j] > scores[best] {
					best = j
				}
			}
			d, err := sut.Route(fp)
			if err != nil {
				t.Fatal(err)
			}
			w := d.Worker
			if w != ids[best] {
				t.Fatalf("task %d: routed to %d, best cluster is worker %d (%v)", task, w, ids[best], scores)
			}
			if first >= 0 && w != first {
				t.Fatalf("task %d split over workers %d and %d", task, first, w)
			}
			first = w
		}
	}
}

func TestRouteScoresAndLoads(t *testing.T) {
	sut, err := NewRouter(fittedTable(t, 4), RouterOptions{Policy: PolicyEldr, Tau: DefaultTau})
	if err != nil {
		t.Fatal(err)
	}
	defer sut.Close()
	fp := footprint(newRNG(1), 3, 4)
	d, err := sut.Route(fp)
	if err != nil {
		t.Fatal(err)
	}
	if d.Worker < 0 || d.Worker > 3 || d.BandSize < 1 || d.BandSize > 4 || d.Policy != PolicyEldr ||
		d.Similarity <= 0 || d.Similarity > 1.00001 {
		t.Fatalf("decision %+v", d)
	}
	scores, err := sut.Scores(fp)
	if err != nil {
		t.Fatal(err)
	}
	slot, inBand := -1, uint32(0)
	for i, s := range scores {
		if s.Worker == d.Worker {
			slot = i
		}
		if s.InBand {
			inBand++
		}
	}
	if slot < 0 || !scores[slot].InBand || inBand != d.BandSize {
		t.Fatalf("scores %+v disagree with decision %+v", scores, d)
	}
	loads := make([]uint32, len(scores))
	loads[slot] = 1000
	moved, err := sut.RouteWithLoads(fp, loads)
	if err != nil {
		t.Fatal(err)
	}
	if d.BandSize > 1 && moved.Worker == d.Worker {
		t.Fatalf("a loaded worker kept the request although the band has %d workers", d.BandSize)
	}
	_, err = sut.RouteWithLoads(fp, loads[:2])
	if !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("short loads: %v", err)
	}
}

func TestJSQCompleteAndWorkerStates(t *testing.T) {
	sut, err := NewRouter(fittedTable(t, 4), RouterOptions{Policy: PolicyJSQ, Tau: DefaultTau})
	if err != nil {
		t.Fatal(err)
	}
	defer sut.Close()
	for w := int32(0); w < 4; w++ {
		if err := sut.SetLoad(w, 10); err != nil {
			t.Fatal(err)
		}
	}
	_ = sut.SetLoad(2, 0)
	fp := footprint(newRNG(2), 0, 4)
	if d, err := sut.Route(fp); err != nil || d.Worker != 2 {
		t.Fatalf("JSQ routed to %d (%v), want the idle worker 2", d.Worker, err)
	}
	if err := sut.CompleteWorker(2); err != nil {
		t.Fatal(err)
	}
	if err := sut.CompleteWorker(2); !errors.Is(err, ErrState) {
		t.Fatalf("complete below zero: %v", err)
	}
	err = sut.CompleteWorker(4000)
	var e *Error
	if !errors.As(err, &e) || e.Message == "" || (e.Status != ErrNotFound && e.Status != ErrInvalidArgument) {
		t.Fatalf("unknown worker: %#v", err)
	}
	_ = sut.DrainWorker(1)
	_ = sut.RemoveWorker(3)
	slots, err := sut.Workers()
	if err != nil {
		t.Fatal(err)
	}
	states := map[int32]WorkerState{}
	for _, s := range slots {
		states[s.Worker] = s.State
	}
	if states[0] != WorkerActive || states[1] != WorkerDraining || states[3] != WorkerRemoved {
		t.Fatalf("states %v", states)
	}
	for i := 0; i < 10; i++ {
		if d, _ := sut.Route(fp); d.Worker == 1 || d.Worker == 3 {
			t.Fatalf("routed to drained/removed worker %d", d.Worker)
		}
	}
}

func TestEveryPolicyHasAName(t *testing.T) {
	for p := PolicyEldr; p <= PolicyEldrCost; p++ {
		back, err := ParsePolicy(p.String())
		if err != nil || back != p {
			t.Fatalf("%d: %q -> %d, %v", p, p.String(), back, err)
		}
	}
	if _, err := ParsePolicy("nope"); !errors.Is(err, ErrInvalidArgument) {
		t.Fatal(err)
	}
}

func TestRouterSharedByGoroutines(t *testing.T) {
	table := fittedTable(t, 4)
	sut, err := NewRouter(table, DefaultRouterOptions())
	if err != nil {
		t.Fatal(err)
	}
	table.Close() // the router keeps its own reference
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			r := newRNG(uint64(100 + g))
			for i := 0; i < 50; i++ {
				d, err := sut.Route(footprint(r, uint32(g), 4))
				if err == nil {
					err = sut.CompleteWorker(d.Worker)
				}
				if err != nil {
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
	sut.Close()
	if _, err := sut.Route(footprint(newRNG(1), 0, 4)); !errors.Is(err, ErrState) {
		t.Fatalf("route after close: %v", err)
	}
	sut.Close() // idempotent
}

func TestSwapTableBumpsEpoch(t *testing.T) {
	sut, err := NewRouter(fittedTable(t, 4), DefaultRouterOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer sut.Close()
	fp := footprint(newRNG(6), 0, 4)
	before, _ := sut.Route(fp)
	if err := sut.SwapTable(fittedTable(t, 4)); err != nil {
		t.Fatal(err)
	}
	after, _ := sut.Route(fp)
	if after.TableEpoch <= before.TableEpoch {
		t.Fatalf("epoch %d -> %d", before.TableEpoch, after.TableEpoch)
	}
}

func TestErrorsCarryStatusNameAndMessage(t *testing.T) {
	table := fittedTable(t, 4)
	sut, _ := NewRouter(table, DefaultRouterOptions())
	defer sut.Close()

	// Wrong slice length: refused in Go before any C call.
	_, err := sut.Route(Footprint{Counts: make([]int16, 10), Layers: testLayers, Experts: testExperts})
	if !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("short footprint: %v", err)
	}
	// Shape disagreeing with the table: the library's error and message.
	_, err = sut.Route(Footprint{Counts: make([]int16, testLayers*16), Layers: testLayers, Experts: 16})
	var e *Error
	if !errors.As(err, &e) || e.Status != ErrShapeMismatch || e.Message == "" {
		t.Fatalf("shape mismatch: %#v", err)
	}
	if got := err.Error(); len(got) < 23 || got[:23] != "ELDR_E_SHAPE_MISMATCH: " {
		t.Fatalf("error text %q", got)
	}
	// Negative counts.
	fp := footprint(newRNG(3), 0, 4)
	fp.Counts[5] = -7
	if _, err := table.Scores(fp); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("negative count: %v", err)
	}
	// Files.
	if _, err := LoadTable("/nonexistent/eldr/table.eldr"); !errors.Is(err, ErrIO) {
		t.Fatalf("missing file: %v", err)
	}
	garbage := filepath.Join(t.TempDir(), "garbage.eldr")
	_ = os.WriteFile(garbage, []byte("this is not a cluster table at all, just bytes"), 0o600)
	if _, err := LoadTable(garbage); !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnsupported) {
		t.Fatalf("garbage file: %v", err)
	}
	if _, err := LoadTable("bad\x00path"); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("NUL path: %v", err)
	}
	if ErrTimeout.Name() != "ELDR_E_TIMEOUT" || Status(-12345).Name() != "ELDR_E_UNKNOWN" {
		t.Fatal(ErrTimeout.Name())
	}
}

func TestFitRejectsInconsistentCalibration(t *testing.T) {
	prefill := make([]int16, 8*testLayers*testExperts)
	_, err := FitTable(Calibration{Prefill: prefill, N: 9, Layers: testLayers, Experts: testExperts,
		TopK: testTopK}, FitOptions{NumWorkers: 2})
	if !errors.Is(err, ErrInvalidArgument) {
		t.Fatal(err)
	}
	_, err = FitTable(Calibration{Prefill: prefill, N: 8, Layers: testLayers, Experts: testExperts,
		TopK: testTopK}, FitOptions{NumWorkers: 0})
	var e *Error
	if !errors.As(err, &e) || e.Message == "" {
		t.Fatalf("zero workers: %#v", err)
	}
}

func TestDefaultOptionsRouteWithEldrCost(t *testing.T) {
	if DefaultRouterOptions().Policy != PolicyEldrCost || PolicyEldrCost.String() != "eldr_cost" {
		t.Fatalf("default policy %v", DefaultRouterOptions().Policy)
	}
	if p, err := ParsePolicy("eldr_cost"); err != nil || p != PolicyEldrCost {
		t.Fatalf("parse eldr_cost: %v %v", p, err)
	}
	sut, err := NewRouter(fittedTable(t, 4), DefaultRouterOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer sut.Close()
	d, err := sut.Route(footprint(newRNG(4), 1, 4))
	if err != nil || d.Policy != PolicyEldrCost {
		t.Fatalf("decision %+v, %v", d, err)
	}
}

// localityRouter: tau 0, every request of a task goes to one worker.
func localityRouter(t *testing.T, opts RouterOptions) *Router {
	opts.Policy, opts.Tau = PolicyEldr, 0
	sut, err := NewRouter(fittedTable(t, 4), opts)
	if err != nil {
		t.Fatal(err)
	}
	return sut
}

func inFlightOf(t *testing.T, sut *Router, worker int32) uint32 {
	slots, err := sut.Workers()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range slots {
		if s.Worker == worker {
			return s.InFlight
		}
	}
	t.Fatalf("no worker %d in %+v", worker, slots)
	return 0
}

func mustStats(t *testing.T, sut *Router) RouterStats {
	st, err := sut.Stats()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestRouteRequestAndComplete(t *testing.T) {
	sut := localityRouter(t, RouterOptions{})
	defer sut.Close()
	fp := footprint(newRNG(8), 2, 4)
	d1, err := sut.RouteRequest(1, fp)
	if err != nil {
		t.Fatal(err)
	}
	d2, err := sut.RouteRequest(2, fp)
	if err != nil || d2.Worker != d1.Worker || d1.Policy != PolicyEldr {
		t.Fatalf("%+v %+v %v", d1, d2, err)
	}
	w := d1.Worker
	if n := inFlightOf(t, sut, w); n != 2 {
		t.Fatalf("in flight %d", n)
	}
	// An id in flight may not be routed again.
	if _, err := sut.RouteRequest(2, fp); !errors.Is(err, ErrState) {
		t.Fatalf("duplicate id: %v", err)
	}
	if err := sut.Complete(1); err != nil {
		t.Fatal(err)
	}
	// Twice, and never routed: ErrNotFound, counted, counts unchanged.
	if err := sut.Complete(1); !errors.Is(err, ErrNotFound) {
		t.Fatalf("double completion: %v", err)
	}
	if err := sut.Complete(777); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown id: %v", err)
	}
	if n := inFlightOf(t, sut, w); n != 1 {
		t.Fatalf("in flight %d after the rejected completions", n)
	}
	st := mustStats(t, sut)
	if st.Routed != 2 || st.Rejected != 1 || st.CompletesUnknown != 2 || st.CompletesRejected != 2 {
		t.Fatalf("stats %+v", st)
	}
	if err := sut.Complete(2); err != nil || inFlightOf(t, sut, w) != 0 {
		t.Fatalf("complete 2: %v", err)
	}
}

func TestCompleteTakesTheOldestRequestOnTheWorker(t *testing.T) {
	sut := localityRouter(t, RouterOptions{})
	defer sut.Close()
	fp := footprint(newRNG(9), 1, 4)
	var w int32
	for id := uint64(10); id < 13; id++ {
		d, err := sut.RouteRequest(id, fp)
		if err != nil {
			t.Fatal(err)
		}
		w = d.Worker
	}
	if err := sut.CompleteWorker(w); err != nil { // 10
		t.Fatal(err)
	}
	if err := sut.Complete(10); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the oldest was not taken: %v", err)
	}
	if err := sut.Complete(12); err != nil {
		t.Fatal(err)
	}
	if err := sut.CompleteWorker(w); err != nil { // 11
		t.Fatal(err)
	}
	if err := sut.Complete(11); !errors.Is(err, ErrNotFound) {
		t.Fatalf("11 still in flight: %v", err)
	}
	if err := sut.CompleteWorker(w); !errors.Is(err, ErrState) {
		t.Fatalf("complete of nothing: %v", err)
	}
}

func TestReportSetsTheInFlightCount(t *testing.T) {
	sut := localityRouter(t, RouterOptions{})
	defer sut.Close()
	fp := footprint(newRNG(10), 0, 4)
	d, err := sut.RouteRequest(1, fp)
	if err != nil {
		t.Fatal(err)
	}
	if err := sut.Report(WorkerReport{Worker: d.Worker, BatchSize: 7}); err != nil {
		t.Fatal(err)
	}
	if n := inFlightOf(t, sut, d.Worker); n != 7 {
		t.Fatalf("in flight %d after a report of 7", n)
	}
	if _, err := sut.RouteRequest(2, fp); err != nil || inFlightOf(t, sut, d.Worker) != 8 {
		t.Fatalf("route after report: %v", err)
	}
	if err := sut.Report(WorkerReport{Worker: d.Worker, StepMs: 3.5}); err != nil || inFlightOf(t, sut, d.Worker) != 8 {
		t.Fatalf("batch 0 is not reported: %v", err)
	}
	for _, bad := range []float32{-1, float32(math.NaN()), float32(math.Inf(1))} {
		if err := sut.Report(WorkerReport{Worker: d.Worker, BatchSize: 3, StepMs: bad}); !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("step_ms %v: %v", bad, err)
		}
	}
	if err := sut.Report(WorkerReport{Worker: 4000, BatchSize: 3, StepMs: 1}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown worker: %v", err)
	}
	if err := sut.Report(WorkerReport{Worker: -1, BatchSize: 3, StepMs: 1}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("negative worker: %v", err)
	}
}

func TestStepConstantsOptionsAndFit(t *testing.T) {
	table := fittedTable(t, 4)
	given := StepCost{T0Ms: 2, TSeqMs: 0.5, AlphaUs: 3}
	for _, noFit := range []bool{false, true} {
		opts := DefaultRouterOptions()
		opts.StepCost, opts.NoStepCostFit = &given, noFit
		sut, err := NewRouter(table, opts)
		if err != nil {
			t.Fatal(err)
		}
		st := mustStats(t, sut)
		if st.T0Ms != 2 || st.TSeqMs != 0.5 || st.AlphaUs != 3 || st.StepSamples != 0 {
			t.Fatalf("stats %+v", st)
		}
		if _, err := sut.RouteRequest(1, footprint(newRNG(1), 0, 4)); err != nil {
			t.Fatal(err)
		}
		for i := uint32(0); i < 40; i++ {
			if err := sut.Report(WorkerReport{Worker: 0, BatchSize: uint32(1 + i%4), StepMs: 30 + float32(i%4)}); err != nil {
				t.Fatal(err)
			}
		}
		st = mustStats(t, sut)
		if noFit && (st.StepSamples != 0 || st.T0Ms != 2) {
			t.Fatalf("fit off, stats %+v", st)
		}
		if !noFit && (st.StepSamples != 40 || st.T0Ms == 2) {
			t.Fatalf("fit on, stats %+v", st)
		}
		sut.Close()
		if _, err := sut.Stats(); !errors.Is(err, ErrState) {
			t.Fatalf("stats after close: %v", err)
		}
	}
	// A mix of set and unset constants is refused.
	opts := DefaultRouterOptions()
	opts.StepCost = &StepCost{T0Ms: 1, TSeqMs: -1, AlphaUs: 1}
	if _, err := NewRouter(table, opts); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("mixed constants: %v", err)
	}
	// One request record: the second route is counted but untracked.
	sut := localityRouter(t, RouterOptions{MaxInFlight: 1})
	defer sut.Close()
	fp := footprint(newRNG(2), 3, 4)
	for id := uint64(1); id <= 2; id++ {
		if _, err := sut.RouteRequest(id, fp); err != nil {
			t.Fatal(err)
		}
	}
	if st := mustStats(t, sut); st.Untracked != 1 || st.Routed != 2 {
		t.Fatalf("stats %+v", st)
	}
	if err := sut.Complete(2); !errors.Is(err, ErrNotFound) {
		t.Fatalf("untracked id: %v", err)
	}
}
