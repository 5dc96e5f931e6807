package xla

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSpanFor checks the span buckets: they cover the chunk, fit in the capacity
// bucket, stay a bounded set (28 programs for 128k positions in chunks of 512), keep
// blocks ≤ 4 chunks, and keep the attention work of aligned chunks within 15% of
// causal from 4k positions on.
func TestSpanFor(t *testing.T) {
	for _, c := range []struct {
		end, unit int
		want      kvSpan
	}{
		{1, 16, kvSpan{1, 16}}, {16, 16, kvSpan{1, 16}}, {17, 16, kvSpan{2, 16}},
		{128, 16, kvSpan{8, 16}}, {129, 16, kvSpan{5, 32}}, {208, 16, kvSpan{7, 32}},
		{600, 16, kvSpan{10, 64}}, {8192, 512, kvSpan{8, 1024}},
		{100_128, 512, kvSpan{56, 2048}}, {131_072, 512, kvSpan{64, 2048}},
	} {
		require.Equal(t, c.want, spanFor(c.end, c.unit), "end %d unit %d", c.end, c.unit)
	}
	for _, unit := range []int{16, 256, 512} {
		for end := 1; end <= 1<<17; end += 1 + end/97 {
			sp := spanFor(end, unit)
			capacity := unit
			for capacity < end {
				capacity *= 2
			}
			require.GreaterOrEqual(t, sp.Len(), end)
			require.LessOrEqual(t, sp.Len(), capacity, "end %d unit %d", end, unit)
			require.LessOrEqual(t, sp.Block, MaxBlockPages*unit)
		}
	}
	programs := map[kvSpan]bool{}
	for end := 512; end <= 131_072; end += 512 {
		programs[spanFor(end, 512)] = true
	}
	require.Len(t, programs, 28)
	for _, T := range []int{4096, 8192, 32768, 100_128, 131_072} {
		var done int64
		for off := 0; off < T; off += 512 {
			done += 512 * int64(spanFor(min(off+512, T), 512).Len())
		}
		ratio := float64(done) / (float64(T) * float64(T+1) / 2)
		require.Less(t, ratio, 1.15, "T %d", T)
		t.Logf("T %d: attention work %.3f× causal, chunk 512", T, ratio)
	}
}

// TestScoreCausalSpans scores 200 tokens in chunks (and pages) of 16, so the past
// spans reach 6 blocks of 2 pages (600 tokens without -short: 10 blocks of 4 pages),
// and checks the paged path's log-probs against the bucket path and one unchunked
// pass, and that it attends to fewer positions.
func TestScoreCausalSpans(t *testing.T) {
	m := testModel(t, tinyFields(map[string]any{"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 4,
		"num_key_value_heads": 2, "head_dim": 8, "intermediate_size": 64}), 5)
	n := 600
	if testing.Short() {
		n = 200 // each span is an XLA compile
	}
	tokens := testTokens(n, m.Config.VocabSize, 6)
	full := fullLogProbs(t, m, tokens)
	score := func(bucket bool) ([]float32, AttentionStats) {
		s, err := NewScorer(newTestBackend(t), m, ScorerOptions{Chunk: 16, BucketAttention: bucket})
		require.NoError(t, err)
		lp, c, err := s.Score(t.Context(), tokens)
		require.NoError(t, err)
		require.NoError(t, c.Close())
		return lp, s.Stats().Attention
	}
	spans, st := score(false)
	bucket, bt := score(true)
	var worst, worstBucket float64
	for i := 1; i < n; i++ {
		worst = math.Max(worst, math.Abs(float64(spans[i]-full[i-1])))
		worstBucket = math.Max(worstBucket, math.Abs(float64(spans[i]-bucket[i])))
	}
	require.Less(t, worst, 1e-4)
	require.Less(t, worstBucket, 1e-5)
	causal := int64(n) * int64(n+1) / 2
	t.Logf("max |spans − unchunked| %.2g, |spans − bucket| %.2g; attended pairs: spans %d (%.2f× causal, %d programs), bucket %d (%.2f×, %d programs)",
		worst, worstBucket, st.AttendedPairs, float64(st.AttendedPairs)/float64(causal), st.Programs,
		bt.AttendedPairs, float64(bt.AttendedPairs)/float64(causal), bt.Programs)
	require.Equal(t, int64((n+15)/16), st.Steps)
	require.Less(t, float64(st.AttendedPairs), 1.25*float64(causal))
	require.Less(t, st.AttendedPairs, bt.AttendedPairs*2/3)
}

// TestTrainCausalCuts: a training step (exact and truncated backprop, chunk 16)
// whose chunks see the cache cut to their span moves the weights as one whose chunks
// see the capacity bucket. AdamW's eps is 1, so the update is nearly lr × gradient
// rather than its sign.
func TestTrainCausalCuts(t *testing.T) {
	backend := newTestBackend(t)
	dir := tinyModelDir(t)
	pool := rolloutPool(2, 41)
	step := func(mode Backprop, bucket bool) ([][]float32, AttentionStats) {
		m, err := Open(dir, OpenOptions{})
		require.NoError(t, err)
		opts := resumeOptions(nil)
		opts.Credit.KLBeta = 0
		opts.Chunk, opts.Backprop, opts.Scorer.BucketAttention = 16, mode, bucket
		opts.Optimizer.Eps, opts.Optimizer.ClipNorm, opts.Optimizer.WeightDecay = 1, 0, 0
		opts.Optimizer.LR, opts.Optimizer.MinLR, opts.Optimizer.WarmupSteps = 100, 100, 0
		tr, err := NewTrainer(backend, m, opts)
		require.NoError(t, err)
		moved := stepMoves(t, tr, m, pool)
		return moved, tr.GradientStats()
	}
	modes := []Backprop{BackpropExact, BackpropTruncated}
	if testing.Short() {
		modes = modes[:1] // the cuts are the same; each is an XLA compile
	}
	for _, mode := range modes {
		cut, cs := step(mode, false)
		whole, ws := step(mode, true)
		var worst, scale float64
		for i := range cut {
			for j := range cut[i] {
				worst = math.Max(worst, math.Abs(float64(cut[i][j]-whole[i][j])))
				scale = math.Max(scale, math.Abs(float64(whole[i][j])))
			}
		}
		t.Logf("%s: largest update difference %.2g of %.2g; attended pairs %d vs %d", mode, worst, scale, cs.AttendedPairs, ws.AttendedPairs)
		require.Less(t, worst, 1e-4*scale)
		require.Equal(t, cs.Steps, ws.Steps)
		require.Less(t, cs.AttendedPairs, ws.AttendedPairs)
	}
}
