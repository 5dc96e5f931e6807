package efficacy

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/rs/zerolog"

	"github.com/hindsight-ai/hindsight/credit"
	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/rollout"
	"github.com/hindsight-ai/hindsight/teacher"
	"github.com/hindsight-ai/hindsight/toolworld"
	"github.com/hindsight-ai/hindsight/xla"
)

// Protocol 3's arms besides ArmOutcome and ArmHint (docs/experiments/protocol3.md
// "Arms").
const (
	// ArmSDPO: the teacher sees a successful sibling and the environment's feedback
	// (ContextSDPO), logit distillation, an EMA teacher, with the outcome term.
	ArmSDPO = "sdpo"
	// ArmPlacebo: ArmHint with the hints shuffled across tasks (ContextPlacebo).
	ArmPlacebo = "placebo"
)

// Arms3 are protocol 3's arms in report order.
var Arms3 = []string{ArmOutcome, ArmSDPO, ArmHint, ArmPlacebo}

// Protocol3Hints is the hint stage of protocol 3's hint and placebo arms: the world
// rules (SlipHint) at the retry turn.
var Protocol3Hints = HintSetup{Rules: RulesWorld3, Place: PlaceRetry, Base: credit.BaseStudent}

// Protocol3Config returns protocol 3's pre-registered arms (issue 27 item 4): every arm
// of Arms3 with seeds 1–3, 48 steps of 8 train tasks × G = 8 rollouts sampled at
// temperature 1 (3,072 rollouts a run), greedy held-out evals of all 250 tasks every
// 12 steps, in Protocol3World, distillation mode full (the byte tokenizer's 265 ids;
// topk for a larger vocabulary). LR is 0: the outcome-only pilot (G4) fixes it.
func Protocol3Config() Config {
	return Config{Protocol: 3, Arms: slices.Clone(Arms3), Seeds: []int64{1, 2, 3}, Steps: 48, TasksPerStep: 8, Group: 8,
		Temperature: 1, EvalEvery: 12, EvalTasks: toolworld.SplitSizes[toolworld.SplitHeldout], EvalSplit: toolworld.SplitHeldout,
		World: Protocol3World(), Hints: Protocol3Hints, Distill: credit.DistillFull}
}

// DistillFor returns the distillation mode of protocol 3 for a vocabulary of vocab
// ids: full where the teacher's whole distribution may be kept (xla.MaxFullVocab),
// else topk.
func DistillFor(vocab int) credit.DistillMode {
	if vocab <= xla.MaxFullVocab {
		return credit.DistillFull
	}
	return credit.DistillTopK
}

// ArmSpec3 returns protocol 3's arm called name. Every arm has the same credit
// config — normalize separate (the outcome term over its own tokens, so its scale is
// the same in every arm), λ_out 1, λ_distill 1, distillation mode (full or topk with
// k 100) with JSD α 0.5, SDPO's choice, no clip — except that outcome-only has no
// distillation term (λ_hint = λ_distill = 0) and the live teacher (it never scores a
// teacher pass); the hinted arms use an EMA teacher at rate 0.05 (SDPO's). What the
// teacher sees (Context) is the difference between the hinted arms.
func ArmSpec3(name string, mode credit.DistillMode) (ArmSpec, error) {
	if mode == "" {
		mode = credit.DistillFull
	}
	c := credit.DefaultConfig()
	c.Base, c.Normalize, c.LambdaOut, c.LambdaDistill = credit.BaseStudent, credit.NormalizeSeparate, 1, 1
	// Pre-registered before issue 37 changed credit's defaults: the teacher's top k
	// (topk), the exact tail, no importance weight on the divergence. Kept explicit so
	// the arms stay as registered.
	c.Distill = credit.DistillConfig{Mode: mode, TopK: 100, Divergence: credit.DivJSD, JSDAlpha: 0.5, ClipScope: credit.ClipEntry,
		TopKIDs: credit.IDsTeacher, Tail: credit.TailExact, ISCap: 0}
	s := ArmSpec{Name: name, Credit: c, Teacher: xla.TeacherModelConfig{Mode: xla.TeacherEMA, RefreshEvery: 100, EMARate: 0.05}}
	switch name {
	case ArmOutcome:
		s.Credit.LambdaHint, s.Credit.LambdaDistill, s.Teacher, s.Context = 0, 0, xla.DefaultTeacherModel(), ContextNone
	case ArmSDPO:
		s.Context = ContextSDPO
	case ArmHint:
		s.Context = ContextWorld
	case ArmPlacebo:
		s.Context = ContextPlacebo
	default:
		return ArmSpec{}, fmt.Errorf("arm %q: protocol 3's arms are %v", name, Arms3)
	}
	if mode == credit.DistillSampledToken {
		return ArmSpec{}, fmt.Errorf("arm %s: distillation mode %s: protocol 3 distils logits (%s or %s)", name, mode, credit.DistillFull, credit.DistillTopK)
	}
	return s, s.Credit.Validate()
}

