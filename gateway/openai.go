package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// The OpenAI chat completions wire types this gateway reads and writes: the subset
// agents use (docs/gateway.md lists what is not supported).

// Message is one chat message as clients send it. Content is a string, null, or a
// list of text parts.
type Message struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content,omitempty"`
	Name       string          `json:"name,omitempty"`
	ToolCalls  []ToolCall      `json:"tool_calls,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
	// Status is hindsight's extension on tool messages: "ok" or "error" (or 0 / 1),
	// the tool segment's status in the rollout; absent: null.
	Status json.RawMessage `json:"status,omitempty"`
}

// ToolCall is an assistant message's call of a function tool.
type ToolCall struct {
	Index    *int         `json:"index,omitempty"` // streamed deltas only
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type,omitempty"`
	Function FunctionCall `json:"function"`
}

// FunctionCall names the function and carries its arguments as a JSON string.
type FunctionCall struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

// ChatRequest is the body of POST /v1/chat/completions.
type ChatRequest struct {
	Model               string            `json:"model"`
	Messages            []Message         `json:"messages"`
	Tools               []json.RawMessage `json:"tools,omitempty"`
	ToolChoice          json.RawMessage   `json:"tool_choice,omitempty"`
	Temperature         *float64          `json:"temperature,omitempty"`
	TopP                *float64          `json:"top_p,omitempty"`
	MaxTokens           *int              `json:"max_tokens,omitempty"`
	MaxCompletionTokens *int              `json:"max_completion_tokens,omitempty"`
	Stop                json.RawMessage   `json:"stop,omitempty"`
	Seed                *int64            `json:"seed,omitempty"`
	N                   *int              `json:"n,omitempty"`
	Stream              bool              `json:"stream,omitempty"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options,omitempty"`
	Logprobs    bool              `json:"logprobs,omitempty"`
	TopLogprobs *int              `json:"top_logprobs,omitempty"`
	Metadata    map[string]string `json:"metadata,omitempty"`
	User        string            `json:"user,omitempty"`
	// The sampling fields past OpenAI's first ones (fields.go says how each is
	// honoured); TopK, MinP, RepetitionPenalty and StopTokenIDs are vLLM's.
	ParallelToolCalls *bool              `json:"parallel_tool_calls,omitempty"`
	ResponseFormat    json.RawMessage    `json:"response_format,omitempty"`
	LogitBias         map[string]float64 `json:"logit_bias,omitempty"`
	PresencePenalty   *float64           `json:"presence_penalty,omitempty"`
	FrequencyPenalty  *float64           `json:"frequency_penalty,omitempty"`
	TopK              *int               `json:"top_k,omitempty"`
	MinP              *float64           `json:"min_p,omitempty"`
	RepetitionPenalty *float64           `json:"repetition_penalty,omitempty"`
	StopTokenIDs      []int32            `json:"stop_token_ids,omitempty"`
	// unknown lists the body's top-level fields the gateway does not know
	// (UnmarshalJSON), sorted: the request is refused naming the first.
	unknown []string
}

// stops returns the request's stop strings (a string or a list of them).
func (r *ChatRequest) stops() ([]string, error) {
	if len(r.Stop) == 0 || string(r.Stop) == "null" {
		return nil, nil
	}
	var one string
	if err := json.Unmarshal(r.Stop, &one); err == nil {
		return []string{one}, nil
	}
	var many []string
	if err := json.Unmarshal(r.Stop, &many); err != nil {
		return nil, errors.New("stop: want a string or a list of strings")
	}
	if len(many) > 4 {
		return nil, errors.New("stop: at most 4 sequences")
	}
	return many, nil
}

// contentText returns a message's content as text: a string, null (""), or the
// concatenated text of its text parts.
func contentText(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", errors.New("content: want a string, null or a list of text parts")
	}
	var b strings.Builder
	for i, p := range parts {
		if p.Type != "text" {
			return "", fmt.Errorf("content[%d]: part type %q is not supported (only text)", i, p.Type)
		}
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

// toolStatus parses a tool message's status extension: -1 (null), 0 ok, 1 error.
func toolStatus(raw json.RawMessage) (int8, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return -1, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch s {
		case "ok", "0":
			return 0, nil
		case "error", "1":
			return 1, nil
		}
	}
	if n, err := strconv.Atoi(string(raw)); err == nil && (n == 0 || n == 1) {
		return int8(n), nil
	}
	return 0, fmt.Errorf("status %s: want \"ok\", \"error\", 0 or 1", raw)
}

// ChatResponse is a non-streamed answer.
type ChatResponse struct {
	ID                string   `json:"id"`
	Object            string   `json:"object"`
	Created           int64    `json:"created"`
	Model             string   `json:"model"`
	SystemFingerprint string   `json:"system_fingerprint"`
	Choices           []Choice `json:"choices"`
	Usage             *Usage   `json:"usage,omitempty"`
}

// Choice is the one choice of an answer (n = 1).
type Choice struct {
	Index        int          `json:"index"`
	Message      *OutMessage  `json:"message,omitempty"`
	Delta        *OutMessage  `json:"delta,omitempty"`
	FinishReason *string      `json:"finish_reason"`
	Logprobs     *LogprobList `json:"logprobs"`
}

// OutMessage is the assistant message of an answer, or a streamed delta of it.
type OutMessage struct {
	Role      string     `json:"role,omitempty"`
	Content   *string    `json:"content"`
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
}

// LogprobList is choices[].logprobs: one entry per sampled token.
type LogprobList struct {
	Content []TokenLogprob `json:"content"`
}

// TokenLogprob is one sampled token with the log-prob it was sampled with (nats)
// and, with top_logprobs, the most likely tokens of the same distribution.
type TokenLogprob struct {
	Token       string       `json:"token"`
	Logprob     float64      `json:"logprob"`
	Bytes       []int        `json:"bytes"`
	TopLogprobs []TopLogprob `json:"top_logprobs"`
	// TokenID is hindsight's extension: the token id itself.
	TokenID int32 `json:"token_id"`
}

// TopLogprob is one of top_logprobs' alternatives.
type TopLogprob struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
	TokenID int32   `json:"token_id"`
}

// Usage counts a turn's tokens.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// apiError is an OpenAI-style error: {"error": {"message", "type", "param", "code"}}.
type apiError struct {
	status  int
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func (e *apiError) Error() string { return e.Message }

// badRequest is a 400 invalid_request_error with an optional code.
func badRequest(code, format string, args ...any) *apiError {
	e := &apiError{status: http.StatusBadRequest, Message: fmt.Sprintf(format, args...), Type: "invalid_request_error"}
	if code != "" {
		e.Code = &code
	}
	return e
}

// writeError writes e as the response.
func writeError(w http.ResponseWriter, e *apiError) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.status)
	json.NewEncoder(w).Encode(map[string]*apiError{"error": e})
}

// writeJSON writes v with status 200.
func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}
