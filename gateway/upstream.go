package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/hindsight-ai/hindsight/xla"
)

// upstream samples on an OpenAI-compatible engine (vLLM) instead of the embedded
// sampler. The gateway still renders and tokenizes the conversation itself and
// sends the session's exact token ids as the prompt of a completions request
// (POST <base>/completions, prompt: [ids]), so a follow-up never re-tokenises an
// earlier turn; it asks for the sampled tokens' ids and log-probs
// (return_token_ids, return_tokens_as_token_ids, logprobs: 0) and records those.
type upstream struct {
	base   string // e.g. http://127.0.0.1:8000/v1
	model  string
	keyEnv string
	client *http.Client
}

// upstreamError is an engine's failure: answered 502.
type upstreamError struct{ err error }

func (e *upstreamError) Error() string { return "upstream engine: " + e.err.Error() }

// completionRequest is the body sent to <base>/completions. The fields after Stream
// are vLLM's extensions.
type completionRequest struct {
	Model       string  `json:"model"`
	Prompt      []int32 `json:"prompt"`
	MaxTokens   int     `json:"max_tokens"`
	Temperature float64 `json:"temperature"`
	TopP        float64 `json:"top_p"`
	Seed        int64   `json:"seed"`
	N           int     `json:"n"`
	Logprobs    int     `json:"logprobs"`
	Stream      bool    `json:"stream"`
	// StopTokenIDs end the completion at the chat template's turn-end tokens.
	StopTokenIDs []int32 `json:"stop_token_ids"`
	// ReturnTokenIDs adds choices[].token_ids (vLLM ≥ 0.10.2);
	// ReturnTokensAsTokenIDs writes logprobs.tokens as "token_id:<id>", which older
	// versions need to say which ids were sampled.
	ReturnTokenIDs         bool `json:"return_token_ids"`
	ReturnTokensAsTokenIDs bool `json:"return_tokens_as_token_ids"`
	SkipSpecialTokens      bool `json:"skip_special_tokens"`
}

// completionResponse is the part of a completions answer the gateway reads.
type completionResponse struct {
	Choices []struct {
		Text     string  `json:"text"`
		TokenIDs []int32 `json:"token_ids"`
		Logprobs *struct {
			Tokens        []string   `json:"tokens"`
			TokenLogprobs []*float64 `json:"token_logprobs"`
		} `json:"logprobs"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
}

// generate samples one completion of prompt. The engine's log-probs are its own
// (vLLM's default logprobs mode: the model's distribution before temperature and
// top-p). onToken, if any, hears the tokens once the answer is in.
func (u *upstream) generate(ctx context.Context, prompt []int32, o xla.SampleOptions, vocab int) (xla.Sample, error) {
	topP := o.TopP
	if topP == 0 {
		topP = 1
	}
	body, _ := json.Marshal(completionRequest{Model: u.model, Prompt: prompt, MaxTokens: o.MaxNew, Temperature: o.Temperature,
		TopP: topP, Seed: int64(o.Seed >> 1), N: 1, StopTokenIDs: o.Stop, ReturnTokenIDs: true, ReturnTokensAsTokenIDs: true})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(u.base, "/")+"/completions", bytes.NewReader(body))
	if err != nil {
		return xla.Sample{}, &upstreamError{err}
	}
	req.Header.Set("Content-Type", "application/json")
	if u.keyEnv != "" {
		req.Header.Set("Authorization", "Bearer "+os.Getenv(u.keyEnv))
	}
	resp, err := u.client.Do(req)
	if err != nil {
		return xla.Sample{}, &upstreamError{err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return xla.Sample{}, &upstreamError{fmt.Errorf("read answer: %w", err)}
	}
	if resp.StatusCode/100 != 2 {
		return xla.Sample{}, &upstreamError{fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(b[:min(len(b), 2048)])))}
	}
	s, err := parseCompletion(b, o, vocab)
	if err != nil {
		return xla.Sample{}, &upstreamError{err}
	}
	if o.OnToken != nil {
		for i, t := range s.Tokens {
			o.OnToken(0, t, s.LogProbs[i])
		}
	}
	return s, nil
}

// parseCompletion reads the sampled ids (token_ids, else the "token_id:<id>"
// tokens) and their log-probs from a completions answer, and checks them: one
// choice, an id and a log-prob for every token, ids inside the vocabulary, no more
// than max_tokens.
func parseCompletion(b []byte, o xla.SampleOptions, vocab int) (xla.Sample, error) {
	var r completionResponse
	if err := json.Unmarshal(b, &r); err != nil {
		return xla.Sample{}, fmt.Errorf("decode answer: %w", err)
	}
	if len(r.Choices) != 1 {
		return xla.Sample{}, fmt.Errorf("answer has %d choices, want 1", len(r.Choices))
	}
	ch := r.Choices[0]
	if ch.Logprobs == nil || len(ch.Logprobs.TokenLogprobs) == 0 && (len(ch.TokenIDs) > 0 || ch.Text != "") {
		return xla.Sample{}, fmt.Errorf("answer has no logprobs: the engine must return the sampled tokens' log-probs")
	}
	ids := ch.TokenIDs
	if ids == nil {
		for i, t := range ch.Logprobs.Tokens {
			v, ok := strings.CutPrefix(t, "token_id:")
			id, err := strconv.ParseInt(v, 10, 32)
			if !ok || err != nil {
				return xla.Sample{}, fmt.Errorf("logprobs.tokens[%d] %q: want token_id:<id> (return_tokens_as_token_ids)", i, t)
			}
			ids = append(ids, int32(id))
		}
	}
	if len(ch.Logprobs.TokenLogprobs) != len(ids) {
		return xla.Sample{}, fmt.Errorf("answer has %d token ids and %d log-probs", len(ids), len(ch.Logprobs.TokenLogprobs))
	}
	if len(ids) > o.MaxNew {
		return xla.Sample{}, fmt.Errorf("answer has %d tokens, max_tokens was %d", len(ids), o.MaxNew)
	}
	s := xla.Sample{Tokens: ids, LogProbs: make([]float32, len(ids)), Reason: xla.StopLength}
	for i, id := range ids {
		if id < 0 || int(id) >= vocab {
			return xla.Sample{}, fmt.Errorf("token %d: id %d is outside the tokenizer's vocabulary [0, %d): the engine serves another model", i, id, vocab)
		}
		lp := ch.Logprobs.TokenLogprobs[i]
		if lp == nil {
			return xla.Sample{}, fmt.Errorf("token %d: null log-prob", i)
		}
		s.LogProbs[i] = float32(*lp)
	}
	if len(ids) > 0 && slices.Contains(o.Stop, ids[len(ids)-1]) {
		s.Reason = xla.StopToken
	}
	// A "stop" without a turn-end token last (an engine that leaves the stop token
	// out) closes like a length stop: the gateway appends the turn's end itself.
	return s, nil
}