// SDPOTeacher is the sdpo arm's teacher.Config: the daemon's teacher with
// teacher.context sibling and feedback and no written hint — the chain is the
// feedback teacher (a person's comments, which the task world has none of), selection
// on tool errors only — in the byte tokenizer's hint turn (HintTemplate).
func SDPOTeacher() teacher.Config {
	cfg := teacher.DefaultConfig()
	cfg.Chain = []string{teacher.TeacherFeedback}
	cfg.Select.Rules = []teacher.Reason{teacher.ReasonToolError}
	cfg.Template = HintTemplate
	cfg.Context.Sources = []string{teacher.ContextSibling, teacher.ContextFeedback}
	return cfg
}

// armTeacher is one run's teacher stage: it gives the rollouts of a step the teacher
// contexts the arm's spec asks for. It is not safe for concurrent use.
type armTeacher struct {
	context string
	rules   *Hinter         // ContextRules, ContextWorld, ContextPlacebo
	sdpo    *teacher.Hinter // ContextSDPO
	hints   int             // hint spans handed to the trainer (ContextSDPO)
	kinds   map[string]int  // hint spans by context kind (ContextSDPO)
}

// newArmTeacher returns the teacher stage of spec; the hint stages read text with
// tok, and ContextRules and ContextWorld use setup.
func newArmTeacher(tok tokenizer.Tokenizer, spec ArmSpec, setup HintSetup) (*armTeacher, error) {
	a := &armTeacher{context: spec.Context, kinds: map[string]int{}}
	var err error
	switch spec.Context {
	case ContextNone:
	case ContextRules:
		a.rules, err = NewHinterWith(tok, setup)
	case ContextWorld, ContextPlacebo:
		if setup.Rules != RulesWorld3 {
			return nil, fmt.Errorf("arm %s: hints.rules %q, want %s", spec.Name, setup.Rules, RulesWorld3)
		}
		a.rules, err = NewHinterWith(tok, setup)
	case ContextSDPO:
		a.sdpo, err = teacher.New(SDPOTeacher(), teacher.Deps{Tokenizer: tok, Logger: zerolog.Nop()})
	default:
		return nil, fmt.Errorf("arm %s: unknown context %q", spec.Name, spec.Context)
	}
	if err != nil {
		return nil, fmt.Errorf("arm %s: %w", spec.Name, err)
	}
	return a, nil
}

