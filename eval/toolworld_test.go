package eval

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/data"
	"github.com/hindsight-ai/hindsight/xla"
)

func TestToolworldSuite(t *testing.T) {
	sc, dir := tinyScorer(t)
	b, err := xla.NewBackend(xla.DefaultBackend)
	require.NoError(t, err)
	s, err := xla.NewSampler(b, sc.Model(), 64)
	require.NoError(t, err)
	md, err := data.OpenModelDir(dir)
	require.NoError(t, err)
	tok := md.Tokenizer
	md.Close()
	rec, err := OpenRecorder(filepath.Join(t.TempDir(), "evals.jsonl"))
	require.NoError(t, err)
	defer rec.Close()
	cfg := DefaultConfig()
	cfg.Budget = 0
	cfg.Suites = []SuiteConfig{{Name: "heldout", Kind: KindToolworld, Tasks: 3, MaxTokens: 160, MaxTurnTokens: 12}}
	require.NoError(t, cfg.Validate("eval."))
	r := NewRunner(cfg, rec, RunnerOptions{Log: zerolog.Nop()})
	p := Policy{Step: 4, Scorer: sc, Sampler: s, Tokenizer: tok}
	out := r.Run(t.Context(), p)
	require.Len(t, out, 1)
	res := out[0]
	require.Empty(t, res.Error)
	require.True(t, res.Complete)
	require.Equal(t, float64(3), res.Metrics["episodes"])
	for _, k := range []string{"success", "mean_reward", "tool_error_rate", "tokens_per_task", "calls_per_task", "truncated"} {
		require.Contains(t, res.Metrics, k)
	}
	require.LessOrEqual(t, res.Metrics["tokens_per_task"], 160.0)
	// Greedy: the same checkpoint evaluates the same.
	again := r.Run(t.Context(), p)
	require.Equal(t, res.Metrics, again[0].Metrics)

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	out = r.Run(ctx, p)
	require.False(t, out[0].Complete)
	require.Empty(t, out[0].Error)
}
