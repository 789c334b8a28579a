package eldr

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// Routing from the prompt: a predictor fitted on 4 synthetic domains (task t
// of the workload uses its own words and its own token ids), token ids and
// text routed to the domain's worker, learning, bad input.

var domainWords = [4][4]string{
	{"integral", "derivative", "matrix", "theorem"},
	{"function", "compile", "pointer", "class"},
	{"court", "statute", "contract", "plaintiff"},
	{"patient", "dose", "symptom", "diagnosis"},
}

func domainText(task, variant uint32) string {
	var b strings.Builder
	b.WriteString("You are a helpful assistant. Answer the question. ")
	for i := uint32(0); i < 6; i++ {
		b.WriteString(domainWords[task][(i+variant)%4] + " ")
	}
	fmt.Fprintf(&b, "please and thank you %d", variant)
	return b.String()
}

func domainTokens(task, variant uint32) []uint32 {
	t := []uint32{1, 2, 3, 4, 5}
	for i := uint32(0); i < 8; i++ {
		t = append(t, 100*(task+1)+(i*7+variant)%10)
	}
	return append(t, 9000+variant)
}

// predictorTable is fittedTable with a predictor fitted on perTask text and
// perTask token-id prompts of each task.
func predictorTable(t testing.TB, workers, perTask uint32) *Table {
	t.Helper()
	r := newRNG(23)
	var prompts []Prompt
	var footprints []int16
	for task := uint32(0); task < 4; task++ {
		for v := uint32(0); v < perTask; v++ {
			prompts = append(prompts, TextPrompt(domainText(task, v)), TokensPrompt(domainTokens(task, v)))
			footprints = append(footprints, footprint(r, task, 4).Counts...)
			footprints = append(footprints, footprint(r, task, 4).Counts...)
		}
	}
	table, skipped, err := fittedTable(t, workers).FitPredictor(prompts, footprints, nil)
	if err != nil || skipped != 0 {
		t.Fatalf("FitPredictor: %v (skipped %d)", err, skipped)
	}
	t.Cleanup(func() { table.Close() })
	return table
}

// taskWorker is the worker table routes task's footprints to (its best cluster).
func taskWorker(t testing.TB, table *Table, task uint32) int32 {
	t.Helper()
	scores, err := table.Scores(footprint(newRNG(1000+uint64(task)), task, 4))
	if err != nil {
		t.Fatal(err)
	}
	best := 0
	for i := range scores {
		if scores[i] > scores[best] {
			best = i
		}
	}
	ids, err := table.WorkerIDs()
	if err != nil {
		t.Fatal(err)
	}
	return ids[best]
}

// bestWorkerRouter routes by the locality band alone (tau 0): the best
// worker, whatever the loads.
func bestWorkerRouter(t testing.TB, table *Table) *Router {
	t.Helper()
	r, err := NewRouter(table, RouterOptions{Policy: PolicyEldr, Tau: 0})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func wantStatus(t *testing.T, what string, err error, want Status) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) || e.Status != want {
		t.Fatalf("%s: got %v, want %s", what, err, want.Name())
	}
}

func TestFitPredictorGivesATableWithAPredictor(t *testing.T) {
	plain := fittedTable(t, 4)
	_, err := plain.PredictorInfo()
	wantStatus(t, "a table without a predictor", err, ErrNotFound)
	sut := predictorTable(t, 4, 6)
	info, err := sut.PredictorInfo()
	if err != nil {
		t.Fatal(err)
	}
	if info.Prototypes != 48 || info.Kinds != PromptKindTokens|PromptKindText ||
		info.Learned < 48 || info.DemandBytes == 0 || info.FeatureBytes == 0 {
		t.Fatalf("predictor info %+v", info)
	}
	a, _ := sut.Info()
	b, _ := plain.Info()
	if a != b {
		t.Fatalf("the copy changed the clusters: %+v vs %+v", a, b)
	}
	o := DefaultPredictorOptions()
	if o.Capacity != 4096 || o.Neighbours != 16 || o.MaxFeatures != 256 || o.Bandwidth != 0.05 {
		t.Fatalf("default options %+v", o)
	}
}