// step returns the hints of each rollout of one step (rolls[i] a rollout of
// tasks[i]); rng draws the placebo's shuffle.
func (a *armTeacher) step(ctx context.Context, rolls []*rollout.Rollout, tasks []toolworld.Task, rng *rand.Rand) ([][]teacher.Hint, error) {
	out := make([][]teacher.Hint, len(rolls))
	switch a.context {
	case ContextNone:
		return out, nil
	case ContextSDPO:
		step := make([]teacher.StepRollout, len(rolls))
		for i, r := range rolls {
			res, err := a.sdpo.Run(ctx, r)
			if err != nil {
				return nil, err
			}
			// Every rollout of a step is accepted: the experiment has no journal.
			step[i] = teacher.StepRollout{Rollout: r, Accepted: true, Hints: res.Hints}
		}
		out = a.sdpo.Siblings(step)
		for _, hs := range out {
			a.hints += len(hs)
			for _, h := range hs {
				a.kinds[h.Context.Kind()]++
			}
		}
		return out, nil
	}
	for i, r := range rolls {
		hs, err := a.rules.Hints(ctx, r, tasks[i])
		if err != nil {
			return nil, err
		}
		out[i] = hs
	}
	if a.context == ContextPlacebo {
		ids := make([]string, len(tasks))
		for i, t := range tasks {
			ids[i] = t.ID
		}
		out = a.rules.Placebo(out, ids, rng)
	}
	return out, nil
}

// stats returns what the stage did over the run.
func (a *armTeacher) stats() HintStats {
	switch {
	case a.rules != nil:
		return a.rules.Stats
	case a.sdpo != nil:
		snap := a.sdpo.Stats().Snapshot()
		st := HintStats{Rollouts: int(snap.Rollouts), Selections: int(snap.Selections), Hints: a.hints, NoHint: int(snap.NoHint),
			ByReason: map[string]int{}, Contexts: map[string]int{}}
		for k, v := range snap.Contexts {
			st.Contexts[k] = int(v)
		}
		for k, v := range a.kinds {
			st.ByReason[k] = v
		}
		return st
	}
	return HintStats{}
}

// Placebo returns hints (hints[i] those of a rollout of task taskIDs[i]) with every
// hint's text replaced by the text of a hint written for a rollout of another task:
// the same places, the same number of hints and the same texts (so the same lengths),
// only moved across tasks. The hints are put in task order (the tasks in a random
// order, the hints of a task shuffled) and each takes the text of the hint m places
// on, m the largest task's count, so no hint keeps a text of its own task while no
// task holds more than half of the hints; a hint that would (a step whose hints come
// mostly from one task) is dropped and counted in Stats.PlaceboSameTask. It draws from
// rng; the inputs are not modified.
func (h *Hinter) Placebo(hints [][]teacher.Hint, taskIDs []string, rng *rand.Rand) [][]teacher.Hint {
	type ref struct{ i, k int }
	var all []ref
	rank := map[string]int{}
	var tasks []string
	for i, hs := range hints {
		for k := range hs {
			all = append(all, ref{i, k})
			if _, ok := rank[taskIDs[i]]; !ok {
				rank[taskIDs[i]] = len(tasks)
				tasks = append(tasks, taskIDs[i])
			}
		}
	}
	rng.Shuffle(len(tasks), func(a, b int) { tasks[a], tasks[b] = tasks[b], tasks[a] })
	for r, t := range tasks {
		rank[t] = r
	}
	rng.Shuffle(len(all), func(a, b int) { all[a], all[b] = all[b], all[a] })
	slices.SortStableFunc(all, func(a, b ref) int { return cmp.Compare(rank[taskIDs[a.i]], rank[taskIDs[b.i]]) })
	count, m := map[string]int{}, 0
	for _, r := range all {
		count[taskIDs[r.i]]++
		m = max(m, count[taskIDs[r.i]])
	}
	text := map[ref]string{}
	for j, r := range all {
		src := all[(j+m)%len(all)]
		if taskIDs[src.i] == taskIDs[r.i] {
			h.Stats.PlaceboSameTask++
			continue
		}
		text[r] = hints[src.i][src.k].Text
	}
	out := make([][]teacher.Hint, len(hints))
	for i, hs := range hints {
		for k, hint := range hs {
			t, ok := text[ref{i, k}]
			if !ok {
				continue
			}
			toks, err := h.inserter.Wrap(t)
			if err != nil { // cannot happen: t was wrapped with the same template
				h.Stats.TooLong++
				continue
			}
			hint.Text, hint.Tokens, hint.Source = t, toks, "placebo"
			out[i] = append(out[i], hint)
			h.Stats.Placebo++
		}
	}
	return out
}
