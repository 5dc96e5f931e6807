package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hindsight-ai/hindsight/internal/fsutil"
	"github.com/hindsight-ai/hindsight/rollout"
)

// LateFeedback holds the ratings and comments that arrive after their session was
// written to the spool, as follow-up records the daemon joins to the rollout
// (docs/gateway.md "Late feedback"). There is one file per written session,
// <dir>/<session>.json, rewritten durably (temp, fsync, rename, fsync dir) on every
// change. A record added before the daemon takes the rollout for training is
// joined to it (the feedback column, the turn's reply segment's feedback) every
// time the rollout is read for training, so a restart before the checkpoint joins
// it again to the same rollout and it is trained once; a record added after is
// kept as too late, counted, and never trained.
//
// The gateway (Written, Add) and the daemon's feed stage (Join) share one
// LateFeedback: its mutex orders a record against the take.
type LateFeedback struct {
	dir string

	mu      sync.Mutex
	entries map[string]*lateEntry
	counts  LateCounts
}

// LateCounts count late-feedback records by state.
type LateCounts struct {
	// Pending records wait for their rollout to be taken for training.
	Pending int64
	// Joined records were in their rollout when it was taken for training.
	Joined int64
	// Late records came after their rollout was taken: kept, never trained.
	Late int64
}

// lateEntry is one written session's file.
type lateEntry struct {
	Session string `json:"session"`
	// ReplySegments[n] is the index in the rollout's segments of turn n+1's reply.
	ReplySegments []int `json:"reply_segments"`
	// Taken: the daemon took the rollout for training; records after it are late.
	Taken   bool         `json:"taken"`
	Records []lateRecord `json:"records"`
}

// lateRecord is one rating or comment on a written session.
type lateRecord struct {
	Rating  *int8     `json:"rating,omitempty"`
	Comment string    `json:"comment,omitempty"`
	Turn    int       `json:"turn"`
	Late    bool      `json:"late"`
	At      time.Time `json:"at"`
}

// ErrNoSession is Add's answer for a session never written by this gateway.
var ErrNoSession = errors.New("no session")

// TurnError is Add's answer for a turn the session does not have.
type TurnError struct {
	Session     string
	Turn, Turns int
}

func (e *TurnError) Error() string {
	return fmt.Sprintf("turn %d: session %s has turns 1…%d", e.Turn, e.Session, e.Turns)
}

// OpenLateFeedback reads the follow-up records in dir (created if missing).
func OpenLateFeedback(dir string) (*LateFeedback, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("open late feedback: %w", err)
	}
	l := &LateFeedback{dir: dir, entries: map[string]*lateEntry{}}
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, fmt.Errorf("open late feedback: %w", err)
	}
	for _, path := range paths {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("open late feedback: %w", err)
		}
		e := &lateEntry{}
		if err := json.Unmarshal(b, e); err != nil {
			return nil, fmt.Errorf("read late feedback %s: %w", path, err)
		}
		if e.Session != strings.TrimSuffix(filepath.Base(path), ".json") {
			return nil, fmt.Errorf("read late feedback %s: session %q: want the file's name", path, e.Session)
		}
		l.entries[e.Session] = e
		l.count(e, 1)
	}
	return l, nil
}

// count adds sign × e's records to the counts.
func (l *LateFeedback) count(e *lateEntry, sign int64) {
	for _, r := range e.Records {
		switch {
		case r.Late:
			l.counts.Late += sign
		case e.Taken:
			l.counts.Joined += sign
		default:
			l.counts.Pending += sign
		}
	}
}

// save writes e durably; on failure the in-memory entry is left as it was.
func (l *LateFeedback) save(e *lateEntry) error {
	b, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("encode late feedback: %w", err)
	}
	return fsutil.WriteFileBytes(filepath.Join(l.dir, e.Session+".json"), b, 0o644)
}

// Written records that session id is being written to the spool with these reply
// segments, so later feedback on it is taken as a follow-up record. Called before
// the rollout file is written: the daemon cannot take a rollout it does not know.
// A session written again (a restart re-emitting it) keeps its records.
func (l *LateFeedback) Written(id string, replySegments []int) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	old := l.entries[id]
	e := &lateEntry{Session: id, ReplySegments: slices.Clone(replySegments)}
	if old != nil {
		e.Taken, e.Records = old.Taken, old.Records
	}
	if err := l.save(e); err != nil {
		return err
	}
	if old != nil {
		l.count(old, -1)
	}
	l.entries[id] = e
	l.count(e, 1)
	return nil
}

// Has reports whether session id was written to the spool by this gateway (in
// this process or an earlier one: the records are on disk).
func (l *LateFeedback) Has(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.entries[id] != nil
}

// Add records feedback on a written session; turn 0 means the last. late reports
// that the rollout was taken for training already: the record is kept and counted,
// never trained. ErrNoSession: id was never written; a bad turn is an error too.
func (l *LateFeedback) Add(id string, rating *int8, comment string, turn int) (n int, late bool, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	old := l.entries[id]
	if old == nil {
		return 0, false, ErrNoSession
	}
	if turn == 0 {
		turn = len(old.ReplySegments)
	}
	if turn < 1 || turn > len(old.ReplySegments) {
		return 0, false, &TurnError{Session: id, Turn: turn, Turns: len(old.ReplySegments)}
	}
	e := *old
	e.Records = append(append([]lateRecord(nil), old.Records...),
		lateRecord{Rating: rating, Comment: comment, Turn: turn, Late: old.Taken, At: time.Now().UTC()})
	if err := l.save(&e); err != nil {
		return 0, false, err
	}
	l.count(old, -1)
	l.entries[id] = &e
	l.count(&e, 1)
	return turn, e.Taken, nil
}

// Join applies the records that came before the take to r (a rollout read for
// training; one the gateway never wrote is left alone) and marks the take, so
// records after it are late. It returns how many records it applied. A failure to
// persist the take is returned after r is joined: the take holds in memory, and a
// restart reads r again and joins the same records.
func (l *LateFeedback) Join(r *rollout.Rollout) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.entries[r.ID]
	if e == nil {
		return 0, nil
	}
	n := 0
	for _, rec := range e.Records {
		if rec.Late {
			continue
		}
		n++
		if rec.Rating != nil {
			r.Feedback, r.HasFeedback = *rec.Rating, true
		}
		if rec.Comment != "" && rec.Turn >= 1 && rec.Turn <= len(e.ReplySegments) {
			if i := e.ReplySegments[rec.Turn-1]; i >= 0 && i < len(r.Segments) {
				seg := &r.Segments[i]
				if seg.Feedback != "" {
					seg.Feedback += "\n"
				}
				seg.Feedback += rec.Comment
			}
		}
	}
	if e.Taken {
		return n, nil
	}
	taken := *e
	taken.Taken = true
	l.count(e, -1)
	l.entries[r.ID] = &taken
	l.count(&taken, 1)
	if err := l.save(&taken); err != nil {
		return n, fmt.Errorf("mark rollout %s taken: %w", r.ID, err)
	}
	return n, nil
}

// Counts returns the records by state.
func (l *LateFeedback) Counts() LateCounts {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.counts
}
