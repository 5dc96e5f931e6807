package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// postChat sends body to the gateway's chat endpoint and returns the status and the
// decoded answer.
func postChat(t *testing.T, url string, body map[string]any) (int, map[string]any) {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", bytes.NewReader(b))
	require.NoError(t, err)
	defer resp.Body.Close()
	var v map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&v))
	return resp.StatusCode, v
}

// sampledIDs returns an answer's sampled token ids (logprobs' token_id).
func sampledIDs(t *testing.T, v map[string]any) []int32 {
	t.Helper()
	var ids []int32
	for _, e := range v["choices"].([]any)[0].(map[string]any)["logprobs"].(map[string]any)["content"].([]any) {
		ids = append(ids, int32(e.(map[string]any)["token_id"].(float64)))
	}
	return ids
}

// banStops is a logit_bias that keeps the tiny model from ending its turn.
func banStops(g *Gateway) map[string]any {
	bias := map[string]any{}
	for _, id := range g.pol.cur.Load().stops {
		bias[strconv.Itoa(int(id))] = -100
	}
	return bias
}

// TestClientGoneDropsRow: a client that goes away mid-stream has its row dropped
// by the sampler (counted in Stats.RowsDropped, only for a row stopped before its
// max_tokens), nothing is recorded for it, and the next request is answered.
func TestClientGoneDropsRow(t *testing.T) {
	g, srv, _ := newTestGateway(t)
	ctx, cancel := context.WithCancel(t.Context())
	b, _ := json.Marshal(map[string]any{"model": "hindsight", "stream": true, "max_tokens": 4000, "seed": 1,
		"logit_bias": banStops(g), "messages": []map[string]any{{"role": "user", "content": "go on forever"}}})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/chat/completions", bytes.NewReader(b))
	req.Header.Set(SessionHeader, "gone-1")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	rd := bufio.NewReader(resp.Body)
	for contents := 0; contents < 2; { // the role chunk, then content: the row is decoding
		line, err := rd.ReadString('\n')
		require.NoError(t, err)
		if strings.Contains(line, `"content":"`) && !strings.Contains(line, `"content":""`) {
			contents++
		}
	}
	cancel()
	resp.Body.Close()
	deadline := time.Now().Add(2 * time.Minute) // catches a hang only
	for g.Stats().RowsDropped == 0 {
		require.True(t, time.Now().Before(deadline), "the row was not dropped")
		time.Sleep(20 * time.Millisecond)
	}
	require.Equal(t, int64(1), g.Stats().RowsDropped)
	code, v := postChat(t, srv.URL, map[string]any{"model": "hindsight", "max_tokens": 4, "messages": []map[string]any{{"role": "user", "content": "hi"}}})
	require.Equal(t, 200, code, v)
	require.Zero(t, g.Stats().Turns-1, "the dropped row's turn was not answered")
}

// TestContextLimit: gateway.max_context_tokens bounds the conversation with a 400
// that names it, and /v1/models and /v1/models/{id} say the bound.
func TestContextLimit(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxContextTokens = 64
	_, srv, _ := newTestGatewayWith(t, cfg)
	get := func(path string) (int, map[string]any) {
		resp, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		var v map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&v))
		return resp.StatusCode, v
	}
	code, list := get("/v1/models")
	require.Equal(t, 200, code)
	for _, m := range list["data"].([]any) {
		require.EqualValues(t, 64, m.(map[string]any)["max_model_len"])
		require.EqualValues(t, 131072, m.(map[string]any)["max_position_embeddings"])
	}
	code, one := get("/v1/models/hindsight")
	require.Equal(t, 200, code)
	require.Equal(t, "hindsight", one["id"])
	require.EqualValues(t, 64, one["max_model_len"])
	code, missing := get("/v1/models/gpt-4o")
	require.Equal(t, 404, code)
	require.Equal(t, "model_not_found", missing["error"].(map[string]any)["code"])

	code, v := postChat(t, srv.URL, map[string]any{"model": "hindsight", "messages": []map[string]any{{"role": "user", "content": strings.Repeat("a", 100)}}})
	require.Equal(t, 400, code)
	e := v["error"].(map[string]any)
	require.Equal(t, "context_length_exceeded", e["code"])
	require.Contains(t, e["message"], "gateway.max_context_tokens 64")
	// A shorter conversation is answered, its reply cut at the bound.
	code, v = postChat(t, srv.URL, map[string]any{"model": "hindsight", "max_tokens": 500, "logit_bias": map[string]any{}, "logprobs": true,
		"messages": []map[string]any{{"role": "user", "content": "hi"}}})
	require.Equal(t, 200, code, v)
	u := v["usage"].(map[string]any)
	require.LessOrEqual(t, u["total_tokens"].(float64), 64.0)
}

