package gateway

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/internal/testwait"
	"github.com/hindsight-ai/hindsight/xla"
)

// vllmAnswer is a completions answer in vLLM's shape (serving_completion.py), with
// or without token_ids (return_token_ids, vLLM ≥ 0.10.2).
func vllmAnswer(ids []int32, lps []float64, finish string, withIDs bool) string {
	var tokens []string
	var tops []map[string]float64
	for i, id := range ids {
		tok := fmt.Sprintf("token_id:%d", id)
		tokens = append(tokens, tok)
		tops = append(tops, map[string]float64{tok: lps[i]})
	}
	ch := map[string]any{"index": 0, "text": "x", "finish_reason": finish, "stop_reason": nil, "prompt_logprobs": nil,
		"logprobs": map[string]any{"text_offset": make([]int, len(ids)), "token_logprobs": lps, "tokens": tokens, "top_logprobs": tops}}
	if withIDs {
		ch["token_ids"], ch["prompt_token_ids"] = ids, []int32{1, 2}
	}
	b, _ := json.Marshal(map[string]any{"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m",
		"choices": []any{ch}, "usage": map[string]int{"prompt_tokens": 2, "completion_tokens": len(ids), "total_tokens": 2 + len(ids)}})
	return string(b)
}

// TestParseCompletion reads vLLM's answers, new and old shape, and refuses those
// that cannot be recorded faithfully.
func TestParseCompletion(t *testing.T) {
	o := xla.SampleOptions{MaxNew: 8, Stop: []int32{258}}
	for _, withIDs := range []bool{true, false} {
		s, err := parseCompletion([]byte(vllmAnswer([]int32{104, 105, 258}, []float64{-0.5, -1, -0.25}, "stop", withIDs)), o, 265)
		require.NoError(t, err)
		require.Equal(t, []int32{104, 105, 258}, s.Tokens)
		require.Equal(t, []float32{-0.5, -1, -0.25}, s.LogProbs)
		require.Equal(t, xla.StopToken, s.Reason)
	}
	s, err := parseCompletion([]byte(vllmAnswer([]int32{104, 105}, []float64{-0.5, -1}, "length", true)), o, 265)
	require.NoError(t, err)
	require.Equal(t, xla.StopLength, s.Reason)
	for name, tc := range map[string]struct {
		body string
		want string
	}{
		"outside vocab": {vllmAnswer([]int32{104, 9000}, []float64{-1, -1}, "length", true), "outside the tokenizer's vocabulary"},
		"too many":      {vllmAnswer(make([]int32, 9), make([]float64, 9), "length", true), "max_tokens was 8"},
		"no logprobs":   {`{"choices":[{"text":"hi","token_ids":[1,2],"finish_reason":"length"}]}`, "no logprobs"},
		"mismatch":      {`{"choices":[{"text":"hi","token_ids":[1,2],"logprobs":{"tokens":["a"],"token_logprobs":[-1]}}]}`, "2 token ids and 1 log-probs"},
		"text tokens":   {`{"choices":[{"text":"hi","logprobs":{"tokens":["hi"],"token_logprobs":[-1]}}]}`, "want token_id:<id>"},
		"two choices":   {`{"choices":[{},{}]}`, "2 choices"},
	} {
		_, err := parseCompletion([]byte(tc.body), o, 265)
		require.ErrorContains(t, err, tc.want, name)
	}
}

// TestUpstreamErrors: an engine that refuses (vLLM's 404 for an unknown model) or
// answers what cannot be recorded gives the client a 502 upstream_error, and
// nothing is recorded.
func TestUpstreamErrors(t *testing.T) {
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if strings.Contains(string(b), `"model":"gone"`) {
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"error":{"message":"The model `+"`gone`"+` does not exist.","type":"NotFoundError","param":null,"code":404}}`)
			return
		}
		fmt.Fprint(w, vllmAnswer([]int32{70000}, []float64{-1}, "length", true))
	}))
	defer engine.Close()
	for _, model := range []string{"gone", "other-tokenizer"} {
		cfg := DefaultConfig()
		cfg.Upstream, cfg.UpstreamModel = engine.URL+"/v1", model
		g, srv, _ := newTestGatewayWith(t, cfg)
		resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"hindsight","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`))
		require.NoError(t, err)
		var e struct{ Error apiError }
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
		resp.Body.Close()
		require.Equal(t, http.StatusBadGateway, resp.StatusCode, model)
		require.Equal(t, "upstream_error", *e.Error.Code)
		g.mu.Lock()
		require.Empty(t, g.sessions, "nothing recorded")
		g.mu.Unlock()
	}
}

// TestUpstreamStreamsTokenByToken: a streamed turn streams from the engine, and
// the gateway sends the client the first token's content while the engine has not
// yet sent the rest (the engine waits for the client to have it).
func TestUpstreamStreamsTokenByToken(t *testing.T) {
	clientHasFirst := make(chan struct{})
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req completionRequest
		require.NoError(t, json.NewDecoder(r.Body).Decode(&req))
		require.True(t, req.Stream)
		w.Header().Set("Content-Type", "text/event-stream")
		chunk := func(id int32, finish string) {
			f := "null"
			if finish != "" {
				f = `"` + finish + `"`
			}
			fmt.Fprintf(w, `data: {"id":"cmpl-s","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"x",`+
				`"logprobs":{"text_offset":[0],"token_logprobs":[-0.5],"tokens":["token_id:%d"],"top_logprobs":[{"token_id:%d":-0.5}]},`+
				`"finish_reason":%s,"stop_reason":null,"token_ids":[%d]}]}`+"\n\n", id, id, f, id)
			w.(http.Flusher).Flush()
		}
		chunk('H', "")
		select {
		case <-clientHasFirst:
		case <-time.After(testwait.Guard(time.Minute)):
			t.Error("the gateway did not pass the first token on before the engine finished")
		}
		chunk('i', "")
		chunk(req.StopTokenIDs[0], "stop")
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	defer engine.Close()
	cfg := DefaultConfig()
	cfg.Upstream, cfg.UpstreamModel = engine.URL+"/v1", "m"
	_, srv, _ := newTestGatewayWith(t, cfg)
	resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"hindsight","messages":[{"role":"user","content":"hi"}],"max_tokens":8,"stream":true}`))
	require.NoError(t, err)
	defer resp.Body.Close()
	var content strings.Builder
	sc := bufio.NewScanner(resp.Body)
	finish := ""
	for sc.Scan() {
		line := sc.Text()
		if strings.Contains(line, `"content":"H"`) {
			close(clientHasFirst)
		}
		if i := strings.Index(line, `"finish_reason":"`); i >= 0 {
			finish = line[i+17 : i+17+strings.IndexByte(line[i+17:], '"')]
		}
		if d, ok := strings.CutPrefix(line, "data: "); ok && d != "[DONE]" {
			var c struct {
				Choices []struct {
					Delta struct{ Content string } `json:"delta"`
				} `json:"choices"`
			}
			require.NoError(t, json.Unmarshal([]byte(d), &c))
			for _, ch := range c.Choices {
				content.WriteString(ch.Delta.Content)
			}
		}
	}
	require.Equal(t, "Hi", content.String())
	require.Equal(t, "stop", finish)
}
