package efficacy

import (
	"bytes"
	"context"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gomlx/gomlx/backends"

	"github.com/hindsight-ai/hindsight/collect"
	"github.com/hindsight-ai/hindsight/credit"
	"github.com/hindsight-ai/hindsight/data"
	"github.com/hindsight-ai/hindsight/data/checkpoint"
	"github.com/hindsight-ai/hindsight/rollout"
	"github.com/hindsight-ai/hindsight/toolworld"
	"github.com/hindsight-ai/hindsight/train"
	"github.com/hindsight-ai/hindsight/xla"
)

// Config is the experiment: what every arm shares.
type Config struct {
	Model string   `json:"-"` // the warm start's model directory
	Arms  []string `json:"arms"`
	Seeds []int64  `json:"seeds"`
	// Steps optimizer steps per run, each on TasksPerStep train tasks × Group rollouts.
	Steps        int     `json:"steps"`
	TasksPerStep int     `json:"tasks_per_step"`
	Group        int     `json:"group"`
	Temperature  float64 `json:"temperature"`
	LR           float64 `json:"lr"`
	// EvalEvery steps, greedy success on the first EvalTasks tasks of EvalSplit.
	EvalEvery int    `json:"eval_every"`
	EvalTasks int    `json:"eval_tasks"`
	EvalSplit string `json:"eval_split"`
	World     World  `json:"world"`
	// Hints is the hint stage of the hint arms (protocol 1: Protocol1Hints).
	Hints HintSetup `json:"hints"`
	// Protocol 3 runs protocol 3's arms (ArmSpec3, protocol3.Config); 0 protocol 1
	// and 2's (SpecOf).
	Protocol int `json:"protocol,omitempty"`
	// Distill is protocol 3's distillation mode, full or topk (protocol3.DistillFor).
	Distill credit.DistillMode `json:"distill,omitempty"`
}

// DefaultConfig returns the settings of protocol 2 (bench/efficacy/protocol2): 24
// steps of 16 tasks × 4 rollouts, an eval every 8 steps, Protocol2Hints. Protocol 1
// (bench/efficacy) was 8 steps, an eval every 4, Protocol1Hints.
func DefaultConfig() Config {
	return Config{Arms: []string{ArmOutcome, ArmHint}, Seeds: []int64{1, 2, 3}, Steps: 24, TasksPerStep: 16, Group: 4,
		Temperature: 0.7, LR: 1e-4, EvalEvery: 8, EvalTasks: 250, EvalSplit: toolworld.SplitHeldout, World: DefaultWorld(),
		Hints: Protocol2Hints}
}

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case len(c.Arms) == 0:
		return fmt.Errorf("arms: none")
	case len(c.Seeds) == 0:
		return fmt.Errorf("seeds: none")
	case c.Steps < 1 || c.TasksPerStep < 1 || c.Group < 2:
		return fmt.Errorf("steps %d, tasks_per_step %d, group %d: want ≥ 1, ≥ 1, ≥ 2", c.Steps, c.TasksPerStep, c.Group)
	case c.EvalEvery < 1 || c.EvalTasks < 1:
		return fmt.Errorf("eval_every %d, eval_tasks %d: want ≥ 1", c.EvalEvery, c.EvalTasks)
	case !(c.LR > 0):
		return fmt.Errorf("lr: %g, want > 0", c.LR)
	}
	if err := c.Hints.Validate(); err != nil {
		return err
	}
	if c.Protocol == 3 && c.Hints.Rules != RulesWorld3 {
		return fmt.Errorf("hints.rules: %q, protocol 3's hint arms use %s", c.Hints.Rules, RulesWorld3)
	}
	for _, a := range c.Arms {
		if _, err := c.Spec(a); err != nil {
			return err
		}
	}
	return nil
}

