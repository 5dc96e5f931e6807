package teacher

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/hindsight-ai/hindsight/rollout"
)

// Reason says why a segment was selected for a hint.
type Reason string

// The selection rules. Their names are also the values of SelectConfig.Rules.
const (
	// ReasonFeedback: a person commented on the segment (or, for a non-policy
	// segment, on the context the next policy turn reacts to).
	ReasonFeedback Reason = "feedback"
	// ReasonNegativeRating: the whole rollout was rated −1; the last policy turn.
	ReasonNegativeRating Reason = "negative_rating"
	// ReasonToolError: a tool call whose result has status error.
	ReasonToolError Reason = "tool_error"
	// ReasonSurprise: a rollout whose reward is below the threshold; the policy turn
	// with the lowest sampler log-probs.
	ReasonSurprise Reason = "surprise"
)

// ReasonSibling: a rollout below its group's best with a successful sibling and no
// other selection; the whole response, scored with the sibling in front (made by
// Hinter.Siblings, not by Select).
const ReasonSibling Reason = "sibling"

var allReasons = []Reason{ReasonFeedback, ReasonNegativeRating, ReasonToolError, ReasonSurprise}

// Selection is one place in a rollout that gets a hint. The teacher pass re-scores the
// token range [InsertAt, End) with the hint inserted at InsertAt.
type Selection struct {
	// Segment is the index in Rollout.Segments of the target: the policy segment the
	// hint is about. End is always Segments[Segment].End.
	Segment int
	// InsertAt is the token position where the hint goes: the start of the policy turn
	// that holds Segment (it includes the turn's header tokens).
	InsertAt int32
	// End is the exclusive end of the scored range, in tokens.
	End int32
	// Reason is the rule that chose this selection.
	Reason Reason
	// Source is the index of the segment that triggered the rule: the failed tool
	// result, the segment carrying feedback; -1 when there is none.
	Source int
	// Score is the rule's measure, for logs and audit: for ReasonSurprise the mean of
	// the turn's lowest sampler log-probs (nats); 0 otherwise.
	Score float64
}

// SelectConfig configures Select. The zero value of a field means its default only
// through DefaultSelectConfig; Validate rejects values that make no sense.
type SelectConfig struct {
	// Rules are the selection rules in priority order: when two candidates collide
	// (overlap or closer than MinGap), the earlier rule wins.
	Rules []Reason `yaml:"rules"`
	// MaxPerRollout caps the selections of one rollout.
	MaxPerRollout int `yaml:"max_per_rollout"`
	// MinGap is the least number of tokens between the end of one scored range and the
	// insert_at of the next.
	MinGap int `yaml:"min_gap"`
	// RewardThreshold: the surprise rule applies to rollouts whose reward is below it
	// (never to rollouts without a reward).
	RewardThreshold float64 `yaml:"reward_threshold"`
	// SurpriseTurns caps the turns the surprise rule picks per rollout.
	SurpriseTurns int `yaml:"surprise_turns"`
	// SurpriseTopK: a turn's surprise is the mean of its K lowest sampler log-probs.
	SurpriseTopK int `yaml:"surprise_top_k"`
}

// DefaultSelectConfig returns the defaults: all rules, feedback first; at most 4
// selections 32 tokens apart; the surprise rule below reward 0.5, one turn, top 8.
func DefaultSelectConfig() SelectConfig {
	return SelectConfig{
		Rules:           slices.Clone(allReasons),
		MaxPerRollout:   4,
		MinGap:          32,
		RewardThreshold: 0.5,
		SurpriseTurns:   1,
		SurpriseTopK:    8,
	}
}

// Validate reports the first bad field, named by its YAML path under prefix.
func (c SelectConfig) Validate(prefix string) error {
	seen := map[Reason]bool{}
	for i, r := range c.Rules {
		if !slices.Contains(allReasons, r) {
			return fmt.Errorf("%srules[%d]: unknown rule %q (want one of %s)", prefix, i, r, joinReasons(allReasons))
		}
		if seen[r] {
			return fmt.Errorf("%srules[%d]: rule %q listed twice", prefix, i, r)
		}
		seen[r] = true
	}
	switch {
	case c.MaxPerRollout < 0:
		return fmt.Errorf("%smax_per_rollout: must be ≥ 0, got %d", prefix, c.MaxPerRollout)
	case c.MinGap < 0:
		return fmt.Errorf("%smin_gap: must be ≥ 0, got %d", prefix, c.MinGap)
	case c.SurpriseTurns < 0:
		return fmt.Errorf("%ssurprise_turns: must be ≥ 0, got %d", prefix, c.SurpriseTurns)
	case c.SurpriseTopK < 1:
		return fmt.Errorf("%ssurprise_top_k: must be ≥ 1, got %d", prefix, c.SurpriseTopK)
	}
	return nil
}

