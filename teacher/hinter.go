package teacher

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/rs/zerolog"

	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/rollout"
)

// Deps are what a Hinter needs from its owner.
type Deps struct {
	// Tokenizer is the policy's tokenizer: it reads rollout text and encodes hints.
	Tokenizer tokenizer.Tokenizer
	Logger    zerolog.Logger
	// Stats receives the counters; nil makes a fresh one (see Hinter.Stats).
	Stats *Stats
	// HTTPClient is used by the openai teacher; nil makes a plain one.
	HTTPClient *http.Client
}

// Hinter runs one rollout through selection, the teacher chain, the leak guard and the
// hint template. It is safe for concurrent use.
type Hinter struct {
	cfg      Config
	teacher  Teacher
	guard    *LeakGuard
	inserter *Inserter
	tok      tokenizer.Tokenizer
	stats    *Stats
	log      zerolog.Logger
}

// New returns the Hinter cfg describes. cfg must be valid (Config.Validate).
func New(cfg Config, deps Deps) (*Hinter, error) {
	if err := cfg.Validate("teacher."); err != nil {
		return nil, err
	}
	if deps.Tokenizer == nil {
		return nil, errors.New("new teacher: no tokenizer")
	}
	if deps.Stats == nil {
		deps.Stats = &Stats{}
	}
	log := deps.Logger.With().Str("component", "teacher").Logger()
	in, err := NewInserter(cfg.Template, deps.Tokenizer, cfg.MaxHintTokens)
	if err != nil {
		return nil, fmt.Errorf("new teacher: %w", err)
	}
	var ts []Teacher
	for _, name := range cfg.Chain {
		switch name {
		case TeacherFeedback:
			ts = append(ts, FeedbackTeacher{})
		case TeacherRules:
			ts = append(ts, NewRulesTeacher(cfg.Rules, deps.Tokenizer))
		case TeacherOpenAI:
			var cache *Cache
			if cfg.CacheDir != "" {
				if cache, err = OpenCache(cfg.CacheDir); err != nil {
					return nil, fmt.Errorf("new teacher: %w", err)
				}
			}
			t, err := NewOpenAITeacher(cfg.OpenAI, OpenAIDeps{
				Tokenizer: deps.Tokenizer, Logger: log, Stats: deps.Stats, Cache: cache, HTTPClient: deps.HTTPClient,
			})
			if err != nil {
				return nil, fmt.Errorf("new teacher: %w", err)
			}
			ts = append(ts, t)
		}
	}
	return &Hinter{
		cfg:      cfg,
		teacher:  Compose(ts...),
		guard:    NewLeakGuard(cfg.Leak, deps.Tokenizer),
		inserter: in,
		tok:      deps.Tokenizer,
		stats:    deps.Stats,
		log:      log,
	}, nil
}

// Stats returns the counters the Hinter updates.
func (h *Hinter) Stats() *Stats { return h.stats }

// Inserter returns the hint template in use (for Empty, the q(∅) base).
func (h *Hinter) Inserter() *Inserter { return h.inserter }

// Result is what Run found for one rollout.
type Result struct {
	Selections []Selection
	// Hints are the hints to train on, in InsertAt order, each with its template
	// Tokens and its Empty template.
	Hints []Hint
	// Failed are selections whose teachers failed (Hint.Err says how); they get no
	// hint.
	Failed []Hint
	// Leaks are the hints the leak guard flagged; with leak.action "drop" they are not
	// in Hints.
	Leaks []Hint
	// TooLong are hints dropped for exceeding max_hint_tokens.
	TooLong []Hint
	// Hold asks the caller to keep the rollout back and try later: a teacher failed
	// and on_failure is "hold".
	Hold bool
}