// StepStat is one optimizer step's credit statistics.
type StepStat struct {
	Step int `json:"step"`
	// Tasks fingerprints the train tasks the step sampled (TasksFingerprint): equal
	// across arms of a seed, so a test can tell that the arms saw the same tasks.
	Tasks    string  `json:"tasks,omitempty"`
	Success  float64 `json:"train_success"` // share of the step's rollouts with reward 1
	Loss     float64 `json:"loss"`
	Hints    int     `json:"hints"`
	DeltaAbs float64 `json:"delta_abs_mean"` // mean |Δ| over hint tokens, nats
	ClipFrac float64 `json:"clip_fraction"`
	Pivot    float64 `json:"pivot_share"` // share of Σ|Δ| held by the top 1% of hint tokens
	// DeltaFailed and DeltaOther are the mean signed Δ over hint tokens of failed tool
	// calls and of other policy segments: a hint the policy follows should make a
	// failed call less likely (negative).
	DeltaFailed float64 `json:"delta_failed_call"`
	DeltaOther  float64 `json:"delta_other"`
	// DeltaRight and DeltaWrong are the mean signed Δ over hint tokens of right
	// actions (a call that succeeded, the answer of a rewarded rollout) and of wrong
	// ones (a failed call, the answer of an unrewarded rollout): a useful hint raises
	// the first and lowers the second.
	DeltaRight float64 `json:"delta_right"`
	DeltaWrong float64 `json:"delta_wrong"`
	AOutAbs    float64 `json:"a_out_abs_mean"`
	AHintAbs   float64 `json:"a_hint_abs_mean"`
	// LossOut and LossDistill are the step's two loss terms (xla.Metrics.Terms) and
	// DistillTokens the trainable tokens inside a teacher span (credit.Stats).
	LossOut       float64 `json:"loss_out"`
	LossDistill   float64 `json:"loss_distill"`
	DistillTokens int     `json:"distill_tokens"`
}

// Run is one arm with one seed.
type Run struct {
	Curve       Curve      `json:"curve"`
	WallSeconds float64    `json:"wall_seconds"`
	CPUSeconds  float64    `json:"cpu_seconds"` // training (sampling, hints, steps), evals excluded
	EvalCPU     float64    `json:"eval_cpu_seconds"`
	Steps       []StepStat `json:"steps"`
	Hints       HintStats  `json:"hints"`
}

// Runner runs arms from the warm start on one backend. It compiles once: one policy
// (weights and sampler) serves every run, with one trainer per arm and learning rate,
// and every run starts by restoring the reset checkpoint (the warm start's weights,
// zero optimizer moments, step 0) into its trainer.
type Runner struct {
	Backend  backends.Backend
	Config   Config
	Progress func(string)
	warm     map[string]float64 // the warm start's eval success per split, shared by every run
	policy   *Policy
	trainers map[string]*xla.Trainer
	reset    string // the reset checkpoint's directory
}

// Close removes the reset checkpoint.
func (r *Runner) Close() error {
	if r.reset == "" {
		return nil
	}
	return os.RemoveAll(filepath.Dir(r.reset))
}

// trainer returns the arm's trainer at the config's learning rate, restored to the
// warm start (an EMA or frozen teacher too).
func (r *Runner) trainer(spec ArmSpec, seed int64) (*xla.Trainer, error) {
	c := r.Config
	if r.policy == nil {
		p, err := OpenPolicy(r.Backend, c.Model)
		if err != nil {
			return nil, err
		}
		r.policy, r.trainers = p, map[string]*xla.Trainer{}
	}
	key := fmt.Sprintf("%s@%g", spec.Name, c.LR)
	tr := r.trainers[key]
	if tr == nil {
		var err error
		if tr, err = xla.NewTrainer(r.Backend, r.policy.Model, r.Config.TrainerOptions(spec, seed)); err != nil {
			return nil, fmt.Errorf("trainer of %s: %w", key, err)
		}
		r.trainers[key] = tr
		if r.reset == "" { // the first trainer, before any step: the warm start itself
			if r.reset, err = saveReset(tr, c.Model); err != nil {
				return nil, err
			}
		}
	}
	if _, err := tr.Restore(r.reset); err != nil {
		return nil, fmt.Errorf("trainer of %s: %w", key, err)
	}
	return tr, nil
}

// saveReset writes the trainer's state as a checkpoint whose model file is bf16, so
// that it carries f32 master weights that Trainer.Restore loads into the weights.
func saveReset(tr *xla.Trainer, model string) (string, error) {
	files, err := checkpoint.ModelFiles(model)
	if err != nil {
		return "", err
	}
	cfg := bytes.Replace(files[data.ConfigFileName], []byte(`"torch_dtype": "float32"`), []byte(`"torch_dtype": "bfloat16"`), 1)
	if bytes.Equal(cfg, files[data.ConfigFileName]) {
		return "", fmt.Errorf("reset checkpoint: %s/config.json is not float32", model)
	}
	files[data.ConfigFileName] = cfg
	root, err := os.MkdirTemp("", "efficacy-reset-")
	if err != nil {
		return "", err
	}
	dir, err := tr.SaveCheckpoint(root, files, checkpoint.TrainerState{}, 1)
	if err != nil {
		return "", fmt.Errorf("reset checkpoint: %w", err)
	}
	return dir, nil
}

