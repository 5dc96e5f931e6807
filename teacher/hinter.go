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
	res.Selections = Select(r, h.cfg.Select)
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
		switch {
		case hint.Text == "" && hint.Err != nil:
			res.Failed = append(res.Failed, hint)
			h.stats.failed[KindOf(hint.Err)].Add(1)
			log.Str("outcome", "failed").Str("kind", KindOf(hint.Err).String()).Msg("no hint")
			continue
		case hint.Text == "":
			h.stats.noHint.Add(1)
			log.Str("outcome", "none").Msg("no hint")
			continue
		}
		if leak := h.guard.Check(r, hint.Selection, hint.Text); leak != nil {
			hint.Leak = leak
			res.Leaks = append(res.Leaks, hint)
			h.stats.leakFlagged.Add(1)
			if h.cfg.Leak.Action == "drop" {
				h.stats.leakDropped.Add(1)
				log.Str("outcome", "leak").Str("leak", leak.String()).Msg("hint dropped")
				continue
			}
		}
		toks, err := h.inserter.Wrap(hint.Text)
		if err != nil {
			res.TooLong = append(res.TooLong, hint)
			h.stats.tooLong.Add(1)
			log.Str("outcome", "too_long").Err(err).Msg("hint dropped")
			continue
		}
		hint.Tokens, hint.Empty = toks, h.inserter.Empty()
		res.Hints = append(res.Hints, hint)
		h.stats.hint(hint.Source)
		log.Str("outcome", "hint").Int("tokens", len(toks)).Bool("cached", hint.Cached).Msg("hint")
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
