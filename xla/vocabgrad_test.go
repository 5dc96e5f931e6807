package xla

import (
	"math"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/stretchr/testify/require"
)

// chunkGrads returns m's gradient of −Σ_t w_t·log p(y_t) over tokens (one full
// pass), one float32 slice per trained variable.
func chunkGrads(t *testing.T, backend backends.Backend, m *Model, tokens []int32, w []float32) [][]float32 {
	t.Helper()
	p, err := newGradPass(backend, m)
	require.NoError(t, err)
	acc := p.zeroGrads()
	_, err = p.accumulate(t.Context(), BackpropFull, nil, tokens, nil, chunkTerms{Weight: w}, 16, 0, acc)
	require.NoError(t, err)
	var out [][]float32
	for _, g := range acc {
		out = append(out, tensors.MustCopyFlatData[float32](g))
		g.FinalizeAll()
	}
	return out
}

// relErr is ‖got − want‖ / ‖want‖.
func relErr(got, want []float32) float64 {
	var d, n float64
	for i := range want {
		e := float64(got[i]) - float64(want[i])
		d, n = d+e*e, n+float64(want[i])*float64(want[i])
	}
	return math.Sqrt(d / n)
}

// TestBF16VocabGradients: a bf16 model's gradient of every trained weight against
// the f32 model's on the same (bfloat16-representable) weights, for a tied
// embedding and an untied head. The two differ by the bf16 forward's roundings
// (activations rounded into every product); the embedding's and head's gradients,
// made in float32 from the cotangents (vocabgrad.go), must be no further from
// f32's than the gradients autodiff gives in bfloat16 and then widens, which add
// a rounding of their own (vocabTapOff), and every gradient within 5% (relative L2).
func TestBF16VocabGradients(t *testing.T) {
	backend := newTestBackend(t)
	if err := PrecisionBF16.CheckBackend(backend); err != nil {
		t.Skip(err)
	}
	for name, fields := range map[string]map[string]any{
		"tied":   tinyFields(map[string]any{"torch_dtype": "bfloat16"}),
		"untied": tinyFields(map[string]any{"model_type": "qwen3", "tie_word_embeddings": false, "torch_dtype": "bfloat16"}),
	} {
		t.Run(name, func(t *testing.T) {
			tokens := testTokens(48, 265, 9)
			w := make([]float32, len(tokens))
			for i := range w {
				w[i] = float32(math.Sin(float64(i))) / 8
			}
			f32 := testModelAs(t, fields, 3, PrecisionF32)
			want := chunkGrads(t, backend, f32, tokens, w)
			bf16 := testModelAs(t, fields, 3, PrecisionBF16)
			got := chunkGrads(t, backend, bf16, tokens, w)
			vocabTapOff.Store(true)
			old := chunkGrads(t, backend, testModelAs(t, fields, 3, PrecisionBF16), tokens, w)
			vocabTapOff.Store(false)
			tapped := 0
			for i, v := range trainables(bf16) {
				e, eOld := relErr(got[i], want[i]), relErr(old[i], want[i])
				require.Less(t, e, 0.05, "%s", v.ScopeAndName())
				require.Greater(t, e, 0.0, "%s: bf16 gave f32's gradient exactly", v.ScopeAndName())
				if v.Shape().Dimensions[0] != 265 {
					require.Equal(t, eOld, e, "%s: not a vocab weight, same gradient either way", v.ScopeAndName())
					continue
				}
				tapped++
				t.Logf("%s: relative error against f32 %.5f (bf16 autodiff %.5f)", v.ScopeAndName(), e, eOld)
				require.LessOrEqual(t, e, eOld, "%s", v.ScopeAndName())
			}
			require.Equal(t, map[string]int{"tied": 1, "untied": 2}[name], tapped)
		})
	}
}
