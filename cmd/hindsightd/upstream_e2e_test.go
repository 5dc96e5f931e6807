package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/gateway"
	"github.com/hindsight-ai/hindsight/internal/testwait"
)

// startFakeVLLM starts gateway/testdata/fake_vllm.py, an HTTP server process that
// answers in vLLM's completions shape, and returns its base URL and the file it
// logs every request body to.
func startFakeVLLM(t *testing.T, args ...string) (base, log string) {
	t.Helper()
	python := pythonWith(t, "json")
	dir := t.TempDir()
	portFile, log := filepath.Join(dir, "port"), filepath.Join(dir, "requests.jsonl")
	cmd := exec.Command(python, append([]string{"../../gateway/testdata/fake_vllm.py", portFile, log}, args...)...)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	deadline := time.Now().Add(testwait.Guard(2 * time.Minute))
	for {
		if b, err := os.ReadFile(portFile); err == nil {
			return "http://127.0.0.1:" + string(b) + "/v1", log
		}
		require.True(t, time.Now().Before(deadline), "fake vLLM did not start")
		time.Sleep(20 * time.Millisecond)
	}
}

// engineRequest is what the gateway sent the engine.
type engineRequest struct {
	Model                  string  `json:"model"`
	Prompt                 []int32 `json:"prompt"`
	MaxTokens              int     `json:"max_tokens"`
	Logprobs               *int    `json:"logprobs"`
	StopTokenIDs           []int32 `json:"stop_token_ids"`
	ReturnTokenIDs         bool    `json:"return_token_ids"`
	ReturnTokensAsTokenIDs bool    `json:"return_tokens_as_token_ids"`
	Stream                 bool    `json:"stream"`
}

// streamTurn sends a streamed turn and returns the content and token ids the
// client assembled from the chunks.
func streamTurn(t *testing.T, base, session string, msgs []map[string]any) (string, []int32) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"model": "hindsight", "messages": msgs, "max_tokens": 32, "logprobs": true, "stream": true})
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/chat/completions", strings.NewReader(string(body)))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+gatewayKey)
	req.Header.Set(gateway.SessionHeader, session)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	var content string
	var ids []int32
	finish := ""
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
				Logprobs *struct {
					Content []struct {
						TokenID int32 `json:"token_id"`
					} `json:"content"`
				} `json:"logprobs"`
				FinishReason string `json:"finish_reason"`
			} `json:"choices"`
		}
		require.NoError(t, json.Unmarshal([]byte(data), &chunk), data)
		for _, c := range chunk.Choices {
			content += c.Delta.Content
			if c.Logprobs != nil {
				for _, e := range c.Logprobs.Content {
					ids = append(ids, e.TokenID)
				}
			}
			if c.FinishReason != "" {
				finish = c.FinishReason
			}
		}
	}
	require.Equal(t, "stop", finish)
	return content, ids
}

// fakeReply is what fake_vllm.py samples for a request: the bytes of "reply <prompt
// length>", then the first stop id, with its made-up log-probs.
func fakeReply(r engineRequest) ([]int32, []float32) {
	var ids []int32
	for _, b := range []byte(fmt.Sprintf("reply %d", len(r.Prompt))) {
		ids = append(ids, int32(b))
	}
	ids = append(ids, r.StopTokenIDs[0])
	lps := make([]float32, len(ids))
	for i := range ids {
		lps[i] = -0.125 * float32(1+i%5)
	}
	return ids, lps
}

