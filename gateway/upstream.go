package gateway

import (
	"bufio"
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
	// The request's other sampling fields, forwarded as vLLM names them (absent:
	// the engine's defaults, which change nothing).
	TopK              int                `json:"top_k,omitempty"`
	MinP              float64            `json:"min_p,omitempty"`
	PresencePenalty   float64            `json:"presence_penalty,omitempty"`
	FrequencyPenalty  float64            `json:"frequency_penalty,omitempty"`
	RepetitionPenalty float64            `json:"repetition_penalty,omitempty"`
	LogitBias         map[string]float32 `json:"logit_bias,omitempty"`
}

// completionResponse is the part of a completions answer (or of a streamed
// chunk) the gateway reads.
type completionResponse struct {
	Choices []completionChoice `json:"choices"`
}

type completionChoice struct {
	Text     string  `json:"text"`
	TokenIDs []int32 `json:"token_ids"`
	Logprobs *struct {
		Tokens        []string   `json:"tokens"`
		TokenLogprobs []*float64 `json:"token_logprobs"`
	} `json:"logprobs"`
	FinishReason *string `json:"finish_reason"`
}

// generate samples one completion of prompt. The engine's log-probs are its own
// (vLLM's default logprobs mode: the model's distribution before temperature and
// top-p). With o.OnToken (a streamed turn) the engine streams too, and each token
// goes on as it comes.
func (u *upstream) generate(ctx context.Context, prompt []int32, o xla.SampleOptions, vocab int) (xla.Sample, error) {
	topP := o.TopP
	if topP == 0 {
		topP = 1
	}
	stream := o.OnToken != nil // a streamed answer: tokens go on as the engine sends them
	cr := completionRequest{Model: u.model, Prompt: prompt, MaxTokens: o.MaxNew, Temperature: o.Temperature,
		TopP: topP, Seed: int64(o.Seed >> 1), N: 1, Stream: stream, StopTokenIDs: o.Stop, ReturnTokenIDs: true, ReturnTokensAsTokenIDs: true,
		TopK: o.TopK, MinP: o.MinP, PresencePenalty: o.PresencePenalty, FrequencyPenalty: o.FrequencyPenalty, RepetitionPenalty: o.RepetitionPenalty}
	for id, b := range o.LogitBias {
		if cr.LogitBias == nil {
			cr.LogitBias = map[string]float32{}
		}
		cr.LogitBias[strconv.Itoa(int(id))] = b
	}
	body, _ := json.Marshal(cr)
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
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
		return xla.Sample{}, &upstreamError{fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(b)))}
	}
	if stream {
		s, err := readStreamed(resp.Body, o, vocab)
		if err != nil {
			return xla.Sample{}, &upstreamError{err}
		}
		return s, nil
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return xla.Sample{}, &upstreamError{fmt.Errorf("read answer: %w", err)}
	}
	s, err := parseCompletion(b, o, vocab)
	if err != nil {
		return xla.Sample{}, &upstreamError{err}
	}
	return s, nil
}

// readStreamed reads a streamed completions answer (server-sent events, each a
// chunk whose one choice holds the new tokens: token_ids or "token_id:<id>"
// tokens, and their log-probs; an {"error": …} event ends it), checking each token
// and handing it to o.OnToken as it comes.
func readStreamed(body io.Reader, o xla.SampleOptions, vocab int) (xla.Sample, error) {
	s := xla.Sample{Reason: xla.StopLength}
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	done := false
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data:")
		if !ok {
			continue
		}
		data = strings.TrimSpace(data)
		if data == "[DONE]" {
			done = true
			break
		}
		var chunk struct {
			completionResponse
			Error *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			return xla.Sample{}, fmt.Errorf("decode streamed chunk: %w", err)
		}
		if chunk.Error != nil {
			return xla.Sample{}, fmt.Errorf("engine error mid-stream: %s", chunk.Error.Message)
		}
		if len(chunk.Choices) == 0 { // the usage chunk
			continue
		}
		ids, lps, err := choiceTokens(&chunk.Choices[0])
		if err != nil {
			return xla.Sample{}, err
		}
		for i, id := range ids {
			if err := checkToken(len(s.Tokens), id, lps[i], o, vocab); err != nil {
				return xla.Sample{}, err
			}
			s.Tokens, s.LogProbs = append(s.Tokens, id), append(s.LogProbs, float32(*lps[i]))
			o.OnToken(0, id, float32(*lps[i]), nil)
		}
	}
	if err := sc.Err(); err != nil {
		return xla.Sample{}, fmt.Errorf("read streamed answer: %w", err)
	}
	if !done {
		return xla.Sample{}, fmt.Errorf("streamed answer ended without [DONE]")
	}
	if len(s.Tokens) > 0 && slices.Contains(o.Stop, s.Tokens[len(s.Tokens)-1]) {
		s.Reason = xla.StopToken
	}
	return s, nil
}

