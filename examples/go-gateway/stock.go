package main

// The gateway's side of a stock prefill engine (SGLang or vLLM started with
// --enable-return-routed-experts): the engine knows nothing of eldr, so the
// gateway asks it for the routed experts, builds the request's footprint from
// its answer and routes it through eldrd itself.

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"eldr.dev/eldr"
)

// Flavor is the protocol the prefill engine speaks.
type Flavor string

const (
	// FlavorEldr: the engine pushes the footprint to eldr itself
	// (examples/python-engine); the gateway only waits for the decision.
	FlavorEldr Flavor = "eldr"
	// FlavorSGLang: POST /generate, meta_info.routed_experts (base64 raw ids).
	FlavorSGLang Flavor = "sglang"
	// FlavorVLLM: POST /v1/completions, choices[0].routed_experts (base64 .npy).
	FlavorVLLM Flavor = "vllm"
)

// ParseFlavor accepts "eldr", "sglang" or "vllm".
func ParseFlavor(s string) (Flavor, error) {
	switch f := Flavor(s); f {
	case FlavorEldr, FlavorSGLang, FlavorVLLM:
		return f, nil
	}
	return "", fmt.Errorf("unknown flavor %q (eldr, sglang or vllm)", s)
}

// StockModel is what reading a stock engine's routed experts needs to know of
// the model: the payloads carry ids, not their meaning.
type StockModel struct {
	Experts      uint32   // experts per MoE layer
	HiddenLayers uint32   // SGLang: the payload's layer axis (its bytes carry no shape)
	TopK         uint32   // SGLang: ids per token and layer
	MoELayers    []uint32 // the hidden layers that are MoE, ascending; nil = all
	Name         string   // vLLM: the "model" of the request
}

type sglangGenerate struct {
	RID                 string         `json:"rid"`
	InputIDs            []int64        `json:"input_ids,omitempty"`
	Text                string         `json:"text,omitempty"`
	SamplingParams      map[string]int `json:"sampling_params"`
	ReturnRoutedExperts bool           `json:"return_routed_experts"`
}

type sglangAnswer struct {
	MetaInfo struct {
		PromptTokens       *uint64 `json:"prompt_tokens"`
		RoutedExperts      *string `json:"routed_experts"`
		RoutedExpertsDtype string  `json:"routed_experts_dtype"`
	} `json:"meta_info"`
}

type vllmCompletion struct {
	Model     string      `json:"model"`
	Prompt    interface{} `json:"prompt"` // token ids or text
	MaxTokens int         `json:"max_tokens"`
	RequestID string      `json:"request_id"`
}

type vllmAnswer struct {
	Choices []struct {
		RoutedExperts *string `json:"routed_experts"`
	} `json:"choices"`
	Usage struct {
		PromptTokens *uint64 `json:"prompt_tokens"`
	} `json:"usage"`
}

// badRoutedExperts: the engine answered, but its routed experts do not decode
// (malformed, or another model than StockModel says). Routing falls back
// like a missing decision.
type badRoutedExperts struct{ err error }

func (e *badRoutedExperts) Error() string {
	return "bad routed experts in the prefill answer: " + e.err.Error()
}
func (e *badRoutedExperts) Unwrap() error { return e.err }

// listOfIDs reads prompt_tokens as a list of token ids.
func listOfIDs(raw json.RawMessage) ([]int64, bool) {
	var ids []int64
	if len(raw) == 0 || json.Unmarshal(raw, &ids) != nil || ids == nil {
		return nil, false
	}
	return ids, true
}

