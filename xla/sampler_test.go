package xla

import (
	"math"
	"slices"
	"testing"

	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/stretchr/testify/require"
)

// samplerPrompts are ragged prompts: lengths 9, 1, 30 (longer than one prefill
// chunk of 16) and 4.
func samplerPrompts(vocab int) [][]int32 {
	return [][]int32{testTokens(9, vocab, 1), {5}, testTokens(30, vocab, 2), testTokens(4, vocab, 3)}
}

func newTestSampler(t *testing.T, seed uint64) *Sampler {
	t.Helper()
	m := testModel(t, tinyFields(nil), seed)
	s, err := NewSampler(newTestBackend(t), m, 16)
	require.NoError(t, err)
	return s
}

// TestGenerateLogProbsEqualScorer: at temperature 1 without truncation the
// sampler's log-probs are the scorer's on the same full sequence (the trainer and
// the sampler must agree), within 1e-5, for every row of a ragged batch, with the
// decoding cache grown (prefill pages of 16: the 30-token row's starts at 32
// positions and reaches 69).
func TestGenerateLogProbsEqualScorer(t *testing.T) {
	s := newTestSampler(t, 21)
	prompts := samplerPrompts(s.Model().Config.VocabSize)
	out, err := s.Generate(t.Context(), prompts, SampleOptions{MaxNew: 40, Temperature: 1, Seed: 3})
	require.NoError(t, err)
	scorer, err := NewScorer(newTestBackend(t), s.Model(), ScorerOptions{Chunk: 16})
	require.NoError(t, err)
	for r, p := range prompts {
		o := out[r]
		require.Len(t, o.Tokens, 40, "row %d", r)
		require.Equal(t, StopLength, o.Reason)
		full := append(slices.Clone(p), o.Tokens...)
		lp, c, err := scorer.Score(t.Context(), full)
		require.NoError(t, err)
		c.Close()
		var worst float64
		for i := range o.Tokens {
			want := float64(lp[len(p)+i])
			worst = max(worst, math.Abs(float64(o.LogProbs[i])-want), math.Abs(float64(o.PolicyLogProbs[i])-want))
		}
		require.Less(t, worst, 1e-5, "row %d", r)
		t.Logf("row %d (prompt %d): max |sampler − scorer| = %.2g", r, len(p), worst)
	}
}

// TestGenerateDeterministic: the same seed gives the same tokens; another seed
// other tokens. OnToken sees every row's tokens and log-probs, in order, as the
// samples hold them, and changes nothing.
func TestGenerateDeterministic(t *testing.T) {
	s := newTestSampler(t, 22)
	prompts := samplerPrompts(s.Model().Config.VocabSize)
	opts := SampleOptions{MaxNew: 20, Temperature: 1.3, TopK: 50, TopP: 0.95, Seed: 9}
	a, err := s.Generate(t.Context(), prompts, opts)
	require.NoError(t, err)
	seen := make([]Sample, len(prompts))
	opts.OnToken = func(row int, tok int32, lp float32, _ []TokenLogProb) {
		seen[row].Tokens = append(seen[row].Tokens, tok)
		seen[row].LogProbs = append(seen[row].LogProbs, lp)
	}
	b, err := s.Generate(t.Context(), prompts, opts)
	require.NoError(t, err)
	opts.OnToken = nil
	require.Equal(t, a, b)
	for r := range a {
		require.Equal(t, a[r].Tokens, seen[r].Tokens, "row %d", r)
		require.Equal(t, a[r].LogProbs, seen[r].LogProbs, "row %d", r)
	}
	opts.Seed = 10
	c, err := s.Generate(t.Context(), prompts, opts)
	require.NoError(t, err)
	require.NotEqual(t, a, c)
}

// lastLogits returns the logits after tokens from a plain causal forward without
// a cache.
func lastLogits(t *testing.T, m *Model, tokens []int32) []float32 {
	t.Helper()
	cfg := m.Config
	e, err := mlctx.NewExec(newTestBackend(t), m.ctx, func(ctx *mlctx.Context, tok *Node) *Node {
		h := decoder(ctx, cfg, tok, ScalarZero(tok.Graph(), tok.DType()), chunkOnly{})
		return headLogits(ctx, cfg, h)
	})
	require.NoError(t, err)
	out, err := e.Exec(tensors.FromFlatDataAndDimensions(tokens, 1, len(tokens)))
	require.NoError(t, err)
	l := tensors.MustCopyFlatData[float32](out[0])
	return l[(len(tokens)-1)*cfg.VocabSize:]
}

