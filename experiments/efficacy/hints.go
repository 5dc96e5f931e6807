package efficacy

import (
	"context"
	"fmt"
	"strings"

	"github.com/hindsight-ai/hindsight/credit"
	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/rollout"
	"github.com/hindsight-ai/hindsight/teacher"
	"github.com/hindsight-ai/hindsight/toolworld"
)

// HintStats count what the hint stage did over a run.
type HintStats struct {
	Rollouts   int `json:"rollouts"`
	Selections int `json:"selections"`
	Hints      int `json:"hints"`   // hints kept, trained on
	NoHint     int `json:"no_hint"` // selections the rules had nothing to say about
	// AnswerLeaks are hints dropped because they held the task's answer or the name of
	// a file it reads; GuardLeaks those the teacher's general leak guard dropped.
	AnswerLeaks int `json:"answer_leaks"`
	GuardLeaks  int `json:"guard_leaks"`
	TooLong     int `json:"too_long"`
	// NoRetry counts hints of PlaceRetry dropped because no policy turn follows the
	// failed call (or another hint already targets it).
	NoRetry int `json:"no_retry,omitempty"`
	// ByReason counts kept hints per selection rule (tool_error, surprise, …); in the
	// sdpo arm, the hint spans trained on per context kind (sibling, feedback,
	// sibling+feedback).
	ByReason map[string]int `json:"by_reason"`
	// Contexts are the sdpo arm's teacher.Stats contexts: selections given the
	// feedback context, rollouts given a sibling, and those whose group had no
	// success (sibling_no_success).
	Contexts map[string]int `json:"contexts,omitempty"`
	// Placebo counts the placebo arm's hints given another task's text
	// (Hinter.Placebo); PlaceboSameTask those dropped because every other text left
	// was of their own task.
	Placebo         int `json:"placebo,omitempty"`
	PlaceboSameTask int `json:"placebo_same_task,omitempty"`
}

// Hinter is the experiment's hint stage: teacher.Select on the whole rollout (the
// selection may read the reward), then the rules teacher on the rollout cut just
// after the selected segment and its own tool result (the teacher never sees what
// came later, the reward or the checker), the general leak guard, the answer guard
// (a hint holding the task's answer or one of its files' names is dropped and
// counted) and the hint template. It is not safe for concurrent use.
type Hinter struct {
	setup    HintSetup
	sel      teacher.SelectConfig
	rules    rulesTeacher
	guard    *teacher.LeakGuard
	inserter *teacher.Inserter
	tok      tokenizer.Tokenizer
	Stats    HintStats
}

// HintTemplate is the byte tokenizer's hint turn, "<|user|>Hint: …<|end|>", the turn
// toolworld.Env.Hint writes.
var HintTemplate = teacher.Template{Preset: "bytes", Label: toolworld.HintLabel}

// HintPatterns are the rules teacher's patterns in the task world: failed_call and
// repeated_failure. unused_tool is left out: on any failure it names two tools the
// episode did not call, which in a task that needs two or three of six tools is
// mostly wrong advice and doubles a hint's length (~180 byte tokens, most of a
// 256-token rollout); ignored_exit never fires (the tools print no exit codes).
var HintPatterns = []string{teacher.PatternFailedCall, teacher.PatternRepeatedFailure}

// rulesTeacher is what the hint stage asks for hint text: teacher.RulesTeacher or
// WorldRules.
type rulesTeacher interface {
	Hints(ctx context.Context, r *rollout.Rollout, sels []teacher.Selection) ([]teacher.Hint, error)
}

// HintSetup is the hint stage's choice of rules and of where a hint goes.
type HintSetup struct {
	// Rules: RulesGeneric (the teacher package's rules with HintPatterns, protocol 1
	// and the warm start's demonstrations) or RulesWorld (WorldRules, protocol 2).
	Rules string `json:"rules"`
	// Place: PlaceFailed (the hint before the failed call it is about, scoring that
	// call: protocol 1) or PlaceRetry (the hint after the failed call's result, before
	// the next policy turn, scoring that turn: where the warm start's demonstrations
	// put their hint turns; protocol 2).
	Place string `json:"place"`
	// Base is the hint arms' credit base: credit.BaseStudent (protocol 1) or
	// credit.BaseEmptyHint (q(h) − q(∅): the template's own shift taken out).
	Base credit.Base `json:"base"`
}

// The rules and places of HintSetup.
const (
	RulesGeneric = "generic"
	RulesWorld   = "world"
	// RulesWorld3 is protocol 3's world rules (SlipHint): a hint for every slip,
	// failed or silent, at the retry turn; Place must be PlaceRetry.
	RulesWorld3 = "world3"
	PlaceFailed = "failed"
	PlaceRetry  = "retry"
)

