package teacher

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/hindsight-ai/hindsight/rollout"
)

// Hint is a teacher's answer for one selection.
type Hint struct {
	Selection
	// Text is the hint as the teacher wrote it; empty means the teacher has none.
	Text string
	// Source names the teacher that wrote it ("feedback", "rules", "openai").
	Source string
	// Rule names the rules-teacher patterns that produced Text, comma separated.
	Rule string
	// Cached is true when the text came from the on-disk cache.
	Cached bool
	// Err is set when the teacher failed for this selection (a *Failure); Text is then
	// empty.
	Err error
	// Tokens is Text wrapped in the model's hint template, ready to insert at InsertAt
	// (set by Hinter.Run).
	Tokens []int32
	// Empty is the same template with an empty hint, for credit base empty_hint (the
	// q(∅) pass); set with Tokens, from the same template, so a reload of the teacher
	// settings (SIGHUP) between hinting and scoring cannot pair a hint with another
	// template's empty turn.
	Empty []int32
	// Leak is set when the leak guard flagged the hint.
	Leak *Leak
	// Context is everything Tokens wrap: the sibling's solution, the environment's
	// feedback, and the hint text kept (Context.Hint; "" when only context is left).
	Context Context
	// Sibling is the rollout id of the sibling in Context; "" when none.
	Sibling string
}

// Teacher writes hints for the selected segments of one rollout.
type Teacher interface {
	// Name is the teacher's name in config and in Hint.Source.
	Name() string
	// Hints returns one Hint per selection, in the same order. A Hint with empty Text
	// and nil Err means the teacher has nothing to say there; a non-nil Err means it
	// failed there (and the failure is counted). The error result is only for a
	// cancelled ctx: a teacher never fails the whole rollout for one bad request.
	Hints(ctx context.Context, r *rollout.Rollout, sels []Selection) ([]Hint, error)
}

// FailureKind classifies why a teacher produced no hint.
type FailureKind uint8

// Failure kinds, as counted in Stats.
const (
	FailOther       FailureKind = iota // anything else (a network error, a bad URL)
	FailTimeout                        // the request ran past its timeout
	FailRateLimited                    // HTTP 429
	FailServer                         // HTTP 5xx
	FailClient                         // HTTP 4xx other than 429 (not retried)
	FailMalformed                      // a reply that is not a chat completion
	FailEmpty                          // a completion with no text
	FailTooLong                        // a hint longer than the token cap
	FailReset                          // the connection was reset or closed mid-reply
	FailBreakerOpen                    // the circuit breaker refused the request
	numFailureKinds
)

var failureNames = [numFailureKinds]string{
	FailOther:       "other",
	FailTimeout:     "timeout",
	FailRateLimited: "rate_limited",
	FailServer:      "server_error",
	FailClient:      "client_error",
	FailMalformed:   "malformed",
	FailEmpty:       "empty",
	FailTooLong:     "too_long",
	FailReset:       "reset",
	FailBreakerOpen: "breaker_open",
}

// String returns the kind's snake_case name, as used in Stats.
func (k FailureKind) String() string {
	if k < numFailureKinds {
		return failureNames[k]
	}
	return fmt.Sprintf("FailureKind(%d)", uint8(k))
}

// Failure is the error of a Hint whose teacher failed.
type Failure struct {
	Kind FailureKind
	Err  error
}

// Error returns the kind and the cause.
func (f *Failure) Error() string {
	if f.Err == nil {
		return f.Kind.String()
	}
	return f.Kind.String() + ": " + f.Err.Error()
}

// Unwrap returns the cause.
func (f *Failure) Unwrap() error { return f.Err }

// KindOf returns the FailureKind of err: its *Failure's kind, or FailOther.
func KindOf(err error) FailureKind {
	if f, ok := errors.AsType[*Failure](err); ok {
		return f.Kind
	}
	return FailOther
}

// chain is the Teacher that Compose returns.
type chain []Teacher

// Compose returns a Teacher that asks ts in order: each selection gets the hint of the
// first teacher that has one. A selection where an earlier teacher failed still goes to
// the later ones; it keeps the last failure only if none of them has a hint.
func Compose(ts ...Teacher) Teacher { return chain(ts) }

func (c chain) Name() string {
	names := make([]string, len(c))
	for i, t := range c {
		names[i] = t.Name()
	}
	return "chain(" + strings.Join(names, ",") + ")"
}

func (c chain) Hints(ctx context.Context, r *rollout.Rollout, sels []Selection) ([]Hint, error) {
	out := make([]Hint, len(sels))
	for i, s := range sels {
		out[i] = Hint{Selection: s}
	}
	todo := make([]int, len(sels)) // indices into sels still without a hint
	for i := range todo {
		todo[i] = i
	}
	for _, t := range c {
		if len(todo) == 0 {
			break
		}
		ask := make([]Selection, len(todo))
		for j, i := range todo {
			ask[j] = sels[i]
		}
		hs, err := t.Hints(ctx, r, ask)
		if err != nil {
			return nil, fmt.Errorf("teacher %s: %w", t.Name(), err)
		}
		if len(hs) != len(ask) {
			return nil, fmt.Errorf("teacher %s: %d hints for %d selections", t.Name(), len(hs), len(ask))
		}
		rest := todo[:0]
		for j, i := range todo {
			switch h := hs[j]; {
			case h.Text != "":
				out[i] = h
			case h.Err != nil:
				out[i] = h
				rest = append(rest, i)
			default:
				rest = append(rest, i)
			}
		}
		todo = rest
	}
	return out, nil
}