func TestRouteTokensAndTextPickTheDomainsWorker(t *testing.T) {
	table := predictorTable(t, 4, 6)
	sut := bestWorkerRouter(t, table)
	for task := uint32(0); task < 4; task++ {
		want := taskWorker(t, table, task)
		d, err := sut.RouteText(domainText(task, 17), nil)
		if err != nil || d.Worker != want || d.Confidence <= 0.5 || d.Confidence > 1 {
			t.Fatalf("text of task %d: %+v, %v (want worker %d)", task, d, err, want)
		}
		d, err = sut.RouteTokens(domainTokens(task, 8), nil)
		if err != nil || d.Worker != want || d.Confidence <= 0.5 {
			t.Fatalf("tokens of task %d: %+v, %v (want worker %d)", task, d, err, want)
		}
	}
	d, err := sut.RouteText("zebra quantum violin marmalade", nil)
	if err != nil || d.Confidence >= 0.3 {
		t.Fatalf("an unfamiliar prompt: %+v, %v", d, err)
	}
	d, err = sut.Route(footprint(newRNG(3), 1, 4))
	if err != nil || d.Confidence != 1 {
		t.Fatalf("a footprint's confidence: %+v, %v", d, err)
	}
	st, err := sut.PromptStats()
	if err != nil || st.Routed != 9 || st.Rejected != 0 {
		t.Fatalf("prompt stats %+v, %v", st, err)
	}
}

func TestRoutePromptAmongChoosesOnlyTheGivenWorkers(t *testing.T) {
	table := predictorTable(t, 4, 6)
	router := bestWorkerRouter(t, table)
	own := taskWorker(t, table, 1)
	ids, _ := table.WorkerIDs()
	var others []int32
	for _, id := range ids {
		if id != own {
			others = append(others, id)
		}
	}
	for _, p := range []Prompt{TextPrompt(domainText(1, 30)), TokensPrompt(domainTokens(1, 30))} {
		d, err := router.RoutePromptAmong(p, nil, nil)
		if err != nil || d.Worker != own {
			t.Fatalf("among every worker: %+v %v, want %d", d, err, own)
		}
		d, err = router.RoutePromptAmong(p, nil, append(others, 999))
		if err != nil || d.Worker == own {
			t.Fatalf("among %v: %+v %v", others, d, err)
		}
		id := uint64(77)
		if d, err = router.RoutePromptAmong(p, &id, []int32{own}); err != nil || d.Worker != own {
			t.Fatalf("among [%d] with an id: %+v %v", own, d, err)
		}
		if err := router.Complete(id); err != nil {
			t.Fatal(err)
		}
	}
	_, err := router.RoutePromptAmong(TextPrompt("hello"), nil, []int32{})
	wantStatus(t, "an empty set", err, ErrNoWorker)
	_, err = router.RoutePromptAmong(TextPrompt("hello"), nil, []int32{999})
	wantStatus(t, "only unknown ids", err, ErrNoWorker)
}

func TestLearnTakesTheRealFootprintOfARequestRoutedFromItsPrompt(t *testing.T) {
	table := predictorTable(t, 4, 6)
	sut := bestWorkerRouter(t, table)
	id := uint64(7)
	d, err := sut.RouteText(domainText(2, 30), &id)
	if err != nil || d.Worker != taskWorker(t, table, 2) {
		t.Fatalf("%+v, %v", d, err)
	}
	fp := footprint(newRNG(4), 2, 4)
	if err := sut.Learn(7, fp); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, "learned twice", sut.Learn(7, fp), ErrNotFound)
	wantStatus(t, "an id never routed from a prompt", sut.Learn(99, fp), ErrNotFound)
	wantStatus(t, "a footprint that does not hold its shape",
		sut.Learn(7, Footprint{Counts: fp.Counts[1:], Layers: fp.Layers, Experts: fp.Experts}),
		ErrInvalidArgument)
	if err := sut.Complete(7); err != nil {
		t.Fatal(err)
	}
	st, err := sut.PromptStats()
	if err != nil || st.Routed != 1 || st.Learned != 1 || st.LearnRejected < 2 {
		t.Fatalf("prompt stats %+v, %v", st, err)
	}
}