// TestGenerateGreedy: temperature 0 and top-k 1 (at any temperature and seed) are
// the argmax of an uncached forward at every step, with log-prob 0; stop ids and
// MaxNew cut the same sequence.
func TestGenerateGreedy(t *testing.T) {
	s := newTestSampler(t, 23)
	prompt := testTokens(7, s.Model().Config.VocabSize, 4)
	g, err := s.Generate(t.Context(), [][]int32{prompt}, SampleOptions{MaxNew: 8})
	require.NoError(t, err)
	k1, err := s.Generate(t.Context(), [][]int32{prompt}, SampleOptions{MaxNew: 8, Temperature: 2, TopK: 1, Seed: 77})
	require.NoError(t, err)
	require.Equal(t, g, k1)
	seq := slices.Clone(prompt)
	for i, tok := range g[0].Tokens {
		l := lastLogits(t, s.Model(), seq)
		require.Equal(t, int32(slices.Index(l, slices.Max(l))), tok, "step %d", i)
		require.Zero(t, g[0].LogProbs[i])
		seq = append(seq, tok)
	}

	short, err := s.Generate(t.Context(), [][]int32{prompt}, SampleOptions{MaxNew: 3})
	require.NoError(t, err)
	require.Equal(t, g[0].Tokens[:3], short[0].Tokens)
	require.Equal(t, StopLength, short[0].Reason)

	stop := g[0].Tokens[4]
	n := slices.Index(g[0].Tokens, stop) + 1
	st, err := s.Generate(t.Context(), [][]int32{prompt}, SampleOptions{MaxNew: 8, Stop: []int32{-1, stop}})
	require.NoError(t, err)
	require.Equal(t, g[0].Tokens[:n], st[0].Tokens)
	require.Equal(t, StopToken, st[0].Reason)
}

// TestGenerateBatchEqualsAlone: each row of a ragged batch equals the prompt
// generated alone (greedy; and sampled for row 0, whose stream is the same).
func TestGenerateBatchEqualsAlone(t *testing.T) {
	s := newTestSampler(t, 24)
	prompts := samplerPrompts(s.Model().Config.VocabSize)
	for _, opts := range []SampleOptions{{MaxNew: 12}, {MaxNew: 12, Temperature: 1, Seed: 5}} {
		batch, err := s.Generate(t.Context(), prompts, opts)
		require.NoError(t, err)
		for r, p := range prompts {
			if opts.Temperature > 0 && r > 0 {
				break
			}
			alone, err := s.Generate(t.Context(), [][]int32{p}, opts)
			require.NoError(t, err)
			require.Equal(t, alone[0].Tokens, batch[r].Tokens, "row %d", r)
			require.InDeltaSlice(t, alone[0].PolicyLogProbs, batch[r].PolicyLogProbs, 1e-5, "row %d", r)
		}
	}
}

// TestGenerateSameLengthPrefill: rows waiting with prompts of one length (one
// chunk) are prefilled together in one step, as one batch, beside a row of another
// length; each row's tokens and log-probs are still what it gives alone.
func TestGenerateSameLengthPrefill(t *testing.T) {
	s := newTestSampler(t, 24)
	vocab := s.Model().Config.VocabSize
	prompts := [][]int32{testTokens(9, vocab, 1), testTokens(9, vocab, 4), testTokens(30, vocab, 2), testTokens(9, vocab, 5), {7}, {8}}
	opts := SampleOptions{MaxNew: 10}
	batch, err := s.Generate(t.Context(), prompts, opts)
	require.NoError(t, err)
	for r, p := range prompts {
		alone, err := s.Generate(t.Context(), [][]int32{p}, opts)
		require.NoError(t, err)
		require.Equal(t, alone[0].Tokens, batch[r].Tokens, "row %d", r)
		require.InDeltaSlice(t, alone[0].PolicyLogProbs, batch[r].PolicyLogProbs, 1e-5, "row %d", r)
	}
	// The three 9-token prompts (and the two of one token) joined in one step each.
	b := s.NewBatch()
	defer b.Close()
	for r, p := range prompts {
		require.NoError(t, b.Add(r, p, opts, nil))
	}
	_, err = b.Step(t.Context())
	require.NoError(t, err)
	require.Len(t, b.rows, 3, "rows decoding after the first step")
	require.Len(t, b.waiting, 3, "rows still waiting")
}

