package main

// What the picker reads from a request body: the model and the prompt, from
// OpenAI completions ("prompt": text, token ids, or a batch of either), chat
// completions ("messages": text content or text parts) and SGLang's
// /generate ("text" or "input_ids"). Token ids are preferred where the
// body has them (the predictor was fitted on the engine's own tokens).

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"unicode/utf8"

	"github.com/valyala/fastjson"

	"eldr.dev/eldr"
)

// parsed is one request as the picker routes it.
type parsed struct {
	model  string
	prompt eldr.Prompt
	stream bool
}

// badRequest is a body the picker refuses: an ImmediateResponse with code.
type badRequest struct {
	code   int    // HTTP status
	reason string // metric label
	msg    string
}

func (e *badRequest) Error() string { return e.msg }

func refuse(code int, reason, format string, args ...any) *badRequest {
	return &badRequest{code: code, reason: reason, msg: fmt.Sprintf(format, args...)}
}

// parsers: fastjson validates and indexes a body in one pass without
// reflection; encoding/json spent most of a pick's CPU on a 2,000-token
// prompt (docs/benchmarks.md).
var parsers fastjson.ParserPool

// Limits of what reaches the predictor: it reads a long prompt's head and
// tail only (eldr_prompt.h), so a longer one keeps both ends.
const (
	maxPromptTokens = 131072
	maxPromptBytes  = 512 << 10
)

func parseBody(body []byte) (*parsed, error) {
	parser := parsers.Get()
	defer parsers.Put(parser)
	v, err := parser.ParseBytes(body)
	if err != nil {
		return nil, refuse(400, "bad_json", "request body is not JSON: %v", err)
	}
	if v.Type() != fastjson.TypeObject {
		return nil, refuse(400, "bad_json", "request body is not a JSON object")
	}
	p := &parsed{model: string(v.GetStringBytes("model")), stream: v.GetBool("stream")}
	switch {
	case present(v, "input_ids"):
		p.prompt, err = tokensOf(v.Get("input_ids"), "input_ids")
	case present(v, "text"):
		p.prompt, err = textOrTokens(v.Get("text"), "text")
	case present(v, "prompt"):
		p.prompt, err = textOrTokens(v.Get("prompt"), "prompt")
	case present(v, "messages"):
		p.prompt, err = chatText(v.Get("messages"))
	default:
		return nil, refuse(400, "no_prompt", "request has no prompt (prompt, messages, text or input_ids)")
	}
	if err != nil {
		return nil, err
	}
	if p.prompt.IsTokens() {
		if len(p.prompt.Tokens) == 0 {
			return nil, refuse(400, "no_prompt", "the prompt is empty")
		}
		p.prompt.Tokens = headTailTokens(p.prompt.Tokens)
	} else {
		if strings.TrimSpace(p.prompt.Text) == "" {
			return nil, refuse(400, "no_prompt", "the prompt is empty")
		}
		p.prompt.Text = headTailText(p.prompt.Text)
	}
	return p, nil
}

func present(v *fastjson.Value, key string) bool {
	f := v.Get(key)
	return f != nil && f.Type() != fastjson.TypeNull
}

// textOrTokens: a string, a list of token ids, or a batch (a list of
// either); a batch is routed as one request (it decodes on one worker), by
// its prompts joined.
func textOrTokens(v *fastjson.Value, field string) (eldr.Prompt, error) {
	switch v.Type() {
	case fastjson.TypeString:
		return eldr.TextPrompt(string(v.GetStringBytes())), nil
	case fastjson.TypeArray:
		items := v.GetArray()
		if len(items) == 0 || items[0].Type() == fastjson.TypeNumber {
			return tokensOf(v, field)
		}
		var text []string
		var tokens []uint32
		for _, it := range items {
			switch it.Type() {
			case fastjson.TypeString:
				text = append(text, string(it.GetStringBytes()))
			case fastjson.TypeArray:
				t, err := tokensOf(it, field)
				if err != nil {
					return eldr.Prompt{}, err
				}
				tokens = append(tokens, t.Tokens...)
			default:
				return eldr.Prompt{}, refuse(400, "no_prompt", "%s holds a %s", field, it.Type())
			}
		}
		if text != nil && tokens != nil {
			return eldr.Prompt{}, refuse(400, "no_prompt", "%s mixes text and token ids", field)
		}
		if tokens != nil {
			return eldr.TokensPrompt(tokens), nil
		}
		return eldr.TextPrompt(strings.Join(text, "\n")), nil
	}
	return eldr.Prompt{}, refuse(400, "no_prompt", "%s is neither text, token ids, nor a list of them", field)
}

func tokensOf(v *fastjson.Value, field string) (eldr.Prompt, error) {
	items, err := v.Array()
	if err != nil {
		return eldr.Prompt{}, refuse(400, "no_prompt", "%s is not a list of token ids", field)
	}
	ids := make([]uint32, len(items))
	for i, it := range items {
		n, err := it.Uint64()
		if err != nil || n > math.MaxUint32 {
			return eldr.Prompt{}, refuse(400, "no_prompt", "%s[%d] is not a token id (0..2^32-1)", field, i)
		}
		ids[i] = uint32(n)
	}
	return eldr.TokensPrompt(ids), nil
}

// chatText joins the messages' text: content as a string, or its "text"
// parts (images and other parts carry no words).
func chatText(v *fastjson.Value) (eldr.Prompt, error) {
	messages, err := v.Array()
	if err != nil {
		return eldr.Prompt{}, refuse(400, "no_prompt", "messages is not a list of messages")
	}
	var b strings.Builder
	for _, m := range messages {
		c := m.Get("content")
		if c == nil {
			continue
		}
		switch c.Type() {
		case fastjson.TypeString:
			b.Write(c.GetStringBytes())
			b.WriteByte('\n')
		case fastjson.TypeArray:
			for _, part := range c.GetArray() {
				if string(part.GetStringBytes("type")) == "text" {
					b.Write(part.GetStringBytes("text"))
					b.WriteByte('\n')
				}
			}
		}
	}
	return eldr.TextPrompt(b.String()), nil
}

// headTailTokens keeps a long prompt's first three quarters and last quarter
// of the limit, as the sidecar's ring does.
func headTailTokens(t []uint32) []uint32 {
	if len(t) <= maxPromptTokens {
		return t
	}
	head := maxPromptTokens * 3 / 4
	out := make([]uint32, 0, maxPromptTokens)
	out = append(out, t[:head]...)
	return append(out, t[len(t)-(maxPromptTokens-head):]...)
}

// headTailText likewise, cutting at code points; invalid UTF-8 is replaced
// (a client's bad bytes are not a reason to refuse its request).
func headTailText(s string) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if len(s) <= maxPromptBytes {
		return s
	}
	head := maxPromptBytes * 3 / 4
	for head > 0 && !utf8.RuneStart(s[head]) {
		head--
	}
	tail := len(s) - (maxPromptBytes - head)
	for tail < len(s) && !utf8.RuneStart(s[tail]) {
		tail++
	}
	return s[:head] + s[tail:]
}

var errNoEndpoint = errors.New("no ready endpoint")
