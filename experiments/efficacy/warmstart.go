package efficacy

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/gomlx/gomlx/backends"

	"github.com/hindsight-ai/hindsight/credit"
	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/rollout"
	"github.com/hindsight-ai/hindsight/toolworld"
	"github.com/hindsight-ai/hindsight/train"
	"github.com/hindsight-ai/hindsight/xla"
)

// WarmStartConfig configures the supervised warm start: demonstrations of noisy
// scripted agents on the train split, some with a hint turn from the rules teacher
// between a failed call and the corrected one, trained with advantage 1 on their
// policy tokens (credit baseline none, λ_hint = 0, no sampler: SFT).
type WarmStartConfig struct {
	Init string `json:"init"` // the freshly initialised model directory
	Out  string `json:"out"`  // where the warm start is written
	// Demos is the number of demonstrations (train tasks 0..Demos-1, one each).
	Demos int `json:"demos"`
	// Noise is the noisy agent's mistake probability per call; HintRate the share of
	// failed calls followed by a hint turn.
	Noise    float64 `json:"noise"`
	HintRate float64 `json:"hint_rate"`
	// DemoMaxTokens caps a demonstration (a hint turn needs room: the rules' hints are
	// ~100 byte tokens).
	DemoMaxTokens int     `json:"demo_max_tokens"`
	Batch         int     `json:"batch"` // demonstrations per step
	Steps         int     `json:"steps"` // the most steps
	LR            float64 `json:"lr"`
	// EvalEvery steps the greedy success on ValTasks validation tasks is measured;
	// training stops once it reaches Target.
	EvalEvery int     `json:"eval_every"`
	ValTasks  int     `json:"val_tasks"`
	Target    float64 `json:"target"`
	Seed      uint64  `json:"seed"`
	World     World   `json:"world"`
}

// DefaultWarmStart returns the committed warm start's settings.
func DefaultWarmStart() WarmStartConfig {
	return WarmStartConfig{Demos: 4000, Noise: 0.25, HintRate: 0.5, DemoMaxTokens: 448, Batch: 32, Steps: 1500,
		LR: 3e-3, EvalEvery: 100, ValTasks: 100, Target: 0.3, Seed: 1, World: DefaultWorld()}
}

// WarmStartResult is what the warm start reached.
type WarmStartResult struct {
	Config     WarmStartConfig `json:"config"`
	Steps      int             `json:"steps"`
	Demos      int             `json:"demos"`
	HintDemos  int             `json:"hint_demos"` // demonstrations holding a hint turn
	HintTurns  int             `json:"hint_turns"`
	Validation float64         `json:"validation_success"`
	Heldout    float64         `json:"heldout_success"`
	CPUSeconds float64         `json:"cpu_seconds"`
	WallSecs   float64         `json:"wall_seconds"`
	Hints      HintStats       `json:"hints"`
}

// demoAgent is a noisy scripted agent that, after a failed call, asks the rules
// teacher (through the experiment's hint stage, on the episode so far) for a hint
// with probability rate: demonstrations of reading a hint, then acting right.
type demoAgent struct {
	*toolworld.Noisy
	h     *Hinter
	rate  float64
	rng   *rand.Rand
	hints int
}

// Hint implements toolworld.Hinter: the hint for the last failed call, or "".
func (a *demoAgent) Hint(env *toolworld.Env) string {
	if a.rng.Float64() >= a.rate {
		return ""
	}
	r := env.Rollout("demo")
	hs, err := a.h.Hints(context.Background(), r, env.Task())
	if err != nil || len(hs) == 0 {
		return ""
	}
	last := hs[len(hs)-1]
	if last.Segment != len(r.Segments)-2 { // the call before the pending turn's result
		return ""
	}
	a.hints++
	return last.Text
}

