package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	crand "crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	hindsightv1 "github.com/hindsight-ai/hindsight/api/hindsight/v1"
	"github.com/hindsight-ai/hindsight/data/creditfile"
	"github.com/hindsight-ai/hindsight/gateway"
	"github.com/hindsight-ai/hindsight/internal/apikey"
	"github.com/hindsight-ai/hindsight/internal/testwait"
	"github.com/hindsight-ai/hindsight/rollout"
	"github.com/hindsight-ai/hindsight/xla"
)

// gatewayKey is the API key the gateway tests use; only its hash is on disk.
const gatewayKey = "hs-test-key-0123456789"

// startGateway starts hindsightd with training off and the gateway on a free port,
// serving a tiny byte-tokenizer model (hindsight init-model), and returns the
// daemon, its data directory and the gateway's base URL. The same dataDir restarts
// the same daemon.
func startGateway(t *testing.T, dataDir string) (*proc, string) {
	t.Helper()
	return startGatewayWith(t, dataDir, "train: {enabled: false}\n", "")
}

// startGatewayWith is startGateway with the config's train: section and extra
// gateway keys (", key: value" each) of the caller's.
func startGatewayWith(t *testing.T, dataDir, train, gatewayExtra string) (*proc, string) {
	t.Helper()
	return startGatewayEnv(t, dataDir, train, gatewayExtra, nil)
}

