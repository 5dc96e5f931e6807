package eval

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/data"
	"github.com/hindsight-ai/hindsight/internal/testwait"
	"github.com/hindsight-ai/hindsight/rollout"
	"github.com/hindsight-ai/hindsight/xla"
)

// tinyScorer returns the scorer of a freshly initialised tiny byte-tokenizer model.
func tinyScorer(t *testing.T) (*xla.Scorer, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "model")
	_, err := data.InitModel(dir, data.InitOptions{Preset: "tiny", Tokenizer: "bytes", Seed: 1, Dtype: "float32"})
	require.NoError(t, err)
	b, err := xla.NewBackend(xla.DefaultBackend)
	require.NoError(t, err)
	m, err := xla.Open(dir, xla.OpenOptions{})
	require.NoError(t, err)
	sc, err := xla.NewScorer(b, m, xla.ScorerOptions{Chunk: 128})
	require.NoError(t, err)
	return sc, dir
}

func TestRunnerCommandSuites(t *testing.T) {
	rec, err := OpenRecorder(filepath.Join(t.TempDir(), "evals.jsonl"))
	require.NoError(t, err)
	defer rec.Close()
	cfg := DefaultConfig()
	cfg.Suites = []SuiteConfig{
		{Name: "ok", Kind: KindCommand, Command: []string{"sh", "-c", `echo "{\"score\": $HINDSIGHT_STEP.5, \"ckpt_ok\": $(test -n \"$HINDSIGHT_CHECKPOINT\" && echo true || echo false), \"note\": \"x\"}"`}},
		{Name: "exit", Kind: KindCommand, Command: []string{"sh", "-c", "echo bad things >&2; exit 3"}},
		{Name: "garbage", Kind: KindCommand, Command: []string{"sh", "-c", "echo not json"}},
		{Name: "slow", Kind: KindCommand, Command: []string{"sleep", "30"}, Timeout: 200 * time.Millisecond},
	}
	require.NoError(t, cfg.Validate("eval."))
	var seen []Result
	r := NewRunner(cfg, rec, RunnerOptions{Log: zerolog.Nop()})
	require.Empty(t, r.Run(t.Context(), Policy{Step: 7, Checkpoint: "/ckpt/step-7"}), "command suites do not run on the device")
	r.Wait()
	for _, res := range rec.Latest() {
		seen = append(seen, res)
	}
	require.Len(t, seen, 4)
	byName := map[string]Result{}
	for _, s := range seen {
		byName[s.Suite] = s
	}
	require.Empty(t, byName["ok"].Error)
	require.Equal(t, map[string]float64{"score": 7.5, "ckpt_ok": 1}, byName["ok"].Metrics)
	require.True(t, byName["ok"].Complete)
	require.Contains(t, byName["exit"].Error, "exit status 3")
	require.Contains(t, byName["exit"].Error, "bad things")
	require.Contains(t, byName["garbage"].Error, "not one JSON object")
	require.Contains(t, byName["slow"].Error, "timed out")
	require.False(t, byName["slow"].Complete)
	best := rec.Best()
	require.Len(t, best, 1, "only the suite that worked ranks checkpoints")
}

func TestRunnerLikelihoodAndBudget(t *testing.T) {
	sc, _ := tinyScorer(t)
	dir := t.TempDir()
	paths, err := rollout.WriteSynth(dir, rollout.SynthOptions{N: 3, Tokens: 300, Seed: 5, PerFile: 3})
	require.NoError(t, err)

	// The reference: mean over docs/design.md's trainable tokens of the scorer's log-probs.
	rd, err := rollout.OpenReader(paths[0], rollout.ReadOptions{})
	require.NoError(t, err)
	var sum float64
	var n int
	for rd.Next() {
		ro := rd.Rollout()
		lp, cache, err := sc.Score(t.Context(), ro.Tokens)
		require.NoError(t, err)
		cache.Close()
		for i := 1; i < len(ro.Tokens); i++ {
			if ro.Trainable(i) {
				sum += float64(lp[i])
				n++
			}
		}
	}
	require.NoError(t, rd.Close())
	require.Positive(t, n)

	rec, err := OpenRecorder(filepath.Join(t.TempDir(), "evals.jsonl"))
	require.NoError(t, err)
	defer rec.Close()
	cfg := DefaultConfig()
	cfg.Budget = 0 // no limit
	cfg.Suites = []SuiteConfig{
		{Name: "ll", Kind: KindLikelihood, File: paths[0]},
		{Name: "missing", Kind: KindLikelihood, File: filepath.Join(dir, "nope.arrow")},
		{Name: "tw", Kind: KindToolworld},
	}
	r := NewRunner(cfg, rec, RunnerOptions{Log: zerolog.Nop()})
	out := r.Run(t.Context(), Policy{Step: 1, Scorer: sc})
	require.Len(t, out, 3)
	ll := out[0]
	require.Empty(t, ll.Error)
	require.True(t, ll.Complete)
	require.Equal(t, float64(3), ll.Metrics["rollouts"])
	require.Equal(t, float64(n), ll.Metrics["tokens"])
	require.InDelta(t, sum/float64(n), ll.Metrics["mean_logprob"], 1e-9)
	require.InDelta(t, math.Exp(-sum/float64(n)), ll.Metrics["perplexity"], 1e-6)
	require.Contains(t, out[1].Error, "nope.arrow")
	require.Contains(t, out[2].Error, "no sampler")

	// A budget already spent: the suite stops before its first rollout, incomplete.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	out = r.Run(ctx, Policy{Step: 2, Scorer: sc})
	require.False(t, out[0].Complete)
	require.Empty(t, out[0].Error)
}

