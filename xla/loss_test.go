package xla

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/credit"
)

// smallFields is the model of the loss tests: d = 32, 2 layers.
func smallFields() map[string]any {
	return tinyFields(map[string]any{"hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2,
		"head_dim": 8, "intermediate_size": 64})
}

// randomCreditRollout draws one rollout's credit inputs around the device's own
// student log-probs: random trainable runs, sampler log-probs near the student's
// (some null), a reward, a few hint spans with teacher log-probs s ± noise.
func randomCreditRollout(rng *rand.Rand, id, task string, student []float32, kl bool) credit.Sequence {
	T := len(student)
	r := credit.Sequence{ID: id, TaskID: task, Student: f64s(student), Sampler: make([]float64, T), Trainable: make([]bool, T)}
	for t := 1; t < T; t++ {
		r.Trainable[t] = rng.IntN(3) > 0
		r.Sampler[t] = math.NaN()
		if r.Trainable[t] {
			r.Sampler[t] = math.Min(0, r.Student[t]+0.3*rng.NormFloat64())
		}
	}
	if rng.IntN(4) > 0 {
		r.Reward, r.HasReward = float64(rng.IntN(2)), true
	}
	for range 1 + rng.IntN(3) {
		a := 1 + rng.IntN(T-2)
		b := a + 1 + rng.IntN(min(20, T-a))
		h := credit.Hint{InsertAt: a, End: b, Teacher: make([]float64, b-a)}
		for t := a; t < b; t++ {
			h.Teacher[t-a] = math.Min(0, r.Student[t]+3*rng.NormFloat64())
		}
		r.Hints = append(r.Hints, h)
	}
	if kl {
		r.Ref = make([]float64, T)
		for t := range T {
			r.Ref[t] = math.Min(0, r.Student[t]+0.5*rng.NormFloat64())
		}
	}
	return r
}

// TestDeviceLossMatchesCredit checks, on random cases, that the per-token losses and
// their sum computed on the device (chunked, against the scoring pass's KV cache)
// equal credit.Loss's float64 reference evaluated at the training pass's log-probs,
// and that those log-probs are the scoring pass's.
func TestDeviceLossMatchesCredit(t *testing.T) {
	backend := newTestBackend(t)
	m := testModel(t, smallFields(), 21)
	s, err := NewScorer(backend, m, ScorerOptions{Chunk: 32})
	require.NoError(t, err)
	p, err := newGradPass(backend, m)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(5, 6))
	for c := range 6 {
		kl := c%2 == 1
		cfg := credit.DefaultConfig()
		if kl {
			cfg.KLBeta = 0.1
		}
		if c >= 4 {
			cfg.Gate = credit.GateTanh
		}
		var rs []credit.Sequence
		var toks [][]int32
		var caches []*KVCache
		for i := range 3 {
			tokens := testTokens(20+rng.IntN(60), m.Config.VocabSize, uint64(100*c+i))
			lp, cache, err := s.Score(t.Context(), tokens)
			require.NoError(t, err)
			defer cache.Close()
			toks, caches = append(toks, tokens), append(caches, cache)
			rs = append(rs, randomCreditRollout(rng, fmt.Sprint(i), "task", lp, kl))
		}
		budget := 150
		res, _, err := credit.Step(cfg, rs, credit.NewBaselines(), budget)
		require.NoError(t, err)
		acc := p.zeroGrads()
		var devLoss float64
		logp := make([][]float64, len(rs))
		for i := range rs {
			terms := chunkTerms{Weight: make([]float32, len(toks[i]))}
			for j, w := range res[i].Weight {
				terms.Weight[j] = float32(w)
			}
			if kl && !res[i].Skipped {
				terms.KLCoef, terms.Ref = make([]float32, len(toks[i])), make([]float32, len(toks[i]))
				for j, mk := range rs[i].Trainable {
					if mk {
						terms.KLCoef[j] = float32(cfg.KLBeta / float64(budget))
						terms.Ref[j] = float32(rs[i].Ref[j])
					}
				}
			}
			pr, err := p.accumulate(t.Context(), BackpropTruncated, s, toks[i], caches[i], terms, 16, 0, acc)
			require.NoError(t, err)
			devLoss += pr.Loss
			logp[i] = f64s(pr.LogProb)
			for j := 1; j < len(toks[i]); j++ {
				require.InDelta(t, rs[i].Student[j], logp[i][j], 1e-5, "case %d rollout %d: training-pass log-prob at %d", c, i, j)
				// The reference's per-token term.
				want := -res[i].Weight[j] * logp[i][j]
				if kl && rs[i].Trainable[j] && !res[i].Skipped {
					x := rs[i].Ref[j] - logp[i][j]
					want += cfg.KLBeta / float64(budget) * (math.Exp(x) - x - 1)
				}
				require.InDelta(t, want, float64(pr.TokLoss[j]), 1e-5, "case %d rollout %d: token loss at %d", c, i, j)
			}
		}
		want := credit.Loss(cfg, rs, res, logp, budget)
		require.InDelta(t, want, devLoss, 1e-5, "case %d", c)
		for _, a := range acc {
			a.FinalizeAll()
		}
	}
}

