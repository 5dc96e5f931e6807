package teacher

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/internal/testwait"
	"github.com/hindsight-ai/hindsight/rollout"
)

// fakeURL is the root of the fake chat-completions server that TestMain starts as a
// separate process (teacher/internal/fakellm); its API is under /v1.
var fakeURL string

func TestMain(m *testing.M) {
	stop, err := startFakeLLM()
	if err != nil {
		fmt.Fprintln(os.Stderr, "start fake LLM server:", err)
		os.Exit(1)
	}
	code := m.Run()
	stop()
	os.Exit(code)
}

// startFakeLLM builds the fake server with go build, starts it on 127.0.0.1:0 and
// reads the address it prints.
func startFakeLLM() (stop func(), err error) {
	dir, err := os.MkdirTemp("", "fakellm-")
	if err != nil {
		return nil, err
	}
	bin := filepath.Join(dir, "fakellm")
	build := exec.Command("go", "build", "-o", bin, "./internal/fakellm")
	if out, err := build.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "-addr", "127.0.0.1:0")
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	stop = func() {
		cmd.Process.Kill()
		cmd.Wait()
		os.RemoveAll(dir)
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			addr <- strings.TrimPrefix(sc.Text(), "ADDR ")
		}
		close(addr)
	}()
	select {
	case a, ok := <-addr:
		if !ok || a == "" {
			stop()
			return nil, fmt.Errorf("fake server printed no address")
		}
		fakeURL = "http://" + a
	case <-time.After(testwait.Guard(2 * time.Minute)):
		stop()
		return nil, fmt.Errorf("fake server did not start (hang guard)")
	}
	return stop, nil
}

type serverStats struct {
	Count int     `json:"count"`
	Times []int64 `json:"times"`
	Auth  string  `json:"auth"`
}

// fakeStats returns the fake server's counters for one model name.
func fakeStats(t *testing.T, model string) serverStats {
	t.Helper()
	resp, err := http.Get(fakeURL + "/stats")
	require.NoError(t, err)
	defer resp.Body.Close()
	all := map[string]serverStats{}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&all))
	return all[model]
}

// testOpenAIConfig is a fast config for model on the fake server: no retries, short
// timeouts and backoff, a breaker that stays closed.
func testOpenAIConfig(model string) OpenAIConfig {
	c := DefaultOpenAIConfig()
	c.BaseURL = fakeURL + "/v1"
	c.Model = model
	c.Timeout = 2 * time.Second
	c.Retries = 0
	c.Backoff = 5 * time.Millisecond
	c.MaxBackoff = 20 * time.Millisecond
	c.Breaker = BreakerConfig{Failures: 100, Cooldown: time.Second}
	return c
}

func newTestOpenAI(t *testing.T, cfg OpenAIConfig, cache *Cache) (*OpenAITeacher, *Stats) {
	t.Helper()
	stats := &Stats{}
	tt, err := NewOpenAITeacher(cfg, OpenAIDeps{Tokenizer: tokenizer.NewBytes(), Logger: zerolog.Nop(), Stats: stats, Cache: cache})
	require.NoError(t, err)
	return tt, stats
}

// askOne asks t for a hint on the failed grep call of leakRollout.
func askOne(t *testing.T, tt Teacher) Hint {
	t.Helper()
	r := leakRollout()
	hs, err := tt.Hints(t.Context(), r, []Selection{target(r, 3, ReasonToolError, 4)})
	require.NoError(t, err)
	require.Len(t, hs, 1)
	return hs[0]
}

const fakeOKHint = "Locate the file with `search_code` before reading it instead of guessing the path."