// choiceTokens returns a choice's sampled ids (token_ids, else the "token_id:<id>"
// tokens) and their log-probs.
func choiceTokens(ch *completionChoice) ([]int32, []*float64, error) {
	if ch.Logprobs == nil {
		if len(ch.TokenIDs) == 0 && ch.Text == "" {
			return nil, nil, nil
		}
		return nil, nil, fmt.Errorf("answer has no logprobs: the engine must return the sampled tokens' log-probs")
	}
	ids := ch.TokenIDs
	if ids == nil {
		for i, t := range ch.Logprobs.Tokens {
			v, ok := strings.CutPrefix(t, "token_id:")
			id, err := strconv.ParseInt(v, 10, 32)
			if !ok || err != nil {
				return nil, nil, fmt.Errorf("logprobs.tokens[%d] %q: want token_id:<id> (return_tokens_as_token_ids)", i, t)
			}
			ids = append(ids, int32(id))
		}
	}
	if len(ch.Logprobs.TokenLogprobs) != len(ids) {
		return nil, nil, fmt.Errorf("answer has %d token ids and %d log-probs", len(ids), len(ch.Logprobs.TokenLogprobs))
	}
	return ids, ch.Logprobs.TokenLogprobs, nil
}

// checkToken checks sampled token n: inside the vocabulary, with a log-prob, within
// max_tokens.
func checkToken(n int, id int32, lp *float64, o xla.SampleOptions, vocab int) error {
	switch {
	case n >= o.MaxNew:
		return fmt.Errorf("answer has more than %d tokens, max_tokens was %d", o.MaxNew, o.MaxNew)
	case id < 0 || int(id) >= vocab:
		return fmt.Errorf("token %d: id %d is outside the tokenizer's vocabulary [0, %d): the engine serves another model", n, id, vocab)
	case lp == nil:
		return fmt.Errorf("token %d: null log-prob", n)
	}
	return nil
}

// parseCompletion reads the sampled ids and their log-probs from a completions
// answer, and checks them: one choice, an id and a log-prob for every token, ids
// inside the vocabulary, no more than max_tokens.
func parseCompletion(b []byte, o xla.SampleOptions, vocab int) (xla.Sample, error) {
	var r completionResponse
	if err := json.Unmarshal(b, &r); err != nil {
		return xla.Sample{}, fmt.Errorf("decode answer: %w", err)
	}
	if len(r.Choices) != 1 {
		return xla.Sample{}, fmt.Errorf("answer has %d choices, want 1", len(r.Choices))
	}
	ids, lps, err := choiceTokens(&r.Choices[0])
	if err != nil {
		return xla.Sample{}, err
	}
	s := xla.Sample{Tokens: ids, LogProbs: make([]float32, len(ids)), Reason: xla.StopLength}
	for i, id := range ids {
		if err := checkToken(i, id, lps[i], o, vocab); err != nil {
			return xla.Sample{}, err
		}
		s.LogProbs[i] = float32(*lps[i])
	}
	// A "stop" without a turn-end token last (an engine that leaves the stop token
	// out) closes like a length stop: the gateway appends the turn's end itself.
	if len(ids) > 0 && slices.Contains(o.Stop, ids[len(ids)-1]) {
		s.Reason = xla.StopToken
	}
	return s, nil
}
