package teacher

import (
	"sync"
	"sync/atomic"
)

// Stats counts what the teachers did. It is safe for concurrent use; the daemon reads
// it through Snapshot. The zero value is ready.
type Stats struct {
	rollouts, selections, noHint        atomic.Int64
	requests, retries                   atomic.Int64
	cacheHits, cacheMisses, cacheErrors atomic.Int64
	leakFlagged, leakDropped, tooLong   atomic.Int64
	held, outcomeOnly                   atomic.Int64
	breakerOpens                        atomic.Int64
	faults, failed                      [numFailureKinds]atomic.Int64
	mu                                  sync.Mutex
	hints                               map[string]int64 // by source; few keys
	contexts                            map[string]int64 // by context event; few keys
	comments                            map[string]int64 // comments dropped, by reason; few keys
	breakerState                        atomic.Value     // string
}

// Snapshot is a copy of the counters at one moment. Maps are fresh copies.
type Snapshot struct {
	Rollouts   int64 // rollouts run through the teacher
	Selections int64 // segments selected for a hint
	// Hints counts the hints kept (after the leak guard), by source teacher.
	Hints map[string]int64
	// NoHint counts selections for which no teacher had a hint and none failed.
	NoHint int64
	// Failed counts selections left without a hint because a teacher failed, by the
	// kind of the last failure.
	Failed map[string]int64
	// Faults counts every failed request attempt to the LLM server by kind, retried or
	// not, plus requests the breaker refused.
	Faults   map[string]int64
	Requests int64 // requests sent to the LLM server, retries included
	Retries  int64 // of which retries
	// Cache counters: hits, misses, and entries that could not be read or written.
	CacheHits, CacheMisses, CacheErrors int64
	LeakFlagged                         int64 // hints the leak guard flagged
	LeakDropped                         int64 // of which dropped (leak.action: drop)
	TooLong                             int64 // hints dropped at insertion for exceeding max_hint_tokens
	// Held counts rollouts held back because a teacher failed (on_failure: hold);
	// OutcomeOnly counts rollouts that lost at least one hint to a failure and train on
	// their outcome signal alone there (on_failure: outcome_only).
	Held, OutcomeOnly int64
	BreakerOpens      int64  // times the circuit breaker opened
	BreakerState      string // closed, open, half_open; empty without an LLM teacher
	// Contexts counts the teacher contexts: "feedback" (selections given the
	// environment's feedback), "context_only" (of all hints kept, those without a
	// written hint), "sibling" (rollouts given a successful sibling),
	// "sibling_no_success" (rollouts below their group's best whose group had no
	// success), "sibling_too_long" (siblings over sibling.max_tokens, not used).
	Contexts map[string]int64
	// CommentsDropped counts a person's comments that gave no hint, by reason:
	// CommentOverlap, CommentNoRoom, CommentNoRule (Select), CommentTooLong (over
	// max_hint_tokens).
	CommentsDropped map[string]int64
}

// Snapshot returns the current counters.
func (s *Stats) Snapshot() Snapshot {
	snap := Snapshot{
		Rollouts:        s.rollouts.Load(),
		Selections:      s.selections.Load(),
		NoHint:          s.noHint.Load(),
		Requests:        s.requests.Load(),
		Retries:         s.retries.Load(),
		CacheHits:       s.cacheHits.Load(),
		CacheMisses:     s.cacheMisses.Load(),
		CacheErrors:     s.cacheErrors.Load(),
		LeakFlagged:     s.leakFlagged.Load(),
		LeakDropped:     s.leakDropped.Load(),
		TooLong:         s.tooLong.Load(),
		Held:            s.held.Load(),
		OutcomeOnly:     s.outcomeOnly.Load(),
		BreakerOpens:    s.breakerOpens.Load(),
		Hints:           map[string]int64{},
		Failed:          map[string]int64{},
		Faults:          map[string]int64{},
		Contexts:        map[string]int64{},
		CommentsDropped: map[string]int64{},
	}
	if v, ok := s.breakerState.Load().(string); ok {
		snap.BreakerState = v
	}
	for k := range numFailureKinds {
		if n := s.faults[k].Load(); n != 0 {
			snap.Faults[k.String()] = n
		}
		if n := s.failed[k].Load(); n != 0 {
			snap.Failed[k.String()] = n
		}
	}
	s.mu.Lock()
	for k, v := range s.hints {
		snap.Hints[k] = v
	}
	for k, v := range s.contexts {
		snap.Contexts[k] = v
	}
	for k, v := range s.comments {
		snap.CommentsDropped[k] = v
	}
	s.mu.Unlock()
	return snap
}

func (s *Stats) fault(k FailureKind) { s.faults[k].Add(1) }

func (s *Stats) hint(source string) {
	s.mu.Lock()
	if s.hints == nil {
		s.hints = map[string]int64{}
	}
	s.hints[source]++
	s.mu.Unlock()
}

func (s *Stats) context(event string) {
	s.mu.Lock()
	if s.contexts == nil {
		s.contexts = map[string]int64{}
	}
	s.contexts[event]++
	s.mu.Unlock()
}

func (s *Stats) commentDropped(reason string) {
	s.mu.Lock()
	if s.comments == nil {
		s.comments = map[string]int64{}
	}
	s.comments[reason]++
	s.mu.Unlock()
}
