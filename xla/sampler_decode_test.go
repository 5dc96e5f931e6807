package xla

import (
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDecodeCacheAcrossMerges: rows that join while others decode (prompts of
// one, two and four prefill chunks), leave at different steps (their own MaxNew)
// and decode past several merges of the recent buffer into the main cache (45
// steps, recentSlots 16), and grow it: every row's policy log-probs are the
// scorer's on the same full sequence within 1e-5, and a sampled row's log-probs
// too. A key or value written at the wrong position, or lost in a merge, a join
// or a cut, moves them by far more.
func TestDecodeCacheAcrossMerges(t *testing.T) {
	s := newTestSampler(t, 27)
	vocab := s.Model().Config.VocabSize
	prompts := [][]int32{testTokens(9, vocab, 1), {5}, testTokens(30, vocab, 2), testTokens(4, vocab, 3), testTokens(50, vocab, 4), testTokens(17, vocab, 5)}
	rows := []SampleOptions{
		{MaxNew: 40, Temperature: 1, Seed: 1},
		{MaxNew: 3},
		{MaxNew: 37, Temperature: 1, Seed: 2},
		{MaxNew: 20},
		{MaxNew: 45, Temperature: 1, Seed: 3},
		{MaxNew: 16},
	}
	out, err := s.Generate(t.Context(), prompts, SampleOptions{MaxNew: 45, Rows: rows})
	require.NoError(t, err)
	scorer, err := NewScorer(newTestBackend(t), s.Model(), ScorerOptions{Chunk: 16})
	require.NoError(t, err)
	for r, p := range prompts {
		o := out[r]
		require.Len(t, o.Tokens, rows[r].MaxNew, "row %d", r)
		lp, c, err := scorer.Score(t.Context(), append(slices.Clone(p), o.Tokens...))
		require.NoError(t, err)
		c.Close()
		var worst float64
		for i := range o.Tokens {
			want := float64(lp[len(p)+i])
			worst = max(worst, math.Abs(float64(o.PolicyLogProbs[i])-want))
			if rows[r].Temperature == 1 {
				worst = max(worst, math.Abs(float64(o.LogProbs[i])-want))
			}
		}
		require.Less(t, worst, 1e-5, "row %d", r)
		t.Logf("row %d (prompt %d, %d new): max |sampler − scorer| = %.2g", r, len(p), len(o.Tokens), worst)
	}
}