// TrainerOptions are the trainer options of arm spec with seed: the learning rate,
// AdamW (2 warm-up steps) and seed are the config's, the same for every arm; the
// credit and the teacher's weights are the arm's.
func (c Config) TrainerOptions(spec ArmSpec, seed int64) xla.TrainerOptions {
	opt := xla.DefaultAdamW()
	opt.LR, opt.WarmupSteps = c.LR, 2
	return xla.TrainerOptions{Credit: spec.Credit, TeacherModel: spec.Teacher, Optimizer: opt, Seed: uint64(seed)}
}

// Tasks returns the train tasks of step (1-based) for seed: the same for every arm.
func (c Config) Tasks(seed int64, step int) ([]toolworld.Task, error) {
	rng := rand.New(rand.NewPCG(uint64(seed), uint64(step)))
	out := make([]toolworld.Task, c.TasksPerStep)
	for i := range out {
		t, err := toolworld.Generate(toolworld.SplitTrain, rng.IntN(1<<20))
		if err != nil {
			return nil, err
		}
		out[i] = t
	}
	return out, nil
}

func (r *Runner) eval(ctx context.Context, p *Policy) (float64, error) {
	tasks, err := toolworld.Tasks(r.Config.EvalSplit, r.Config.EvalTasks)
	if err != nil {
		return 0, err
	}
	st, err := Evaluate(ctx, p, tasks, r.Config.World)
	return st.Success, err
}

// Run trains one arm with one seed from the warm start and returns its curve: the
// greedy eval success after every EvalEvery steps against rollouts consumed and
// training CPU-seconds.
func (r *Runner) Run(ctx context.Context, arm string, seed int64) (Run, error) {
	c := r.Config
	spec, err := c.Spec(arm)
	if err != nil {
		return Run{}, err
	}
	if spec.Context == ContextRules {
		spec.Credit.Base = c.Hints.Base
	}
	t0 := time.Now()
	tr, err := r.trainer(spec, seed)
	if err != nil {
		return Run{}, fmt.Errorf("run %s seed %d: %w", arm, seed, err)
	}
	p := r.policy
	run := Run{Curve: Curve{Arm: arm, Seed: seed, LR: c.LR}}
	warm, ok := r.warm[c.EvalSplit]
	if !ok {
		e0 := CPUTime()
		if warm, err = r.eval(ctx, p); err != nil {
			return Run{}, err
		}
		if r.warm == nil {
			r.warm = map[string]float64{}
		}
		r.warm[c.EvalSplit] = warm
		r.Progress(fmt.Sprintf("warm start: %s success %.1f%% (%d tasks, cpu %.0fs)", c.EvalSplit, 100*warm, c.EvalTasks, (CPUTime() - e0).Seconds()))
	}
	run.Curve.Points = append(run.Curve.Points, Point{Success: warm})
	h, err := newArmTeacher(p.Tok, spec, c.Hints)
	if err != nil {
		return Run{}, err
	}
	var cpu time.Duration
	for step := 1; step <= c.Steps; step++ {
		c0 := CPUTime()
		st, err := r.step(ctx, tr, p, h, spec, seed, step)
		if err != nil {
			return Run{}, fmt.Errorf("run %s seed %d: step %d: %w", arm, seed, step, err)
		}
		cpu += CPUTime() - c0
		run.Steps = append(run.Steps, st)
		if step%c.EvalEvery != 0 && step != c.Steps {
			continue
		}
		e0 := CPUTime()
		s, err := r.eval(ctx, p)
		if err != nil {
			return Run{}, fmt.Errorf("run %s seed %d: %w", arm, seed, err)
		}
		run.EvalCPU += (CPUTime() - e0).Seconds()
		pt := Point{Rollouts: step * c.TasksPerStep * c.Group, CPUSeconds: cpu.Seconds(), Success: s}
		run.Curve.Points = append(run.Curve.Points, pt)
		r.Progress(fmt.Sprintf("%s seed %d: step %d/%d rollouts %d success %.1f%% (train %.1f%%, hints %d, |Δ| %.3f, clip %.3f) cpu %.0fs wall %.0fs",
			arm, seed, step, c.Steps, pt.Rollouts, 100*s, 100*st.Success, h.stats().Hints, st.DeltaAbs, st.ClipFrac, cpu.Seconds(), time.Since(t0).Seconds()))
	}
	run.CPUSeconds, run.WallSeconds, run.Hints = cpu.Seconds(), time.Since(t0).Seconds(), h.stats()
	return run, nil
}