// Demos plays n demonstrations of the train split with noisy agents and returns
// them as trainer rollouts (reward 1, SFT) with the number that hold a hint turn.
func Demos(tok tokenizer.Tokenizer, cfg WarmStartConfig) ([]credit.Sequence, int, int, HintStats, error) {
	h, err := NewHinter(tok)
	if err != nil {
		return nil, 0, 0, HintStats{}, err
	}
	rule := train.NewRule(SFTCredit(), tok) // policy turns past their role header are the targets
	tasks, err := toolworld.Tasks(toolworld.SplitTrain, cfg.Demos)
	if err != nil {
		return nil, 0, 0, HintStats{}, err
	}
	var out []credit.Sequence
	hintDemos, hintTurns := 0, 0
	for i, t := range tasks {
		env, err := toolworld.New(t, tok, toolworld.Options{MaxTokens: cfg.DemoMaxTokens, MaxCalls: cfg.World.MaxCalls + 3})
		if err != nil {
			return nil, 0, 0, HintStats{}, err
		}
		a := &demoAgent{Noisy: toolworld.NewNoisy(cfg.Noise, cfg.Seed<<32|uint64(i)), h: h, rate: cfg.HintRate,
			rng: rand.New(rand.NewPCG(cfg.Seed, uint64(i)))}
		rew, err := toolworld.Play(env, a, 16)
		if err != nil {
			return nil, 0, 0, HintStats{}, fmt.Errorf("demo %s: %w", t.ID, err)
		}
		if rew != 1 {
			continue // cut short: not a demonstration of success
		}
		r := env.Rollout(fmt.Sprintf("demo-%05d", i))
		if a.hints > 0 && hasHintTurn(r) {
			hintDemos++
			hintTurns += a.hints
		}
		r.Reward, r.HasReward = 1, true
		out = append(out, maskMistakes(r, train.ToTrainer(r, nil, rule)))
	}
	return out, hintDemos, hintTurns, h.Stats, nil
}

// maskMistakes leaves the failed calls of a demonstration out of its trainable
// tokens: they stay as context (what a mistake and its error look like, before the
// recovery) but are not imitated.
func maskMistakes(r *rollout.Rollout, xr credit.Sequence) credit.Sequence {
	for k, s := range r.Segments {
		if s.Kind == rollout.KindToolCall && k+1 < len(r.Segments) && r.Segments[k+1].Status == rollout.StatusError {
			for i := s.Start; i < s.End; i++ {
				xr.Trainable[i] = false
			}
		}
	}
	return xr
}

// hasHintTurn reports whether r holds a user turn after the first policy turn.
func hasHintTurn(r *rollout.Rollout) bool {
	policy := false
	for _, s := range r.Segments {
		policy = policy || s.Kind.IsPolicy()
		if policy && s.Kind == rollout.KindUser {
			return true
		}
	}
	return false
}

// SFTCredit is the credit of supervised fine-tuning: A = R = 1 on every policy token
// of a demonstration, importance weight 1.
func SFTCredit() credit.Config {
	c := credit.DefaultConfig()
	c.Baseline, c.LambdaHint, c.AllowNoSampler = credit.BaselineNone, 0, true
	return c
}