func TestLearningTeachesANewDomain(t *testing.T) {
	r := newRNG(5)
	var prompts []Prompt
	var footprints []int16
	for task := uint32(0); task < 3; task++ { // no task 3
		for v := uint32(0); v < 6; v++ {
			prompts = append(prompts, TextPrompt(domainText(task, v)))
			footprints = append(footprints, footprint(r, task, 4).Counts...)
		}
	}
	table, _, err := fittedTable(t, 4).FitPredictor(prompts, footprints, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer table.Close()
	sut := bestWorkerRouter(t, table)
	before, err := sut.RouteText(domainText(3, 40), nil)
	if err != nil {
		t.Fatal(err)
	}
	for v := uint64(0); v < 8; v++ {
		id := 100 + v
		if _, err := sut.RouteText(domainText(3, uint32(v)), &id); err != nil {
			t.Fatal(err)
		}
		if err := sut.Learn(id, footprint(r, 3, 4)); err != nil {
			t.Fatal(err)
		}
		_ = sut.Complete(id)
	}
	after, err := sut.RouteText(domainText(3, 40), nil)
	if err != nil || after.Worker != taskWorker(t, table, 3) || after.Confidence <= before.Confidence {
		t.Fatalf("before %+v, after %+v, %v", before, after, err)
	}
}

func TestBadPromptsAndATableWithoutAPredictor(t *testing.T) {
	sut := bestWorkerRouter(t, predictorTable(t, 4, 4))
	for what, p := range map[string]Prompt{
		"empty text":             TextPrompt(""),
		"no token":               TokensPrompt(nil),
		"id past the vocabulary": TokensPrompt([]uint32{1, MaxVocabulary, 2}),
		"too many tokens":        TokensPrompt(make([]uint32, MaxPromptTokens+1)),
		"invalid UTF-8":          TextPrompt("\xff"),
	} {
		_, err := sut.RoutePrompt(p, nil)
		wantStatus(t, what, err, ErrInvalidArgument)
	}
	if st, _ := sut.PromptStats(); st.Rejected != 5 {
		t.Fatalf("rejected %d, want 5", st.Rejected)
	}
	if _, err := sut.RouteTokens([]uint32{MaxVocabulary - 1, 5}, nil); err != nil {
		t.Fatal(err)
	}

	plain := bestWorkerRouter(t, fittedTable(t, 4))
	_, err := plain.RouteText(domainText(0, 1), nil)
	wantStatus(t, "no predictor", err, ErrUnsupported)
	id := uint64(1)
	_, err = plain.RouteTokens(domainTokens(0, 1), &id)
	wantStatus(t, "no predictor", err, ErrUnsupported)

	// A text predictor does not read token ids.
	r := newRNG(6)
	var prompts []Prompt
	var footprints []int16
	for i := uint32(0); i < 8; i++ {
		prompts = append(prompts, TextPrompt(domainText(i%4, i)))
		footprints = append(footprints, footprint(r, i%4, 4).Counts...)
	}
	text, _, err := fittedTable(t, 4).FitPredictor(prompts, footprints, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer text.Close()
	_, err = bestWorkerRouter(t, text).RouteTokens(domainTokens(0, 1), nil)
	wantStatus(t, "token ids to a text predictor", err, ErrUnsupported)

	sut.Close()
	_, err = sut.RouteText("hello", nil)
	wantStatus(t, "route after Close", err, ErrState)
}

func TestFitPredictorChecksItsInput(t *testing.T) {
	table := fittedTable(t, 4)
	fp := footprint(newRNG(8), 0, 4).Counts
	one := []Prompt{TextPrompt(domainText(0, 0))}
	_, _, err := table.FitPredictor(one, fp[1:], nil)
	wantStatus(t, "short footprints", err, ErrInvalidArgument)
	_, _, err = table.FitPredictor(nil, nil, nil)
	wantStatus(t, "no prompts", err, ErrInvalidArgument)
	two := append(append([]int16(nil), fp...), fp...)
	got, skipped, err := table.FitPredictor([]Prompt{TextPrompt(""), one[0]}, two, nil)
	if err != nil || skipped != 1 {
		t.Fatalf("one bad record of two: skipped %d, %v", skipped, err)
	}
	got.Close()
	_, _, err = table.FitPredictor([]Prompt{TokensPrompt([]uint32{MaxVocabulary})}, fp, nil)
	wantStatus(t, "no usable record", err, ErrInvalidArgument)
	bad := DefaultPredictorOptions()
	bad.Neighbours = 0
	_, _, err = table.FitPredictor(one, fp, &bad)
	wantStatus(t, "zero neighbours", err, ErrInvalidArgument)
}

func TestThePredictorSurvivesSaveAndLoad(t *testing.T) {
	original := predictorTable(t, 4, 4)
	path := t.TempDir() + "/t.eldr"
	if err := original.Save(path); err != nil {
		t.Fatal(err)
	}
	loaded, err := LoadTable(path)
	if err != nil {
		t.Fatal(err)
	}
	defer loaded.Close()
	a, _ := original.PredictorInfo()
	b, err := loaded.PredictorInfo()
	if err != nil || a != b {
		t.Fatalf("%+v vs %+v, %v", a, b, err)
	}
	sut := bestWorkerRouter(t, loaded)
	for task := uint32(0); task < 4; task++ {
		if d, err := sut.RouteText(domainText(task, 9), nil); err != nil || d.Worker != taskWorker(t, loaded, task) {
			t.Fatalf("task %d: %+v, %v", task, d, err)
		}
	}
}

// Through eldrd: the daemon routes a prompt with its table's predictor and
// learns from the real footprint pushed later under the same id.

func TestClientRoutesPromptsToTheDomainsWorker(t *testing.T) {
	var table *Table
	// The paper's rule: the domain's worker wins while loads are equal
	// (eldr_cost would spread these one-at-a-time requests to idle workers).
	instance, _ := startDaemonWith(t, func() *Table { table = predictorTable(t, 4, 6); return table },
		"--policy", "eldr")
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
	for task := uint32(0); task < 4; task++ {
		want := taskWorker(t, table, task)
		id := fmt.Sprintf("go-text-%d", task)
		d, err := gateway.RouteText(id, domainText(task, 17), 5*time.Second)
		if err != nil || d.Worker != want || d.Confidence <= 0.5 || d.CompletionToken == 0 {
			t.Fatalf("text of task %d: %+v, %v (want worker %d)", task, d, err, want)
		}
		// After prefill the engine pushes the real footprint under the same id.
		if err := engine.Push(id, footprint(newRNG(uint64(task)), task, 4)); err != nil {
			t.Fatal(err)
		}
		if err := gateway.Complete(id, d.CompletionToken); err != nil {
			t.Fatal(err)
		}
		id = fmt.Sprintf("go-tokens-%d", task)
		if d, err = gateway.RouteTokens(id, domainTokens(task, 8), 5*time.Second); err != nil || d.Worker != want {
			t.Fatalf("tokens of task %d: %+v, %v (want worker %d)", task, d, err, want)
		}
		_ = gateway.Complete(id, d.CompletionToken)
	}
	if err := gateway.PushText("go-push-text", domainText(1, 30)); err != nil {
		t.Fatal(err)
	}
	if err := gateway.PushTokens("go-push-tokens", domainTokens(3, 30)); err != nil {
		t.Fatal(err)
	}
	for id, task := range map[string]uint32{"go-push-text": 1, "go-push-tokens": 3} {
		d, err := gateway.Wait(id, 5*time.Second)
		if err != nil || d.Worker != taskWorker(t, table, task) {
			t.Fatalf("%s: %+v, %v", id, d, err)
		}
		_ = gateway.Complete(id, d.CompletionToken)
	}
	_, err = gateway.RouteTokens("go-bad", []uint32{1, MaxVocabulary}, 5*time.Second)
	wantStatus(t, "an id past the vocabulary", err, ErrInvalidArgument)
	_, err = gateway.RouteText("go-empty", "", 5*time.Second)
	wantStatus(t, "empty text", err, ErrInvalidArgument)
	wantStatus(t, "a bad request id", gateway.PushText("", "hello"), ErrInvalidArgument)
}

func TestClientPromptWithoutAPredictorIsUnsupported(t *testing.T) {
	instance := startDaemon(t, 4)
	c, err := Open(instance, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.RouteText("go-no-predictor", domainText(0, 1), 5*time.Second)
	wantStatus(t, "no predictor in the daemon's table", err, ErrUnsupported)
}

func TestPoolRoutesPromptsOverNATS(t *testing.T) {
	url := startNATS(t)
	pool := fmt.Sprintf("gop%d", os.Getpid())
	var table *Table
	startDaemonWith(t, func() *Table { table = predictorTable(t, 4, 6); return table },
		"--nats", url, "--node", "gop", "--pool", pool, "--policy", "eldr")
	p, err := OpenPool(url, pool, 2*time.Second)
	var e *Error
	if errors.As(err, &e) && e.Status == ErrUnsupported {
		t.Skip("this build has no NATS support")
	}
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var d Decision
	deadline := time.Now().Add(10 * time.Second)
	for {
		d, err = p.RouteText("gop-text-0", domainText(0, 17), 2*time.Second)
		if err == nil || !errors.As(err, &e) || e.Status != ErrNoDaemon || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond) // the node is still subscribing
	}
	if err != nil || d.Worker != taskWorker(t, table, 0) || d.CompletionToken == 0 {
		t.Fatalf("text through the pool: %+v, %v", d, err)
	}
	if err := p.Complete("gop-text-0", d.CompletionToken); err != nil {
		t.Fatal(err)
	}
	d, err = p.RouteTokens("gop-tokens-2", domainTokens(2, 8), 2*time.Second)
	if err != nil || d.Worker != taskWorker(t, table, 2) {
		t.Fatalf("tokens through the pool: %+v, %v", d, err)
	}
	_ = p.Complete("gop-tokens-2", d.CompletionToken)
	_, err = p.RouteTokens("gop-bad", nil, 2*time.Second)
	wantStatus(t, "no token", err, ErrInvalidArgument)
}
