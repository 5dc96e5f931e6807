package efficacy

import (
	"encoding/json"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/data"
	"github.com/hindsight-ai/hindsight/data/safetensors"
	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/experiments/efficacy/efficacytest"
	"github.com/hindsight-ai/hindsight/rollout"
	"github.com/hindsight-ai/hindsight/toolworld"
	"github.com/hindsight-ai/hindsight/train"
)

// TestExperimentSmoke runs the real pipeline end to end at a toy size on the test
// backend (pure Go; $HINDSIGHT_TEST_BACKEND=xla-cpu for XLA): the SFT warm start on
// demonstrations, then per arm sampling, hints, training steps and held-out evals,
// and the results files. It checks the outputs' invariants, not the experiment's
// answer.
func TestExperimentSmoke(t *testing.T) {
	backend, dir, init := efficacytest.TinyModel(t, "init")
	world := World{MaxTokens: 256, MaxTurnTokens: 16, MaxCalls: 3}
	ws := WarmStartConfig{Init: init, Out: filepath.Join(dir, "warm"), Demos: 24, Noise: 0.5, HintRate: 1,
		DemoMaxTokens: 400, Batch: 8, Steps: 2, LR: 1e-3, EvalEvery: 2, ValTasks: 2, Target: 1, Seed: 1, World: world}
	var lines []string
	progress := func(s string) { lines = append(lines, s); t.Log(s) }
	wr, err := WarmStart(t.Context(), backend, ws, progress)
	require.NoError(t, err)
	require.Equal(t, 2, wr.Steps)
	require.Positive(t, wr.HintDemos, "some demonstrations hold a hint turn")
	require.LessOrEqual(t, wr.HintDemos, wr.Demos)
	require.FileExists(t, filepath.Join(ws.Out, safetensors.FileName))
	require.FileExists(t, filepath.Join(ws.Out, data.ConfigFileName))

	cfg := Config{Model: ws.Out, Arms: []string{ArmOutcome, ArmHint}, Seeds: []int64{1}, Steps: 2, TasksPerStep: 2,
		Group: 2, Temperature: 1, LR: 1e-3, EvalEvery: 1, EvalTasks: 2, EvalSplit: toolworld.SplitHeldout, World: world,
		Hints: Protocol2Hints}
	require.NoError(t, cfg.Validate())
	r := &Runner{Backend: backend, Config: cfg, Progress: progress}
	defer r.Close()
	saves := 0
	res, err := Experiment(t.Context(), r, func(res Results) error {
		saves++
		require.Equal(t, saves < 2, res.Partial)
		return res.Write(dir)
	})
	require.NoError(t, err)
	require.Equal(t, 2, saves, "results written after every run")
	require.Len(t, res.Runs, 2)
	for _, run := range res.Runs {
		c := run.Curve
		require.Len(t, c.Points, 3, "warm start and one eval per step")
		require.Equal(t, res.Runs[0].Curve.Points[0], c.Points[0], "every arm starts from the same warm start")
		for i, p := range c.Points {
			require.Equal(t, i*cfg.TasksPerStep*cfg.Group, p.Rollouts)
			require.GreaterOrEqual(t, p.Success, 0.0)
			require.LessOrEqual(t, p.Success, 1.0)
			if i > 0 {
				require.Greater(t, p.CPUSeconds, c.Points[i-1].CPUSeconds, "CPU time grows")
			}
		}
		require.Len(t, run.Steps, cfg.Steps)
		if c.Arm == ArmOutcome {
			require.Zero(t, run.Hints.Rollouts, "the outcome-only arm runs no teacher")
		} else {
			require.Equal(t, cfg.Steps*cfg.TasksPerStep*cfg.Group, run.Hints.Rollouts)
			require.Equal(t, run.Hints.Hints, sum(run.Steps, func(s StepStat) int { return s.Hints }))
			require.Positive(t, run.Hints.Hints, "an untrained policy's calls fail: the rules teacher has hints")
			h := run.Hints
			require.Equal(t, h.Selections, h.Hints+h.NoHint+h.AnswerLeaks+h.GuardLeaks+h.TooLong+h.NoRetry, "every selection is accounted for")
			require.Positive(t, res.Credit[ArmHint].DeltaAbs, "the hints move the teacher's log-probs")
		}
	}
	// Every arm trained on the tasks Config.Tasks gives its seed and step: the
	// fingerprints the runs recorded, not the function compared with itself.
	for _, run := range res.Runs {
		for _, st := range run.Steps {
			want, err := cfg.Tasks(run.Curve.Seed, st.Step)
			require.NoError(t, err)
			require.Equal(t, TasksFingerprint(want), st.Tasks, "%s seed %d step %d", run.Curve.Arm, run.Curve.Seed, st.Step)
			require.Equal(t, res.Runs[0].Steps[st.Step-1].Tasks, st.Tasks, "the same tasks as the first arm")
		}
	}
	other, err := cfg.Tasks(2, 1)
	require.NoError(t, err)
	require.NotEqual(t, res.Runs[0].Steps[0].Tasks, TasksFingerprint(other), "another seed's tasks differ: the check can fail")

	raw, err := os.ReadFile(filepath.Join(dir, "results.json"))
	require.NoError(t, err)
	var got map[string]any
	require.NoError(t, json.Unmarshal(raw, &got))
	require.Equal(t, []any{1.0}, got["seeds"])
	require.Contains(t, got, "ratio")
	require.Equal(t, false, got["partial"])
	f, err := os.Open(filepath.Join(dir, "efficacy.png"))
	require.NoError(t, err)
	defer f.Close()
	_, err = png.Decode(f)
	require.NoError(t, err)
	require.FileExists(t, filepath.Join(dir, "results.md"))
	require.FileExists(t, filepath.Join(dir, "efficacy_cpu.png"))
	back, err := ReadResults(filepath.Join(dir, "results.json"))
	require.NoError(t, err)
	require.Equal(t, res.Table(), back.Table(), "results.json holds everything the table is made of")
	require.NotEmpty(t, lines)
}

