package xla

import (
	"math"
	"strings"
	"testing"

	"github.com/hindsight-ai/hindsight/credit"
	"github.com/stretchr/testify/require"
)

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
	qwen3 := map[string]any{"model_type": "qwen3", "num_hidden_layers": 3, "tie_word_embeddings": false}
	cases := []struct {
		name   string
		fields map[string]any
		lora   bool
	}{
		{"llama", map[string]any{"num_hidden_layers": 3}, false},
		{"qwen3", qwen3, false},
		{"qwen3 lora", qwen3, true},
	}
	if testing.Short() { // the case that exercises the most: q/k norms, a separate head, adapters
		cases = cases[2:]
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := testModel(t, tinyFields(c.fields), 11)
			if c.lora {
				require.NoError(t, m.AddLoRA(LoRAConfig{Rank: 4, Alpha: 8, Targets: []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}}, 5))
				randomizeB(t, m, 6, 0.1)
			}
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
	qwen3 := map[string]any{"model_type": "qwen3", "num_hidden_layers": 3, "tie_word_embeddings": false}
	cases := []struct {
		name   string
		fields map[string]any
		lora   bool
	}{
		{"llama tied", map[string]any{"num_hidden_layers": 3}, false},
		{"qwen3", qwen3, false},
		{"qwen3 lora", qwen3, true},
	}
	if testing.Short() { // the tied embedding's two gradients, and adapters only
		cases = []struct {
			name   string
			fields map[string]any
			lora   bool
		}{cases[0], cases[2]}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := testModel(t, tinyFields(c.fields), 21)
			if c.lora {
				require.NoError(t, m.AddLoRA(LoRAConfig{Rank: 4, Alpha: 8, Targets: []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}}, 5))
				randomizeB(t, m, 6, 0.1)
			}
			backend := newTestBackend(t)
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
		})
	}
}