func TestOpenAIHint(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "key")
	require.NoError(t, os.WriteFile(keyFile, []byte("sk-test-secret-123\n"), 0o600))
	cfg := testOpenAIConfig("ok#hint")
	cfg.APIKeyFile = keyFile
	var logs bytes.Buffer
	stats := &Stats{}
	tt, err := NewOpenAITeacher(cfg, OpenAIDeps{Tokenizer: tokenizer.NewBytes(),
		Logger: zerolog.New(&logs).Level(zerolog.TraceLevel), Stats: stats})
	require.NoError(t, err)
	h := askOne(t, tt)
	require.NoError(t, h.Err)
	require.Equal(t, fakeOKHint, h.Text)
	require.Equal(t, "openai", h.Source)
	require.False(t, h.Cached)
	st := fakeStats(t, "ok#hint")
	require.Equal(t, 1, st.Count)
	require.Equal(t, "Bearer sk-test-secret-123", st.Auth, "the key from the file is sent")
	require.EqualValues(t, 1, stats.Snapshot().Requests)

	// A failing request logs at debug level, and never the key.
	cfg.Model = "500#hint"
	tt, err = NewOpenAITeacher(cfg, OpenAIDeps{Tokenizer: tokenizer.NewBytes(),
		Logger: zerolog.New(&logs).Level(zerolog.TraceLevel), Stats: stats})
	require.NoError(t, err)
	require.Error(t, askOne(t, tt).Err)
	require.Contains(t, logs.String(), "teacher request failed")
	require.NotContains(t, logs.String(), "sk-test-secret")
}

func TestOpenAIAPIKeyEnv(t *testing.T) {
	t.Setenv("HINDSIGHT_TEST_KEY", "")
	cfg := testOpenAIConfig("ok#env")
	cfg.APIKeyEnv = "HINDSIGHT_TEST_KEY"
	_, err := NewOpenAITeacher(cfg, OpenAIDeps{Tokenizer: tokenizer.NewBytes()})
	require.ErrorContains(t, err, "openai.api_key_env: environment variable HINDSIGHT_TEST_KEY is empty")
	t.Setenv("HINDSIGHT_TEST_KEY", "sk-env-secret")
	tt, _ := newTestOpenAI(t, cfg, nil)
	require.NoError(t, askOne(t, tt).Err)
	require.Equal(t, "Bearer sk-env-secret", fakeStats(t, "ok#env").Auth)
}

// TestOpenAIFaults: each injected fault fails fast, says "no hint", and is counted
// once under its kind.
func TestOpenAIFaults(t *testing.T) {
	tests := []struct {
		model string
		kind  FailureKind
	}{
		{"slow#f", FailTimeout},
		{"429#f", FailRateLimited},
		{"500#f", FailServer},
		{"badjson#f", FailMalformed},
		{"empty#f", FailEmpty},
		{"long#f", FailTooLong},
		{"reset#f", FailReset},
		{"nosuchmode#f", FailClient}, // the server answers 404
	}
	for _, tc := range tests {
		t.Run(tc.model, func(t *testing.T) {
			cfg := testOpenAIConfig(tc.model)
			cfg.Timeout = 300 * time.Millisecond
			tt, stats := newTestOpenAI(t, cfg, nil)
			h := askOne(t, tt) // no fault stalls: each ends as its kind below (a stall is the test timeout's)
			require.Empty(t, h.Text)
			require.Error(t, h.Err)
			require.Equal(t, tc.kind, KindOf(h.Err), "err %v", h.Err)
			snap := stats.Snapshot()
			require.Equal(t, map[string]int64{tc.kind.String(): 1}, snap.Faults)
			require.EqualValues(t, 1, snap.Requests)
			require.Equal(t, 1, fakeStats(t, tc.model).Count)
		})
	}
}

