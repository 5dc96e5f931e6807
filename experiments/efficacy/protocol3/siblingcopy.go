package protocol3

import (
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/hindsight-ai/hindsight/credit"
	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/experiments/efficacy"
	"github.com/hindsight-ai/hindsight/rollout"
	"github.com/hindsight-ai/hindsight/toolworld"
)

// SiblingCopyDemos builds the sibling copy curriculum (attempt 7's next step 2: G1's
// sibling half): the copy curriculum's groups (CopyDemos) with the hint turn replaced
// by G1's sibling turn. At one slip of a scripted episode of each train task
// 0..cfg.Tasks-1 (seeded by seed, drawn apart from CopyDemos' draws), up to
// cfg.Variants rollouts share the prefix up to the slip; in each, the sibling turn
// (efficacy.SiblingText, as the live sibling eval inserts it) shows the solution's
// calls with the call at the slip's place being the right one or one of
// CopyAlternatives, and the call it shows there follows, the only target. Which call
// follows is decided by the sibling turn alone.
func SiblingCopyDemos(tok tokenizer.Tokenizer, cfg CopyConfig, maxTokens, maxCalls int, seed uint64) ([][]credit.Sequence, CopyCounts, error) {
	return copyCurriculum(tok, cfg, seed, 0x7369626c, func(i int, t toolworld.Task, rng *rand.Rand) ([]copyGroup, error) {
		rs, failed, err := playSiblingCopy(tok, t, cfg, maxTokens, maxCalls, rng)
		return []copyGroup{{fmt.Sprintf("sibcopy3-%05d", i), rs, failed}}, err
	})
}

// playSiblingCopy plays t's solution with one slip before a uniformly drawn call (not
// the answer) and returns the variants: the episode replayed to the slip, a sibling
// turn showing the solution with the right call or an alternative at the slip's place,
// then the call it shows there. nil when the slip is not one (the Tracker does not
// see a slip), the episode ends first, or no alternative exists.
func playSiblingCopy(tok tokenizer.Tokenizer, t toolworld.Task, cfg CopyConfig, maxTokens, maxCalls int, rng *rand.Rand) ([]*rollout.Rollout, bool, error) {
	s, err := drawCopySlip(tok, t, cfg.Own, maxTokens, maxCalls, rng)
	if err != nil || s == nil {
		return nil, false, err
	}
	slipAt, exp, slip, lines, k := s.at, s.exp, s.slip, s.lines, s.k
	last := k.Turns[len(k.Turns)-1]
	if k.Expected() != exp || !lastIsSlip(t, k.Turns) {
		return nil, false, nil
	}
	shown := append([]string{exp}, CopyAlternatives(exp, slip, t, k.Turns, cfg.Variants-1, rng)...)
	if len(shown) < 2 {
		return nil, false, nil
	}
	var out []*rollout.Rollout
	for i, call := range shown {
		sib := slices.Clone(t.Solution)
		sib[slipAt] = call
		e, err := replay(tok, t, lines, maxTokens, maxCalls, efficacy.NewTracker(t))
		if err != nil || e == nil {
			return nil, false, err
		}
		gen := append(tok.EncodeText(call), e.StopID())
		if _, err := e.UserTurn(efficacy.SiblingText(sib)); err != nil || len(gen) > e.Budget() {
			if i == 0 {
				return nil, false, nil // no room for the right call's variant
			}
			continue
		}
		if _, _, err := e.Step(gen, nil); err != nil {
			return nil, false, fmt.Errorf("sibling copy demo %s: %w", t.ID, err)
		}
		out = append(out, e.Rollout("sibcopy"))
	}
	if len(out) < 2 {
		return nil, false, nil
	}
	return out, last.Failed, nil
}

// lastIsSlip reports whether the last of turns is a slip (efficacy.Tracker) after
// the others: where the live sibling eval inserts its sibling turn.
func lastIsSlip(t toolworld.Task, turns []efficacy.Turn) bool {
	k, slip := efficacy.NewTracker(t), false
	for _, u := range turns {
		slip = k.Observe(u.Call, u.Out, u.Failed)
	}
	return slip
}

// SiblingShareOf returns the first share of groups (rounded down; CopyConfig.SiblingShare):
// the groups are one per task in task order, so the first ones are a draw of the tasks.
// A share ≤ 0 or ≥ 1 returns groups unchanged.
func SiblingShareOf[G any](groups []G, share float64) []G {
	if share <= 0 || share >= 1 {
		return groups
	}
	return groups[:int(float64(len(groups))*share)]
}
