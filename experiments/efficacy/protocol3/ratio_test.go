package protocol3

import (
	"math"
	"testing"

	"github.com/hindsight-ai/hindsight/experiments/efficacy"

	"github.com/stretchr/testify/require"
)

// curve3 is a run of arm with seed whose evals after 0, 100 and 200 rollouts are succ.
func curve3(arm string, seed int64, succ ...float64) efficacy.Curve {
	c := efficacy.Curve{Arm: arm, Seed: seed}
	for i, s := range succ {
		c.Points = append(c.Points, efficacy.Point{Rollouts: 100 * i, CPUSeconds: float64(10 * i), Success: s})
	}
	return c
}

// TestSummarizeByHand checks the threshold, the crossings and the paired ratios
// against values computed by hand: warm start 20%, outcome-only gains 20 and 10
// points (mean 15), so the threshold is 27.5%.
func TestSummarizeByHand(t *testing.T) {
	curves := []efficacy.Curve{
		curve3(efficacy.ArmOutcome, 1, .20, .30, .40), // crosses .275 at 75 rollouts
		curve3(efficacy.ArmOutcome, 2, .20, .25, .30), // at 150
		curve3(efficacy.ArmSDPO, 1, .20, .50, .60),    // at 25: ratio 3
		curve3(efficacy.ArmSDPO, 2, .20, .50, .50),    // at 25: ratio 6
		curve3(efficacy.ArmHint, 1, .20, .22, .25),    // never: ratio < 75/200
		curve3(efficacy.ArmHint, 2, .20, .40, .40),    // at 37.5: ratio 4
	}
	s, err := Summarize(curves, []string{efficacy.ArmOutcome, efficacy.ArmSDPO, efficacy.ArmHint})
	require.NoError(t, err)
	require.InDelta(t, 0.20, s.WarmStart, 1e-12)
	require.InDelta(t, 0.15, s.OutcomeGain, 1e-12)
	require.InDelta(t, 0.275, s.Threshold, 1e-12)
	require.Equal(t, 200, s.Budget)
	require.Empty(t, s.NoRatio)
	require.NotContains(t, s.Ratio, efficacy.ArmOutcome)

	sd := s.Ratio[efficacy.ArmSDPO]
	require.Len(t, sd.PerSeed, 2)
	require.InDelta(t, 75, sd.PerSeed[0].Outcome, 1e-9)
	require.InDelta(t, 25, sd.PerSeed[0].Arm, 1e-9)
	require.InDelta(t, 3, sd.PerSeed[0].Ratio, 1e-9)
	require.InDelta(t, 6, sd.PerSeed[1].Ratio, 1e-9)
	require.Equal(t, 2, sd.Stats.N)
	require.InDelta(t, 4.5, sd.Stats.Mean, 1e-9)
	require.InDelta(t, math.Sqrt(4.5), sd.Stats.Std, 1e-9) // ((3−4.5)² + (6−4.5)²) / (2−1)
	require.InDelta(t, 3, sd.Stats.Min, 1e-9)
	require.InDelta(t, 6, sd.Stats.Max, 1e-9)
	require.Zero(t, sd.Censored)

	h := s.Ratio[efficacy.ArmHint]
	require.True(t, math.IsNaN(h.PerSeed[0].Ratio), "seed 1 never reached the threshold: no ratio")
	require.Equal(t, BoundBelow, h.PerSeed[0].Bound)
	require.InDelta(t, 75.0/200, h.PerSeed[0].BoundValue, 1e-9)
	require.InDelta(t, 4, h.PerSeed[1].Ratio, 1e-9)
	require.Equal(t, 1, h.Censored)
	require.Equal(t, 1, h.Stats.N, "the bounded seed is left out of the statistics")
	require.InDelta(t, 4, h.Stats.Mean, 1e-9)

	require.Equal(t, efficacy.ArmHint, s.Arms[2].Name)
	require.Equal(t, 1, s.Arms[2].Reached)
	require.InDelta(t, 0.325, s.Arms[2].Final.Mean, 1e-12)
}

