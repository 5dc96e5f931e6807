package gateway

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/hindsight-ai/hindsight/xla"
)

// The request fields past model and messages: each is honoured (mapped onto
// xla.SampleOptions, whose LogProbs stay the log-probs of the distribution actually
// sampled from, so the rollout's importance ratio is honest) or refused with a 400
// that names it; none is accepted and ignored. docs/gateway.md "Request fields"
// lists them.

// ignoredFields are top-level fields accepted without effect: none changes what is
// sampled or returned (hindsight records every conversation whatever store says).
var ignoredFields = map[string]bool{"store": true, "service_tier": true, "prompt_cache_key": true, "safety_identifier": true}

// knownFields are ChatRequest's JSON fields and ignoredFields.
var knownFields = func() map[string]bool {
	known := map[string]bool{}
	t := reflect.TypeFor[ChatRequest]()
	for i := range t.NumField() {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
			known[name] = true
		}
	}
	for k := range ignoredFields {
		known[k] = true
	}
	return known
}()

// UnmarshalJSON decodes a request and notes its unknown top-level fields.
func (r *ChatRequest) UnmarshalJSON(b []byte) error {
	type plain ChatRequest
	if err := json.Unmarshal(b, (*plain)(r)); err != nil {
		return err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return err
	}
	r.unknown = nil
	for k := range fields {
		if !knownFields[k] {
			r.unknown = append(r.unknown, k)
		}
	}
	slices.Sort(r.unknown)
	return nil
}

// unsupported is the 400 of a field the gateway does not honour.
func unsupported(param, format string, args ...any) *apiError {
	e := badRequest("unsupported_parameter", format, args...)
	e.Param = &param
	return e
}

// invalid is the 400 of a field with a bad value.
func invalid(param, format string, args ...any) *apiError {
	e := badRequest("invalid_value", format, args...)
	e.Param = &param
	return e
}

// toolChoice returns the request's tool_choice: "auto" (also when absent),
// "none", "required", or "function" with the function's name.
func (r *ChatRequest) toolChoice() (mode, name string, err error) {
	raw := bytes.TrimSpace(r.ToolChoice)
	if len(raw) == 0 || string(raw) == "null" {
		return "auto", "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch s {
		case "auto", "none", "required":
			return s, "", nil
		}
		return "", "", strconv.ErrSyntax
	}
	var f struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if err := json.Unmarshal(raw, &f); err != nil || f.Type != "function" || f.Function.Name == "" {
		return "", "", strconv.ErrSyntax
	}
	return "function", f.Function.Name, nil
}

// toolCalls says whether the reply's tool calls are parsed: the request has tools
// and tool_choice is not "none" (then the reply is text, as sampled).
func (r *ChatRequest) toolCalls() bool {
	mode, _, _ := r.toolChoice()
	return len(r.Tools) > 0 && mode != "none"
}

// checkFields refuses what the gateway does not honour and values out of range
// (those needing the model, sampleOptions checks).
func (r *ChatRequest) checkFields() *apiError {
	if len(r.unknown) > 0 {
		return unsupported(r.unknown[0], "field %q is not supported by this gateway (docs/gateway.md \"Request fields\" lists those it honours)", r.unknown[0])
	}
	mode, name, err := r.toolChoice()
	switch {
	case err != nil:
		return invalid("tool_choice", "tool_choice %s: want \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": …}}", r.ToolChoice)
	case mode != "none" && mode != "auto" && len(r.Tools) == 0:
		return invalid("tool_choice", "tool_choice %s needs tools", r.ToolChoice)
	case mode == "required":
		return unsupported("tool_choice", "tool_choice \"required\" is not supported: forcing a tool call needs constrained decoding, which the gateway does not do; use \"auto\"")
	case mode == "function":
		if !slices.ContainsFunc(r.Tools, func(t json.RawMessage) bool { return toolName(t) == name }) {
			return invalid("tool_choice", "tool_choice names function %q, which is not in tools", name)
		}
		return unsupported("tool_choice", "tool_choice naming a function is not supported: forcing a tool call needs constrained decoding, which the gateway does not do; use \"auto\"")
	}
	if len(r.ResponseFormat) > 0 && string(r.ResponseFormat) != "null" {
		var f struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(r.ResponseFormat, &f); err != nil || f.Type == "" {
			return invalid("response_format", "response_format: want {\"type\": \"text\"}")
		}
		if f.Type != "text" {
			return unsupported("response_format", "response_format %q is not supported: JSON output needs constrained decoding, which the gateway does not do; only \"text\"", f.Type)
		}
	}
	if r.TopLogprobs != nil {
		if *r.TopLogprobs < 0 || *r.TopLogprobs > xla.MaxTopLogProbs {
			return invalid("top_logprobs", "top_logprobs %d: want in [0, %d]", *r.TopLogprobs, xla.MaxTopLogProbs)
		}
		if *r.TopLogprobs > 0 && !r.Logprobs {
			return invalid("top_logprobs", "top_logprobs needs logprobs: true")
		}
	}
	for _, f := range []struct {
		name string
		v    *float64
	}{{"presence_penalty", r.PresencePenalty}, {"frequency_penalty", r.FrequencyPenalty}} {
		if f.v != nil && !(*f.v >= -2 && *f.v <= 2) {
			return invalid(f.name, "%s %g: want in [-2, 2]", f.name, *f.v)
		}
	}
	if r.TopK != nil && *r.TopK < -1 {
		return invalid("top_k", "top_k %d: want -1 or 0 (all tokens) or > 0", *r.TopK)
	}
	if r.MinP != nil && !(*r.MinP >= 0 && *r.MinP <= 1) {
		return invalid("min_p", "min_p %g: want in [0, 1]", *r.MinP)
	}
	if r.RepetitionPenalty != nil && !(*r.RepetitionPenalty > 0 && *r.RepetitionPenalty <= 10) {
		return invalid("repetition_penalty", "repetition_penalty %g: want in (0, 10] (1: none)", *r.RepetitionPenalty)
	}
	return nil
}

