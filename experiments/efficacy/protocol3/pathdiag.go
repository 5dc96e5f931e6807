package protocol3

import (
	"context"
	"fmt"
	"sort"

	"github.com/gomlx/gomlx/backends"

	"github.com/hindsight-ai/hindsight/collect"
	"github.com/hindsight-ai/hindsight/experiments/efficacy"
	"github.com/hindsight-ai/hindsight/toolworld"
)

// How an episode ended (PathTrace.End).
const (
	EndSuccess  = "success"   // answered right, the store's keys as the task wants
	EndAnswered = "answered"  // answered, without the reward
	EndCallCap  = "call cap"  // the world's call cap ended it
	EndTokenCap = "token cap" // the rollout's token cap ended it (or a turn cut short)
)

// PathTrace is one episode followed against its task's solution (efficacy.Tracker):
// how far along the solution's path it got and how it ended. Stuck is the tool of the
// first solution call the episode never made ("answer" when it made every call before
// the answer); it is empty for a success.
type PathTrace struct {
	Task    string          `json:"task"`
	Family  string          `json:"family"`
	Turns   []efficacy.Turn `json:"turns"`
	Answer  string          `json:"answer,omitempty"`
	Reached int             `json:"reached"` // solution calls made on the path (Tracker.Next)
	Slips   int             `json:"slips"`
	Stuck   string          `json:"stuck,omitempty"`
	End     string          `json:"end"`
	Calls   int             `json:"calls"`
}

// PathCount is how many failed episodes stopped before one solution call (Stuck) and
// ended one way (End).
type PathCount struct {
	Stuck string `json:"stuck"`
	End   string `json:"end"`
	N     int    `json:"n"`
}

// PathDiagnosis is the failure breakdown of one family's greedy episodes.
type PathDiagnosis struct {
	Family   string      `json:"family"`
	Episodes int         `json:"episodes"`
	Success  int         `json:"success"`
	Failures []PathCount `json:"failures"` // most common first
	Traces   []PathTrace `json:"traces"`
}

// TracePath follows the calls of one finished episode of t against its solution:
// turns are its calls in order (the answer call included) with their outputs; reward,
// truncated and calls are the episode's state at the end.
func TracePath(t toolworld.Task, turns []efficacy.Turn, reward float32, truncated bool, calls, maxCalls int) PathTrace {
	k := efficacy.NewTracker(t)
	tr := PathTrace{Task: t.ID, Family: t.Family, Turns: turns, Calls: calls}
	for _, u := range turns {
		if c := toolworld.ParseCall(u.Call); c.Name == toolworld.AnswerCommand {
			tr.Answer = u.Call
			continue
		}
		if k.Observe(u.Call, u.Out, u.Failed) {
			tr.Slips++
		}
	}
	tr.Reached = k.Next
	switch {
	case reward == 1:
		tr.End = EndSuccess
		return tr
	case tr.Answer != "":
		tr.End = EndAnswered
	case truncated && calls >= maxCalls:
		tr.End = EndCallCap
	default:
		tr.End = EndTokenCap
	}
	tr.Stuck = toolworld.ParseCall(t.Solution[min(tr.Reached, len(t.Solution)-1)]).Name
	return tr
}

// Breakdown counts the failed traces by where they stopped and how they ended, most
// common first (ties in the solution's order of tools, then by end).
func Breakdown(traces []PathTrace) []PathCount {
	n := map[[2]string]int{}
	for _, tr := range traces {
		if tr.End != EndSuccess {
			n[[2]string{tr.Stuck, tr.End}]++
		}
	}
	out := make([]PathCount, 0, len(n))
	for k, c := range n {
		out = append(out, PathCount{Stuck: k[0], End: k[1], N: c})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].N != out[j].N {
			return out[i].N > out[j].N
		}
		if out[i].Stuck != out[j].Stuck {
			return out[i].Stuck < out[j].Stuck
		}
		return out[i].End < out[j].End
	})
	return out
}

// DiagnosePaths plays one greedy episode (G3's setting: world w, temperature 0) of
// every held-out task of the given families with the model in dir and returns, per
// family, where the failed episodes left the solution's path. A measurement, not a
// gate: G3's greedy run plays all 250 tasks in batches of 64, these only the family's,
// so an episode may differ where batching changes a near-tie.
func DiagnosePaths(ctx context.Context, backend backends.Backend, dir string, w efficacy.World, families []string) ([]PathDiagnosis, error) {
	p, err := efficacy.OpenPolicy(backend, dir)
	if err != nil {
		return nil, err
	}
	held, err := toolworld.Tasks(toolworld.SplitHeldout, 0)
	if err != nil {
		return nil, err
	}
	var out []PathDiagnosis
	for _, fam := range families {
		var tasks []toolworld.Task
		for _, t := range held {
			if t.Family == fam {
				tasks = append(tasks, t)
			}
		}
		if len(tasks) == 0 {
			return nil, fmt.Errorf("diagnose paths: no held-out task of family %q (families: %v)", fam, Families)
		}
		turns := make([][]efficacy.Turn, len(tasks))
		opts := w.Episodes(1, 0, 0)
		opts.AfterStep = func(i int, env *toolworld.Env) error {
			out, failed := env.Last()
			if toolworld.ParseCall(env.LastCall()).Name == toolworld.AnswerCommand {
				out, failed = "", false
			}
			turns[i] = append(turns[i], efficacy.Turn{Call: env.LastCall(), Out: out, Failed: failed})
			return nil
		}
		envs, err := collect.Episodes(ctx, p.Sampler, p.Tok, tasks, opts)
		if err != nil {
			return nil, fmt.Errorf("diagnose paths %s: %w", fam, err)
		}
		d := PathDiagnosis{Family: fam, Episodes: len(envs)}
		for i, e := range envs {
			calls, _ := e.Calls()
			tr := TracePath(e.Task(), turns[i], e.Reward(), e.Truncated(), calls, w.MaxCalls)
			if tr.End == EndSuccess {
				d.Success++
			}
			d.Traces = append(d.Traces, tr)
		}
		d.Failures = Breakdown(d.Traces)
		out = append(out, d)
	}
	return out, nil
}
