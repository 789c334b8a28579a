package main

// A synthetic model for the demo, the benchmark and the tests: a few task
// domains, each with its own words, token ids and experts, and a table with
// a predictor fitted on them, so that a prompt of a domain is routed to the
// worker that serves that domain's experts.

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"eldr.dev/eldr"
)

const (
	synthLayers  = 8
	synthExperts = 64
	synthTopK    = 4
	synthTasks   = 4
	synthTokens  = 32 // prefill tokens per footprint
)

var synthWords = [synthTasks][]string{
	{"integral", "matrix", "theorem", "derivative", "eigenvalue", "proof"},
	{"compile", "pointer", "function", "variable", "segfault", "thread"},
	{"sonnet", "rhyme", "stanza", "metaphor", "verse", "poem"},
	{"patient", "dose", "symptom", "diagnosis", "therapy", "clinic"},
}

// synthRNG is xorshift64*: the same data on every machine.
type synthRNG uint64

func (r *synthRNG) next() uint64 {
	x := uint64(*r)
	x ^= x >> 12
	x ^= x << 25
	x ^= x >> 27
	*r = synthRNG(x)
	return x * 0x2545F4914F6CDD1D
}

func (r *synthRNG) below(n int) int { return int(r.next() % uint64(n)) }

// synthText is a prompt of task: shared boilerplate and the task's words.
func synthText(r *synthRNG, task int) string {
	var b strings.Builder
	b.WriteString("You are a helpful assistant. Answer carefully. ")
	for i := 0; i < 12; i++ {
		b.WriteString(synthWords[task][r.below(len(synthWords[task]))])
		b.WriteByte(' ')
	}
	fmt.Fprintf(&b, "question %d", r.below(1000))
	return b.String()
}

// synthLongText is a long prompt of task, about `words` words: the task's
// words among general ones drawn Zipf-like from a 4,000-word vocabulary, as
// a document or a conversation reads (about 1.3 tokens per word).
func synthLongText(r *synthRNG, task, words int) string {
	var b strings.Builder
	b.WriteString("You are a helpful assistant. Answer carefully. ")
	for i := 0; i < words; i++ {
		if r.below(100) < 30 {
			b.WriteString(synthWords[task][r.below(len(synthWords[task]))])
		} else {
			rank := int(math.Pow(4000, float64(r.below(1<<20))/float64(1<<20)))
			fmt.Fprintf(&b, "w%s", strconv.FormatInt(int64(rank), 36))
		}
		b.WriteByte(' ')
	}
	return b.String()
}

// synthTokenIDs is a prompt of task as token ids, n long: a shared prefix,
// then mostly the task's ids among general ones.
func synthTokenIDs(r *synthRNG, task, n int) []uint32 {
	t := make([]uint32, 0, n)
	for i := 0; i < min(n, 8); i++ {
		t = append(t, uint32(1+i))
	}
	for len(t) < n {
		if r.below(100) < 70 {
			t = append(t, uint32(1000*(task+1)+r.below(40)))
		} else {
			t = append(t, uint32(50000+r.below(20000)))
		}
	}
	return t
}

// synthFootprint: each token picks topK distinct experts per layer, 85 % in
// the task's slice of experts.
func synthFootprint(r *synthRNG, task int) []int16 {
	slice := synthExperts / synthTasks
	counts := make([]int16, synthLayers*synthExperts)
	for l := 0; l < synthLayers; l++ {
		row := counts[l*synthExperts : (l+1)*synthExperts]
		for t := 0; t < synthTokens; t++ {
			picked := map[int]bool{}
			for len(picked) < synthTopK {
				e := r.below(synthExperts)
				if r.below(100) < 85 {
					e = task*slice + r.below(slice)
				}
				if !picked[e] {
					picked[e] = true
					row[e]++
				}
			}
		}
	}
	return counts
}

// synthTable fits a table of `workers` workers and its predictor on text and
// token-id prompts of every task.
func synthTable(workers int) (*eldr.Table, error) {
	r := synthRNG(0x5eed)
	const perTask = 48
	var prefill []int16
	for i := 0; i < 4*perTask; i++ {
		prefill = append(prefill, synthFootprint(&r, i%synthTasks)...)
	}
	base, err := eldr.FitTable(eldr.Calibration{Prefill: prefill, N: 4 * perTask, Layers: synthLayers,
		Experts: synthExperts, TopK: synthTopK}, eldr.FitOptions{NumWorkers: uint32(workers), Threads: 1})
	if err != nil {
		return nil, err
	}
	defer base.Close()
	var prompts []eldr.Prompt
	var fps []int16
	for i := 0; i < synthTasks*perTask; i++ {
		task := i % synthTasks
		prompts = append(prompts, eldr.TextPrompt(synthText(&r, task)),
			eldr.TokensPrompt(synthTokenIDs(&r, task, 64+r.below(2000))))
		fps = append(fps, synthFootprint(&r, task)...)
		fps = append(fps, synthFootprint(&r, task)...)
	}
	t, _, err := base.FitPredictor(prompts, fps, nil)
	return t, err
}

// jsonIDs is token ids as a JSON array.
func jsonIDs(ids []uint32) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatUint(uint64(id), 10))
	}
	b.WriteByte(']')
	return b.String()
}

// synthBody is an OpenAI completions body of task: a short text (tokens 0),
// n token ids, or (tokens < 0) a text of about -tokens tokens.
func synthBody(r *synthRNG, task, tokens int, stream bool) []byte {
	var prompt string
	if tokens < 0 {
		prompt = strconv.Quote(synthLongText(r, task, -tokens*3/4))
	} else if tokens > 0 {
		prompt = jsonIDs(synthTokenIDs(r, task, tokens))
	} else {
		prompt = strconv.Quote(synthText(r, task))
	}
	return []byte(fmt.Sprintf(`{"model":"synth-moe","prompt":%s,"max_tokens":16,"stream":%t}`, prompt, stream))
}
