package efficacy

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/rs/zerolog"

	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/rollout"
	"github.com/hindsight-ai/hindsight/teacher"
	"github.com/hindsight-ai/hindsight/toolworld"
)

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