// TestGenerateContextAndErrors: a row stops at max_position_embeddings; bad
// prompts and options are errors naming them.
func TestGenerateContextAndErrors(t *testing.T) {
	m := testModel(t, tinyFields(map[string]any{"max_position_embeddings": 24}), 25)
	s, err := NewSampler(newTestBackend(t), m, 16)
	require.NoError(t, err)
	out, err := s.Generate(t.Context(), [][]int32{testTokens(20, 265, 1), {1}}, SampleOptions{MaxNew: 100, Temperature: 1})
	require.NoError(t, err)
	require.Len(t, out[0].Tokens, 4)
	require.Equal(t, StopContext, out[0].Reason)
	require.Len(t, out[1].Tokens, 23)

	_, err = s.Generate(t.Context(), [][]int32{testTokens(24, 265, 1)}, SampleOptions{MaxNew: 1})
	require.ErrorIs(t, err, ErrTooLong)
	_, err = s.Generate(t.Context(), [][]int32{{1}, {}}, SampleOptions{MaxNew: 1})
	require.ErrorContains(t, err, "prompt 1 is empty")
	_, err = s.Generate(t.Context(), [][]int32{{1, 265}}, SampleOptions{MaxNew: 1})
	require.ErrorContains(t, err, "token 265 at position 1")
	_, err = s.Generate(t.Context(), [][]int32{{1}}, SampleOptions{})
	require.ErrorContains(t, err, "max_new 0")
	_, err = s.Generate(t.Context(), [][]int32{{1}}, SampleOptions{MaxNew: 1, TopP: 1.5})
	require.ErrorContains(t, err, "top_p 1.5")
}

// TestGenerateRowOptions: rows with their own temperature, top-p, max_new and seed
// in one batch each give what the prompt gives alone with those options: the same
// tokens, log-probs within float rounding (what lets a server batch unrelated
// requests without changing any answer).
func TestGenerateRowOptions(t *testing.T) {
	s := newTestSampler(t, 25)
	prompts := samplerPrompts(s.Model().Config.VocabSize)
	rows := []SampleOptions{
		{MaxNew: 12, Temperature: 1, Seed: 3},
		{MaxNew: 5, Temperature: 0.7, TopP: 0.9, Seed: 4},
		{MaxNew: 9},
		{MaxNew: 12, Temperature: 1.2, TopK: 20, Seed: 5},
	}
	var seen [4][]int32
	batch, err := s.Generate(t.Context(), prompts, SampleOptions{MaxNew: 12, Rows: rows,
		OnToken: func(r int, tok int32, _ float32, _ []TokenLogProb) { seen[r] = append(seen[r], tok) }})
	require.NoError(t, err)
	for r, p := range prompts {
		alone, err := s.Generate(t.Context(), [][]int32{p}, rows[r])
		require.NoError(t, err)
		// The same tokens and stop; the log-probs equal on pure Go, and within float
		// rounding on XLA, whose batched and one-row programs add in other orders
		// (measured up to 3e-8).
		require.Equal(t, alone[0].Tokens, batch[r].Tokens, "row %d", r)
		require.Equal(t, alone[0].Reason, batch[r].Reason, "row %d", r)
		requireCloseLogProbs(t, alone[0].LogProbs, batch[r].LogProbs, 1e-5, "row %d log-probs", r)
		requireCloseLogProbs(t, alone[0].PolicyLogProbs, batch[r].PolicyLogProbs, 1e-5, "row %d policy log-probs", r)
		require.Equal(t, batch[r].Tokens, seen[r], "row %d's callback", r)
		require.LessOrEqual(t, len(batch[r].Tokens), rows[r].MaxNew)
	}
	_, err = s.Generate(t.Context(), prompts, SampleOptions{MaxNew: 4, Rows: rows})
	require.ErrorContains(t, err, "rows[0].max_new 12: above max_new 4")
	_, err = s.Generate(t.Context(), prompts, SampleOptions{MaxNew: 12, Rows: rows[:2]})
	require.ErrorContains(t, err, "2 row options for 4 prompts")
}