// gradOf returns the flattened gradient of one rollout's loss: through the cache
// with the given chunk, or (nil cache) one exact pass.
func gradOf(t *testing.T, p *gradPass, s *Scorer, tokens []int32, cache *KVCache, terms chunkTerms, chunk int) []float64 {
	t.Helper()
	acc := p.zeroGrads()
	mode := BackpropTruncated
	if cache == nil {
		mode = BackpropFull
	}
	_, err := p.accumulate(t.Context(), mode, s, tokens, cache, terms, chunk, 0, acc)
	require.NoError(t, err)
	var out []float64
	for _, a := range acc {
		out = append(out, f64s(tensors.MustCopyFlatData[float32](a))...)
		a.FinalizeAll()
	}
	return out
}

func cosine(a, b []float64) float64 {
	var ab, aa, bb float64
	for i := range a {
		ab += a[i] * b[i]
		aa += a[i] * a[i]
		bb += b[i] * b[i]
	}
	return ab / math.Sqrt(aa*bb)
}

func randomTerms(T int, seed uint64) chunkTerms {
	rng := rand.New(rand.NewPCG(seed, 3))
	ct := chunkTerms{Weight: make([]float32, T)}
	for t := 1; t < T; t++ {
		ct.Weight[t] = float32(rng.NormFloat64() / float64(T))
	}
	return ct
}

// TestChunkedGradientOneChunk: when the rollout fits one chunk, the gradient through
// the KV cache equals the exact one (the cache only supplies padding positions the
// mask hides).
func TestChunkedGradientOneChunk(t *testing.T) {
	backend := newTestBackend(t)
	m := testModel(t, smallFields(), 22)
	s, err := NewScorer(backend, m, ScorerOptions{Chunk: 64})
	require.NoError(t, err)
	p, err := newGradPass(backend, m)
	require.NoError(t, err)
	tokens := testTokens(50, m.Config.VocabSize, 8)
	_, cache, err := s.Score(t.Context(), tokens)
	require.NoError(t, err)
	defer cache.Close()
	terms := randomTerms(len(tokens), 1)
	full := gradOf(t, p, s, tokens, nil, terms, 64)
	chunked := gradOf(t, p, s, tokens, cache, terms, 64)
	var scale float64
	for _, g := range full {
		scale = math.Max(scale, math.Abs(g))
	}
	for i := range full {
		require.InDelta(t, full[i], chunked[i], 1e-5*math.Max(1, scale), "parameter element %d", i)
	}
	require.Greater(t, cosine(full, chunked), 1-1e-9)
}

// TestTruncatedGradientCosine measures how far truncated backprop (earlier chunks'
// K/V constant) is from the exact gradient at T = 256, for a few chunk sizes. The
// cosine similarities are logged (docs/training.md "Training").
func TestTruncatedGradientCosine(t *testing.T) {
	backend := newTestBackend(t)
	m := testModel(t, smallFields(), 23)
	s, err := NewScorer(backend, m, ScorerOptions{Chunk: 256})
	require.NoError(t, err)
	p, err := newGradPass(backend, m)
	require.NoError(t, err)
	const T = 256
	tokens := testTokens(T, m.Config.VocabSize, 9)
	_, cache, err := s.Score(t.Context(), tokens)
	require.NoError(t, err)
	defer cache.Close()
	terms := randomTerms(T, 2)
	t0 := time.Now()
	full := gradOf(t, p, s, tokens, nil, terms, T)
	t.Logf("T=%d full gradient in %v", T, time.Since(t0))
	for _, chunk := range []int{256, 128, 64, 32, 16} {
		t0 := time.Now()
		g := gradOf(t, p, s, tokens, cache, terms, chunk)
		cos := cosine(full, g)
		t.Logf("T=%d chunk %3d: cosine(truncated, full) = %.4f (%v)", T, chunk, cos, time.Since(t0))
		require.Greater(t, cos, 0.5)
		if chunk == T {
			require.Greater(t, cos, 1-1e-9)
		}
	}
}