// promptIDs turns the completion's prompt_tokens (a count or the token ids)
// into the ids the engine is sent.
func promptIDs(raw json.RawMessage) ([]int64, error) {
	var ids []int64
	if err := json.Unmarshal(raw, &ids); err == nil {
		if len(ids) == 0 {
			return nil, fmt.Errorf("prompt_tokens must not be empty")
		}
		return ids, nil
	}
	var n int
	if err := json.Unmarshal(raw, &n); err != nil || n <= 0 || n > 1<<20 {
		return nil, fmt.Errorf("prompt_tokens must be a count in 1..%d or a list of token ids", 1<<20)
	}
	ids = make([]int64, n)
	for i := range ids {
		ids[i] = int64(i % 1000)
	}
	return ids, nil
}

// stockPrefill has the stock engine prefill the prompt (one generated token,
// as a PD prefill server does) and returns the request's footprint, built
// from the prompt's rows of the answer's routed experts, and the prompt's
// token count. The prompt sent is the request's token ids when it carries
// them, else its text, else as many placeholder ids as its count says.
func (g *Gateway) stockPrefill(ctx context.Context, requestID string,
	prompt json.RawMessage, text string) (eldr.Footprint, json.RawMessage, error) {
	var ids []int64
	var err error
	if _, isList := listOfIDs(prompt); !isList && text != "" {
		ids = nil
	} else if ids, err = promptIDs(prompt); err != nil {
		return eldr.Footprint{}, nil, fail(400, "%v", err)
	}
	m := g.Model
	opts := eldr.RoutedExpertsOptions{NumExperts: m.Experts, MoELayers: m.MoELayers}
	var fp eldr.Footprint
	var info eldr.RoutedExpertsInfo
	var tokens uint64
	switch g.Flavor {
	case FlavorSGLang:
		var ans sglangAnswer
		req := sglangGenerate{RID: requestID, InputIDs: ids, ReturnRoutedExperts: true,
			SamplingParams: map[string]int{"max_new_tokens": 1}}
		if ids == nil {
			req.Text = text
		}
		if err := g.post(ctx, g.PrefillURL, req, &ans); err != nil {
			return fp, nil, fail(502, "prefill: %v", err)
		}
		meta := ans.MetaInfo
		if meta.RoutedExperts == nil || meta.PromptTokens == nil {
			return fp, nil, fail(502, "prefill: the answer has no meta_info.routed_experts or "+
				"prompt_tokens (is the server started with --enable-return-routed-experts?)")
		}
		dtype := meta.RoutedExpertsDtype // "" = int32, SGLang's default; newer versions name theirs
		tokens = *meta.PromptTokens
		opts.NumHiddenLayers, opts.TopK, opts.RowCount = m.HiddenLayers, m.TopK, tokens
		fp.Counts, info, err = eldr.FootprintFromSGLang(*meta.RoutedExperts, dtype, opts)
	case FlavorVLLM:
		var ans vllmAnswer
		req := vllmCompletion{Model: m.Name, Prompt: ids, MaxTokens: 1, RequestID: requestID}
		if ids == nil {
			req.Prompt = text
		}
		if err := g.post(ctx, g.PrefillURL, req, &ans); err != nil {
			return fp, nil, fail(502, "prefill: %v", err)
		}
		if len(ans.Choices) == 0 || ans.Choices[0].RoutedExperts == nil ||
			ans.Usage.PromptTokens == nil {
			return fp, nil, fail(502, "prefill: the answer has no choices[0].routed_experts or "+
				"usage.prompt_tokens (is the server started with --enable-return-routed-experts?)")
		}
		tokens = *ans.Usage.PromptTokens
		opts.RowCount = tokens
		fp.Counts, info, err = eldr.FootprintFromVLLM(*ans.Choices[0].RoutedExperts, opts)
	default:
		return fp, nil, fmt.Errorf("stockPrefill with flavor %q", g.Flavor)
	}
	fp.Layers, fp.Experts = info.Layers, m.Experts
	count := json.RawMessage(strconv.FormatUint(tokens, 10))
	if err != nil {
		// The prefill itself ran: only routing lacks its input.
		return fp, count, &badRoutedExperts{err}
	}
	return fp, count, nil
}
