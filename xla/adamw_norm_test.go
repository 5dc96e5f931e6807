package xla

import (
	"math"
	"math/rand/v2"
	"testing"

	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/stretchr/testify/require"
)

// TestGradNormPerGroup: the update's global gradient norm (gradNorm) is the norm of
// every gradient against a float64 reference, computed by one small program per
// group's shapes: a 4-layer model's four layer groups share one, so what is compiled
// does not grow with the depth.
func TestGradNormPerGroup(t *testing.T) {
	backend := newTestBackend(t)
	m := testModel(t, tinyFields(map[string]any{"num_hidden_layers": 4}), 3)
	tr, err := NewTrainer(backend, m, TrainerOptions{})
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(5, 6))
	var grads []*tensors.Tensor
	var want float64
	for _, v := range tr.grad.params {
		g := make([]float32, v.Shape().Size())
		for i := range g {
			g[i] = float32(rng.NormFloat64())
			want += float64(g[i]) * float64(g[i])
		}
		grads = append(grads, tensors.FromFlatDataAndDimensions(g, v.Shape().Dimensions...))
	}
	want = math.Sqrt(want)
	got, err := tr.opt.gradNorm(grads)
	require.NoError(t, err)
	require.InDelta(t, want, float64(got), 1e-6*want)

	graphs := map[*Graph]bool{}
	for _, idx := range tr.opt.groups {
		args := make([]any, len(idx))
		for k, i := range idx {
			args[k] = grads[i]
		}
		out, g, err := tr.opt.sumSq.ExecWithGraphOnDevice(0, args...)
		require.NoError(t, err)
		finalize(out)
		graphs[g] = true
	}
	// The groups: 4 decoder layers (alike), the embedding, the final norm.
	require.Len(t, tr.opt.groups, 6)
	require.Len(t, graphs, 3, "one program for the four layer groups")
}
