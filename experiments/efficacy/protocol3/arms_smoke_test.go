package protocol3

import (
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hindsight-ai/hindsight/experiments/efficacy"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/experiments/efficacy/efficacytest"
	"github.com/hindsight-ai/hindsight/toolworld"
)

// TestArmsSmoke runs protocol 3's four arms for two steps each on a tiny untrained
// model (pure Go backend; $HINDSIGHT_TEST_BACKEND=xla-cpu for XLA) through runArms,
// the arms' command after its gate check — the test-only path around the check, since
// no gate was measured on this model — and checks the runs' invariants and that
// results.json, the plot and the table agree. It checks the plumbing, not the answer.
// It runs seed 101, not one of the registered 1–3: any seed list runs (-seed-list), and
// the train tasks are the seed's own.
func TestArmsSmoke(t *testing.T) {
	backend, dir, model := efficacytest.TinyModel(t, "model")

	cfg := Config()
	cfg.Model, cfg.LR = model, 1e-3
	cfg.Seeds, cfg.Steps, cfg.TasksPerStep, cfg.Group, cfg.EvalEvery, cfg.EvalTasks = []int64{101}, 2, 2, 2, 1, 2
	cfg.World = efficacy.World{MaxTokens: 192, MaxTurnTokens: 16, MaxCalls: 3}
	gates := GateSet{"G1": {Pass: false, Threshold: "not measured on this model"}}
	out := filepath.Join(dir, "arms")
	var lines []string
	res, err := runArms(t.Context(), backend, cfg, gates, true, out, "test", func(s string) { lines = append(lines, s); t.Log(s) })
	require.NoError(t, err)
	require.False(t, res.Partial)
	require.True(t, res.GatesBypassed)
	require.Len(t, res.Runs, len(efficacy.Arms3))

	first := res.Runs[0]
	for i, run := range res.Runs {
		c := run.Curve
		require.Equal(t, efficacy.Arms3[i], c.Arm, "seed-major, the arms in order")
		require.Len(t, c.Points, 3, "the warm start and one eval per step")
		require.Equal(t, first.Curve.Points[0], c.Points[0], "every arm starts from the same warm start")
		require.Len(t, run.Steps, cfg.Steps)
		for k, st := range run.Steps {
			// Tasks compared across arms: what each arm recorded, not Config.Tasks with itself.
			require.Equal(t, first.Steps[k].Tasks, st.Tasks, "%s step %d: the outcome arm's tasks", c.Arm, st.Step)
			want, err := cfg.Tasks(c.Seed, st.Step)
			require.NoError(t, err)
			require.Equal(t, efficacy.TasksFingerprint(want), st.Tasks)
		}
		switch c.Arm {
		case efficacy.ArmOutcome:
			require.Zero(t, run.Hints.Rollouts, "outcome-only runs no teacher")
			for _, st := range run.Steps {
				require.Zero(t, st.Hints)
				require.Zero(t, st.DistillTokens)
			}
		case efficacy.ArmSDPO:
			require.Equal(t, cfg.Steps*cfg.TasksPerStep*cfg.Group, run.Hints.Rollouts, "the daemon's teacher saw every rollout")
			require.Equal(t, run.Hints.Hints, stepHints(run.Steps))
		case efficacy.ArmHint, efficacy.ArmPlacebo:
			require.Equal(t, cfg.Steps*cfg.TasksPerStep*cfg.Group, run.Hints.Rollouts)
			trained := run.Hints.Hints - run.Hints.PlaceboSameTask
			require.Equal(t, trained, stepHints(run.Steps))
			require.Positive(t, run.Hints.Hints, "an untrained policy slips: the world rules have hints")
		}
		for _, st := range run.Steps {
			if st.Hints > 0 {
				require.Positive(t, st.DistillTokens, "%s step %d: hinted tokens train the distillation term", c.Arm, st.Step)
			}
		}
	}
	other, err := cfg.Tasks(1, 1)
	require.NoError(t, err)
	require.NotEqual(t, first.Steps[0].Tasks, efficacy.TasksFingerprint(other), "another seed's tasks differ: the check can fail")

	raw, err := os.ReadFile(filepath.Join(out, "results.json"))
	require.NoError(t, err)
	var got map[string]any
	require.NoError(t, json.Unmarshal(raw, &got))
	require.Equal(t, []any{101.0}, got["seeds"])
	require.Equal(t, true, got["gates_bypassed"])
	require.Contains(t, got["gates"], "G1")
	ratio, ok := got["ratio"].(map[string]any)
	require.True(t, ok, "ratio per arm")
	for _, a := range []string{efficacy.ArmSDPO, efficacy.ArmHint, efficacy.ArmPlacebo} {
		require.Contains(t, ratio, a)
	}
	require.NotContains(t, ratio, efficacy.ArmOutcome)
	back, err := ReadResults(filepath.Join(out, "results.json"))
	require.NoError(t, err)
	require.Equal(t, res.Table(), back.Table(), "results.json holds everything the table is made of")
	md, err := os.ReadFile(filepath.Join(out, "results.md"))
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(md), res.Table()), "results.md opens with the table")
	require.Contains(t, string(md), "(**bypassed**")
	for _, a := range efficacy.Arms3 {
		require.Contains(t, string(md), "| "+a+" |")
	}
	for _, name := range []string{"efficacy.png", "efficacy_cpu.png"} {
		f, err := os.Open(filepath.Join(out, name))
		require.NoError(t, err)
		_, err = png.Decode(f)
		f.Close()
		require.NoError(t, err, name)
	}
	require.Equal(t, toolworld.SplitHeldout, back.Config.EvalSplit)
	require.Equal(t, 3, back.Config.Protocol)
}

// stepHints is the hints the steps trained on, summed over steps.
func stepHints(steps []efficacy.StepStat) int {
	n := 0
	for _, s := range steps {
		n += s.Hints
	}
	return n
}