// startGatewayEnv is startGatewayWith with extra environment variables (NAME=value)
// for the daemon.
func startGatewayEnv(t *testing.T, dataDir, train, gatewayExtra string, env []string) (*proc, string) {
	t.Helper()
	listen := "127.0.0.1:0"
	if l, ok := strings.CutPrefix(gatewayExtra, "@"); ok { // "@host:port" fixes the address
		listen, gatewayExtra = l, ""
	}
	modelDir := filepath.Join(dataDir, "model")
	if _, err := os.Stat(modelDir); err != nil {
		_, stderr, code := runCLI(t, "init-model", "-out", modelDir, "-seed", "2")
		require.Equal(t, 0, code, stderr)
	}
	if !strings.Contains(gatewayExtra, "feedback_window:") {
		// Sessions are written at once unless a test holds them for feedback.
		gatewayExtra = ", feedback_window: 0s" + gatewayExtra
	}
	keys := filepath.Join(dataDir, "keys")
	require.NoError(t, os.WriteFile(keys, []byte("# gateway test key\n"+apikey.Hash(gatewayKey)+"\n"), 0o600))
	cfg := fmt.Sprintf("data_dir: %s\nlisten: 127.0.0.1:0\nlog: {format: json, level: debug}\nmodel: {dir: %s}\n%s"+
		"gateway: {enabled: true, listen: %s, keys_file: %s, idle_timeout: 1h%s}\n", dataDir, modelDir, train, listen, keys, gatewayExtra)
	path := filepath.Join(dataDir, "hindsightd.yaml")
	require.NoError(t, os.WriteFile(path, []byte(cfg), 0o644))
	p := startDaemonEnv(t, append([]string{"NOTIFY_SOCKET="}, env...), "-config", path)
	p.waitReady(t)
	deadline := time.Now().Add(testwait.Guard(2 * time.Minute))
	for time.Now().Before(deadline) {
		if m := gatewayRe.FindStringSubmatch(p.log()); m != nil {
			return p, "http://" + m[1] + "/v1"
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("gateway not serving:\n%s", p.log())
	return nil, ""
}

var gatewayRe = regexp.MustCompile(`"component":"gateway","listen":"([^"]+)"[^\n]*"message":"gateway serving"`)

// post sends body to the gateway with the test key (key "" sends none) and an
// optional session header; it returns the status and the decoded JSON answer.
func post(t *testing.T, url, key, session, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if session != "" {
		req.Header.Set(gateway.SessionHeader, session)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var v map[string]any
	require.NoError(t, json.Unmarshal(b, &v), string(b))
	return resp.StatusCode, v
}

// doneRollouts waits until the spool has finished n gateway files (training is
// off: a decided file goes to done/) and returns their rollouts by id.
func doneRollouts(t *testing.T, dataDir string, n int) map[string]*rollout.Rollout {
	t.Helper()
	spool := filepath.Join(dataDir, "spool")
	deadline := time.Now().Add(testwait.Guard(3 * time.Minute))
	for {
		names, _ := filepath.Glob(filepath.Join(spool, "done", "*gateway-*.arrow"))
		if len(names) >= n {
			require.Empty(t, listDir(t, filepath.Join(spool, "failed")), "no gateway file is rejected")
			out := map[string]*rollout.Rollout{}
			for _, name := range names {
				r, err := rollout.OpenReader(name, rollout.ReadOptions{})
				require.NoError(t, err)
				for r.Next() {
					require.Empty(t, r.Problems())
					ro := r.Rollout().Clone()
					out[ro.ID] = ro
				}
				require.NoError(t, r.Close())
			}
			return out
		}
		require.True(t, time.Now().Before(deadline), "spool did not finish %d gateway files: done/ has %v", n, names)
		time.Sleep(50 * time.Millisecond)
	}
}

// sampledOf returns the rollout's tokens and log-probs where the log-prob is not
// null: what the sampler produced, in order.
func sampledOf(ro *rollout.Rollout) ([]int32, []float32) {
	var ids []int32
	var lps []float32
	for i, tok := range ro.Tokens {
		if lp, ok := ro.LogProb(i); ok {
			ids, lps = append(ids, tok), append(lps, lp)
		}
	}
	return ids, lps
}

// kinds lists a rollout's segment kinds (with tool names).
func kinds(ro *rollout.Rollout) []string {
	var out []string
	for _, s := range ro.Segments {
		k := s.Kind.String()
		if s.Tool != "" {
			k += ":" + s.Tool
		}
		out = append(out, k)
	}
	return out
}

// rescore checks that every non-null log-prob of ro equals the model's own score
// of the token at the rollout's temperature within 1e-5 (the client asked for top_p
// 1): the log-prob the sampler recorded is the one the trainer scores.
func rescore(t *testing.T, modelDir string, ro *rollout.Rollout) {
	t.Helper()
	m, err := xla.Open(modelDir, xla.OpenOptions{})
	require.NoError(t, err)
	backend, err := xla.NewBackend(xla.ResolveBackend("", ""))
	require.NoError(t, err)
	sc, err := xla.NewScorer(backend, m, xla.ScorerOptions{})
	require.NoError(t, err)
	lp, cache, err := sc.ScoreAt(t.Context(), ro.Tokens, ro.ScoringTemperature())
	require.NoError(t, err)
	cache.Close()
	n := 0
	for i := range ro.Tokens {
		if v, ok := ro.LogProb(i); ok {
			require.InDelta(t, lp[i], v, 1e-5, "rollout %s token %d", ro.ID, i)
			n++
		}
	}
	require.Positive(t, n)
}

// TestGatewayOpenAIClient drives the gateway with the official openai Python
// package: a three-turn tool-calling conversation matched by message prefix and a
// two-turn streamed one under a session header at temperature 0.5. The rollouts the
// sessions become pass the spool's validation, hold exactly the tokens and
// log-probs the client was sent and the temperature it asked for (OpenAI's default
// 1 when it named none), and their log-probs equal the model's re-score at it.
func TestGatewayOpenAIClient(t *testing.T) {
	python := pythonWith(t, "openai", "pyarrow")
	dataDir := t.TempDir()
	p, base := startGateway(t, dataDir)
	out := filepath.Join(t.TempDir(), "client.json")
	cmd := exec.CommandContext(t.Context(), python, "../../gateway/testdata/openai_client.py", base, gatewayKey, out)
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s\ndaemon log:\n%s", b, p.log())
	require.NotContains(t, p.log(), gatewayKey, "the API key is never logged")

	var rec struct {
		Models   []string `json:"models"`
		Sessions map[string]struct {
			Kind  string `json:"kind"`
			Turns []struct {
				Content  string    `json:"content"`
				Finish   string    `json:"finish_reason"`
				TokenIDs []int32   `json:"token_ids"`
				Logprobs []float64 `json:"logprobs"`
			} `json:"turns"`
		} `json:"sessions"`
	}
	raw, err := os.ReadFile(out)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &rec))
	require.Equal(t, []string{"hindsight", "policy"}, rec.Models)
	require.Len(t, rec.Sessions, 2)

	got := doneRollouts(t, dataDir, 2)
	for id, s := range rec.Sessions {
		ro := got[id]
		require.NotNil(t, ro, "session %s has a rollout", id)
		require.Equal(t, "task-"+id, ro.TaskID)
		require.True(t, ro.HasReward)
		require.Equal(t, "bytes-v1", ro.Tokenizer)
		var wantIDs []int32
		var wantLPs []float64
		for _, tn := range s.Turns {
			require.NotEmpty(t, tn.TokenIDs)
			wantIDs, wantLPs = append(wantIDs, tn.TokenIDs...), append(wantLPs, tn.Logprobs...)
		}
		ids, lps := sampledOf(ro)
		require.Equal(t, wantIDs, ids, "session %s: the rollout's sampled tokens are the ones the client got", id)
		for i := range lps {
			require.InDelta(t, wantLPs[i], lps[i], 1e-6)
		}
		wantT := map[string]float32{"tools": 1, "stream": 0.5}[s.Kind]
		require.True(t, ro.HasTemperature, "session %s records its temperature", id)
		require.Equal(t, wantT, ro.Temperature, "session %s", id)
		switch s.Kind {
		case "tools":
			// The model answers in text; the client's own call (a message it adds) is
			// answered by the tool.
			require.Equal(t, []string{"system", "user", "assistant", "tool_call:get_weather", "tool_result:get_weather", "assistant", "user", "assistant"}, kinds(ro))
		case "stream":
			require.Equal(t, []string{"user", "assistant", "user", "assistant"}, kinds(ro))
		}
		rescore(t, filepath.Join(dataDir, "model"), ro)
	}
	_, stderr, code := runCLI(t, append([]string{"validate"}, mustGlob(t, filepath.Join(dataDir, "spool", "done", "*gateway-*.arrow"))...)...)
	require.Equal(t, 0, code, stderr)
}

// TestGatewayErrorsAndAuth sends what curl would: requests without a key, with a
// wrong one, malformed JSON, an unknown model, a conversation longer than the
// model's context; each gets its OpenAI-style error and the daemon keeps serving.
func TestGatewayErrorsAndAuth(t *testing.T) {
	p, base := startGateway(t, t.TempDir())
	chat := base + "/chat/completions"
	ok := `{"model":"hindsight","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`
	for _, tc := range []struct {
		name, key, body string
		status          int
		typ, code       string
	}{
		{"no key", "", ok, 401, "invalid_request_error", "invalid_api_key"},
		{"wrong key", "hs-wrong", ok, 401, "invalid_request_error", "invalid_api_key"},
		{"malformed JSON", gatewayKey, `{"model":"hindsight","messages":[`, 400, "invalid_request_error", ""},
		{"unknown model", gatewayKey, `{"model":"gpt-5","messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_request_error", "model_not_found"},
		{"no messages", gatewayKey, `{"model":"hindsight","messages":[]}`, 400, "invalid_request_error", ""},
		{"bad role", gatewayKey, `{"model":"hindsight","messages":[{"role":"wizard","content":"hi"}]}`, 400, "invalid_request_error", ""},
		{"too long", gatewayKey, `{"model":"hindsight","messages":[{"role":"user","content":"` + strings.Repeat("a", 131072) + `"}]}`, 400, "invalid_request_error", "context_length_exceeded"},
		{"bad temperature", gatewayKey, `{"model":"hindsight","messages":[{"role":"user","content":"hi"}],"temperature":-1}`, 400, "invalid_request_error", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, v := post(t, chat, tc.key, "", tc.body)
			require.Equal(t, tc.status, status, v)
			e, _ := v["error"].(map[string]any)
			require.NotNil(t, e, v)
			require.NotEmpty(t, e["message"])
			require.Equal(t, tc.typ, e["type"])
			if tc.code != "" {
				require.Equal(t, tc.code, e["code"])
			}
		})
	}
	status, v := post(t, chat, gatewayKey, "", ok)
	require.Equal(t, 200, status, v)
	status, _ = post(t, base+"/sessions/nope/close", gatewayKey, "", "{}")
	require.Equal(t, 404, status)
	require.NotContains(t, p.log(), gatewayKey)
}

// TestGatewaySIGKILLKeepsAcknowledgedTurns answers two turns of a session and
// takes a person's rating and comment, kills the daemon with SIGKILL, restarts it, continues the session for a third turn and
// closes it: the rollout holds all three turns' sampled tokens and the feedback,
// exactly once.
func TestGatewaySIGKILLKeepsAcknowledgedTurns(t *testing.T) {
	dataDir := t.TempDir()
	p, base := startGateway(t, dataDir)
	msgs := []map[string]any{{"role": "user", "content": "count with me"}}
	var want []int32
	var ids []string // completion ids
	turn := func(base string) {
		body, _ := json.Marshal(map[string]any{"model": "hindsight", "messages": msgs, "max_tokens": 8, "logprobs": true, "seed": len(msgs)})
		status, v := post(t, base+"/chat/completions", gatewayKey, "kill-1", string(body))
		require.Equal(t, 200, status, v)
		ids = append(ids, v["id"].(string))
		ch := v["choices"].([]any)[0].(map[string]any)
		for _, e := range ch["logprobs"].(map[string]any)["content"].([]any) {
			want = append(want, int32(e.(map[string]any)["token_id"].(float64)))
		}
		msgs = append(msgs, ch["message"].(map[string]any), map[string]any{"role": "user", "content": "go on"})
	}
	turn(base)
	turn(base)
	// A person rates the conversation and comments on the first reply.
	status, v := post(t, base+"/feedback", gatewayKey, "", `{"completion_id":"`+ids[0]+`","rating":-1,"comment":"say what you count"}`)
	require.Equal(t, 200, status, v)
	require.Equal(t, float64(1), v["turn"])
	status, v = post(t, base+"/feedback", gatewayKey, "", `{"session_id":"kill-1","rating":3}`)
	require.Equal(t, 400, status, v)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	p.wait(t, 10*time.Second)
	require.FileExists(t, filepath.Join(dataDir, "state", "gateway", "kill-1.jsonl"))

	p2, base2 := startGateway(t, dataDir)
	require.Contains(t, p2.log(), "session reopened from its journal")
	turn(base2)
	status, v = post(t, base2+"/sessions/kill-1/close", gatewayKey, "", `{"reward": 1}`)
	require.Equal(t, 200, status, v)
	require.Equal(t, float64(3), v["turns"])
	got := doneRollouts(t, dataDir, 1)
	ro := got["kill-1"]
	require.NotNil(t, ro)
	sampled, _ := sampledOf(ro)
	require.Equal(t, want, sampled)
	require.Equal(t, []string{"user", "assistant", "user", "assistant", "user", "assistant"}, kinds(ro))
	require.True(t, ro.HasFeedback)
	require.Equal(t, int8(-1), ro.Feedback)
	require.Equal(t, "say what you count", ro.Segments[1].Feedback, "the comment is on the first reply")
	require.Empty(t, ro.Segments[3].Feedback)
	status, v = post(t, base2+"/feedback", gatewayKey, "", `{"session_id":"kill-1","rating":1}`)
	require.Equal(t, 200, status, v)
	require.Equal(t, true, v["late"], "a written session's feedback is a follow-up record")
	require.NoFileExists(t, filepath.Join(dataDir, "state", "gateway", "kill-1.jsonl"))
	p2.stop(t, 30*time.Second)
	require.Len(t, mustGlob(t, filepath.Join(dataDir, "spool", "*", "*gateway-*.arrow")), 1, "the session is written once")
}

// TestGatewayLateFeedback rates a session before it is written (journaled with the
// session) and after it is written but before it is trained (a follow-up record),
// kills the daemon with SIGKILL, restarts it, and finds both comments as hints of
// the one trained rollout, exactly once each; a rating after the training is
// recorded as too late and not trained again.
func TestGatewayLateFeedback(t *testing.T) {
	dataDir := t.TempDir()
	// min_gap 0: the two short replies may both be hinted.
	train := "train: {idle_flush: 200ms, checkpoint: {every_steps: 1}}\nteacher: {select: {min_gap: 0}}\n"
	p, base := startGatewayWith(t, dataDir, train, "")
	addr := p.waitReady(t)
	_, stderr, code := runCLI(t, "pause", "-addr", addr, "-reason", "hold the rollout in incoming/")
	require.Equal(t, 0, code, stderr)

	msgs := []map[string]any{{"role": "user", "content": "count with me"}}
	for i := range 2 {
		body, _ := json.Marshal(map[string]any{"model": "hindsight", "messages": msgs, "max_tokens": 6, "seed": i})
		status, v := post(t, base+"/chat/completions", gatewayKey, "late-1", string(body))
		require.Equal(t, 200, status, v)
		msgs = append(msgs, v["choices"].([]any)[0].(map[string]any)["message"].(map[string]any), map[string]any{"role": "user", "content": "go on"})
	}
	status, v := post(t, base+"/feedback", gatewayKey, "", `{"session_id":"late-1","turn":1,"comment":"before the write"}`)
	require.Equal(t, 200, status, v)
	require.Equal(t, false, v["late"])
	status, v = post(t, base+"/sessions/late-1/close", gatewayKey, "", `{"reward": 0}`)
	require.Equal(t, 200, status, v)
	require.Len(t, mustGlob(t, filepath.Join(dataDir, "spool", "incoming", "gateway-late-1.arrow")), 1, "paused: not claimed")

	status, v = post(t, base+"/feedback", gatewayKey, "", `{"session_id":"late-1","rating":-1,"comment":"after the write"}`)
	require.Equal(t, 200, status, v)
	require.Equal(t, true, v["late"])
	require.Equal(t, false, v["too_late"])
	require.Equal(t, float64(2), v["turn"], "default: the last turn")
	status, v = post(t, base+"/feedback", gatewayKey, "", `{"session_id":"late-1","turn":3,"rating":1}`)
	require.Equal(t, 400, status, v)
	status, v = post(t, base+"/feedback", gatewayKey, "", `{"session_id":"never-1","rating":1}`)
	require.Equal(t, 404, status, v)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	p.wait(t, 10*time.Second)

	p2, base2 := startGatewayWith(t, dataDir, train, "")
	addr2 := p2.waitReady(t)
	waitTrained(t, p2, addr2, 1)
	require.Contains(t, p2.log(), `"message":"late feedback joined"`)
	status, v = post(t, base2+"/feedback", gatewayKey, "", `{"session_id":"late-1","rating":1,"comment":"after training"}`)
	require.Equal(t, 200, status, v)
	require.Equal(t, true, v["too_late"])
	// Status, the CLI and /metrics count them: one joined, one too late.
	var gs *hindsightv1.GatewayStats
	for deadline := time.Now().Add(testwait.Guard(2 * time.Minute)); ; time.Sleep(200 * time.Millisecond) {
		gs = statusOf(t, addr2).GetGateway()
		if gs.GetFeedbackLate() == 1 || time.Now().After(deadline) {
			break
		}
	}
	require.EqualValues(t, 1, gs.GetFeedbackJoined())
	require.EqualValues(t, 1, gs.GetFeedbackLate())
	require.EqualValues(t, 0, gs.GetFeedbackPending())
	require.EqualValues(t, 1, gs.GetRequests(), "this process answered the one feedback request")
	table, _, code := runCLI(t, "status", "-addr", addr2)
	require.Equal(t, 0, code)
	require.Regexp(t, `(?m)^  late feedback +1 joined, 1 too late, 0 pending$`, table)
	resp, err := http.Get("http://" + addr2 + "/metrics")
	require.NoError(t, err)
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Contains(t, string(metrics), `hindsight_gateway_feedback_records{state="late"} 1`)
	require.Contains(t, string(metrics), "hindsight_gateway_requests_total 1")
	p2.stop(t, 60*time.Second)

	var hints []string
	rows := 0
	for _, n := range listDir(t, filepath.Join(dataDir, "outputs")) {
		rs, err := creditfile.Read(filepath.Join(dataDir, "outputs", n))
		require.NoError(t, err)
		for _, r := range rs {
			require.Equal(t, "late-1", r.RolloutID)
			rows++
			for _, h := range r.Hints {
				hints = append(hints, fmt.Sprintf("%d:%s:%s", h.Segment, h.Reason, h.Text))
			}
		}
	}
	require.Equal(t, 1, rows, "trained once")
	require.ElementsMatch(t, []string{"1:feedback:before the write", "3:feedback:after the write"}, hints,
		"each comment is the hint of its turn, once; the one after training is not\n%s", p2.log())
	var joined, late int
	for _, line := range strings.Split(p2.log(), "\n") {
		if strings.Contains(line, `"message":"late feedback joined"`) {
			joined++
		}
		if strings.Contains(line, `"too_late":true`) {
			late++
		}
	}
	require.Equal(t, 1, joined)
	require.Equal(t, 1, late)
}

// TestGatewaySwapsCheckpoint runs the outer loop: a session recorded by the
// gateway is trained on, the checkpoint it gives is swapped into the gateway
// without a restart, and requests sent all the while are each answered. An
// SGLang-style engine (a real HTTP server standing in for SGLang's
// /update_weights_from_disk) that fails the first call is told again and gets the
// checkpoint's path.
func TestGatewaySwapsCheckpoint(t *testing.T) {
	dataDir := t.TempDir()
	calls := make(chan string, 64)
	var n atomic.Int32
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			ModelPath string `json:"model_path"`
		}
		json.NewDecoder(r.Body).Decode(&body)
		calls <- r.URL.Path + " " + body.ModelPath
		if n.Add(1) == 1 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, `{"success": true}`)
	}))
	defer engine.Close()
	p, base := startGatewayWith(t, dataDir, "train: {idle_flush: 200ms, checkpoint: {every_steps: 1}}\n"+
		"engine_hooks: [{kind: sglang, url: "+engine.URL+", attempts: 3}]\n", ", reload_interval: 50ms")
	body := `{"model":"hindsight","messages":[{"role":"user","content":"hello"}],"max_tokens":8,"seed":1}`
	status, v := post(t, base+"/chat/completions", gatewayKey, "swap-1", body)
	require.Equal(t, 200, status, v)
	require.Equal(t, "hindsight-step-0", v["system_fingerprint"])
	status, v = post(t, base+"/sessions/swap-1/close", gatewayKey, "", `{"reward": 1, "task_id": "greet"}`)
	require.Equal(t, 200, status, v)

	// Requests keep coming while the daemon trains on the session and the gateway
	// swaps the checkpoint in; every one is answered, the last by the new policy.
	deadline := time.Now().Add(testwait.Guard(10 * time.Minute))
	for i := 0; ; i++ {
		require.True(t, time.Now().Before(deadline), "no checkpoint served in time:\n%s", p.log())
		status, v := post(t, base+"/chat/completions", gatewayKey, fmt.Sprintf("load-%d", i), body)
		require.Equal(t, 200, status, v)
		if v["system_fingerprint"] != "hindsight-step-0" {
			require.Regexp(t, `^hindsight-step-[1-9]\d*$`, v["system_fingerprint"])
			break
		}
	}
	require.Contains(t, p.log(), `"message":"serving policy"`)
	for i := range 2 {
		select {
		case c := <-calls:
			require.Regexp(t, `^/update_weights_from_disk /.*/checkpoints/step-\d+$`, c, "call %d", i+1)
		case <-time.After(testwait.Guard(3 * time.Minute)):
			t.Fatalf("the engine was called %d times, want 2 (a failure, then the retry):\n%s", i, p.log())
		}
	}
	require.Contains(t, p.log(), "engine hook failed; retrying")
	// The hook's state is in status and /metrics: the checkpoint pushed on the
	// second attempt, no error left.
	addr := p.waitReady(t)
	var hk *hindsightv1.EngineHookState
	for deadline := time.Now().Add(testwait.Guard(2 * time.Minute)); ; time.Sleep(200 * time.Millisecond) {
		hs := statusOf(t, addr).GetEngineHooks()
		require.Len(t, hs, 1)
		hk = hs[0]
		if hk.GetLastStep() > 0 || time.Now().After(deadline) {
			break
		}
	}
	require.Equal(t, "sglang", hk.GetKind())
	require.Positive(t, hk.GetLastStep())
	require.Regexp(t, `/checkpoints/step-\d+$`, hk.GetLastCheckpoint())
	require.EqualValues(t, 2, hk.GetAttempts())
	require.Empty(t, hk.GetLastError(), "a success clears the error")
	gs := statusOf(t, addr).GetGateway()
	require.Positive(t, gs.GetTurns())
	require.EqualValues(t, 1, gs.GetRolloutsRecorded())
	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Regexp(t, `hindsight_engine_hook_last_step\{kind="sglang",url="http://127\.0\.0\.1:\d+"\} [1-9]`, string(metrics))
	require.Contains(t, string(metrics), `hindsight_engine_hook_failing{kind="sglang"`)
	resp, err = http.Get(base + "/models")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 401, resp.StatusCode, "models needs the key too")
}

// TestGatewayTLS serves the gateway over HTTPS from certificate and key files: a
// client that trusts the certificate gets answers, a plain-HTTP request does not.
func TestGatewayTLS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, pool := selfSigned(t, dir)
	_, base := startGatewayWith(t, t.TempDir(), "train: {enabled: false}\n",
		fmt.Sprintf(", tls_cert_file: %s, tls_key_file: %s", certFile, keyFile))
	secure := strings.Replace(base, "http://", "https://", 1)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, secure+"/chat/completions",
		strings.NewReader(`{"model":"hindsight","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+gatewayKey)
	resp, err := client.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)

	plain, err := http.Get(base + "/models")
	require.NoError(t, err)
	plain.Body.Close()
	require.Equal(t, http.StatusBadRequest, plain.StatusCode, "an HTTPS server refuses plain HTTP")
}

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key as PEM
// files and returns them with a pool that trusts the certificate.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), crand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "hindsight-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(crand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	kb, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600))
	return certFile, keyFile, pool
}

// TestGatewayPolicyAsTeacher points the openai teacher at the daemon's own
// gateway (teacher.openai.model: policy, the unrecorded model id): for a session
// the person rated −1 the teacher asks the live policy itself for the hint, and
// the teacher's calls are not recorded as rollouts.
func TestGatewayPolicyAsTeacher(t *testing.T) {
	dataDir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	train := "train: {idle_flush: 200ms, checkpoint: {every_steps: 1}}\n" +
		"teacher: {chain: [openai], select: {rules: [negative_rating]}, openai: {base_url: http://" + addr + "/v1, model: policy, api_key_env: HS_GATEWAY_KEY, max_hint_tokens: 24, temperature: 1}}\n"
	t.Setenv("HS_GATEWAY_KEY", gatewayKey)
	p, base := startGatewayWith(t, dataDir, train, "@"+addr)
	require.Equal(t, "http://"+addr+"/v1", base)
	status, v := post(t, base+"/chat/completions", gatewayKey, "rated-1",
		`{"model":"hindsight","messages":[{"role":"user","content":"what is 2+2?"}],"max_tokens":8,"seed":3}`)
	require.Equal(t, 200, status, v)
	status, v = post(t, base+"/feedback", gatewayKey, "", `{"session_id":"rated-1","rating":-1,"comment":""}`)
	require.Equal(t, 200, status, v)
	status, v = post(t, base+"/sessions/rated-1/close", gatewayKey, "", `{"reward": 0}`)
	require.Equal(t, 200, status, v)

	// The policy's reply reaches the teacher as a well-formed completion: a hint,
	// or, from a tiny random policy, one dropped for its length or emptiness; a
	// reply the teacher could not read (malformed, client_error, …) fails.
	statusAddr := p.waitReady(t)
	deadline := time.Now().Add(testwait.Guard(10 * time.Minute))
	for {
		st := getStatus(t, statusAddr)
		var v map[string]any
		require.NoError(t, json.Unmarshal([]byte(st), &v))
		teacher, _ := findKey(v, "teacher").(map[string]any)
		hints, _ := teacher["hintsBySource"].(map[string]any)
		failures, _ := teacher["failuresByKind"].(map[string]any)
		for kind := range failures {
			require.Contains(t, []string{"too_long", "empty"}, kind, "status:\n%s\nlog:\n%s", st, p.log())
		}
		if hints["openai"] != nil || len(failures) > 0 {
			t.Logf("teacher: %v", teacher)
			break
		}
		require.True(t, time.Now().Before(deadline), "the teacher did not hear from the policy in time; status:\n%s\nlog:\n%s", st, p.log())
		time.Sleep(200 * time.Millisecond)
	}
	require.Contains(t, p.log(), `"model":"policy"`, "the teacher's call reached the gateway as the unrecorded model")
	require.Contains(t, p.log(), `"message":"unrecorded turn"`)
	require.Len(t, mustGlob(t, filepath.Join(dataDir, "spool", "*", "*gateway-*.arrow")), 1, "only the person's session is a rollout")
	require.NoDirExists(t, filepath.Join(dataDir, "state", "gateway", "unrecorded"))
}

// findKey returns the first value under key in a decoded JSON tree.
func findKey(v any, key string) any {
	switch x := v.(type) {
	case map[string]any:
		if got, ok := x[key]; ok {
			return got
		}
		for _, c := range x {
			if got := findKey(c, key); got != nil {
				return got
			}
		}
	case []any:
		for _, c := range x {
			if got := findKey(c, key); got != nil {
				return got
			}
		}
	}
	return nil
}

// getStatus returns GetStatus as JSON (Connect over HTTP/1.1).
func getStatus(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Post("http://"+addr+"/hindsight.v1.StatusService/GetStatus", "application/json", strings.NewReader("{}"))
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

// TestControlAPIKey: with control_keys_file, pause needs a key
// (HINDSIGHT_CONTROL_KEY for the CLI) while status stays open.
func TestControlAPIKey(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "control-keys")
	require.NoError(t, os.WriteFile(keys, []byte(apikey.Hash("ops-key")+"\n"), 0o600))
	cfg := filepath.Join(dir, "hindsightd.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(fmt.Sprintf("data_dir: %s\nlisten: 127.0.0.1:0\nlog: {format: json}\ntrain: {enabled: false}\ncontrol_keys_file: %s\n", filepath.Join(dir, "data"), keys)), 0o644))
	p := startDaemon(t, "-config", cfg)
	addr := p.waitReady(t)

	t.Setenv("HINDSIGHT_CONTROL_KEY", "")
	_, stderr, code := runCLI(t, "pause", "-addr", addr, "-reason", "no key")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "unauthenticated")
	t.Setenv("HINDSIGHT_CONTROL_KEY", "wrong")
	_, _, code = runCLI(t, "pause", "-addr", addr)
	require.Equal(t, 1, code)
	t.Setenv("HINDSIGHT_CONTROL_KEY", "ops-key")
	out, stderr, code := runCLI(t, "pause", "-addr", addr, "-reason", "maintenance")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "paused by ")
	require.Contains(t, getStatus(t, addr), "maintenance", "status needs no key")
	require.NotContains(t, p.log(), "ops-key")
}

func mustGlob(t *testing.T, pattern string) []string {
	t.Helper()
	m, err := filepath.Glob(pattern)
	require.NoError(t, err)
	return m
}

// pythonWith returns a python3 that imports every module of mods; it skips the test
// without one unless HINDSIGHT_REQUIRE_PYTHON_OPENAI is set (CI installs
// .ci/requirements.txt into the python3 on its PATH).
func pythonWith(t *testing.T, mods ...string) string {
	t.Helper()
	for _, py := range []string{os.Getenv("HINDSIGHT_PYTHON"), "python3"} {
		if py == "" {
			continue
		}
		path, err := exec.LookPath(py)
		if err != nil {
			continue
		}
		var stderr bytes.Buffer
		cmd := exec.Command(path, "-c", "import "+strings.Join(mods, ", "))
		cmd.Stderr = &stderr
		if cmd.Run() == nil {
			return path
		}
	}
	if os.Getenv("HINDSIGHT_REQUIRE_PYTHON_OPENAI") != "" {
		t.Fatalf("no python3 (HINDSIGHT_PYTHON or PATH) imports %v", mods)
	}
	t.Skipf("no python3 imports %v (pip install -r .ci/requirements.txt)", mods)
	return ""
}
