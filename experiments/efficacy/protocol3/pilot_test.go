package protocol3

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/hindsight-ai/hindsight/experiments/efficacy"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/experiments/efficacy/efficacytest"
	"github.com/hindsight-ai/hindsight/toolworld"
)

// TestPilot runs G4 on a tiny untrained model at two rates for one step each: it
// evaluates on the whole validation split, keeps the rate with the larger gain, and
// WritePilot adds it to a gates file that ArmsReady then reads back.
func TestPilot(t *testing.T) {
	backend, dir, model := efficacytest.TinyModel(t, "model")
	cfg := Config()
	cfg.Model, cfg.Steps, cfg.TasksPerStep, cfg.Group, cfg.EvalEvery = model, 1, 1, 2, 1
	cfg.World = efficacy.World{MaxTokens: 96, MaxTurnTokens: 8, MaxCalls: 2}
	p, err := Pilot(t.Context(), backend, cfg, []float64{1e-3, 3e-3}, func(s string) { t.Log(s) })
	require.NoError(t, err)
	require.Len(t, p.Runs, 2)
	require.Equal(t, []float64{1e-3, 3e-3}, p.LRs)
	for i, run := range p.Runs {
		require.Equal(t, efficacy.ArmOutcome, run.Curve.Arm)
		require.EqualValues(t, 1, run.Curve.Seed)
		require.Equal(t, p.LRs[i], run.Curve.LR)
		pts := run.Curve.Points
		require.InDelta(t, pts[len(pts)-1].Success-pts[0].Success, p.Gains[i], 1e-12)
	}
	require.Equal(t, toolworld.SplitValidation, p.Config.EvalSplit)
	require.Equal(t, 200, p.Config.EvalTasks, "the whole validation split")
	best := 0
	if p.Gains[1] > p.Gains[0] {
		best = 1
	}
	require.Equal(t, p.LRs[best], p.LR)
	require.Equal(t, p.Gains[best], p.Gain)
	require.Equal(t, p.Gain >= PilotMinGain, p.Pass)

	gates := filepath.Join(dir, "results.json")
	require.NoError(t, os.WriteFile(gates, []byte(`{"g1_live_hints": {"pass": true}, "g2_probe": {"pass": true}, "g3_warm_start": {"pass": true}, "model": "kept"}`), 0o644))
	require.NoError(t, WritePilot(gates, p))
	g, back, err := ReadGates(gates)
	require.NoError(t, err)
	require.Equal(t, p.Pass, g["G4"].Pass)
	require.Equal(t, p.LR, back.LR)
	raw, err := os.ReadFile(gates)
	require.NoError(t, err)
	require.Contains(t, string(raw), `"model": "kept"`, "the gates file's other fields are kept")
	_, lr, err := ArmsReady(gates, model)
	if p.Pass {
		require.NoError(t, err)
		require.Equal(t, p.LR, lr)
	} else {
		require.ErrorIs(t, err, ErrGates)
		require.ErrorContains(t, err, "G4 (g4_outcome_pilot) failed")
	}
}