// toolName is a tools entry's function name.
func toolName(raw json.RawMessage) string {
	var t struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	json.Unmarshal(raw, &t)
	return t.Function.Name
}

// sampleOptions maps the request's sampling fields onto the sampler's (checkFields
// has run).
func (g *Gateway) sampleOptions(req *ChatRequest, p *policy, promptLen int) (xla.SampleOptions, *apiError) {
	o := xla.SampleOptions{Temperature: 1, TopP: 1, Stop: slices.Clone(p.stops)}
	if req.Temperature != nil {
		if *req.Temperature < 0 || *req.Temperature > 2 {
			return o, badRequest("", "temperature %g: want in [0, 2]", *req.Temperature)
		}
		o.Temperature = *req.Temperature
	}
	if req.TopP != nil {
		if *req.TopP <= 0 || *req.TopP > 1 {
			return o, badRequest("", "top_p %g: want in (0, 1]", *req.TopP)
		}
		o.TopP = *req.TopP
	}
	o.MaxNew = g.cfg.MaxTokens
	for _, m := range []*int{req.MaxTokens, req.MaxCompletionTokens} {
		if m != nil {
			if *m <= 0 {
				return o, badRequest("", "max_tokens %d: want > 0", *m)
			}
			o.MaxNew = *m
		}
	}
	o.MaxNew = min(o.MaxNew, p.maxPos-promptLen)
	if req.Seed != nil {
		o.Seed = uint64(*req.Seed)
	} else {
		var b [8]byte
		rand.Read(b[:])
		o.Seed = binary.LittleEndian.Uint64(b[:])
	}
	vocab := p.tok.VocabSize()
	if req.TopK != nil && *req.TopK > 0 {
		o.TopK = *req.TopK
	}
	if req.MinP != nil {
		o.MinP = *req.MinP
	}
	if req.PresencePenalty != nil {
		o.PresencePenalty = *req.PresencePenalty
	}
	if req.FrequencyPenalty != nil {
		o.FrequencyPenalty = *req.FrequencyPenalty
	}
	if req.RepetitionPenalty != nil {
		o.RepetitionPenalty = *req.RepetitionPenalty
	}
	if req.TopLogprobs != nil {
		if p.up != nil && *req.TopLogprobs > 0 {
			return o, unsupported("top_logprobs", "top_logprobs is not supported with an upstream engine (gateway.upstream)")
		}
		o.TopLogProbs = *req.TopLogprobs
	}
	for k, v := range req.LogitBias {
		id, err := strconv.ParseInt(k, 10, 32)
		if err != nil || id < 0 || int(id) >= vocab {
			return o, invalid("logit_bias", "logit_bias key %q: want a token id in [0, %d)", k, vocab)
		}
		if !(v >= -100 && v <= 100) || math.IsNaN(v) {
			return o, invalid("logit_bias", "logit_bias[%s] %g: want in [-100, 100]", k, v)
		}
		if o.LogitBias == nil {
			o.LogitBias = map[int32]float32{}
		}
		o.LogitBias[int32(id)] = float32(v)
	}
	for i, id := range req.StopTokenIDs {
		if id < 0 || int(id) >= vocab {
			return o, invalid("stop_token_ids", "stop_token_ids[%d] %d: want a token id in [0, %d)", i, id, vocab)
		}
		if !slices.Contains(o.Stop, id) {
			o.Stop = append(o.Stop, id)
		}
	}
	return o, nil
}

// cutAfterFirstCall, with parallel_tool_calls false, finds the first complete tool
// call in a sample that holds another: it returns the number of tokens to keep
// (through the token that completes the first call's closing tag) and their text.
// What the model sampled after it is dropped, as if it had stopped there.
func cutAfterFirstCall(p *policy, toks []int32, req *ChatRequest) (int, string, bool) {
	if !req.toolCalls() || req.ParallelToolCalls == nil || *req.ParallelToolCalls {
		return 0, "", false
	}
	text, _ := p.tok.Decode(toks)
	end := -1
	for _, m := range toolCallRE.FindAllStringSubmatchIndex(text, -1) {
		if _, calls := parseToolCalls(text[m[0]:m[1]], func() string { return "" }); len(calls) == 1 {
			end = m[1]
			break
		}
	}
	if end < 0 || !strings.Contains(text[end:], toolCallTag) {
		return 0, "", false // no second call to drop
	}
	for n := 1; n <= len(toks); n++ {
		if t, _ := p.tok.Decode(toks[:n]); len(t) >= end && strings.HasPrefix(t, text[:end]) {
			return n, t, true
		}
	}
	return 0, "", false
}