// Protocol1Hints is the first protocol's setup (and the warm start's);
// Protocol2Hints the second's, chosen from the warm-start probe (Probe) before any
// protocol-2 arm ran.
var (
	Protocol1Hints = HintSetup{Rules: RulesGeneric, Place: PlaceFailed, Base: credit.BaseStudent}
	Protocol2Hints = HintSetup{Rules: RulesWorld, Place: PlaceRetry, Base: credit.BaseEmptyHint}
)

// Validate names a bad field.
func (s HintSetup) Validate() error {
	if s.Rules != RulesGeneric && s.Rules != RulesWorld && s.Rules != RulesWorld3 {
		return fmt.Errorf("hints.rules: %q, want %s, %s or %s", s.Rules, RulesGeneric, RulesWorld, RulesWorld3)
	}
	if s.Rules == RulesWorld3 && s.Place != PlaceRetry {
		return fmt.Errorf("hints.place: %q, rules %s hint the retry turn only (%s)", s.Place, RulesWorld3, PlaceRetry)
	}
	if s.Place != PlaceFailed && s.Place != PlaceRetry {
		return fmt.Errorf("hints.place: %q, want %s or %s", s.Place, PlaceFailed, PlaceRetry)
	}
	if s.Base != credit.BaseStudent && s.Base != credit.BaseEmptyHint {
		return fmt.Errorf("hints.base: %q, want %s or %s", s.Base, credit.BaseStudent, credit.BaseEmptyHint)
	}
	return nil
}

// String is RULES,PLACE,BASE, the form ParseHintSetup reads.
func (s HintSetup) String() string { return s.Rules + "," + s.Place + "," + string(s.Base) }

// ParseHintSetup reads RULES,PLACE,BASE (e.g. "world,retry,empty_hint").
func ParseHintSetup(v string) (HintSetup, error) {
	f := strings.Split(v, ",")
	if len(f) != 3 {
		return HintSetup{}, fmt.Errorf("hint setup %q: want RULES,PLACE,BASE", v)
	}
	s := HintSetup{Rules: f[0], Place: f[1], Base: credit.Base(f[2])}
	return s, s.Validate()
}

// NewHinter returns the hint stage of protocol 1 (Protocol1Hints), the one the warm
// start's demonstrations were written with.
func NewHinter(tok tokenizer.Tokenizer) (*Hinter, error) { return NewHinterWith(tok, Protocol1Hints) }

// NewHinterWith returns the hint stage with the teacher package's default selection
// and leak guard, setup's rules and placement, and HintTemplate.
func NewHinterWith(tok tokenizer.Tokenizer, setup HintSetup) (*Hinter, error) {
	if err := setup.Validate(); err != nil {
		return nil, fmt.Errorf("new hinter: %w", err)
	}
	cfg := teacher.DefaultConfig()
	cfg.Rules.Patterns = HintPatterns
	in, err := teacher.NewInserter(HintTemplate, tok, cfg.MaxHintTokens)
	if err != nil {
		return nil, fmt.Errorf("new hinter: %w", err)
	}
	var rules rulesTeacher = teacher.NewRulesTeacher(cfg.Rules, tok)
	if setup.Rules == RulesWorld {
		rules = NewWorldRules(tok)
	}
	return &Hinter{setup: setup, sel: cfg.Select, rules: rules,
		guard: teacher.NewLeakGuard(cfg.Leak, tok), inserter: in, tok: tok,
		Stats: HintStats{ByReason: map[string]int{}}}, nil
}

// Hints returns the hints of rollout r of task t, each with its template tokens.
func (h *Hinter) Hints(ctx context.Context, r *rollout.Rollout, t toolworld.Task) ([]teacher.Hint, error) {
	h.Stats.Rollouts++
	if h.setup.Rules == RulesWorld3 {
		return h.slipHints(r, t)
	}
	sels := teacher.Select(r, h.sel)
	h.Stats.Selections += len(sels)
	var out []teacher.Hint
	targets := map[int]bool{}
	for _, s := range sels {
		seen := cutAfter(r, s.Segment)
		got, err := h.rules.Hints(ctx, seen, []teacher.Selection{s})
		if err != nil {
			return nil, fmt.Errorf("hints for %s: %w", r.ID, err)
		}
		hint := got[0]
		if h.setup.Place == PlaceRetry && strings.TrimSpace(hint.Text) != "" {
			rs, ok := retryOf(r, s)
			if !ok || targets[rs.Segment] {
				h.Stats.NoRetry++
				continue
			}
			targets[rs.Segment] = true
			hint.Selection = rs
		}
		switch {
		case strings.TrimSpace(hint.Text) == "":
			h.Stats.NoHint++
			continue
		case LeaksAnswer(hint.Text, t):
			h.Stats.AnswerLeaks++
			continue
		case h.guard.Check(r, hint.Selection, hint.Text) != nil:
			h.Stats.GuardLeaks++
			continue
		}
		toks, err := h.inserter.Wrap(hint.Text)
		if err != nil {
			h.Stats.TooLong++
			continue
		}
		hint.Tokens, hint.Empty = toks, h.inserter.Empty()
		out = append(out, hint)
		h.Stats.Hints++
		h.Stats.ByReason[string(s.Reason)]++
	}
	return out, nil
}