// step samples the step's rollouts with the policy, gives them the arm's teacher
// contexts, and applies one optimizer step.
func (r *Runner) step(ctx context.Context, tr *xla.Trainer, p *Policy, h *armTeacher, spec ArmSpec, seed int64, step int) (StepStat, error) {
	c := r.Config
	tasks, err := c.Tasks(seed, step)
	if err != nil {
		return StepStat{}, err
	}
	envs, err := collect.Episodes(ctx, p.Sampler, p.Tok, tasks, c.World.Episodes(c.Group, c.Temperature, SampleSeed(seed, step)))
	if err != nil {
		return StepStat{}, err
	}
	st := StepStat{Step: step, Success: collect.Summarize(envs).Success, Tasks: TasksFingerprint(tasks)}
	rolls := make([]*rollout.Rollout, len(envs))
	rtasks := make([]toolworld.Task, len(envs))
	for i, e := range envs {
		rolls[i], rtasks[i] = e.Rollout(fmt.Sprintf("s%d-%04d-%03d", seed, step, i)), e.Task()
		rolls[i].PolicyVersion = tr.StepCount()
	}
	hints, err := h.step(ctx, rolls, rtasks, rand.New(rand.NewPCG(uint64(seed), SampleSeed(seed, step))))
	if err != nil {
		return StepStat{}, err
	}
	batch := make([]credit.Sequence, len(envs))
	for i, ro := range rolls {
		st.Hints += len(hints[i])
		batch[i] = train.ToTrainer(ro, hints[i], train.NewRule(spec.Credit, p.Tok))
	}
	met, err := tr.Step(ctx, batch)
	if err != nil {
		return StepStat{}, err
	}
	st.LossOut, st.LossDistill, st.DistillTokens = met.Terms.Out, met.Terms.Distill, met.Credit.DistillTokens
	st.Loss, st.DeltaAbs, st.ClipFrac, st.Pivot = met.Loss, met.Credit.DeltaAbsMean, met.Credit.ClipFraction, met.Credit.TopShare
	st.AOutAbs, st.AHintAbs = met.Credit.AOutAbsMean, met.Credit.AHintAbsMean
	st.DeltaFailed, st.DeltaOther = signedDeltas(rolls, met)
	st.DeltaRight, st.DeltaWrong = rightWrongDeltas(rolls, met)
	return st, nil
}

// signedDeltas returns the mean Δ over hinted trainable tokens of failed tool calls
// and of other policy segments (NaN where there are none).
func signedDeltas(rolls []*rollout.Rollout, met xla.Metrics) (failed, other float64) {
	var sf, so float64
	var nf, no int
	for i, ro := range rolls {
		if i >= len(met.Results) {
			break
		}
		d := met.Results[i].Delta
		for k, s := range ro.Segments {
			bad := s.Kind == rollout.KindToolCall && k+1 < len(ro.Segments) && ro.Segments[k+1].Status == rollout.StatusError
			for t := int(s.Start); t < int(s.End) && t < len(d); t++ {
				if math.IsNaN(d[t]) || !met.Inputs[i].Trainable[t] {
					continue
				}
				if bad {
					sf, nf = sf+d[t], nf+1
				} else {
					so, no = so+d[t], no+1
				}
			}
		}
	}
	failed, other = math.NaN(), math.NaN()
	if nf > 0 {
		failed = sf / float64(nf)
	}
	if no > 0 {
		other = so / float64(no)
	}
	return failed, other
}

// TasksFingerprint is a short hash of the tasks' IDs in order.
func TasksFingerprint(tasks []toolworld.Task) string {
	h := fnv.New64a()
	for _, t := range tasks {
		fmt.Fprintf(h, "%s\n", t.ID)
	}
	return fmt.Sprintf("%016x", h.Sum64())
}