func TestOpenAIRetries(t *testing.T) {
	tests := []struct {
		model   string
		faults  map[string]int64
		retried int64
	}{
		{"500*2#r", map[string]int64{"server_error": 2}, 2},
		{"reset*1#r", map[string]int64{"reset": 1}, 1},
		{"badjson*1#r", map[string]int64{"malformed": 1}, 1},
		{"slow*1#r", map[string]int64{"timeout": 1}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.model, func(t *testing.T) {
			cfg := testOpenAIConfig(tc.model)
			cfg.Timeout = 300 * time.Millisecond
			cfg.Retries = 3
			tt, stats := newTestOpenAI(t, cfg, nil)
			h := askOne(t, tt)
			require.NoError(t, h.Err)
			require.Equal(t, fakeOKHint, h.Text)
			snap := stats.Snapshot()
			require.Equal(t, tc.faults, snap.Faults)
			require.Equal(t, tc.retried, snap.Retries)
			require.EqualValues(t, tc.retried+1, snap.Requests)
			require.EqualValues(t, tc.retried+1, fakeStats(t, tc.model).Count)
		})
	}

	t.Run("retries run out", func(t *testing.T) {
		cfg := testOpenAIConfig("500#out")
		cfg.Retries = 2
		tt, stats := newTestOpenAI(t, cfg, nil)
		require.Equal(t, FailServer, KindOf(askOne(t, tt).Err))
		require.Equal(t, 3, fakeStats(t, "500#out").Count)
		require.EqualValues(t, 3, stats.Snapshot().Faults["server_error"])
	})
	t.Run("empty is not retried", func(t *testing.T) {
		cfg := testOpenAIConfig("empty#once")
		cfg.Retries = 3
		tt, _ := newTestOpenAI(t, cfg, nil)
		require.Equal(t, FailEmpty, KindOf(askOne(t, tt).Err))
		require.Equal(t, 1, fakeStats(t, "empty#once").Count)
	})
}

func TestOpenAIRetryAfter(t *testing.T) {
	cfg := testOpenAIConfig("429*1#ra")
	cfg.Retries = 2
	tt, stats := newTestOpenAI(t, cfg, nil)
	h := askOne(t, tt)
	require.NoError(t, h.Err)
	st := fakeStats(t, "429*1#ra")
	require.Equal(t, 2, st.Count)
	gap := time.Duration(st.Times[1] - st.Times[0])
	require.GreaterOrEqual(t, gap, 950*time.Millisecond, "Retry-After: 1 is obeyed, though backoff is 5ms")
	require.EqualValues(t, 1, stats.Snapshot().Faults["rate_limited"])

	// A Retry-After longer than max_retry_after is not waited for.
	cfg = testOpenAIConfig("429#ra-cap")
	cfg.Retries = 3
	cfg.MaxRetryAfter = 200 * time.Millisecond
	tt, _ = newTestOpenAI(t, cfg, nil)
	require.Equal(t, FailRateLimited, KindOf(askOne(t, tt).Err))
	require.Equal(t, 1, fakeStats(t, "429#ra-cap").Count, "given up at once: no retry after the Retry-After")
}

// TestOpenAIBreaker: two failures open the breaker, which then refuses without a
// request; after the cooldown one probe goes out: a failed probe reopens it, a
// successful one closes it.
func TestOpenAIBreaker(t *testing.T) {
	const model = "500*3#brk"
	cfg := testOpenAIConfig(model)
	cfg.Breaker = BreakerConfig{Failures: 2, Cooldown: 300 * time.Millisecond}
	tt, stats := newTestOpenAI(t, cfg, nil)
	// The breaker's clock moves only when the test says the cooldown has passed, so
	// a slow machine cannot reach the half-open state early.
	var clockMu sync.Mutex
	clock := time.Now()
	tt.breaker.now = func() time.Time { clockMu.Lock(); defer clockMu.Unlock(); return clock }
	cooldown := func() { clockMu.Lock(); clock = clock.Add(cfg.Breaker.Cooldown + time.Millisecond); clockMu.Unlock() }
	step := func(kind FailureKind, requests int, state string) {
		t.Helper()
		h := askOne(t, tt)
		if kind == 255 {
			require.NoError(t, h.Err)
		} else {
			require.Equal(t, kind, KindOf(h.Err))
		}
		require.Equal(t, requests, fakeStats(t, model).Count)
		require.Equal(t, state, stats.Snapshot().BreakerState)
	}
	step(FailServer, 1, "closed")
	step(FailServer, 2, "open")
	step(FailBreakerOpen, 2, "open") // refused: no request
	cooldown()
	step(FailServer, 3, "open") // the half-open probe fails
	step(FailBreakerOpen, 3, "open")
	cooldown()
	step(255, 4, "closed") // the probe succeeds
	snap := stats.Snapshot()
	require.EqualValues(t, 2, snap.BreakerOpens)
	require.Equal(t, map[string]int64{"server_error": 3, "breaker_open": 2}, snap.Faults)
}