// retryOf moves selection s, about a failed call, to the policy turn after that
// call's result: the hint goes where the warm start's demonstrations put their hint
// turns (after the error, before the next action) and the scored range is that next
// turn. false when the rollout has no policy turn after the call's result.
func retryOf(r *rollout.Rollout, s teacher.Selection) (teacher.Selection, bool) {
	k := s.Segment
	for k < len(r.Segments) && r.Segments[k].Kind.IsPolicy() {
		k++ // past the failed call's turn
	}
	src := k
	for k < len(r.Segments) && !r.Segments[k].Kind.IsPolicy() {
		k++ // past its result
	}
	if k >= len(r.Segments) {
		return teacher.Selection{}, false
	}
	first := k
	for k+1 < len(r.Segments) && r.Segments[k+1].Kind.IsPolicy() {
		k++
	}
	return teacher.Selection{Segment: k, InsertAt: r.Segments[first].Start, End: r.Segments[k].End,
		Reason: s.Reason, Source: src, Score: s.Score}, true
}

// cutAfter returns r as far as the teacher may see it for segment k: every segment up
// to k and, when k is a tool call, the tool result right after it; no reward.
func cutAfter(r *rollout.Rollout, k int) *rollout.Rollout {
	last := k
	if r.Segments[k].Kind == rollout.KindToolCall && k+1 < len(r.Segments) && r.Segments[k+1].Kind == rollout.KindToolResult {
		last = k + 1
	}
	end := r.Segments[last].End
	c := *r
	c.Tokens = r.Tokens[:end]
	c.LogProbs = r.LogProbs[:end]
	c.Segments = r.Segments[:last+1]
	c.Reward, c.HasReward, c.Feedback, c.HasFeedback = 0, false, 0, false
	return &c
}

// LeaksAnswer reports whether hint text gives away task t: its answer string, as a
// word, or the name of a file the solution reads (the answer's source).
func LeaksAnswer(text string, t toolworld.Task) bool {
	for _, w := range strings.FieldsFunc(text, func(r rune) bool {
		return !(r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '.' || r == '/' || r == '_' || r == '-')
	}) {
		if strings.Trim(w, ".") == t.Answer {
			return true
		}
	}
	for path := range t.Files {
		if !strings.Contains(strings.Join(t.Solution, "\n"), path) {
			continue
		}
		base := path[strings.LastIndexByte(path, '/')+1:]
		if strings.Contains(text, path) || strings.Contains(text, base) {
			return true
		}
	}
	return false
}

// slipHints are protocol 3's hints for a rollout of task t: the episode is replayed
// through a Tracker, and every slip (a failed call or a silent one) whose retry turn
// exists gets SlipHint's text, written from the episode up to the slip's result only.
// SlipHint's own guard (LeaksUnseen: never the answer, a solution file only once the
// episode has shown it) replaces the answer guard; the teacher's general leak guard is
// not run, since a hint that names the right next call is meant to match the retry
// turn when that turn is right.
func (h *Hinter) slipHints(r *rollout.Rollout, t toolworld.Task) ([]teacher.Hint, error) {
	k := NewTracker(t)
	var out []teacher.Hint
	for i, seg := range r.Segments {
		if seg.Kind != rollout.KindToolCall || i+1 >= len(r.Segments) || r.Segments[i+1].Kind != rollout.KindToolResult {
			continue
		}
		call, err1 := h.tok.Decode(r.Tokens[seg.Start:seg.End])
		res, err2 := h.tok.Decode(r.Tokens[r.Segments[i+1].Start:r.Segments[i+1].End])
		if err1 != nil || err2 != nil {
			continue
		}
		line := strings.TrimSpace(StripMarkers(call))
		if !k.Observe(line, strings.TrimSpace(StripMarkers(res)), r.Segments[i+1].Status == rollout.StatusError) {
			continue
		}
		h.Stats.Selections++
		text := SlipHint(k)
		if text == "" {
			h.Stats.NoHint++
			continue
		}
		sel, ok := retryOf(r, teacher.Selection{Segment: i, Reason: teacher.ReasonToolError})
		if !ok {
			h.Stats.NoRetry++
			continue
		}
		toks, err := h.inserter.Wrap(text)
		if err != nil {
			h.Stats.TooLong++
			continue
		}
		out = append(out, teacher.Hint{Selection: sel, Source: "world-rules-3", Text: text, Rule: RulesWorld3, Tokens: toks, Empty: h.inserter.Empty()})
		h.Stats.Hints++
		h.Stats.ByReason["slip"]++
	}
	return out, nil
}