// TestSummarizeOutcomeBelowTenPoints: outcome-only gains 8 and 10 points, 9 on
// average: no ratio, and the reason says why.
func TestSummarizeOutcomeBelowTenPoints(t *testing.T) {
	curves := []efficacy.Curve{
		curve3(efficacy.ArmOutcome, 1, .20, .25, .28),
		curve3(efficacy.ArmOutcome, 2, .20, .25, .30),
		curve3(efficacy.ArmSDPO, 1, .20, .60, .70),
		curve3(efficacy.ArmSDPO, 2, .20, .60, .70),
	}
	s, err := Summarize(curves, []string{efficacy.ArmOutcome, efficacy.ArmSDPO})
	require.NoError(t, err)
	require.InDelta(t, 0.09, s.OutcomeGain, 1e-12)
	require.Nil(t, s.Ratio)
	require.Contains(t, s.NoRatio, "outcome-only gained 9.0 points")
	require.Contains(t, s.NoRatio, "< 10")

	// Exactly 10 points is enough.
	curves[0] = curve3(efficacy.ArmOutcome, 1, .20, .25, .30)
	s, err = Summarize(curves, []string{efficacy.ArmOutcome, efficacy.ArmSDPO})
	require.NoError(t, err)
	require.Empty(t, s.NoRatio)
	require.Contains(t, s.Ratio, efficacy.ArmSDPO)
}

// TestSummarizeRejectsUnpaired: an arm whose seeds are not outcome-only's, a seed run
// twice, or unequal budgets are errors, never seeds quietly left out.
func TestSummarizeRejectsUnpaired(t *testing.T) {
	arms := []string{efficacy.ArmOutcome, efficacy.ArmSDPO}
	for name, curves := range map[string][]efficacy.Curve{
		"missing seed": {curve3(efficacy.ArmOutcome, 1, .2, .3, .4), curve3(efficacy.ArmOutcome, 2, .2, .3, .4), curve3(efficacy.ArmSDPO, 1, .2, .3, .4)},
		"other seed":   {curve3(efficacy.ArmOutcome, 1, .2, .3, .4), curve3(efficacy.ArmOutcome, 2, .2, .3, .4), curve3(efficacy.ArmSDPO, 1, .2, .3, .4), curve3(efficacy.ArmSDPO, 3, .2, .3, .4)},
		"seed twice":   {curve3(efficacy.ArmOutcome, 1, .2, .3, .4), curve3(efficacy.ArmOutcome, 1, .2, .3, .4), curve3(efficacy.ArmSDPO, 1, .2, .3, .4), curve3(efficacy.ArmSDPO, 1, .2, .3, .4)},
		"no outcome":   {curve3(efficacy.ArmSDPO, 1, .2, .3, .4)},
		"budget":       {curve3(efficacy.ArmOutcome, 1, .2, .3, .4), curve3(efficacy.ArmSDPO, 1, .2, .3, .4, .5)},
		"unknown arm":  {curve3(efficacy.ArmOutcome, 1, .2, .3, .4), curve3(efficacy.ArmSDPO, 1, .2, .3, .4), curve3("other", 1, .2, .3, .4)},
	} {
		_, err := Summarize(curves, arms)
		require.Error(t, err, name)
		t.Logf("%s: %v", name, err)
	}
	_, err := Summarize([]efficacy.Curve{curve3(efficacy.ArmOutcome, 1, .2, .3, .4), curve3(efficacy.ArmSDPO, 2, .2, .3, .4)}, arms)
	require.ErrorContains(t, err, "paired by seed")
}

// TestPairRatio covers the four cases of a seed.
func TestPairRatio(t *testing.T) {
	nan := math.NaN()
	r := PairRatio(1, 150, 50, 200)
	require.InDelta(t, 3, r.Ratio, 1e-12)
	require.Empty(t, r.Bound)
	r = PairRatio(1, 150, nan, 200)
	require.True(t, math.IsNaN(r.Ratio))
	require.Equal(t, BoundBelow, r.Bound)
	require.InDelta(t, 0.75, r.BoundValue, 1e-12)
	r = PairRatio(1, nan, 50, 200)
	require.Equal(t, BoundAbove, r.Bound)
	require.InDelta(t, 4, r.BoundValue, 1e-12)
	r = PairRatio(1, nan, nan, 200)
	require.Equal(t, BoundNone, r.Bound)
	require.True(t, math.IsNaN(r.Ratio))
}
