package xla

import (
	"math"
	"testing"

	"github.com/hindsight-ai/hindsight/credit"
	"github.com/stretchr/testify/require"
)

// TestScoreLayerProgramsEqualUnrolled scores rollouts with the layer programs
// (ScorerOptions.LayerPrograms: one decoder layer's program run once per layer)
// and with the unrolled step program, on 3-layer models (llama with tied
// embeddings; qwen3 with q/k norms and a separate head; the same with LoRA
// adapters on every projection), at chunk 16 so that a rollout runs many chunks
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
			tokens := testTokens(150, m.Config.VocabSize, 12)
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
				segs := []credit.Hint{{InsertAt: 40, End: 70, Tokens: testTokens(9, m.Config.VocabSize, 13)}, {InsertAt: 100, End: 150, Tokens: testTokens(20, m.Config.VocabSize, 14)}}
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
			st := layered.Stats()
			t.Logf("layer programs: %s", st)
			require.Equal(t, st.Attention.Steps, int64(st.Chunks), "a chunk counted once")
		})
	}
}