// Run selects the segments of r worth a hint, asks the teacher chain, and checks and
// encodes the hints. It returns an error only when ctx is cancelled: teacher failures
// are in Result.Failed and counted.
func (h *Hinter) Run(ctx context.Context, r *rollout.Rollout) (Result, error) {
	var res Result
	var dropped []DroppedComment
	res.Selections, dropped = SelectComments(r, h.cfg.Select)
	for _, d := range dropped {
		h.stats.commentDropped(d.Reason)
		h.log.Warn().Str("rollout_id", r.ID).Int("segment", d.Selection.Source).Str("reason", d.Reason).
			Msg("a person's comment gives no hint")
	}
	h.stats.rollouts.Add(1)
	h.stats.selections.Add(int64(len(res.Selections)))
	if len(res.Selections) == 0 {
		return res, nil
	}
	hints, err := h.teacher.Hints(ctx, r, res.Selections)
	if err != nil {
		return Result{}, fmt.Errorf("hints for rollout %s: %w", r.ID, err)
	}
	for _, hint := range hints {
		log := h.log.Debug().Str("rollout_id", r.ID).Int("segment", hint.Segment).
			Str("reason", string(hint.Reason)).Str("source", hint.Source)
		// The environment's feedback for the turn's failed call, when configured: it
		// stays in the teacher's context whatever becomes of the written hint.
		var fb string
		if h.cfg.Context.Uses(ContextFeedback) {
			if fb, err = EnvFeedback(h.tok, r, hint.Selection); err != nil {
				h.log.Debug().Str("rollout_id", r.ID).Int("segment", hint.Segment).Err(err).Msg("no feedback context")
				fb = ""
			}
			fb = capTokens(h.tok, fb, h.cfg.Context.Feedback.MaxTokens)
		}
		ctxOnly := func(outcome string) {
			if fb == "" {
				return
			}
			hint.Text, hint.Source, hint.Err, hint.Leak = "", "context", nil, nil
			// A fresh event: the one above may have been sent already.
			h.keep(&res, hint, Context{Feedback: fb}, h.log.Debug().Str("rollout_id", r.ID).Int("segment", hint.Segment).
				Str("reason", string(hint.Reason)).Str("source", hint.Source).Str("hint_outcome", outcome))
		}
		switch {
		case hint.Text == "" && hint.Err != nil:
			res.Failed = append(res.Failed, hint)
			h.stats.failed[KindOf(hint.Err)].Add(1)
			log.Str("outcome", "failed").Str("kind", KindOf(hint.Err).String()).Msg("no hint")
			ctxOnly("failed")
			continue
		case hint.Text == "":
			if fb == "" {
				h.stats.noHint.Add(1)
				log.Str("outcome", "none").Msg("no hint")
			}
			ctxOnly("none")
			continue
		}
		ctx := Context{Feedback: fb, Hint: hint.Text}
		if leak := h.guard.Check(r, hint.Selection, hint.Text, ctx.Shown()...); leak != nil {
			hint.Leak = leak
			res.Leaks = append(res.Leaks, hint)
			h.stats.leakFlagged.Add(1)
			if h.cfg.Leak.Action == "drop" {
				h.stats.leakDropped.Add(1)
				log.Str("outcome", "leak").Str("leak", leak.String()).Msg("hint dropped")
				ctxOnly("leak")
				continue
			}
		}
		if _, err := h.inserter.Wrap(hint.Text); err != nil {
			res.TooLong = append(res.TooLong, hint)
			h.stats.tooLong.Add(1)
			if hint.Reason == ReasonFeedback && hint.Source == "feedback" {
				h.stats.commentDropped(CommentTooLong)
				h.log.Warn().Str("rollout_id", r.ID).Int("segment", hint.Segment).Str("reason", CommentTooLong).Err(err).
					Msg("a person's comment gives no hint")
			}
			log.Str("outcome", "too_long").Err(err).Msg("hint dropped")
			ctxOnly("too_long")
			continue
		}
		h.keep(&res, hint, ctx, log)
	}
	if len(res.Failed) > 0 {
		if h.cfg.OnFailure == OnFailureHold {
			res.Hold = true
			h.stats.held.Add(1)
		} else {
			h.stats.outcomeOnly.Add(1)
		}
	}
	return res, nil
}

// keep wraps hint's context into its template tokens and adds it to res.Hints.
func (h *Hinter) keep(res *Result, hint Hint, ctx Context, log *zerolog.Event) {
	hint.Context = ctx
	hint.Tokens, hint.Empty = h.inserter.WrapContext(h.cfg.Context, ctx), h.inserter.Empty()
	res.Hints = append(res.Hints, hint)
	h.stats.hint(hint.Source)
	if ctx.Feedback != "" {
		h.stats.context(ContextFeedback)
	}
	if ctx.Hint == "" {
		h.stats.context("context_only")
	}
	log.Str("outcome", "hint").Str("context", ctx.Kind()).Int("tokens", len(hint.Tokens)).Bool("cached", hint.Cached).Msg("hint")
}

// capTokens returns text cut to its first max tokens (0: no cap).
func capTokens(tok tokenizer.Tokenizer, text string, max int) string {
	if max <= 0 || text == "" {
		return text
	}
	ids := tok.EncodeText(text)
	if len(ids) <= max {
		return text
	}
	cut, err := tok.Decode(ids[:max])
	if err != nil {
		return ""
	}
	return cut + "…"
}

// CommentProblem says why a person's comment on segment seg of r would give no
// hint under the current settings, "" when it would: over max_hint_tokens, or left
// out by selection (overlap, max_per_rollout, no feedback rule). r is the rollout
// as it stands with the comment in it; nil checks the length only. The gateway's
// feedback API answers with it, so the person knows at once (docs/gateway.md).
func (h *Hinter) CommentProblem(r *rollout.Rollout, seg int, comment string) string {
	if _, err := h.inserter.Wrap(comment); err != nil {
		return fmt.Sprintf("%s: %v (teacher.max_hint_tokens)", CommentTooLong, err)
	}
	if r == nil {
		return ""
	}
	_, dropped := SelectComments(r, h.cfg.Select)
	for _, d := range dropped {
		if d.Selection.Source == seg {
			switch d.Reason {
			case CommentNoRoom:
				return fmt.Sprintf("%s: the rollout has teacher.select.max_per_rollout (%d) selections before this comment's turn", d.Reason, h.cfg.Select.MaxPerRollout)
			case CommentNoRule:
				return d.Reason + ": teacher.select.rules has no feedback rule"
			default:
				return d.Reason + ": another selection covers this comment's turn"
			}
		}
	}
	return ""
}