func TestRunnerBudgetAndCadence(t *testing.T) {
	rec, err := OpenRecorder(filepath.Join(t.TempDir(), "evals.jsonl"))
	require.NoError(t, err)
	defer rec.Close()
	now := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	cfg := Config{Budget: 0.1, MinBudget: time.Second, EveryCheckpoints: 2,
		Suites: []SuiteConfig{{Name: "x", Kind: KindToolworld}}}
	calls := 0
	var budgets []time.Duration
	r := NewRunner(cfg, rec, RunnerOptions{Log: zerolog.Nop(), Now: func() time.Time { return now },
		Toolworld: func(ctx context.Context, s SuiteConfig, p Policy) (map[string]float64, bool, error) {
			calls++
			dl, ok := ctx.Deadline()
			require.True(t, ok)
			budgets = append(budgets, time.Until(dl))
			return map[string]float64{"success": 1}, true, nil
		}})
	now = now.Add(100 * time.Second)
	require.Equal(t, 10*time.Second, r.Budget())
	r.Run(t.Context(), Policy{Step: 1})
	now = now.Add(5 * time.Second)
	require.Equal(t, time.Second, r.Budget(), "the floor")
	r.Run(t.Context(), Policy{Step: 2}) // every 2nd checkpoint: skipped
	r.Run(t.Context(), Policy{Step: 3})
	require.Equal(t, 2, calls)
	// The deadlines are the budgets, less the moments between setting and reading
	// them (a slow machine may take a while: a hang guard's worth is allowed).
	require.Len(t, budgets, 2)
	for i, want := range []time.Duration{10 * time.Second, time.Second} {
		require.LessOrEqual(t, budgets[i], want)
		require.Greater(t, budgets[i], want-testwait.Guard(500*time.Millisecond), "deadline %d: %s", i, budgets[i])
	}
	require.Equal(t, 2, rec.Count())
}

// TestRunnerCloseStopsCommand: a command suite still running when Close's grace ends
// is stopped and recorded as stopped at shutdown, not as the command's own failure.
func TestRunnerCloseStopsCommand(t *testing.T) {
	rec, err := OpenRecorder(filepath.Join(t.TempDir(), "evals.jsonl"))
	require.NoError(t, err)
	defer rec.Close()
	marker := filepath.Join(t.TempDir(), "started")
	cfg := DefaultConfig()
	cfg.Suites = []SuiteConfig{{Name: "hang", Kind: KindCommand,
		Command: []string{"sh", "-c", "touch " + marker + "; exec sleep 300"}}}
	require.NoError(t, cfg.Validate("eval."))
	r := NewRunner(cfg, rec, RunnerOptions{Log: zerolog.Nop()})
	r.Run(t.Context(), Policy{Step: 3, Checkpoint: "/ckpt/step-3"})
	for { // the command is running: its marker exists
		if _, err := os.Stat(marker); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	r.Close(0)
	latest := rec.Latest()
	require.Len(t, latest, 1)
	require.Equal(t, int64(3), latest[0].Step)
	require.Contains(t, latest[0].Error, ErrStoppedAtShutdown.Error())
	require.False(t, latest[0].Complete)
}
