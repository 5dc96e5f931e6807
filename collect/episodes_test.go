package collect

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/data"
	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/rollout"
	"github.com/hindsight-ai/hindsight/toolworld"
	"github.com/hindsight-ai/hindsight/xla"
)

// tinyPolicy writes the tiny byte-tokenizer model and returns its sampler, scorer
// and tokenizer on the test backend.
func tinyPolicy(t *testing.T) (string, *xla.Sampler, *xla.Scorer, tokenizer.Tokenizer) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "model")
	_, err := data.InitModel(dir, data.InitOptions{Preset: "tiny", Tokenizer: "bytes", Seed: 3, Dtype: "float32"})
	require.NoError(t, err)
	md, err := data.OpenModelDir(dir)
	require.NoError(t, err)
	tok := md.Tokenizer
	md.Close()
	m, err := xla.Open(dir, xla.OpenOptions{Tokenizer: tok})
	require.NoError(t, err)
	b, err := xla.NewBackend(xla.DefaultBackend)
	require.NoError(t, err)
	s, err := xla.NewSampler(b, m, 64)
	require.NoError(t, err)
	sc, err := xla.NewScorer(b, m, xla.ScorerOptions{Chunk: 64})
	require.NoError(t, err)
	return dir, s, sc, tok
}

func TestEpisodesRecordWhatWasSampled(t *testing.T) {
	_, s, sc, tok := tinyPolicy(t)
	tasks, err := toolworld.Tasks(toolworld.SplitTrain, 3)
	require.NoError(t, err)
	opts := EpisodeOptions{Group: 2, Batch: 4, MaxTurnTokens: 24, Temperature: 0.8, Seed: 11,
		Env: toolworld.Options{MaxTokens: 160, MaxCalls: 3}}
	envs, err := Episodes(t.Context(), s, tok, tasks, opts)
	require.NoError(t, err)
	require.Len(t, envs, 6)
	for i, e := range envs {
		require.True(t, e.Done(), "episode %d", i)
		require.Equal(t, tasks[i/2].ID, e.Task().ID)
		r := e.Rollout("r")
		require.Empty(t, rollout.Validate(r, rollout.ReadOptions{VocabSize: 512, Tokenizer: tok.Fingerprint()}))
		require.LessOrEqual(t, len(r.Tokens), 160)
		// Without truncation the sampler's log-probs are the policy's at the
		// temperature the rollout records: the trainer's scorer at that temperature
		// must give the same on the whole rollout (its importance ratio is 1).
		require.True(t, r.HasTemperature)
		require.Equal(t, float32(0.8), r.Temperature)
		lp, cache, err := sc.ScoreAt(t.Context(), r.Tokens, r.ScoringTemperature())
		require.NoError(t, err)
		cache.Close()
		trainable := 0
		for p := range r.Tokens {
			if !r.Trainable(p) {
				continue
			}
			trainable++
			mu, _ := r.LogProb(p)
			require.InDelta(t, lp[p], mu, 1e-5, "episode %d token %d", i, p)
		}
		require.Positive(t, trainable)
	}
	// The same seed plays the same episodes; another seed does not.
	again, err := Episodes(t.Context(), s, tok, tasks, opts)
	require.NoError(t, err)
	for i := range envs {
		require.Equal(t, envs[i].Tokens(), again[i].Tokens())
	}
	opts.Seed = 12
	other, err := Episodes(t.Context(), s, tok, tasks, opts)
	require.NoError(t, err)
	same := 0
	for i := range envs {
		if slicesEqual(envs[i].Tokens(), other[i].Tokens()) {
			same++
		}
	}
	require.Less(t, same, len(envs))

	st := Summarize(envs)
	require.Equal(t, 6, st.Episodes)
	require.False(t, math.IsNaN(st.Tokens))
	require.Positive(t, st.Tokens)
}

func slicesEqual(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestSummarize(t *testing.T) {
	tok := tokenizer.NewBytes()
	tasks, err := toolworld.Tasks(toolworld.SplitHeldout, 4)
	require.NoError(t, err)
	var envs []*toolworld.Env
	for i, task := range tasks {
		e, err := toolworld.New(task, tok, toolworld.Options{})
		require.NoError(t, err)
		var a toolworld.Agent = &toolworld.Oracle{}
		if i%2 == 1 {
			a = toolworld.NewRandom(uint64(i))
		}
		_, err = toolworld.Play(e, a, 10)
		require.NoError(t, err)
		envs = append(envs, e)
	}
	st := Summarize(envs)
	require.Equal(t, 4, st.Episodes)
	require.InDelta(t, 0.5, st.Success, 1e-9, "the two oracle episodes succeed, the random ones fail")
	require.Equal(t, st.Success, st.Reward)
	m := st.Metrics()
	require.Equal(t, st.Success, m["success"])
	require.Contains(t, m, "tool_error_rate")
}
