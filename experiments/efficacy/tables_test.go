package efficacy

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/experiments/efficacy/efficacytest"
	"github.com/hindsight-ai/hindsight/rollout"
	"github.com/hindsight-ai/hindsight/toolworld"
)

func TestTables(t *testing.T) {
	nan := math.NaN()
	step := func(i, hints int, right, wrong float64) StepStat {
		return StepStat{Step: i, Hints: hints, DeltaAbs: 0.1 * float64(hints), ClipFrac: 0.01, Pivot: 0.2, DeltaRight: right, DeltaWrong: wrong}
	}
	res := Results{Config: Config{EvalEvery: 2}, Runs: []Run{
		{Curve: Curve{Arm: ArmOutcome, Seed: 1, Points: pts(0.2, 0.3)}, Steps: []StepStat{step(1, 0, nan, nan), step(2, 0, nan, nan)}},
		{Curve: Curve{Arm: ArmOutcome, Seed: 2, Points: pts(0.2, 0.5)}, Steps: []StepStat{step(1, 0, nan, nan), step(2, 0, nan, nan)}},
		{Curve: Curve{Arm: ArmHint, Seed: 1, Points: pts(0.2, 0.4)},
			Steps: []StepStat{step(1, 2, 0.1, -0.3), step(2, 4, 0.3, nan), step(3, 6, nan, -0.1)}},
	}}
	ct := res.CurveTable()
	require.Contains(t, ct, "| arm \\ rollouts | 0 | 100 |")
	require.Contains(t, ct, "| outcome | 20.0% ± 0.0 | 40.0% ± 14.1 |")
	require.Contains(t, ct, "| hint | 20.0% ± 0.0 | 40.0% ± 0.0 |")
	cr := res.CreditTable()
	require.NotContains(t, cr, "| outcome |", "an arm without hints has no credit rows")
	require.Contains(t, cr, "| hint | 1–2 | 3.0 | 0.300 | 0.010 | 0.20 | +0.200 | -0.300 |")
	require.Contains(t, cr, "| hint | 3–3 | 6.0 | 0.600 | 0.010 | 0.20 | – | -0.100 |")
	require.Empty(t, Results{Runs: res.Runs[:2]}.CreditTable())
}

// TestDeltaSplitByVerdict: a failed call and an unrewarded answer are wrong actions,
// a call that worked is right, harness turns are neither.
func TestDeltaSplitByVerdict(t *testing.T) {
	tasks, err := toolworld.Tasks(toolworld.SplitTrain, 1)
	require.NoError(t, err)
	r := efficacytest.Played(t, tasks[0], "cst notes", "ls")
	var verdicts []int
	for k := range r.Segments {
		verdicts = append(verdicts, Verdict(r, k))
	}
	call := slicesIndex(r, rollout.KindToolCall)
	require.Equal(t, VerdictWrong, verdicts[call], "the misspelt tool failed")
	require.Equal(t, VerdictRight, verdicts[call+2], "ls worked")
	require.Equal(t, VerdictWrong, verdicts[len(r.Segments)-1], "answer 0 is not the answer")
	require.Equal(t, VerdictNone, verdicts[0], "the system prompt is no action")
	var d DeltaSplit
	d.Add(r, func(t int) (float64, bool) {
		for k, s := range r.Segments {
			if int32(t) >= s.Start && int32(t) < s.End {
				return float64(verdicts[k]), true // +1 on right tokens, −1 on wrong ones
			}
		}
		return 0, false
	})
	require.Positive(t, d.NRight)
	require.Positive(t, d.NWrong)
	require.InDelta(t, 1, d.Right(), 1e-12)
	require.InDelta(t, -1, d.Wrong(), 1e-12)
	require.InDelta(t, 1, d.AbsMean(), 1e-12)
	require.True(t, math.IsNaN(DeltaSplit{}.Right()))
}