func TestTrainChunkFor(t *testing.T) {
	require.Equal(t, 256, trainChunkFor(256, 1000, 1024, 4, 0, false))
	require.Equal(t, 64, trainChunkFor(256, 60, 1024, 4, 0, false))
	require.Equal(t, 16, trainChunkFor(256, 3, 1024, 4, 0, false))
	require.Equal(t, 128, trainChunkFor(256, 150, 1024, 4, 0, false))
	require.Equal(t, 256, trainChunkFor(256, 150, 1024, 4, 0, true))
	require.Equal(t, 128, trainChunkFor(1024, 5000, 32768, 4, 1<<24, false))
	require.Equal(t, 16, trainChunkFor(1024, 5000, 1<<20, 4, 1<<20, false))
}

// TestExactChunkedGradient: the reverse-order chunked pass, which carries the
// cotangents of earlier positions' K/V back through the cache, equals the gradient
// of one causal pass over the whole rollout, for every chunk size; with a KL term
// too. Its log-probs and loss equal the truncated pass's (the forward is the same).
func TestExactChunkedGradient(t *testing.T) {
	backend := newTestBackend(t)
	m := testModel(t, smallFields(), 23)
	s, err := NewScorer(backend, m, ScorerOptions{Chunk: 64})
	require.NoError(t, err)
	p, err := newGradPass(backend, m)
	require.NoError(t, err)
	const T = 200
	tokens := testTokens(T, m.Config.VocabSize, 9)
	_, cache, err := s.Score(t.Context(), tokens)
	require.NoError(t, err)
	defer cache.Close()
	terms := randomTerms(T, 2)
	terms.KLCoef, terms.Ref = make([]float32, T), make([]float32, T)
	for i := 1; i < T; i += 3 {
		terms.KLCoef[i], terms.Ref[i] = 0.01, -5
	}
	grad := func(f func(acc []*tensors.Tensor) (passResult, error)) ([]float64, passResult) {
		acc := p.zeroGrads()
		res, err := f(acc)
		require.NoError(t, err)
		var out []float64
		for _, a := range acc {
			out = append(out, f64s(tensors.MustCopyFlatData[float32](a))...)
			a.FinalizeAll()
		}
		return out, res
	}
	full, fullRes := grad(func(acc []*tensors.Tensor) (passResult, error) {
		return p.accumulate(t.Context(), BackpropFull, s, tokens, nil, terms, T, 0, acc)
	})
	var scale float64
	for _, g := range full {
		scale = math.Max(scale, math.Abs(g))
	}
	// T = 200: chunk 128 runs as 128 + 64 + 16 (chunkRung; before issue 42 as 128 + 128).
	for _, chunk := range []int{16, 32, 64, 128} {
		exact, res := grad(func(acc []*tensors.Tensor) (passResult, error) {
			return p.accumulate(t.Context(), BackpropExact, s, tokens, cache, terms, chunk, 0, acc)
		})
		truncated, _ := grad(func(acc []*tensors.Tensor) (passResult, error) {
			return p.accumulate(t.Context(), BackpropTruncated, s, tokens, cache, terms, chunk, 0, acc)
		})
		t.Logf("chunk %d: cosine(exact, full) = %.7f, cosine(truncated, full) = %.4f", chunk, cosine(full, exact), cosine(full, truncated))
		for i := range full {
			require.InDelta(t, full[i], exact[i], 2e-5*math.Max(1, scale), "chunk %d: parameter element %d", chunk, i)
		}
		require.Greater(t, cosine(full, exact), 1-1e-6)
		require.Less(t, cosine(full, truncated), 1-1e-4, "truncation must make a difference here, or this test shows nothing")
		require.InDelta(t, fullRes.Loss, res.Loss, 1e-6*math.Abs(fullRes.Loss))
		for i := 1; i < T; i++ {
			require.InDelta(t, fullRes.LogProb[i], res.LogProb[i], 1e-4, "log-prob %d", i)
		}
	}
}