// TestOpenAIOnFailure: a teacher that keeps failing leaves the rollout to its outcome
// signal (or holds it back), and a later teacher in the chain still gets its turn.
func TestOpenAIOnFailure(t *testing.T) {
	tests := []struct {
		name      string
		chain     []string
		onFailure string
		hold      bool
		hints     int
	}{
		{"outcome only", []string{TeacherOpenAI}, OnFailureOutcomeOnly, false, 0},
		{"hold", []string{TeacherOpenAI}, OnFailureHold, true, 0},
		{"rules cover the failure", []string{TeacherOpenAI, TeacherRules}, OnFailureHold, false, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Chain = tc.chain
			cfg.OnFailure = tc.onFailure
			cfg.Template = Template{Preset: "bytes", Label: "Hint: "}
			cfg.OpenAI = testOpenAIConfig("500#onfail")
			cfg.OpenAI.Retries = 1
			h, err := New(cfg, Deps{Tokenizer: tokenizer.NewBytes(), Logger: zerolog.Nop()})
			require.NoError(t, err)
			res, err := h.Run(t.Context(), leakRollout())
			require.NoError(t, err)
			require.Len(t, res.Selections, 1)
			require.Len(t, res.Hints, tc.hints)
			require.Equal(t, tc.hold, res.Hold)
			snap := h.Stats().Snapshot()
			if tc.hints == 0 {
				require.Len(t, res.Failed, 1)
				require.Equal(t, FailServer, KindOf(res.Failed[0].Err))
				require.Equal(t, map[string]int64{"server_error": 1}, snap.Failed)
				require.Equal(t, tc.hold, snap.Held == 1)
				require.Equal(t, !tc.hold, snap.OutcomeOnly == 1)
			} else {
				require.Empty(t, res.Failed)
				require.Equal(t, "rules", res.Hints[0].Source)
			}
			require.EqualValues(t, 2, snap.Faults["server_error"])
		})
	}
}

// TestOpenAICache: a restart with the same cache directory gets the hint without a
// request; another teacher config misses.
func TestOpenAICache(t *testing.T) {
	dir := t.TempDir()
	const model = "ok#cache"
	run := func(model string) (Result, Snapshot) {
		cfg := DefaultConfig()
		cfg.Chain = []string{TeacherOpenAI}
		cfg.Template = Template{Preset: "bytes", Label: "Hint: "}
		cfg.OpenAI = testOpenAIConfig(model)
		cfg.CacheDir = dir
		h, err := New(cfg, Deps{Tokenizer: tokenizer.NewBytes(), Logger: zerolog.Nop()})
		require.NoError(t, err)
		res, err := h.Run(t.Context(), leakRollout())
		require.NoError(t, err)
		return res, h.Stats().Snapshot()
	}
	res, snap := run(model)
	require.Len(t, res.Hints, 1)
	require.False(t, res.Hints[0].Cached)
	require.EqualValues(t, 1, snap.CacheMisses)
	require.Equal(t, 1, fakeStats(t, model).Count)

	res2, snap := run(model) // a fresh Hinter: as after a restart
	require.Len(t, res2.Hints, 1)
	require.True(t, res2.Hints[0].Cached)
	require.Equal(t, res.Hints[0].Tokens, res2.Hints[0].Tokens)
	require.EqualValues(t, 1, snap.CacheHits)
	require.EqualValues(t, 0, snap.Requests)
	require.Equal(t, 1, fakeStats(t, model).Count, "the second run is free")

	_, snap = run("ok#cache-other")
	require.EqualValues(t, 1, snap.CacheMisses, "the teacher config is part of the key")

	// A corrupt entry is counted and refetched.
	entries, err := filepath.Glob(filepath.Join(dir, "*", "*.json"))
	require.NoError(t, err)
	require.Len(t, entries, 2)
	for _, e := range entries {
		require.NoError(t, os.WriteFile(e, []byte("{torn"), 0o644))
	}
	_, snap = run(model)
	require.EqualValues(t, 1, snap.CacheErrors)
	require.Equal(t, 2, fakeStats(t, model).Count)
}

