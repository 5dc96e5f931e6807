package efficacy

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

func pts(success ...float64) []Point {
	var p []Point
	for i, s := range success {
		p = append(p, Point{Rollouts: 100 * i, CPUSeconds: 10 * float64(i), Success: s})
	}
	return p
}

func TestCrossing(t *testing.T) {
	x, ok := Crossing(pts(0.2, 0.3, 0.5), 0.4, false)
	require.True(t, ok)
	require.InDelta(t, 150, x, 1e-9)
	x, ok = Crossing(pts(0.2, 0.3, 0.5), 0.4, true)
	require.True(t, ok)
	require.InDelta(t, 15, x, 1e-9)
	x, ok = Crossing(pts(0.5, 0.6), 0.4, false)
	require.True(t, ok)
	require.Zero(t, x)
	_, ok = Crossing(pts(0.2, 0.3), 0.4, false)
	require.False(t, ok)
	// The first crossing counts, not a later one after a dip.
	x, _ = Crossing(pts(0.2, 0.6, 0.1, 0.9), 0.4, false)
	require.InDelta(t, 50, x, 1e-9)
}

func TestSummarize(t *testing.T) {
	curves := []Curve{
		{Arm: "outcome", Seed: 1, Points: pts(0.2, 0.25, 0.3, 0.4)}, // gain 0.2
		{Arm: "outcome", Seed: 2, Points: pts(0.2, 0.2, 0.3, 0.4)},  // gain 0.2
		{Arm: "hint", Seed: 1, Points: pts(0.2, 0.4, 0.5, 0.6)},
		{Arm: "hint", Seed: 2, Points: pts(0.2, 0.3, 0.5, 0.5)},
	}
	s, err := Summarize(curves, "outcome", "hint")
	require.NoError(t, err)
	require.InDelta(t, 0.2, s.WarmStart, 1e-12)
	require.InDelta(t, 0.3, s.Threshold, 1e-12)
	// outcome reaches 0.3 at 200 (both seeds); hint at 50 (seed 1) and 100 (seed 2).
	require.InDeltaSlice(t, []float64{200, 200}, s.Arms[0].ToThreshold, 1e-9)
	require.InDeltaSlice(t, []float64{50, 100}, s.Arms[1].ToThreshold, 1e-9)
	require.InDeltaSlice(t, []float64{4, 2}, s.RatioSeeds, 1e-9)
	require.InDelta(t, 3, s.Ratio.Mean, 1e-9)
	require.InDelta(t, 2, s.Ratio.Min, 1e-9)
	require.InDelta(t, 4, s.Ratio.Max, 1e-9)
	require.InDelta(t, 200/75.0, s.RatioOfMeans, 1e-9)
	require.InDelta(t, 0.55, s.Arms[1].Final.Mean, 1e-12)
	require.Empty(t, s.NoRatio)

	flat := []Curve{
		{Arm: "outcome", Seed: 1, Points: pts(0.2, 0.21)},
		{Arm: "hint", Seed: 1, Points: pts(0.2, 0.5)},
	}
	s, err = Summarize(flat, "outcome", "hint")
	require.NoError(t, err)
	require.Contains(t, s.NoRatio, "no ratio")
	require.True(t, math.IsNaN(s.RatioOfMeans))

	_, err = Summarize(flat, "outcome", "hint-only")
	require.ErrorContains(t, err, "hint-only")
}

func TestStats(t *testing.T) {
	s := NewStats([]float64{1, 2, 3, math.NaN()})
	require.Equal(t, 3, s.N)
	require.InDelta(t, 2, s.Mean, 1e-12)
	require.InDelta(t, 1, s.Std, 1e-12)
	require.True(t, math.IsNaN(NewStats(nil).Mean))
}
