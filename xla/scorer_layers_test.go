package xla

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/hindsight-ai/hindsight/credit"
	"github.com/stretchr/testify/require"
)

// layerCase is a 3-layer model the layer-program tests run: llama with tied
// embeddings, qwen3 with q/k norms and a separate head, the same with LoRA
// adapters on every projection (B drawn, so they act); in bf16 (weights
// bfloat16-representable, as a BF16 checkpoint's) where bf16 says.
type layerCase struct {
	name       string
	fields     map[string]any
	lora, bf16 bool
}

// layerCases are the layer-program tests' cases, with bf16 also the tied llama and
// qwen3 in bf16 (named "… bf16"); under -short only those named in short.
func layerCases(bf16 bool, short ...string) []layerCase {
	qwen3 := map[string]any{"model_type": "qwen3", "num_hidden_layers": 3, "tie_word_embeddings": false}
	cases := []layerCase{
		{name: "llama tied", fields: map[string]any{"num_hidden_layers": 3}},
		{name: "qwen3", fields: qwen3},
		{name: "qwen3 lora", fields: qwen3, lora: true},
	}
	if bf16 {
		for _, c := range cases[:2] {
			c.name, c.bf16 = c.name+" bf16", true
			cases = append(cases, c)
		}
	}
	if !testing.Short() {
		return cases
	}
	var out []layerCase
	for _, c := range cases {
		if slices.Contains(short, c.name) {
			out = append(out, c)
		}
	}
	return out
}

// model loads c's model with weights drawn from seed.
func (c layerCase) model(t *testing.T, seed uint64) *Model {
	t.Helper()
	p, fields := PrecisionF32, tinyFields(c.fields)
	if c.bf16 {
		p, fields["torch_dtype"] = PrecisionBF16, "bfloat16"
	}
	m := testModelAs(t, fields, seed, p)
	if c.lora {
		require.NoError(t, m.AddLoRA(LoRAConfig{Rank: 4, Alpha: 8, Targets: []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}}, 5))
		randomizeB(t, m, 6, 0.1)
	}
	return m
}

// TestScoreLayerProgramsEqualUnrolled scores rollouts with the layer programs
// (ScorerOptions.LayerPrograms: one decoder layer's program run once per layer)
// and with the unrolled step program, on 3-layer models (llama with tied
// embeddings; qwen3 with q/k norms and a separate head; the same with LoRA
// adapters on every projection), at chunk 16 so that a 120-token rollout runs many chunks
// over spans of several pages and a tail rung, at temperatures 1 and 0.7. The
// log-probs agree within 1e-5 and each pass's KV cache is the other's: hinted
// segments scored by the unrolled Scorer on the prefix cache the layer programs
// wrote equal those on the cache the unrolled programs wrote. The layer programs
// compile one layer program per chunk shape whatever the depth.
func TestScoreLayerProgramsEqualUnrolled(t *testing.T) {
	// Under -short the case that exercises the most: q/k norms, a separate head, adapters.
	for _, c := range layerCases(false, "qwen3 lora") {
		t.Run(c.name, func(t *testing.T) {
			m := c.model(t, 11)
			backend := newTestBackend(t)
			unrolled, err := NewScorer(backend, m, ScorerOptions{Chunk: 16})
			require.NoError(t, err)
			layered, err := NewScorer(backend, m, ScorerOptions{Chunk: 16, LayerPrograms: true})
			require.NoError(t, err)
			tokens := testTokens(120, m.Config.VocabSize, 12)
			for _, temp := range []float64{1, 0.7} {
				want, wantKV, err := unrolled.ScoreAt(t.Context(), tokens, temp)
				require.NoError(t, err)
				got, gotKV, err := layered.ScoreAt(t.Context(), tokens, temp)
				require.NoError(t, err)
				require.True(t, math.IsNaN(float64(got[0])))
				require.Equal(t, wantKV.Len, gotKV.Len)
				worst := 0.0
				for i := 1; i < len(tokens); i++ {
					worst = math.Max(worst, math.Abs(float64(got[i]-want[i])))
				}
				require.Less(t, worst, 1e-5, "temperature %g", temp)
				segs := []credit.Hint{{InsertAt: 40, End: 70, Tokens: testTokens(9, m.Config.VocabSize, 13)}, {InsertAt: 90, End: 120, Tokens: testTokens(20, m.Config.VocabSize, 14)}}
				qWant, err := unrolled.ScoreHinted(t.Context(), tokens, wantKV, segs)
				require.NoError(t, err)
				qGot, err := unrolled.ScoreHinted(t.Context(), tokens, gotKV, segs)
				require.NoError(t, err)
				worstQ := 0.0
				for k := range segs {
					require.Len(t, qGot[k], len(qWant[k]))
					for i := range qWant[k] {
						worstQ = math.Max(worstQ, math.Abs(float64(qGot[k][i]-qWant[k][i])))
					}
				}
				require.Less(t, worstQ, 1e-5, "hinted on the layer programs' cache, temperature %g", temp)
				require.NoError(t, wantKV.Close())
				require.NoError(t, gotKV.Close())
				t.Logf("temperature %g: max |layered − unrolled| %.2g, hinted on its cache %.2g", temp, worst, worstQ)
			}
			for key := range unrolled.compiled {
				require.False(t, strings.HasPrefix(key, "layer "), key)
			}
			layerPrograms := 0
			for key := range layered.compiled {
				require.False(t, strings.HasPrefix(key, "paged "), "the layer programs' Scorer ran an unrolled step: %s", key)
				if strings.HasPrefix(key, "layer ") {
					layerPrograms++
				}
			}
			require.Positive(t, layerPrograms)
			st := layered.Stats()
			t.Logf("layer programs: %s", st)
			require.Equal(t, st.Attention.Steps, int64(st.Chunks), "a chunk counted once")
		})
	}
}

