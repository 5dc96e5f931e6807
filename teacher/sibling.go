package teacher

import (
	"github.com/hindsight-ai/hindsight/rollout"
)

// StepRollout is one rollout of an optimizer step with the hints Run gave it, for
// Hinter.Siblings.
type StepRollout struct {
	Rollout *rollout.Rollout
	// Accepted: the journal accepted it (only accepted rollouts are siblings).
	Accepted bool
	Hints    []Hint
}

// Siblings gives the rollouts of one step their sibling contexts (teacher.context
// sibling; without it the hints come back as they are). For each rollout below its
// group's best that PickSiblings pairs with a success, every hint's context gets the
// sibling's solution in front and its Tokens are wrapped again; a rollout with no hint
// gets one selection over its whole response (ReasonSibling: from its first policy
// turn to the end of its last policy segment) with the sibling alone in front, the
// dense credit SDPO gives a failed attempt. The result has one hint slice per step
// rollout, fresh (the inputs are not modified). A group without a success, and a
// sibling over sibling.max_tokens, are counted in Stats.Contexts.
func (h *Hinter) Siblings(step []StepRollout) [][]Hint {
	out := make([][]Hint, len(step))
	for i, s := range step {
		out[i] = s.Hints
	}
	cfg := h.cfg.Context
	if !cfg.Uses(ContextSibling) {
		return out
	}
	members := make([]Member, len(step))
	for i, s := range step {
		r := s.Rollout
		members[i] = Member{TaskID: r.TaskID, Reward: float64(r.Reward), HasReward: r.HasReward, Accepted: s.Accepted}
	}
	rendered := map[int]string{} // by sibling index; "" when unusable
	for i, pick := range PickSiblings(members, cfg.Sibling.SuccessReward) {
		if pick.Miss == MissNoSuccess {
			h.stats.context("sibling_no_success")
		}
		if pick.Sibling < 0 {
			continue
		}
		sol, ok := rendered[pick.Sibling]
		if !ok {
			sib := step[pick.Sibling].Rollout
			text, err := RenderSolution(h.tok, sib)
			switch {
			case err != nil:
				h.log.Warn().Err(err).Str("rollout_id", sib.ID).Msg("sibling not rendered")
			case text == "":
			case cfg.Sibling.MaxTokens > 0 && len(h.tok.EncodeText(text)) > cfg.Sibling.MaxTokens:
				h.stats.context("sibling_too_long")
			default:
				sol = text
			}
			rendered[pick.Sibling] = sol
		}
		if sol == "" {
			continue
		}
		r, sibID := step[i].Rollout, step[pick.Sibling].Rollout.ID
		hints := make([]Hint, 0, max(1, len(step[i].Hints)))
		for _, hint := range step[i].Hints {
			if hint.Context.Hint == "" && hint.Context.Feedback == "" {
				hint.Context.Hint = hint.Text // a hint made without Run (its Context unset)
			}
			hint.Context.Sibling, hint.Sibling = sol, sibID
			hint.Tokens = h.inserter.WrapContext(cfg, hint.Context)
			hints = append(hints, hint)
		}
		if len(hints) == 0 {
			sel, ok := responseSelection(r)
			if !ok {
				continue
			}
			ctx := Context{Sibling: sol}
			hints = append(hints, Hint{Selection: sel, Source: "context", Context: ctx, Sibling: sibID,
				Tokens: h.inserter.WrapContext(cfg, ctx), Empty: h.inserter.Empty()})
		}
		out[i] = hints
		h.stats.context(ContextSibling)
		h.log.Debug().Str("rollout_id", r.ID).Str("sibling", sibID).Int("hints", len(hints)).Msg("sibling context")
	}
	return out
}

// responseSelection returns the selection of r's whole response: inserted at its first
// policy turn, scored to the end of its last policy segment; false when r has no
// policy segment.
func responseSelection(r *rollout.Rollout) (Selection, bool) {
	first, last := -1, -1
	for i, s := range r.Segments {
		if s.Kind.IsPolicy() {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	if first < 0 {
		return Selection{}, false
	}
	return Selection{Segment: last, InsertAt: r.Segments[first].Start, End: r.Segments[last].End,
		Reason: ReasonSibling, Source: -1}, true
}
