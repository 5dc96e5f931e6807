package protocol3

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hindsight-ai/hindsight/experiments/efficacy"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/credit"
	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/rollout"
	"github.com/hindsight-ai/hindsight/teacher"
	"github.com/hindsight-ai/hindsight/toolworld"
	"github.com/hindsight-ai/hindsight/xla"
)

// TestArmsDifferOnlyInCredit builds every protocol-3 arm's trainer options as the
// runner does (Config.Spec, Config.TrainerOptions) and checks that they differ only in
// the credit and the teacher's weights, that the hinted arms share one credit config,
// and that outcome-only's differs from theirs only in the distillation term's λs.
func TestArmsDifferOnlyInCredit(t *testing.T) {
	cfg := Config()
	cfg.Model, cfg.LR = "warm", 1e-3
	require.NoError(t, cfg.Validate())
	require.Equal(t, efficacy.Arms3, cfg.Arms)
	require.Equal(t, 3072, cfg.Steps*cfg.TasksPerStep*cfg.Group, "48 steps of 8 tasks × G = 8")
	require.Equal(t, 1.0, cfg.Temperature)
	require.Equal(t, 12, cfg.EvalEvery)
	require.Equal(t, 250, cfg.EvalTasks)
	require.Equal(t, toolworld.SplitHeldout, cfg.EvalSplit)

	specs := map[string]efficacy.ArmSpec{}
	var ref xla.TrainerOptions
	for i, a := range cfg.Arms {
		s, err := cfg.Spec(a)
		require.NoError(t, err)
		specs[a] = s
		o := cfg.TrainerOptions(s, 7)
		require.Equal(t, s.Credit, o.Credit)
		require.Equal(t, s.Teacher, o.TeacherModel)
		o.Credit, o.TeacherModel = credit.Config{}, xla.TeacherModelConfig{}
		if i == 0 {
			ref = o
			continue
		}
		require.Equal(t, ref, o, "arm %s: only the credit and the teacher differ", a)
	}
	hint := specs[efficacy.ArmHint]
	require.Equal(t, credit.DistillFull, hint.Credit.Distill.Mode, "the byte tokenizer: full")
	require.Equal(t, credit.DivJSD, hint.Credit.Distill.Divergence)
	require.Equal(t, credit.NormalizeSeparate, hint.Credit.Normalize)
	require.Equal(t, xla.TeacherEMA, hint.Teacher.Mode)
	require.Equal(t, 0.05, hint.Teacher.EMARate)
	for _, a := range []string{efficacy.ArmSDPO, efficacy.ArmPlacebo} {
		require.Equal(t, hint.Credit, specs[a].Credit, a)
		require.Equal(t, hint.Teacher, specs[a].Teacher, a)
	}
	out := specs[efficacy.ArmOutcome]
	require.False(t, out.Hints())
	require.Zero(t, out.Credit.LambdaDistill)
	oc := out.Credit
	oc.LambdaHint, oc.LambdaDistill = hint.Credit.LambdaHint, hint.Credit.LambdaDistill
	require.Equal(t, hint.Credit, oc, "outcome-only's credit is the hinted arms' without the distillation term")
	require.Equal(t, efficacy.ContextSDPO, specs[efficacy.ArmSDPO].Context)
	require.Equal(t, efficacy.ContextWorld, hint.Context)
	require.Equal(t, efficacy.ContextPlacebo, specs[efficacy.ArmPlacebo].Context)

	cfg.Distill = DistillFor(151936)
	s, err := cfg.Spec(efficacy.ArmSDPO)
	require.NoError(t, err)
	require.Equal(t, credit.DistillTopK, s.Credit.Distill.Mode, "a large vocabulary: topk")
	require.Equal(t, 100, s.Credit.Distill.TopK)
	_, err = efficacy.ArmSpec3(efficacy.ArmHintOnly, credit.DistillFull)
	require.Error(t, err)
	cfg.Hints = efficacy.Protocol2Hints
	require.ErrorContains(t, cfg.Validate(), "hints.rules")
}