// SampleSeed is the sampling seed of one step: the same for every arm.
func SampleSeed(seed int64, step int) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "efficacy/%d/%d", seed, step)
	return h.Sum64()
}

// Verdicts of an action segment (Verdict).
const (
	VerdictNone  = 0  // not an action: harness text
	VerdictRight = 1  // a call that succeeded, the answer of a rewarded rollout
	VerdictWrong = -1 // a failed call, the answer of an unrewarded rollout
)

// Verdict says whether policy segment k of ro was a right or a wrong action, from
// what the episode recorded (a tool result's status, the reward): for measuring Δ
// only, never shown to the teacher.
func Verdict(ro *rollout.Rollout, k int) int {
	s := ro.Segments[k]
	switch s.Kind {
	case rollout.KindToolCall:
		if k+1 < len(ro.Segments) && ro.Segments[k+1].Kind == rollout.KindToolResult && ro.Segments[k+1].Status == rollout.StatusError {
			return VerdictWrong
		}
		return VerdictRight
	case rollout.KindAssistant:
		if ro.HasReward && ro.Reward > 0 {
			return VerdictRight
		}
		return VerdictWrong
	}
	return VerdictNone
}

// rightWrongDeltas returns the mean Δ over hinted trainable tokens of right and of
// wrong actions (Verdict; NaN where there are none).
func rightWrongDeltas(rolls []*rollout.Rollout, met xla.Metrics) (right, wrong float64) {
	var acc DeltaSplit
	for i, ro := range rolls {
		if i >= len(met.Results) {
			break
		}
		d := met.Results[i].Delta
		acc.Add(ro, func(t int) (float64, bool) {
			if t >= len(d) || math.IsNaN(d[t]) || !met.Inputs[i].Trainable[t] {
				return 0, false
			}
			return d[t], true
		})
	}
	return acc.Right(), acc.Wrong()
}

// DeltaSplit accumulates signed Δ by the Verdict of the segment holding each token.
type DeltaSplit struct {
	SumRight, SumWrong float64
	NRight, NWrong     int
	// AbsRight and AbsWrong sum |Δ|: how much of the signal is about right vs wrong
	// (|mean Δ|) and how much varies token by token within a class.
	AbsRight, AbsWrong float64
}

// Add adds ro's tokens for which delta returns a value.
func (a *DeltaSplit) Add(ro *rollout.Rollout, delta func(t int) (float64, bool)) {
	for k, s := range ro.Segments {
		v := Verdict(ro, k)
		if v == VerdictNone {
			continue
		}
		for t := int(s.Start); t < int(s.End); t++ {
			d, ok := delta(t)
			if !ok {
				continue
			}
			if v == VerdictRight {
				a.SumRight, a.NRight, a.AbsRight = a.SumRight+d, a.NRight+1, a.AbsRight+math.Abs(d)
			} else {
				a.SumWrong, a.NWrong, a.AbsWrong = a.SumWrong+d, a.NWrong+1, a.AbsWrong+math.Abs(d)
			}
		}
	}
}

// AbsMean is the mean |Δ| over both classes (NaN when empty).
func (a DeltaSplit) AbsMean() float64 {
	return meanOr(a.AbsRight+a.AbsWrong, a.NRight+a.NWrong)
}

// Right and Wrong are the means (NaN when empty).
func (a DeltaSplit) Right() float64 { return meanOr(a.SumRight, a.NRight) }
func (a DeltaSplit) Wrong() float64 { return meanOr(a.SumWrong, a.NWrong) }

func meanOr(sum float64, n int) float64 {
	if n == 0 {
		return math.NaN()
	}
	return sum / float64(n)
}

// ParseSeeds reads a comma-separated seed list ("101,102,103"). A run's train tasks
// and sampling are functions of its seed (Config.Tasks, SampleSeed), so seeds no one
// has looked at re-run the arms on tasks and samples no one has seen, for comparison
// with the registered seeds 1–3. Empty fields, non-integers and repeated seeds are
// errors.
func ParseSeeds(s string) ([]int64, error) {
	var out []int64
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("seed %q: not an integer", f)
		}
		if slices.Contains(out, v) {
			return nil, fmt.Errorf("seed %d: repeated", v)
		}
		out = append(out, v)
	}
	return out, nil
}
