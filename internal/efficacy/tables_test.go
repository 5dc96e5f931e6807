package efficacy

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
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
