package efficacy

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/gomlx/gomlx/backends"

	"github.com/hindsight-ai/hindsight/collect"
	"github.com/hindsight-ai/hindsight/toolworld"
	"github.com/hindsight-ai/hindsight/xla"
)

// The contexts a live eval puts in front of the turn after a slip.
const (
	LiveNone    = "none"    // nothing: the policy sees the slip's result only
	LiveHint    = "hint"    // a hint turn with SlipHint's text
	LiveSibling = "sibling" // a user turn with SiblingText of the task's solution calls
)

// LiveResult is a live eval: one episode per task, the chosen context inserted after
// every slip (Tracker) before the next turn.
type LiveResult struct {
	Context     string  `json:"context"`
	Episodes    int     `json:"episodes"`
	Success     float64 `json:"success"`
	Slips       int     `json:"slips"`
	Inserted    int     `json:"inserted"` // contexts inserted (a slip at the end, or without room, gets none)
	NoRoom      int     `json:"no_room"`
	After       int     `json:"after"` // inserted (or, for none, slips) followed by a next turn
	NextRight   int     `json:"next_right"`
	NextExplore int     `json:"next_explore"`
	// RightRate is NextRight / After: after a slip, the next call is the one the task
	// needed (the solution's next call).
	RightRate float64            `json:"next_right_rate"`
	ByFamily  map[string]float64 `json:"success_by_family,omitempty"`
}

// LiveEval plays tasks (one episode each, at temperature temp, seed seed) with live
// contexts of kind context after every slip.
func LiveEval(ctx context.Context, p *Policy, tasks []toolworld.Task, w World, kind string, temp float64, seed uint64) (LiveResult, []*toolworld.Env, error) {
	res := LiveResult{Context: kind}
	trackers := make([]*Tracker, len(tasks))
	pending := make([]string, len(tasks)) // the expected call after an unanswered slip
	for i, t := range tasks {
		trackers[i] = NewTracker(t)
	}
	opts := w.Episodes(1, temp, seed)
	opts.AfterStep = func(i int, env *toolworld.Env) error {
		k := trackers[i]
		line := env.LastCall()
		if exp := pending[i]; exp != "" {
			pending[i] = ""
			res.After++
			if SameCall(line, exp) {
				res.NextRight++
			} else if SameCall(line, Explore(exp)) {
				res.NextExplore++
			}
		}
		if toolworld.ParseCall(line).Name == toolworld.AnswerCommand {
			return nil
		}
		out, failed := env.Last()
		if !k.Observe(line, out, failed) {
			return nil
		}
		res.Slips++
		if env.Done() {
			return nil
		}
		var err error
		switch kind {
		case LiveNone:
			pending[i] = k.Expected()
			return nil
		case LiveHint:
			h := SlipHint(k)
			if h == "" {
				return nil
			}
			_, err = env.Hint(h)
		case LiveSibling:
			_, err = env.UserTurn(SiblingText(k.Task.Solution))
		default:
			return fmt.Errorf("live eval: unknown context %q", kind)
		}
		if errors.Is(err, toolworld.ErrNoRoom) {
			res.NoRoom++
			return nil
		}
		if err != nil {
			return err
		}
		res.Inserted++
		pending[i] = k.Expected()
		return nil
	}
	envs, err := collect.Episodes(ctx, p.Sampler, p.Tok, tasks, opts)
	if err != nil {
		return res, nil, fmt.Errorf("live eval %s: %w", kind, err)
	}
	st := collect.Summarize(envs)
	res.Episodes, res.Success = st.Episodes, st.Success
	res.RightRate = ratio(res.NextRight, res.After)
	res.ByFamily = ByFamily(envs)
	return res, envs, nil
}

func ratio(a, b int) float64 {
	if b == 0 {
		return math.NaN()
	}
	return float64(a) / float64(b)
}

// ByFamily is the success rate of envs per task family.
func ByFamily(envs []*toolworld.Env) map[string]float64 {
	n, ok := map[string]int{}, map[string]int{}
	for _, e := range envs {
		f := e.Task().Family
		n[f]++
		if e.Reward() == 1 {
			ok[f]++
		}
	}
	out := map[string]float64{}
	for f, c := range n {
		out[f] = float64(ok[f]) / float64(c)
	}
	return out
}

// ProbeDelta is G2: at the model's own slips (episodes sampled at temperature 1, no
// live context), the summed log-prob of a teacher-forced next action with a context in
// front minus with the empty hint turn ("Hint: " and nothing): Δ = Σ_t q_t(ctx) −
// q_t(∅) over the action's tokens and its stop token, in nats, averaged over slips.
type ProbeDelta struct {
	Slips int `json:"slips"` // slips probed (a SlipHint and a next turn)
	// Right is the call the task needed; Repeat the slipped call again; Explore the
	// exploring call. Wrong pools Repeat and Explore.
	HintRight   float64 `json:"hint_right"`
	HintRepeat  float64 `json:"hint_repeat"`
	HintExplore float64 `json:"hint_explore"`
	HintWrong   float64 `json:"hint_wrong"`
	SibRight    float64 `json:"sibling_right"`
	SibWrong    float64 `json:"sibling_wrong"`
	BaseRightLP float64 `json:"base_right_logprob"` // Σ log-prob of the right action with the empty hint (for scale)
	Compared    int     `json:"wrong_actions"`
}