func joinReasons(rs []Reason) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = string(r)
	}
	return strings.Join(s, ", ")
}

// Select returns the segments of r that deserve a hint, sorted by InsertAt. It is
// deterministic: the same rollout and config give the same selections. Candidates are
// taken in rule priority order (and by position within a rule); one that overlaps an
// already chosen range, or comes within MinGap tokens of it, is skipped. A person's
// comment (rule feedback) is never skipped for MinGap, a spacing meant for the other
// rules' hints: only an overlap or MaxPerRollout leaves one out (SelectComments says
// which).
func Select(r *rollout.Rollout, cfg SelectConfig) []Selection {
	chosen, _ := SelectComments(r, cfg)
	return chosen
}

// Dropped comment reasons (DroppedComment.Reason, the Stats.CommentsDropped keys).
const (
	// CommentOverlap: the comment's turn is in a range already chosen (another
	// comment on the same turn, or an earlier rule's selection).
	CommentOverlap = "overlap"
	// CommentNoRoom: MaxPerRollout selections were chosen before it.
	CommentNoRoom = "max_per_rollout"
	// CommentNoRule: the rules do not include feedback.
	CommentNoRule = "no_feedback_rule"
	// CommentTooLong: its hint is over max_hint_tokens (counted by the Hinter).
	CommentTooLong = "too_long"
)

// DroppedComment is a person's comment that Select left without a selection.
type DroppedComment struct {
	// Selection is the selection the comment would have had.
	Selection Selection
	// Reason is one of CommentOverlap, CommentNoRoom, CommentNoRule.
	Reason string
}

// SelectComments is Select that also returns the comments it left out, and why.
func SelectComments(r *rollout.Rollout, cfg SelectConfig) ([]Selection, []DroppedComment) {
	if len(r.Segments) == 0 {
		return nil, nil
	}
	var chosen []Selection
	var dropped []DroppedComment
	if !slices.Contains(cfg.Rules, ReasonFeedback) {
		for _, c := range feedbackCandidates(r) {
			dropped = append(dropped, DroppedComment{Selection: c, Reason: CommentNoRule})
		}
	}
	for _, rule := range cfg.Rules {
		limit := cfg.MaxPerRollout
		if rule == ReasonSurprise {
			limit = cfg.SurpriseTurns
		}
		gap := int32(cfg.MinGap)
		if rule == ReasonFeedback {
			gap = 0 // a person's comment is never spaced out
		}
		taken := 0
		for _, c := range candidates(r, rule, cfg) {
			if len(chosen) >= cfg.MaxPerRollout || taken >= limit {
				if rule == ReasonFeedback {
					dropped = append(dropped, DroppedComment{Selection: c, Reason: CommentNoRoom})
					continue
				}
				break
			}
			if !collides(c, chosen, gap) {
				chosen = append(chosen, c)
				taken++
			} else if rule == ReasonFeedback {
				dropped = append(dropped, DroppedComment{Selection: c, Reason: CommentOverlap})
			}
		}
	}
	slices.SortFunc(chosen, func(a, b Selection) int { return cmp.Compare(a.InsertAt, b.InsertAt) })
	return chosen, dropped
}

// collides reports whether c overlaps a chosen range or comes closer than gap to one.
func collides(c Selection, chosen []Selection, gap int32) bool {
	for _, s := range chosen {
		if c.InsertAt < s.End+gap && s.InsertAt < c.End+gap {
			return true
		}
	}
	return false
}

func candidates(r *rollout.Rollout, rule Reason, cfg SelectConfig) []Selection {
	switch rule {
	case ReasonToolError:
		return toolErrorCandidates(r)
	case ReasonFeedback:
		return feedbackCandidates(r)
	case ReasonNegativeRating:
		return negativeRatingCandidates(r)
	case ReasonSurprise:
		return surpriseCandidates(r, cfg)
	}
	return nil
}

// target returns the selection of segment i (a policy segment).
func target(r *rollout.Rollout, i int, reason Reason, source int) Selection {
	return Selection{
		Segment:  i,
		InsertAt: r.Segments[turnStart(r, i)].Start,
		End:      r.Segments[i].End,
		Reason:   reason,
		Source:   source,
	}
}

// turnStart returns the index of the first segment of the policy turn holding segment
// i: a policy turn is a maximal run of consecutive policy segments.
func turnStart(r *rollout.Rollout, i int) int {
	for i > 0 && r.Segments[i-1].Kind.IsPolicy() {
		i--
	}
	return i
}

