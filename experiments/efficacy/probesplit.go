package efficacy

import (
	"context"
	"errors"
	"fmt"

	"github.com/gomlx/gomlx/backends"

	"github.com/hindsight-ai/hindsight/toolworld"
	"github.com/hindsight-ai/hindsight/xla"
)

// SplitStats is ProbeSplit's summary over a set of slips. The right call and the
// slip repeated share a prefix of tokens (a near miss shares the tool and most of
// the path); G2's Σ Δ counts that prefix in both. Here the prefix and the tokens from
// the first one that differs are summed apart, and the two first differing tokens are
// compared head to head. Log-probs in nats, means over slips.
type SplitStats struct {
	Slips     int     `json:"slips"`
	SharedLen float64 `json:"shared_tokens"` // mean length of the shared prefix (tokens)
	// Shared is Σ Δ (hint − empty hint) over the shared prefix, the same for both
	// actions; RightRest and RepeatRest Σ Δ over each action's tokens from the first
	// differing one on (its stop token included).
	Shared     float64 `json:"hint_shared"`
	RightRest  float64 `json:"hint_right_rest"`
	RepeatRest float64 `json:"hint_repeat_rest"`
	// MarginEmpty and MarginHint are log p(right's token) − log p(the slip's token) at
	// the first differing token, after the empty hint and after the hint; AboveEmpty
	// and AboveHint count the slips at which the right call's token is the likelier.
	MarginEmpty float64 `json:"margin_empty"`
	MarginHint  float64 `json:"margin_hint"`
	AboveEmpty  int     `json:"right_above_empty"`
	AboveHint   int     `json:"right_above_hint"`
	// MarginGain is MarginHint − MarginEmpty: the deciding-token margin, what the
	// hint adds to the right token's log-odds over the slip's (attempt 5's copy
	// measure and G2's third part).
	MarginGain float64 `json:"margin_gain"`
	// ExploreRest is Σ Δ over the exploring call's tokens from its first token that
	// differs from the right call (over the Explores slips that have one); WrongRest
	// pools RepeatRest and ExploreRest over the Wrong actions scored so (G2 as
	// attempt 5 registered it).
	ExploreRest float64 `json:"hint_explore_rest"`
	Explores    int     `json:"explores"`
	WrongRest   float64 `json:"hint_wrong_rest"`
	Wrong       int     `json:"wrong_actions"`
}

// ErrNoSlip is ProbeSplit's error when the episodes hold no slip with a hint.
var ErrNoSlip = errors.New("no slip with a hint")

// SplitDelta is ProbeSplit's result: all slips, and the failed and silent ones apart.
type SplitDelta struct {
	All    SplitStats `json:"all"`
	Failed SplitStats `json:"failed"`
	Silent SplitStats `json:"silent"`
}

// ProbeSplit is a diagnostic of G2 (not a gate): on the slips ProbeSlips probes (the
// same episodes for the same tasks, world, temperature and seed), it splits the hint's
// Δ on the right call and on the slip repeated into their shared prefix and the rest,
// and compares the two actions at their first differing token.
func ProbeSplit(ctx context.Context, backend backends.Backend, p *Policy, tasks []toolworld.Task, w World, temp float64, seed uint64) (SplitDelta, error) {
	items, stop, err := probeItems(ctx, p, tasks, w, temp, seed)
	if err != nil {
		return SplitDelta{}, err
	}
	if len(items) == 0 {
		return SplitDelta{}, fmt.Errorf("probe split: %w in %d episodes", ErrNoSlip, len(tasks))
	}
	sc, err := xla.NewScorer(backend, p.Model, xla.ScorerOptions{})
	if err != nil {
		return SplitDelta{}, fmt.Errorf("probe split: %w", err)
	}
	// score returns the log-prob of each of the action's tokens after context c.
	score := func(c, a []int32) ([]float64, error) {
		toks := append(append([]int32(nil), c...), a...)
		s, cache, err := sc.Score(ctx, toks)
		if err != nil {
			return nil, fmt.Errorf("probe split: %w", err)
		}
		cache.Close()
		out := make([]float64, len(a))
		for i := range a {
			out[i] = float64(s[len(c)+i])
		}
		return out, nil
	}
	sum := func(xs []float64) float64 {
		t := 0.0
		for _, x := range xs {
			t += x
		}
		return t
	}
	var d SplitDelta
	for _, it := range items {
		right := append(p.Tok.EncodeText(it.right), stop)
		repeat := append(p.Tok.EncodeText(it.repeat), stop)
		n := 0
		for n < len(right) && n < len(repeat) && right[n] == repeat[n] {
			n++
		}
		if n == len(right) || n == len(repeat) {
			continue // the same tokens: not a slip to compare
		}
		var lp [2][2][]float64 // [right, repeat][empty, hint]
		for i, a := range [][]int32{right, repeat} {
			for j, c := range [][]int32{it.empty, it.hint} {
				if lp[i][j], err = score(c, a); err != nil {
					return d, err
				}
			}
		}
		// The exploring call, from its first token that differs from the right call.
		var exploreRest float64
		hasExplore := it.explore != ""
		if hasExplore {
			ex := append(p.Tok.EncodeText(it.explore), stop)
			m := 0
			for m < len(right) && m < len(ex) && right[m] == ex[m] {
				m++
			}
			e, err := score(it.empty, ex)
			if err != nil {
				return d, err
			}
			h, err := score(it.hint, ex)
			if err != nil {
				return d, err
			}
			exploreRest = sum(h[m:]) - sum(e[m:])
		}
		mEmpty := lp[0][0][n] - lp[1][0][n]
		mHint := lp[0][1][n] - lp[1][1][n]
		add := func(s *SplitStats) {
			s.Slips++
			s.SharedLen += float64(n)
			s.Shared += sum(lp[0][1][:n]) - sum(lp[0][0][:n])
			s.RightRest += sum(lp[0][1][n:]) - sum(lp[0][0][n:])
			s.RepeatRest += sum(lp[1][1][n:]) - sum(lp[1][0][n:])
			s.MarginEmpty += mEmpty
			s.MarginHint += mHint
			repeatRest := sum(lp[1][1][n:]) - sum(lp[1][0][n:])
			s.WrongRest += repeatRest
			s.Wrong++
			if hasExplore {
				s.ExploreRest += exploreRest
				s.WrongRest += exploreRest
				s.Explores++
				s.Wrong++
			}
			if mEmpty > 0 {
				s.AboveEmpty++
			}
			if mHint > 0 {
				s.AboveHint++
			}
		}
		add(&d.All)
		if it.failed {
			add(&d.Failed)
		} else {
			add(&d.Silent)
		}
	}
	for _, s := range []*SplitStats{&d.All, &d.Failed, &d.Silent} {
		if k := float64(max(s.Slips, 1)); s.Slips > 0 {
			s.SharedLen, s.Shared, s.RightRest, s.RepeatRest = s.SharedLen/k, s.Shared/k, s.RightRest/k, s.RepeatRest/k
			s.MarginEmpty, s.MarginHint = s.MarginEmpty/k, s.MarginHint/k
			s.MarginGain = s.MarginHint - s.MarginEmpty
			s.ExploreRest /= float64(max(s.Explores, 1))
			s.WrongRest /= float64(max(s.Wrong, 1))
		}
	}
	return d, nil
}
