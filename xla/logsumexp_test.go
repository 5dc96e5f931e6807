package xla

import (
	"math"
	"math/rand/v2"
	"testing"

	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/stretchr/testify/require"
)

// TestVocabLogSumExpFloat64: at a Qwen-sized vocabulary (152,064) the softmax
// denominator matches a float64 Go reference to float32 rounding of the result
// (≤ 2e-6 nats at |lse| ≈ 13); the same sum taken in float32, measured beside it,
// is what the float64 accumulation replaced.
func TestVocabLogSumExpFloat64(t *testing.T) {
	backend := newTestBackend(t)
	const rows, vocab = 4, 152064
	rng := rand.New(rand.NewPCG(5, 9))
	logits := make([]float32, rows*vocab)
	for i := range logits {
		logits[i] = float32(rng.NormFloat64() * 2)
	}
	want := make([]float64, rows)
	for r := range rows {
		row := logits[r*vocab : (r+1)*vocab]
		top := math.Inf(-1)
		for _, v := range row {
			top = math.Max(top, float64(v))
		}
		s := 0.0
		for _, v := range row {
			s += math.Exp(float64(v) - top)
		}
		want[r] = top + math.Log(s)
	}
	x := tensors.FromFlatDataAndDimensions(logits, 1, rows, vocab)
	run := func(f func(*Node) *Node) []float32 {
		out, err := ExecOnce(backend, f, x)
		require.NoError(t, err)
		return tensors.MustCopyFlatData[float32](out)
	}
	got := run(vocabLogSumExp)
	f32 := run(func(l *Node) *Node { // the float32 sum, as before
		m := StopGradient(ReduceAndKeep(l, ReduceMax, 2))
		return Add(Log(ReduceSum(Exp(Sub(l, m)), 2)), Squeeze(m, 2))
	})
	var errGot, errF32 float64
	for r := range rows {
		errGot = math.Max(errGot, math.Abs(float64(got[r])-want[r]))
		errF32 = math.Max(errF32, math.Abs(float64(f32[r])-want[r]))
	}
	t.Logf("max |error| vs float64 reference: float64 sum %.2g, float32 sum %.2g nats", errGot, errF32)
	require.LessOrEqual(t, errGot, 2e-6)
}