// TestGatewayUpstream forwards a two-turn conversation to an engine process that
// answers as vLLM does (vLLM itself does not run here): the gateway sends the
// session's exact tokens as the prompt and asks for token ids and log-probs; the
// client gets the engine's reply; the rollout keeps the engine's sampled ids and
// log-probs, and the second prompt extends the first with exactly the recorded
// tokens (no re-tokenisation). Then the same against vLLM's older shape (ids only
// in logprobs.tokens as "token_id:<id>").
func TestGatewayUpstream(t *testing.T) {
	for _, old := range []bool{false, true} {
		t.Run(fmt.Sprintf("old=%v", old), func(t *testing.T) {
			var args []string
			if old {
				args = []string{"--old"}
			}
			engine, log := startFakeVLLM(t, args...)
			dataDir := t.TempDir()
			p, base := startGatewayWith(t, dataDir, "train: {enabled: false}\n", ", upstream: "+engine+", upstream_model: served-policy")
			msgs := []map[string]any{{"role": "user", "content": "hello engine"}}
			var got []int32
			for turn := range 2 {
				body, _ := json.Marshal(map[string]any{"model": "hindsight", "messages": msgs, "max_tokens": 32, "logprobs": true})
				status, v := post(t, base+"/chat/completions", gatewayKey, "up-1", string(body))
				require.Equal(t, 200, status, v)
				ch := v["choices"].([]any)[0].(map[string]any)
				msg := ch["message"].(map[string]any)
				require.Regexp(t, `^reply \d+$`, msg["content"], "turn %d", turn)
				require.Equal(t, "stop", ch["finish_reason"])
				for _, e := range ch["logprobs"].(map[string]any)["content"].([]any) {
					got = append(got, int32(e.(map[string]any)["token_id"].(float64)))
				}
				msgs = append(msgs, msg, map[string]any{"role": "user", "content": "again"})
			}
			// A third turn streamed: the engine streams too.
			content, ids := streamTurn(t, base, "up-1", msgs)
			require.Regexp(t, `^reply \d+$`, content)
			got = append(got, ids...)
			msgs = append(msgs, map[string]any{"role": "assistant", "content": content})
			status, v := post(t, base+"/sessions/up-1/close", gatewayKey, "", `{"reward": 1}`)
			require.Equal(t, 200, status, v)
			ro := doneRollouts(t, dataDir, 1)["up-1"]
			require.NotNil(t, ro)

			f, err := os.Open(log)
			require.NoError(t, err)
			defer f.Close()
			var reqs []engineRequest
			sc := bufio.NewScanner(f)
			sc.Buffer(nil, 1<<24)
			for sc.Scan() {
				var r engineRequest
				require.NoError(t, json.Unmarshal(sc.Bytes(), &r))
				reqs = append(reqs, r)
			}
			require.Len(t, reqs, 3)
			var wantIDs []int32
			var wantLPs []float32
			for i, r := range reqs {
				require.Equal(t, "served-policy", r.Model)
				require.True(t, r.ReturnTokenIDs && r.ReturnTokensAsTokenIDs, "asks for token ids")
				require.NotNil(t, r.Logprobs)
				require.Equal(t, 0, *r.Logprobs, "the sampled token's log-prob only")
				require.NotEmpty(t, r.StopTokenIDs)
				require.Equal(t, ro.Tokens[:len(r.Prompt)], r.Prompt, "request %d's prompt is the recorded tokens", i)
				ids, lps := fakeReply(r)
				require.Equal(t, ids, ro.Tokens[len(r.Prompt):len(r.Prompt)+len(ids)], "request %d's reply follows its prompt in the rollout", i)
				wantIDs, wantLPs = append(wantIDs, ids...), append(wantLPs, lps...)
			}
			first, _ := fakeReply(reqs[0])
			require.True(t, slices.Equal(slices.Concat(reqs[0].Prompt, first), reqs[1].Prompt[:len(reqs[0].Prompt)+len(first)]),
				"the second prompt extends the first prompt and reply")
			require.True(t, reqs[2].Stream, "a streamed turn streams from the engine")
			ids, lps := sampledOf(ro)
			require.Equal(t, wantIDs, ids, "the rollout keeps the engine's sampled ids")
			require.Equal(t, wantLPs, lps, "and its log-probs")
			require.Equal(t, wantIDs, got, "the client got them too")
			require.Equal(t, "reply "+strconv.Itoa(len(reqs[1].Prompt)), msgs[3]["content"], "the client's second reply")
			require.Equal(t, "reply "+strconv.Itoa(len(reqs[2].Prompt)), msgs[5]["content"], "the client's streamed reply")
			require.NotContains(t, p.log(), `"level":"error"`)
		})
	}
}