// TestGradLayerProgramsEqualUnrolled runs the truncated gradient pass of a
// rollout as layer programs (forward per layer, the head's loss and gradient, then
// each layer's vector-Jacobian product last layer first, the embedding's gradient
// with the tied head's) and as the unrolled program, on the models of
// TestScoreLayerProgramsEqualUnrolled (full training; the LoRA one trains only the
// adapters), chunk 16 over a 64-token rollout with credit weights, a KL term and
// temperature 0.8: the loss, each token's loss and log-prob, and every trained
// parameter's gradient agree.
func TestGradLayerProgramsEqualUnrolled(t *testing.T) {
	// Under -short: the tied embedding's two gradients, adapters only, and the
	// bf16 vocabulary's float32 gradients tied (the untied bf16 case runs in full
	// runs only: on XLA CPU each bf16 case costs minutes of CI's XLA part).
	for _, c := range layerCases(true, "llama tied", "qwen3 lora", "llama tied bf16") {
		t.Run(c.name, func(t *testing.T) {
			backend := newTestBackend(t)
			if c.bf16 {
				if err := PrecisionBF16.CheckBackend(backend); err != nil {
					t.Skip(err)
				}
			}
			m := c.model(t, 21)
			s, err := NewScorer(backend, m, ScorerOptions{Chunk: 16})
			require.NoError(t, err)
			T := 64
			tokens := testTokens(T, m.Config.VocabSize, 22)
			lp, cache, err := s.ScoreAt(t.Context(), tokens, 0.8)
			require.NoError(t, err)
			defer cache.Close()
			terms := chunkTerms{Weight: make([]float32, T), KLCoef: make([]float32, T), Ref: make([]float32, T), Temp: 0.8}
			for i := 1; i < T; i++ {
				terms.Weight[i] = float32(i%7-3) / 10
				terms.KLCoef[i] = 0.05
				terms.Ref[i] = lp[i] + float32(i%5-2)/20
			}
			run := func(layers bool) (passResult, [][]float32) {
				p, err := newGradPass(backend, m)
				require.NoError(t, err)
				if layers {
					require.NoError(t, p.withLayerPrograms())
				}
				acc := p.zeroGrads()
				res, err := p.accumulate(t.Context(), BackpropTruncated, s, tokens, cache, terms, 16, 0, acc)
				require.NoError(t, err)
				if layers {
					require.Equal(t, int(p.stats.Steps), p.layers.chunks, "every chunk ran as layer programs")
				}
				var g [][]float32
				for _, a := range acc {
					g = append(g, f32s(a))
				}
				finalize(acc)
				return res, g
			}
			want, wantG := run(false)
			got, gotG := run(true)
			require.InDelta(t, want.Loss, got.Loss, 1e-5*math.Max(1, math.Abs(want.Loss)))
			for i := 1; i < T; i++ {
				require.InDelta(t, want.TokLoss[i], got.TokLoss[i], 1e-5, "token loss %d", i)
				require.InDelta(t, want.LogProb[i], got.LogProb[i], 1e-5, "log-prob %d", i)
			}
			require.Len(t, gotG, len(wantG))
			worst := 0.0
			for k := range wantG {
				scale := 0.0
				for _, v := range wantG[k] {
					scale = math.Max(scale, math.Abs(float64(v)))
				}
				require.Positive(t, scale, "parameter %d has a zero gradient", k)
				for i, v := range wantG[k] {
					worst = math.Max(worst, math.Abs(float64(gotG[k][i]-v))/scale)
				}
			}
			require.Less(t, worst, 1e-4, "gradients, relative to each parameter's largest entry")
			t.Logf("%d parameters: loss %.6g vs %.6g; max |Δ gradient| / max |gradient| %.2g", len(wantG), got.Loss, want.Loss, worst)
			if !c.bf16 {
				return
			}
			// The layer programs as before: the vocabulary's gradients by autodiff
			// in bfloat16, rounded per chunk.
			vocabTapOff.Store(true)
			_, oldG := run(true)
			vocabTapOff.Store(false)
			vocab := 0
			for k, v := range trainables(m) {
				if v.Shape().Dimensions[0] != m.Config.VocabSize {
					continue
				}
				vocab++
				e, eOld := relErr(gotG[k], wantG[k]), relErr(oldG[k], wantG[k])
				t.Logf("%s: relative L2 error against the unrolled pass %.3g (bf16 autodiff %.3g)", v.ScopeAndName(), e, eOld)
				require.Less(t, e, 1e-5, v.ScopeAndName())
				require.Greater(t, eOld, 1e-4, "%s: the bf16 gradient is not caught", v.ScopeAndName())
			}
			require.Equal(t, map[bool]int{true: 1, false: 2}[m.Config.TieWordEmbeddings], vocab)
		})
	}
}
