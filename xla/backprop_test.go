package xla

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTrainerBackpropModes: a step with Backprop exact (chunk 16 through the KV
// cache) moves the weights as a step with Backprop full (one causal pass) does, and
// a truncated step does not; an unknown mode is refused.
func TestTrainerBackpropModes(t *testing.T) {
	backend := newTestBackend(t)
	dir := tinyModelDir(t)
	pool := rolloutPool(2, 31)
	step := func(mode Backprop) [][]float32 {
		m, err := Open(dir, OpenOptions{})
		require.NoError(t, err)
		opts := resumeOptions(nil)
		opts.Credit.KLBeta = 0
		opts.Chunk, opts.Backprop = 16, mode
		opts.Optimizer.ClipNorm, opts.Optimizer.WeightDecay = 0, 0
		tr, err := NewTrainer(backend, m, opts)
		require.NoError(t, err)
		moved := stepMoves(t, tr, m, pool)
		return moved
	}
	diff := func(a, b [][]float32) (worst, scale float64) {
		for i := range a {
			for j := range a[i] {
				worst = math.Max(worst, math.Abs(float64(a[i][j]-b[i][j])))
				scale = math.Max(scale, math.Abs(float64(b[i][j])))
			}
		}
		return worst, scale
	}
	full, exact, truncated := step(BackpropFull), step(BackpropExact), step(BackpropTruncated)
	worst, scale := diff(exact, full)
	t.Logf("largest update difference: exact %.3g, truncated %.3g (largest update %.3g)", worst, func() float64 { w, _ := diff(truncated, full); return w }(), scale)
	require.Less(t, worst, 1e-3*scale, "exact equals full")
	worst, _ = diff(truncated, full)
	require.Greater(t, worst, 1e-2*scale, "truncation differs, or the test shows nothing")

	m, err := Open(dir, OpenOptions{})
	require.NoError(t, err)
	_, err = NewTrainer(backend, m, TrainerOptions{Backprop: "sideways"})
	require.ErrorContains(t, err, `backprop: "sideways", want truncated, exact or full`)
}