// TestRequestFieldsRefused: a field the gateway does not honour is refused with a
// 400 naming it, never accepted and ignored.
func TestRequestFieldsRefused(t *testing.T) {
	_, srv, _ := newTestGateway(t)
	tools := []map[string]any{{"type": "function", "function": map[string]any{"name": "ls", "parameters": map[string]any{"type": "object"}}}}
	cases := []struct {
		name  string
		extra map[string]any
		param string
		text  string
	}{
		{"unknown field", map[string]any{"functions": tools}, "functions", `field "functions" is not supported`},
		{"reasoning_effort", map[string]any{"reasoning_effort": "low"}, "reasoning_effort", "not supported"},
		{"tool_choice required", map[string]any{"tools": tools, "tool_choice": "required"}, "tool_choice", `"required" is not supported`},
		{"tool_choice unknown function", map[string]any{"tools": tools, "tool_choice": map[string]any{"type": "function", "function": map[string]any{"name": "rm"}}}, "tool_choice", `"rm", which is not in tools`},
		{"tool_choice named function", map[string]any{"tools": tools, "tool_choice": map[string]any{"type": "function", "function": map[string]any{"name": "ls"}}}, "tool_choice", "naming a function is not supported"},
		{"tool_choice without tools", map[string]any{"tool_choice": map[string]any{"type": "function", "function": map[string]any{"name": "ls"}}}, "tool_choice", "needs tools"},
		{"json_object", map[string]any{"response_format": map[string]any{"type": "json_object"}}, "response_format", `"json_object" is not supported`},
		{"json_schema", map[string]any{"response_format": map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "x"}}}, "response_format", `"json_schema" is not supported`},
		{"top_logprobs without logprobs", map[string]any{"top_logprobs": 2}, "top_logprobs", "needs logprobs: true"},
		{"top_logprobs too many", map[string]any{"logprobs": true, "top_logprobs": 21}, "top_logprobs", "want in [0, 20]"},
		{"presence_penalty", map[string]any{"presence_penalty": 3}, "presence_penalty", "want in [-2, 2]"},
		{"frequency_penalty", map[string]any{"frequency_penalty": -2.5}, "frequency_penalty", "want in [-2, 2]"},
		{"logit_bias id", map[string]any{"logit_bias": map[string]any{"99999": 1}}, "logit_bias", `key "99999"`},
		{"logit_bias value", map[string]any{"logit_bias": map[string]any{"5": 101}}, "logit_bias", "want in [-100, 100]"},
		{"stop_token_ids", map[string]any{"stop_token_ids": []int{-1}}, "stop_token_ids", "stop_token_ids[0] -1"},
		{"top_k", map[string]any{"top_k": -2}, "top_k", "top_k -2"},
		{"min_p", map[string]any{"min_p": 1.5}, "min_p", "min_p 1.5"},
		{"repetition_penalty", map[string]any{"repetition_penalty": 0}, "repetition_penalty", "repetition_penalty 0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			body := map[string]any{"model": "hindsight", "max_tokens": 2, "messages": []map[string]any{{"role": "user", "content": "hi"}}}
			for k, v := range tc.extra {
				body[k] = v
			}
			code, v := postChat(t, srv.URL, body)
			require.Equal(t, 400, code, v)
			e := v["error"].(map[string]any)
			require.Equal(t, tc.param, e["param"])
			require.Contains(t, e["message"], tc.text)
		})
	}
	code, v := postChat(t, srv.URL, map[string]any{"model": "hindsight", "max_tokens": 2, "store": true, "service_tier": "auto",
		"tool_choice": "none", "response_format": map[string]any{"type": "text"}, "parallel_tool_calls": true,
		"messages": []map[string]any{{"role": "user", "content": "hi"}}})
	require.Equal(t, 200, code, v)
}