func sum(steps []StepStat, f func(StepStat) int) int {
	n := 0
	for _, s := range steps {
		n += f(s)
	}
	return n
}

func TestLeaksAnswer(t *testing.T) {
	task := toolworld.Task{Answer: "287", Files: map[string]string{"notes/owl.txt": "41", "logs/fox.txt": "12"},
		Solution: []string{"cat notes/owl.txt", "calc 41*7", "answer 287"}}
	for _, tc := range []struct {
		text string
		leak bool
	}{
		{"The `cat` call here fails: check its arguments.", false},
		{"The answer is 287.", true},
		{"Try 2870 instead.", false},
		{"Read notes/owl.txt first.", true},
		{"Read owl.txt first.", true},
		{"Read logs/fox.txt first.", false}, // a file the solution does not read
	} {
		require.Equal(t, tc.leak, LeaksAnswer(tc.text, task), tc.text)
	}
}

func TestCutAfterHidesTheFuture(t *testing.T) {
	tok := tokenizer.NewBytes()
	tasks, err := toolworld.Tasks(toolworld.SplitTrain, 1)
	require.NoError(t, err)
	env, err := toolworld.New(tasks[0], tok, toolworld.Options{MaxTokens: 400})
	require.NoError(t, err)
	_, err = toolworld.Play(env, &toolworld.Oracle{}, 10)
	require.NoError(t, err)
	r := env.Rollout("x")
	require.True(t, r.HasReward)
	for k, s := range r.Segments {
		if s.Kind.String() != "tool_call" {
			continue
		}
		c := cutAfter(r, k)
		require.False(t, c.HasReward, "the teacher never sees the reward")
		require.Equal(t, k+2, len(c.Segments), "the call and its own result, nothing later")
		require.Equal(t, int(c.Segments[k+1].End), len(c.Tokens))
	}
}

func TestDemoTrainsOnlyTheRightCalls(t *testing.T) {
	tok := tokenizer.NewBytes()
	tasks, err := toolworld.Tasks(toolworld.SplitTrain, 20)
	require.NoError(t, err)
	failed := 0
	for i, task := range tasks {
		env, err := toolworld.New(task, tok, toolworld.Options{MaxTokens: 448})
		require.NoError(t, err)
		_, err = toolworld.Play(env, toolworld.NewNoisy(0.5, uint64(i)), 16)
		require.NoError(t, err)
		r := env.Rollout("d")
		xr := maskMistakes(r, train.ToTrainer(r, nil, train.NewRule(SFTCredit(), tok)))
		for k, s := range r.Segments {
			bad := s.Kind == rollout.KindToolCall && r.Segments[k+1].Status == rollout.StatusError
			for p := s.Start; p < s.End; p++ {
				// Headers (the first token of a policy turn) and harness turns are
				// context; a right call's tokens are trained, a failed one's are not.
				want := s.Kind.IsPolicy() && p > s.Start && !bad
				require.Equal(t, want, xr.Trainable[p], "task %d segment %d (%s) token %d", i, k, s.Kind, p)
			}
			if bad {
				failed++
			}
		}
		require.True(t, math.IsNaN(float64(xr.Sampler[0])), "demonstrations have no sampler log-probs")
	}
	require.Positive(t, failed)
}