// TestArmsRefuse: the arms refuse, naming each gate that failed or was not measured,
// and write nothing; with every gate passed they still refuse a warm start the pilot
// did not run on.
func TestArmsRefuse(t *testing.T) {
	dir := t.TempDir()
	gates := filepath.Join(dir, "results.json")
	// As MeasureGates writes it (the committed protocol-3 gates, abridged).
	require.NoError(t, os.WriteFile(gates, []byte(`{
  "command": "go run ./bench/efficacy -gates",
  "g1_live_hints": {"measured": {"hint_next_right": 0.0687, "none_next_right": 0}, "pass": false, "threshold": "hint next right ≥ 0.60"},
  "g2_probe": {"measured": {"right": 7.1, "wrong": 2.48}, "pass": false, "threshold": "right ≥ +2, wrong ≤ −1"},
  "g3_warm_start": {"measured": {"greedy": 0.31}, "pass": true, "threshold": "greedy 0.30–0.45"}
}`), 0o644))
	model := filepath.Join(dir, "model")
	require.NoError(t, os.MkdirAll(model, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(model, "model.safetensors"), []byte("weights"), 0o644))
	out := filepath.Join(dir, "arms")
	cfg := Config()
	cfg.Model = model
	_, err := RunArms(t.Context(), nil, cfg, gates, out, "test", func(s string) { t.Log(s) })
	require.ErrorIs(t, err, ErrGates)
	msg := err.Error()
	t.Log(msg)
	require.Contains(t, msg, "G1 (g1_live_hints) failed")
	require.Contains(t, msg, `"hint_next_right":0.0687`)
	require.Contains(t, msg, "G2 (g2_probe) failed")
	require.NotContains(t, msg, "G3")
	require.Contains(t, msg, "G4 (g4_outcome_pilot) not measured: run -pilot")
	require.NoDirExists(t, out, "nothing written")

	// Every gate passes, G4 from a pilot on other weights.
	raw := `{"g1_live_hints": {"pass": true}, "g2_probe": {"pass": true}, "g3_warm_start": {"pass": true}}`
	require.NoError(t, os.WriteFile(gates, []byte(raw), 0o644))
	p := PilotResult{Model: model, ModelSHA256: strings.Repeat("0", 64), LRs: []float64{1e-3}, Gains: []float64{0.07}, LR: 1e-3, Gain: 0.07, Pass: true}
	require.NoError(t, WritePilot(gates, p))
	g, pilot, err := ReadGates(gates)
	require.NoError(t, err)
	require.True(t, g["G4"].Pass)
	require.InDelta(t, 1e-3, g["G4"].Measured["lr"], 1e-15)
	require.Equal(t, p.ModelSHA256, pilot.ModelSHA256)
	require.NoError(t, CheckGates(g))
	_, err = RunArms(t.Context(), nil, cfg, gates, out, "test", func(s string) { t.Log(s) })
	require.ErrorIs(t, err, ErrGates)
	require.ErrorContains(t, err, "the pilot ran on a warm start with weights 000000000000")
	require.NoDirExists(t, out)

	// The pilot on these weights: the arms may run, at the pilot's rate.
	p.ModelSHA256, err = ModelDigest(model)
	require.NoError(t, err)
	require.NoError(t, WritePilot(gates, p))
	_, lr, err := ArmsReady(gates, model)
	require.NoError(t, err)
	require.Equal(t, 1e-3, lr)

	// A pilot that gained too little fails G4.
	p.Gain, p.Pass = 0.03, false
	require.NoError(t, WritePilot(gates, p))
	_, _, err = ArmsReady(gates, model)
	require.ErrorContains(t, err, "G4 (g4_outcome_pilot) failed")
}

// stepOfSlips plays protocol 3's demonstration agent on n train tasks and returns the
// rollouts that hold a slip, their tasks and their world-rules hints.
func stepOfSlips(t *testing.T, h *efficacy.Hinter, n int) ([]*rollout.Rollout, []string, [][]teacher.Hint) {
	t.Helper()
	tok := tokenizer.NewBytes()
	tasks, err := toolworld.Tasks(toolworld.SplitTrain, n)
	require.NoError(t, err)
	var rolls []*rollout.Rollout
	var ids []string
	var hints [][]teacher.Hint
	var cnt DemoCounts
	for i, task := range tasks {
		r, _, err := playDemo(tok, task, DemoConfig{Slip: 0.5}, 512, 12, rand.New(rand.NewPCG(11, uint64(i))), &cnt)
		require.NoError(t, err)
		if r == nil {
			continue
		}
		hs, err := h.Hints(t.Context(), r, task)
		require.NoError(t, err)
		rolls, ids, hints = append(rolls, r), append(ids, task.ID), append(hints, hs)
	}
	return rolls, ids, hints
}

// TestPlacebo checks the placebo shuffle on real world-rules hints: every hint keeps
// its place and takes a text written for another task's rollout, the texts (and so
// their lengths) are the same multiset, the tokens are the template's, and a step
// whose hints all come from one task keeps none.
func TestPlacebo(t *testing.T) {
	h, err := efficacy.NewHinterWith(tokenizer.NewBytes(), Hints)
	require.NoError(t, err)
	rolls, ids, hints := stepOfSlips(t, h, 12)
	// The hint turn as the Hinter wraps it (NewHinterWith's inserter).
	in, err := teacher.NewInserter(efficacy.HintTemplate, tokenizer.NewBytes(), teacher.DefaultConfig().MaxHintTokens)
	require.NoError(t, err)
	var before []string
	byTask := map[string][]string{}
	for i, hs := range hints {
		for _, x := range hs {
			before = append(before, x.Text)
			byTask[ids[i]] = append(byTask[ids[i]], x.Text)
		}
	}
	require.GreaterOrEqual(t, len(byTask), 4, "hints from several tasks")
	out := h.Placebo(hints, ids, rand.New(rand.NewPCG(1, 2)))
	require.Len(t, out, len(hints))
	require.Zero(t, h.Stats.PlaceboSameTask, "no task holds half of the hints")
	var after []string
	moved := 0
	for i, hs := range out {
		require.Len(t, hs, len(hints[i]), "rollout %s keeps its number of hints", rolls[i].ID)
		for k, x := range hs {
			orig := hints[i][k]
			require.Equal(t, orig.Selection, x.Selection, "the same place")
			require.Equal(t, orig.Empty, x.Empty)
			require.Equal(t, "placebo", x.Source)
			var others []string
			for task, ts := range byTask {
				if task != ids[i] {
					others = append(others, ts...)
				}
			}
			require.Contains(t, others, x.Text, "a text written for another task")
			want, err := in.Wrap(x.Text)
			require.NoError(t, err)
			require.Equal(t, want, x.Tokens)
			require.NotEqual(t, orig.Tokens, x.Tokens)
			after = append(after, x.Text)
			moved++
		}
	}
	slices.Sort(before)
	slices.Sort(after)
	require.Equal(t, before, after, "the same texts, so the same count and lengths")
	require.Equal(t, moved, h.Stats.Placebo)
	require.NotEqual(t, "placebo", hints[0][0].Source, "the inputs are left as they were")

	same := make([]string, len(ids))
	for i := range same {
		same[i] = "one-task"
	}
	out = h.Placebo(hints, same, rand.New(rand.NewPCG(1, 2)))
	for _, hs := range out {
		require.Empty(t, hs, "no other task's text to give")
	}
	require.Equal(t, len(before), h.Stats.PlaceboSameTask)
}