// TestRequestFieldsHonoured: logit_bias, stop_token_ids and top_logprobs change
// the answer as asked, through the real server.
func TestRequestFieldsHonoured(t *testing.T) {
	g, srv, _ := newTestGateway(t)
	ask := func(extra map[string]any) map[string]any {
		body := map[string]any{"model": "hindsight", "max_tokens": 8, "temperature": 0, "logprobs": true, "logit_bias": banStops(g),
			"messages": []map[string]any{{"role": "user", "content": "count"}}}
		for k, v := range extra {
			body[k] = v
		}
		code, v := postChat(t, srv.URL, body)
		require.Equal(t, 200, code, v)
		return v
	}
	greedy := sampledIDs(t, ask(nil))
	require.Len(t, greedy, 8)

	bias := banStops(g)
	bias[strconv.Itoa(int(greedy[0]))] = -100
	banned := sampledIDs(t, ask(map[string]any{"logit_bias": bias}))
	require.NotContains(t, banned, greedy[0], "a token biased by -100 is never sampled")

	stop := greedy[3]
	n := 0
	for greedy[n] != stop {
		n++
	}
	v := ask(map[string]any{"stop_token_ids": []int32{stop}})
	ch := v["choices"].([]any)[0].(map[string]any)
	require.Equal(t, "stop", ch["finish_reason"])
	require.Equal(t, greedy[:n+1], sampledIDs(t, v), "sampled through the stop id")
	want, _ := g.pol.cur.Load().tok.Decode(greedy[:n])
	require.Equal(t, want, ch["message"].(map[string]any)["content"], "the stop id is not in the content")

	v = ask(map[string]any{"temperature": 1, "seed": 4, "top_logprobs": 3})
	for i, e := range v["choices"].([]any)[0].(map[string]any)["logprobs"].(map[string]any)["content"].([]any) {
		top := e.(map[string]any)["top_logprobs"].([]any)
		require.Len(t, top, 3, "token %d", i)
		best := top[0].(map[string]any)["logprob"].(float64)
		require.LessOrEqual(t, e.(map[string]any)["logprob"].(float64), best+1e-6, "token %d", i)
		for j := 1; j < 3; j++ {
			require.LessOrEqual(t, top[j].(map[string]any)["logprob"].(float64), top[j-1].(map[string]any)["logprob"].(float64))
		}
	}
}

// TestToolChoiceAndParallelCalls: with tool_choice "none" the reply is text (calls
// not parsed); with parallel_tool_calls false a sample holding two calls is cut
// after the first.
func TestToolChoiceAndParallelCalls(t *testing.T) {
	g, _, _ := newTestGateway(t)
	p := g.pol.cur.Load()
	call := func(name string) string {
		return fmt.Sprintf(`<tool_call>{"name": %q, "arguments": {}}</tool_call>`, name)
	}
	text := "ok " + call("ls") + "\n" + call("cat")
	toks := p.tok.Encode(text)
	tools := []json.RawMessage{json.RawMessage(`{"type":"function","function":{"name":"ls"}}`)}
	no := false
	req := &ChatRequest{Tools: tools, ParallelToolCalls: &no}
	n, got, ok := cutAfterFirstCall(p, toks, req)
	require.True(t, ok)
	require.Equal(t, "ok "+call("ls"), got)
	_, calls := parseToolCalls(got, func() string { return "id" })
	require.Len(t, calls, 1)
	require.Less(t, n, len(toks))

	_, _, ok = cutAfterFirstCall(p, p.tok.Encode("ok "+call("ls")), req)
	require.False(t, ok, "one call: nothing to cut")
	_, _, ok = cutAfterFirstCall(p, toks, &ChatRequest{Tools: tools})
	require.False(t, ok, "parallel calls allowed")
	require.True(t, (&ChatRequest{Tools: tools}).toolCalls())
	require.False(t, (&ChatRequest{Tools: tools, ToolChoice: json.RawMessage(`"none"`)}).toolCalls())
}

// TestLongPromptDoesNotBlock: a short request sent while a long prompt is being
// prefilled is answered before the long one: the long prefill runs a chunk per
// step beside the short row's prefill and decoding.
func TestLongPromptDoesNotBlock(t *testing.T) {
	g, srv, _ := newTestGateway(t)
	order := make(chan string, 2)
	go func() {
		code, v := postChat(t, srv.URL, map[string]any{"model": "hindsight", "max_tokens": 1, "messages": []map[string]any{{"role": "user", "content": strings.Repeat("long prompt ", 600)}}})
		order <- fmt.Sprintf("long %d %v", code, v["error"])
	}()
	b := g.pol.cur.Load().batch
	deadline := time.Now().Add(2 * time.Minute) // catches a hang only
	for {
		b.mu.Lock()
		started := b.steps > 0
		b.mu.Unlock()
		if started {
			break
		}
		require.True(t, time.Now().Before(deadline), "the long request never started")
		time.Sleep(5 * time.Millisecond)
	}
	code, v := postChat(t, srv.URL, map[string]any{"model": "hindsight", "max_tokens": 4, "messages": []map[string]any{{"role": "user", "content": "short"}}})
	require.Equal(t, 200, code, v)
	order <- "short"
	require.Equal(t, "short", <-order, "the short request was answered first")
	require.Equal(t, "long 200 <nil>", <-order)
}