type probeItem struct {
	hint, sib, empty []int32
	right, repeat    string
	explore          string
	failed           bool // the slip was a failed call (else a silent one)
}

// probeItems samples one episode of each task at temperature temp and returns, at
// every slip that SlipHint has a hint for, the contexts (hint, sibling, empty hint)
// and the next actions G2 scores, with the tokenizer's stop token.
func probeItems(ctx context.Context, p *Policy, tasks []toolworld.Task, w World, temp float64, seed uint64) ([]probeItem, int32, error) {
	var items []probeItem
	trackers := make([]*Tracker, len(tasks))
	for i, t := range tasks {
		trackers[i] = NewTracker(t)
	}
	opts := w.Episodes(1, temp, seed)
	var stop int32
	opts.AfterStep = func(i int, env *toolworld.Env) error {
		k := trackers[i]
		line := env.LastCall()
		stop = env.StopID()
		if toolworld.ParseCall(line).Name == toolworld.AnswerCommand || env.Done() {
			return nil
		}
		out, failed := env.Last()
		if !k.Observe(line, out, failed) {
			return nil
		}
		h := SlipHint(k)
		if h == "" {
			return nil
		}
		exp := k.Expected()
		it := probeItem{hint: env.ContextWith(toolworld.HintLabel + h), sib: env.ContextWith(SiblingText(k.Task.Solution)),
			empty: env.ContextWith(toolworld.HintLabel), right: exp, repeat: line, failed: failed}
		if e := Explore(exp); !SameCall(e, exp) && !SameCall(e, line) {
			it.explore = e
		}
		if !SameCall(line, exp) {
			items = append(items, it)
		}
		return nil
	}
	if _, err := collect.Episodes(ctx, p.Sampler, p.Tok, tasks, opts); err != nil {
		return nil, 0, fmt.Errorf("probe slips: %w", err)
	}
	return items, stop, nil
}

// ProbeSlips samples one episode of each task at temperature temp and, at every slip
// that SlipHint has a hint for, scores the right, repeated and exploring next actions
// after the hint, the sibling context and the empty hint turn.
func ProbeSlips(ctx context.Context, backend backends.Backend, p *Policy, tasks []toolworld.Task, w World, temp float64, seed uint64) (ProbeDelta, error) {
	items, stop, err := probeItems(ctx, p, tasks, w, temp, seed)
	if err != nil {
		return ProbeDelta{}, err
	}
	sc, err := xla.NewScorer(backend, p.Model, xla.ScorerOptions{})
	if err != nil {
		return ProbeDelta{}, fmt.Errorf("probe slips: %w", err)
	}
	score := func(c []int32, action string) (float64, error) {
		a := append(p.Tok.EncodeText(action), stop)
		toks := append(append([]int32(nil), c...), a...)
		s, cache, err := sc.Score(ctx, toks)
		if err != nil {
			return 0, err
		}
		cache.Close()
		sum := 0.0
		for t := len(c); t < len(toks); t++ {
			sum += float64(s[t])
		}
		return sum, nil
	}
	var d ProbeDelta
	if len(items) == 0 {
		return d, fmt.Errorf("probe slips: no slip with a hint in %d episodes", len(tasks))
	}
	var nr, nrep, nexp, nw int
	var hr, hrep, hexp, sr, sw, base float64
	for _, it := range items {
		dh := func(action string) (float64, float64, error) {
			e, err := score(it.empty, action)
			if err != nil {
				return 0, 0, err
			}
			h, err := score(it.hint, action)
			if err != nil {
				return 0, 0, err
			}
			s, err := score(it.sib, action)
			if err != nil {
				return 0, 0, err
			}
			if action == it.right {
				base += e
			}
			return h - e, s - e, nil
		}
		h, s, err := dh(it.right)
		if err != nil {
			return d, fmt.Errorf("probe slips: %w", err)
		}
		hr, sr, nr = hr+h, sr+s, nr+1
		h, s, err = dh(it.repeat)
		if err != nil {
			return d, fmt.Errorf("probe slips: %w", err)
		}
		hrep, sw, nrep, nw = hrep+h, sw+s, nrep+1, nw+1
		if it.explore != "" {
			h, s, err = dh(it.explore)
			if err != nil {
				return d, fmt.Errorf("probe slips: %w", err)
			}
			hexp, sw, nexp, nw = hexp+h, sw+s, nexp+1, nw+1
		}
	}
	d.Slips, d.Compared = nr, nw
	d.HintRight, d.HintRepeat, d.HintExplore = hr/float64(nr), hrep/float64(nrep), hexp/float64(max(nexp, 1))
	d.HintWrong = (hrep + hexp) / float64(nw)
	d.SibRight, d.SibWrong = sr/float64(nr), sw/float64(nw)
	d.BaseRightLP = base / float64(nr)
	return d, nil
}