// requireCloseLogProbs checks that got has want's length and each value within tol.
func requireCloseLogProbs(t *testing.T, want, got []float32, tol float64, msgAndArgs ...any) {
	t.Helper()
	require.Len(t, got, len(want), msgAndArgs...)
	for i := range want {
		require.InDelta(t, want[i], got[i], tol, msgAndArgs...)
	}
}

// TestGenerateGone: a row whose Gone closes stops before the next step with
// StopGone, the other rows go on as they would alone, and a call whose rows are
// all gone returns at once.
func TestGenerateGone(t *testing.T) {
	s := newTestSampler(t, 26)
	prompts := samplerPrompts(s.Model().Config.VocabSize)[:2]
	done := make(chan struct{})
	rows := []SampleOptions{{MaxNew: 20, Gone: done}, {MaxNew: 20, Stop: []int32{-7}}}
	out, err := s.Generate(t.Context(), prompts, SampleOptions{MaxNew: 20, Rows: rows, OnToken: func(r int, _ int32, _ float32, _ []TokenLogProb) {
		if r == 0 && !gone(done) {
			close(done)
		}
	}})
	require.NoError(t, err)
	require.Equal(t, StopGone, out[0].Reason)
	require.Len(t, out[0].Tokens, 1)
	require.Equal(t, StopLength, out[1].Reason)
	alone, err := s.Generate(t.Context(), prompts[1:], rows[1])
	require.NoError(t, err)
	require.Equal(t, alone[0].Tokens, out[1].Tokens)

	all, err := s.Generate(t.Context(), prompts, SampleOptions{MaxNew: 20, Gone: done})
	require.NoError(t, err)
	for _, o := range all {
		require.Equal(t, StopGone, o.Reason)
		require.Empty(t, o.Tokens)
	}
}

// TestGenerateAdjusted: logit bias and the penalties change the distribution the
// row samples from, and LogProbs (and Top) are log-probs under that distribution,
// computed here independently from an uncached forward; PolicyLogProbs stay the
// model's own.
func TestGenerateAdjusted(t *testing.T) {
	s := newTestSampler(t, 27)
	vocab := s.Model().Config.VocabSize
	prompt := testTokens(6, vocab, 5)
	greedy, err := s.Generate(t.Context(), [][]int32{prompt}, SampleOptions{MaxNew: 1})
	require.NoError(t, err)
	banned := greedy[0].Tokens[0]
	o := SampleOptions{MaxNew: 6, Temperature: 0.8, MinP: 0.05, Seed: 3, TopLogProbs: 3,
		LogitBias: map[int32]float32{banned: -100, 7: 2}, PresencePenalty: 0.5, FrequencyPenalty: 0.3, RepetitionPenalty: 1.3}
	out, err := s.Generate(t.Context(), [][]int32{prompt}, o)
	require.NoError(t, err)
	seq := slices.Clone(prompt)
	counts := map[int32]int{}
	for i, tok := range out[0].Tokens {
		require.NotEqual(t, banned, tok, "step %d", i)
		raw := lastLogits(t, s.Model(), seq)
		z := make([]float64, vocab)
		for v := range z {
			x := float64(raw[v])
			if v == int(banned) {
				x -= 100
			}
			if v == 7 {
				x += 2
			}
			if slices.Contains(seq, int32(v)) {
				if x > 0 {
					x /= 1.3
				} else {
					x *= 1.3
				}
			}
			if n := counts[int32(v)]; n > 0 {
				x -= 0.5 + 0.3*float64(n)
			}
			z[v] = x / 0.8
		}
		top := slices.Max(z)
		var sum float64
		for _, x := range z {
			if x >= top+math.Log(0.05) {
				sum += math.Exp(x - top)
			}
		}
		require.GreaterOrEqual(t, z[tok], top+math.Log(0.05), "step %d: token below min_p", i)
		require.InDelta(t, z[tok]-top-math.Log(sum), out[0].LogProbs[i], 1e-4, "step %d", i)
		require.InDelta(t, float64(raw[tok])-lse(raw), out[0].PolicyLogProbs[i], 1e-4, "step %d", i)
		best := out[0].Top[i][0]
		require.Equal(t, int32(slices.Index(z, top)), best.Token, "step %d", i)
		require.InDelta(t, -math.Log(sum), best.LogProb, 1e-4, "step %d", i)
		require.LessOrEqual(t, len(out[0].Top[i]), 3)
		seq = append(seq, tok)
		counts[tok]++
	}
}