func TestCache(t *testing.T) {
	c, err := OpenCache(filepath.Join(t.TempDir(), "hints"))
	require.NoError(t, err)
	k := CacheKey("a", "b")
	require.NotEqual(t, k, CacheKey("ab"))
	_, ok, err := c.Get(k)
	require.NoError(t, err)
	require.False(t, ok)
	require.NoError(t, c.Put(k, "use <|im_end|> literally"))
	got, ok, err := c.Get(k)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "use <|im_end|> literally", got)
	tmp, err := filepath.Glob(filepath.Join(c.dir, "*", ".tmp-*"))
	require.NoError(t, err)
	require.Empty(t, tmp, "no temp files left")
}

// TestOpenAILeak: an LLM hint that pastes the tool output it was shown as "what
// happened next" is dropped by the leak guard and counted.
func TestOpenAILeak(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Chain = []string{TeacherOpenAI}
	cfg.Template = Template{Preset: "bytes", Label: "Hint: "}
	cfg.OpenAI = testOpenAIConfig("leak#x")
	h, err := New(cfg, Deps{Tokenizer: tokenizer.NewBytes(), Logger: zerolog.Nop()})
	require.NoError(t, err)
	res, err := h.Run(t.Context(), leakRollout())
	require.NoError(t, err)
	require.Empty(t, res.Hints)
	require.Len(t, res.Leaks, 1)
	require.Equal(t, "tool_output", res.Leaks[0].Leak.From)
	require.EqualValues(t, 1, h.Stats().Snapshot().LeakDropped)
}

func TestOpenAIConcurrency(t *testing.T) {
	cfg := testOpenAIConfig("ok#conc")
	cfg.Concurrency = 2
	tt, _ := newTestOpenAI(t, cfg, nil)
	r := rollout.Synthesize(rollout.SynthOptions{Tokens: 8000, Seed: 5}, 0)
	var sels []Selection
	for i, s := range r.Segments {
		if s.Kind == rollout.KindToolCall {
			sels = append(sels, target(r, i, ReasonToolError, -1))
		}
	}
	require.Greater(t, len(sels), 3)
	hs, err := tt.Hints(t.Context(), r, sels)
	require.NoError(t, err)
	for i, h := range hs {
		require.Equal(t, sels[i], h.Selection)
		require.Equal(t, fakeOKHint, h.Text)
	}
}

// TestOpenAICancel: a cancelled context ends a slow request at once and is not
// counted as a server fault.
func TestOpenAICancel(t *testing.T) {
	cfg := testOpenAIConfig("slow#cancel")
	cfg.Timeout = 20 * time.Second
	tt, stats := newTestOpenAI(t, cfg, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	r := leakRollout()
	_, err := tt.Hints(ctx, r, []Selection{target(r, 3, ReasonToolError, 4)})
	require.Error(t, err)
	// Ended by ctx, not by the 20 s request timeout, which would count a timeout fault.
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Empty(t, stats.Snapshot().Faults)
}

func TestPromptData(t *testing.T) {
	cfg := testOpenAIConfig("ok")
	tt, _ := newTestOpenAI(t, cfg, nil)
	r := leakRollout()
	d := tt.promptData(r, target(r, 3, ReasonToolError, 4))
	require.Equal(t, sysTools, d.System)
	require.Equal(t, "fix the failing test\n", d.Before)
	require.True(t, strings.HasPrefix(d.Step, "<think>search</think><tool_call>"))
	require.Equal(t, "error: grep: pkg/cfg: no such file or directory\n", d.After, "what follows, up to the next policy turn")
	require.Equal(t, "grep", d.Tool)

	// A small budget keeps the tail of the step and cuts the context before it.
	tt.cfg.MaxContextTokens = 64
	d = tt.promptData(r, target(r, 3, ReasonToolError, 4))
	require.Len(t, d.Step, 32)
	require.Len(t, d.System, 8)
	require.Len(t, d.After, 16)
	require.LessOrEqual(t, len(d.Before), 64-32-8-16)
}