// turnEnd returns the index of the last segment of the policy turn holding segment i.
func turnEnd(r *rollout.Rollout, i int) int {
	for i+1 < len(r.Segments) && r.Segments[i+1].Kind.IsPolicy() {
		i++
	}
	return i
}

func toolErrorCandidates(r *rollout.Rollout) []Selection {
	results := pairToolResults(r)
	var out []Selection
	for i, s := range r.Segments {
		if s.Kind != rollout.KindToolCall {
			continue
		}
		switch {
		case s.Status == rollout.StatusError:
			out = append(out, target(r, i, ReasonToolError, i))
		case results[i] >= 0 && r.Segments[results[i]].Status == rollout.StatusError:
			out = append(out, target(r, i, ReasonToolError, results[i]))
		}
	}
	return out
}

// pairToolResults maps each tool_call segment to the index of its tool_result, -1
// where it has none. Calls are matched to results in order (parallel calls: the k-th
// pending call of the same tool, else the oldest pending call); a user or system
// segment ends the calls still pending.
func pairToolResults(r *rollout.Rollout) []int {
	res := make([]int, len(r.Segments))
	var pending []int
	for i, s := range r.Segments {
		res[i] = -1
		switch s.Kind {
		case rollout.KindToolCall:
			pending = append(pending, i)
		case rollout.KindToolResult:
			if len(pending) == 0 {
				continue
			}
			k := 0
			if s.Tool != "" {
				if j := slices.IndexFunc(pending, func(c int) bool { return r.Segments[c].Tool == s.Tool }); j >= 0 {
					k = j
				}
			}
			res[pending[k]] = i
			pending = slices.Delete(pending, k, k+1)
		case rollout.KindUser, rollout.KindSystem:
			pending = pending[:0]
		}
	}
	return res
}

func feedbackCandidates(r *rollout.Rollout) []Selection {
	var out []Selection
	for i, s := range r.Segments {
		if strings.TrimSpace(s.Feedback) == "" {
			continue
		}
		if s.Kind.IsPolicy() {
			out = append(out, target(r, i, ReasonFeedback, i))
			continue
		}
		// Feedback on context (a tool result, a user turn) targets the next policy turn.
		for j := i + 1; j < len(r.Segments); j++ {
			if r.Segments[j].Kind.IsPolicy() {
				out = append(out, target(r, turnEnd(r, j), ReasonFeedback, i))
				break
			}
		}
	}
	return out
}

func negativeRatingCandidates(r *rollout.Rollout) []Selection {
	if !r.HasFeedback || r.Feedback >= 0 {
		return nil
	}
	for i := len(r.Segments) - 1; i >= 0; i-- {
		if r.Segments[i].Kind.IsPolicy() {
			return []Selection{target(r, i, ReasonNegativeRating, -1)}
		}
	}
	return nil
}

// surpriseCandidates scores each policy turn of a low-reward rollout by the mean of
// its SurpriseTopK lowest sampler log-probs and returns the turns most surprising
// first; Select takes at most SurpriseTurns of them.
func surpriseCandidates(r *rollout.Rollout, cfg SelectConfig) []Selection {
	if !r.HasReward || float64(r.Reward) >= cfg.RewardThreshold || cfg.SurpriseTurns == 0 {
		return nil
	}
	var out []Selection
	lows := make([]float64, 0, cfg.SurpriseTopK)
	for i := 0; i < len(r.Segments); i++ {
		if !r.Segments[i].Kind.IsPolicy() {
			continue
		}
		last := turnEnd(r, i)
		lows = lows[:0]
		for t := r.Segments[i].Start; t < r.Segments[last].End; t++ {
			lp, ok := r.LogProb(int(t))
			if !ok {
				continue
			}
			lows = pushLowest(lows, float64(lp), cfg.SurpriseTopK)
		}
		if len(lows) > 0 {
			sum := 0.0
			for _, v := range lows {
				sum += v
			}
			sel := target(r, last, ReasonSurprise, -1)
			sel.Score = sum / float64(len(lows))
			out = append(out, sel)
		}
		i = last
	}
	slices.SortStableFunc(out, func(a, b Selection) int { return cmp.Compare(a.Score, b.Score) })
	return out
}

// pushLowest keeps the k lowest values seen, in ascending order.
func pushLowest(lows []float64, v float64, k int) []float64 {
	if len(lows) == k {
		if v >= lows[k-1] {
			return lows
		}
		lows = lows[:k-1]
	}
	i, _ := slices.BinarySearch(lows, v)
	return slices.Insert(lows, i, v)
}