// WarmStart trains the warm start and writes it to cfg.Out. progress gets one line
// per eval.
func WarmStart(ctx context.Context, backend backends.Backend, cfg WarmStartConfig, progress func(string)) (WarmStartResult, error) {
	t0, c0 := time.Now(), CPUTime()
	res := WarmStartResult{Config: cfg}
	p, err := OpenPolicy(backend, cfg.Init)
	if err != nil {
		return res, err
	}
	demos, hintDemos, hintTurns, hs, err := Demos(p.Tok, cfg)
	if err != nil {
		return res, err
	}
	res.Demos, res.HintDemos, res.HintTurns, res.Hints = len(demos), hintDemos, hintTurns, hs
	progress(fmt.Sprintf("warm start: %d demonstrations (%d with a hint turn, %d hint turns)", len(demos), hintDemos, hintTurns))
	opt := xla.DefaultAdamW()
	opt.LR, opt.WarmupSteps, opt.WeightDecay = cfg.LR, 20, 0
	tr, err := xla.NewTrainer(backend, p.Model, xla.TrainerOptions{Credit: SFTCredit(), Optimizer: opt, Seed: cfg.Seed})
	if err != nil {
		return res, fmt.Errorf("warm start: %w", err)
	}
	val, err := toolworld.Tasks(toolworld.SplitValidation, cfg.ValTasks)
	if err != nil {
		return res, err
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x73667400))
	draw := NewDemoBatches(demos, rng)
	for step := 1; step <= cfg.Steps; step++ {
		met, err := tr.Step(ctx, draw.Batch(cfg.Batch))
		if err != nil {
			return res, fmt.Errorf("warm start step %d: %w", step, err)
		}
		res.Steps = step
		if step%25 == 0 {
			progress(fmt.Sprintf("warm start: step %d loss %.3f cpu %.0fs wall %.0fs", step, met.Loss, (CPUTime() - c0).Seconds(), time.Since(t0).Seconds()))
		}
		if step%cfg.EvalEvery != 0 && step != cfg.Steps {
			continue
		}
		st, err := Evaluate(ctx, p, val, cfg.World)
		if err != nil {
			return res, err
		}
		res.Validation = st.Success
		if err := SaveModel(tr, cfg.Init, cfg.Out); err != nil { // the latest, should the run be cut short
			return res, err
		}
		progress(fmt.Sprintf("warm start: step %d loss %.3f validation success %.1f%% (tool errors %.1f%%, %.0f tokens) cpu %.0fs wall %.0fs",
			step, met.Loss, 100*st.Success, 100*st.ToolError, st.Tokens, (CPUTime() - c0).Seconds(), time.Since(t0).Seconds()))
		if st.Success >= cfg.Target {
			break
		}
	}
	if evaluated := res.Steps > 0 && (res.Steps%cfg.EvalEvery == 0 || res.Steps == cfg.Steps); !evaluated {
		// No eval ran at the last step (-warmstart-steps 0 only evaluates and saves):
		// measure validation now, or warmstart.json would record 0.
		st, err := Evaluate(ctx, p, val, cfg.World)
		if err != nil {
			return res, err
		}
		res.Validation = st.Success
	}
	held, err := toolworld.Tasks(toolworld.SplitHeldout, 0)
	if err != nil {
		return res, err
	}
	st, err := Evaluate(ctx, p, held, cfg.World)
	if err != nil {
		return res, err
	}
	res.Heldout = st.Success
	if err := SaveModel(tr, cfg.Init, cfg.Out); err != nil {
		return res, err
	}
	res.CPUSeconds, res.WallSecs = (CPUTime() - c0).Seconds(), time.Since(t0).Seconds()
	progress(fmt.Sprintf("warm start: held-out success %.1f%% after %d steps; written to %s", 100*st.Success, res.Steps, cfg.Out))
	return res, nil
}

// DemoBatches draws batches of demonstrations epoch by epoch, each epoch a fresh
// permutation from rng, so every demonstration is seen once per epoch.
type DemoBatches struct {
	demos []credit.Sequence
	rng   *rand.Rand
	order []int
	next  int
}

func NewDemoBatches(demos []credit.Sequence, rng *rand.Rand) *DemoBatches {
	return &DemoBatches{demos: demos, rng: rng, order: rng.Perm(len(demos))}
}

// Batch returns the next n demonstrations.
func (d *DemoBatches) Batch(n int) []credit.Sequence {
	out := make([]credit.Sequence, 0, n)
	for len(out) < n {
		if d.next == len(d.order) {
			d.order, d.next = d.rng.Perm(len(d.demos)), 0
		}
		out = append(out, d.demos[d.order[d.next]])
		d.next++
	}
	return out
}
