package xla

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestScoreBatchEqualsScore: each rollout's log-probs from ScoreBatch equal
// Score's (the paged pass, one rollout at a time) within 1e-5, at two temperatures
// and a length that is not a power of two; rollouts beyond maxBatchPositions run
// as more than one step; bad input is refused with what is wrong.
func TestScoreBatchEqualsScore(t *testing.T) {
	m := testModel(t, tinyFields(nil), 31)
	s, err := NewScorer(newTestBackend(t), m, ScorerOptions{Chunk: 512})
	require.NoError(t, err)
	vocab := m.Config.VocabSize
	for _, tc := range []struct {
		rows, n int
		temp    float64
	}{{3, 40, 1}, {2, 37, 0.7}, {9, 256, 1}} {
		var rollouts [][]int32
		for r := range tc.rows {
			rollouts = append(rollouts, testTokens(tc.n, vocab, uint64(100+r)))
		}
		got, err := s.ScoreBatch(t.Context(), rollouts, tc.temp)
		require.NoError(t, err)
		require.Len(t, got, tc.rows)
		for r, tokens := range rollouts {
			want, c, err := s.ScoreAt(t.Context(), tokens, tc.temp)
			require.NoError(t, err)
			c.Close()
			require.Len(t, got[r], tc.n)
			require.True(t, math.IsNaN(float64(got[r][0])), "entry 0 is NaN")
			var worst float64
			for i := 1; i < tc.n; i++ {
				worst = max(worst, math.Abs(float64(got[r][i]-want[i])))
			}
			require.Less(t, worst, 1e-5, "%d × %d at T=%g, rollout %d", tc.rows, tc.n, tc.temp, r)
		}
	}
	_, err = s.ScoreBatch(t.Context(), [][]int32{testTokens(8, vocab, 1), testTokens(9, vocab, 2)}, 1)
	require.ErrorContains(t, err, "rollout 1 has 9 tokens, rollout 0 8")
	_, err = s.ScoreBatch(t.Context(), [][]int32{testTokens(600, vocab, 1)}, 1)
	require.ErrorContains(t, err, "more than the chunk (512)")
	_, err = s.ScoreBatch(t.Context(), [][]int32{{0, int32(vocab)}}, 1)
	require.ErrorContains(t, err, "rollout 0")
	_, err = s.ScoreBatch(t.Context(), [][]int32{{0, 1}}, 0)
	require.ErrorContains(t, err, "temperature 0")
}
