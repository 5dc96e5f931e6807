package rollout

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"sync"
	"time"
)

// Journal operations. The journal is a file of JSON lines, one Entry each, appended and
// fsynced before the action it records is taken as done.
const (
	// OpClaim: a file was claimed from incoming/ under sequence Seq. Written before
	// the rename, so a crash between the two is redone from the journal.
	OpClaim = "claim"
	// OpDecide: every row of claimed file Seq was accepted or rejected. One entry holds
	// the whole file's decisions, so a file is decided atomically or not at all.
	OpDecide = "decide"
	// OpFinish: claimed file Seq left processing/ for done/ or failed/ (Outcome).
	OpFinish = "finish"
)

// File outcomes recorded by OpFinish.
const (
	OutcomeDone        = "done"        // at least one rollout accepted; the file is in done/
	OutcomeFailed      = "failed"      // no surviving row; the file is in failed/
	OutcomeQuarantined = "quarantined" // a file-level problem; the file is in failed/
	OutcomeVanished    = "vanished"    // claimed, but the file disappeared before the rename
)

// Entry is one line of the journal.
type Entry struct {
	Op      string        `json:"op"`
	Seq     uint64        `json:"seq"`
	At      time.Time     `json:"at"`
	Name    string        `json:"name,omitempty"`    // OpClaim: the file's name in incoming/
	Rows    []RowDecision `json:"rows,omitempty"`    // OpDecide
	Outcome string        `json:"outcome,omitempty"` // OpFinish
	Code    Code          `json:"code,omitempty"`    // OpFinish of a quarantined file
	Reason  string        `json:"reason,omitempty"`  // OpFinish of a quarantined file
}

// RowDecision is the fate of one row of a claimed file.
type RowDecision struct {
	Row      int    `json:"row"`
	ID       string `json:"id"`
	Accepted bool   `json:"ok"`
	Tokens   int64  `json:"tokens,omitempty"` // accepted rows: number of tokens
	Code     Code   `json:"code,omitempty"`   // rejected rows: the first problem's code
}

// ClaimState is what the journal knows about one claimed file.
type ClaimState struct {
	Seq       uint64
	Name      string        // original name in incoming/
	Decisions []RowDecision // nil until decided
	Decided   bool
	Finished  bool
	Outcome   string
}

// ClaimedName is the file's name in processing/, done/ and failed/: the claim
// sequence, zero-padded so names sort in claim order, then the original name.
func (c *ClaimState) ClaimedName() string { return fmt.Sprintf("%08d-%s", c.Seq, c.Name) }

// Totals counts what the journal holds over the spool's whole life.
type Totals struct {
	FilesClaimed     int64
	FilesDone        int64
	FilesFailed      int64
	FilesQuarantined int64
	RolloutsAccepted int64
	RolloutsRejected int64
	TokensAccepted   int64
	LastSeq          uint64
}

// Journal is the spool's append-only, fsynced record of claims and decisions. It is
// the source of truth for which rollout_ids were ever accepted, so ingestion is
// exactly-once per rollout_id across all files. Safe for concurrent use.
type Journal struct {
	path string

	mu       sync.Mutex
	f        *os.File
	claims   map[uint64]*ClaimState // unfinished claims
	accepted map[string]uint64      // rollout_id → seq of the file that holds it
	totals   Totals
}

// OpenJournal opens (creating if absent) the journal at path and replays it. A torn
// last line, left by a crash during an append, is cut off; a corrupt line anywhere
// else is an error naming the line, since the journal can no longer be trusted.
func OpenJournal(path string) (*Journal, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open journal: %w", err)
	}
	j := &Journal{path: path, f: f, claims: map[uint64]*ClaimState{}, accepted: map[string]uint64{}}
	good, err := j.replay(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("stat journal %s: %w", path, err)
	}
	if st.Size() != good {
		if err := f.Truncate(good); err != nil {
			f.Close()
			return nil, fmt.Errorf("truncate torn journal tail %s: %w", path, err)
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return nil, fmt.Errorf("sync journal %s: %w", path, err)
		}
	}
	if _, err := f.Seek(good, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("seek journal %s: %w", path, err)
	}
	return j, nil
}

// replay applies every complete line of r and returns the byte length of the good prefix.
func (j *Journal) replay(r io.Reader) (int64, error) {
	br := bufio.NewReaderSize(r, 1<<20)
	var good int64
	for line := 1; ; line++ {
		b, err := br.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			// No newline: a torn append (or nothing). Dropped; the action it would
			// have recorded is redone.
			return good, nil
		}
		if err != nil {
			return 0, fmt.Errorf("read journal %s: %w", j.path, err)
		}
		var e Entry
		if uerr := json.Unmarshal(bytes.TrimSpace(b), &e); uerr != nil {
			if _, perr := br.Peek(1); errors.Is(perr, io.EOF) {
				return good, nil // last line garbled by a crash mid-write
			}
			return 0, fmt.Errorf("read journal %s: line %d is corrupt: %v", j.path, line, uerr)
		}
		if err := j.apply(&e); err != nil {
			return 0, fmt.Errorf("read journal %s: line %d: %w", j.path, line, err)
		}
		good += int64(len(b))
	}
}

// apply updates the in-memory state with one entry. Called with mu held (or before
// the journal is shared).
func (j *Journal) apply(e *Entry) error {
	switch e.Op {
	case OpClaim:
		if e.Seq <= j.totals.LastSeq {
			return fmt.Errorf("claim seq %d after seq %d", e.Seq, j.totals.LastSeq)
		}
		j.claims[e.Seq] = &ClaimState{Seq: e.Seq, Name: e.Name}
		j.totals.LastSeq = e.Seq
		j.totals.FilesClaimed++
	case OpDecide:
		c, ok := j.claims[e.Seq]
		if !ok {
			return fmt.Errorf("decide for unknown or finished claim %d", e.Seq)
		}
		if c.Decided {
			return fmt.Errorf("claim %d decided twice", e.Seq)
		}
		c.Decided, c.Decisions = true, e.Rows
		for _, d := range e.Rows {
			if d.Accepted {
				j.accepted[d.ID] = e.Seq
				j.totals.RolloutsAccepted++
				j.totals.TokensAccepted += d.Tokens
			} else {
				j.totals.RolloutsRejected++
			}
		}
	case OpFinish:
		if _, ok := j.claims[e.Seq]; !ok {
			return fmt.Errorf("finish for unknown or finished claim %d", e.Seq)
		}
		delete(j.claims, e.Seq)
		switch e.Outcome {
		case OutcomeDone:
			j.totals.FilesDone++
		case OutcomeFailed:
			j.totals.FilesFailed++
		case OutcomeQuarantined:
			j.totals.FilesQuarantined++
		}
	default:
		return fmt.Errorf("unknown op %q", e.Op)
	}
	return nil
}

// append writes e durably and then applies it. On a write error the in-memory state is
// unchanged; the caller must treat the journal as broken.
func (j *Journal) append(e Entry) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return fmt.Errorf("append journal %s: closed", j.path)
	}
	if e.At.IsZero() {
		e.At = time.Now().UTC()
	}
	b, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("append journal: %w", err)
	}
	b = append(b, '\n')
	off, err := j.f.Seek(0, io.SeekCurrent)
	if err != nil {
		return fmt.Errorf("append journal %s: %w", j.path, err)
	}
	if _, err := j.f.Write(b); err != nil {
		return j.undo(off, fmt.Errorf("append journal %s: %w", j.path, err))
	}
	if err := j.f.Sync(); err != nil {
		return j.undo(off, fmt.Errorf("sync journal %s: %w", j.path, err))
	}
	return j.apply(&e)
}

// undo cuts a failed append off (a full disk can leave part of the line written), so
// a retried append never lands after a torn line in the middle of the journal.
func (j *Journal) undo(off int64, err error) error {
	if terr := j.f.Truncate(off); terr != nil {
		return fmt.Errorf("%w (and cut off the torn entry: %v)", err, terr)
	}
	if _, serr := j.f.Seek(off, io.SeekStart); serr != nil {
		return fmt.Errorf("%w (and seek back: %v)", err, serr)
	}
	return err
}

// Claim records a new claim of the incoming file name and returns its state.
func (j *Journal) Claim(name string) (*ClaimState, error) {
	j.mu.Lock()
	seq := j.totals.LastSeq + 1
	j.mu.Unlock()
	if err := j.append(Entry{Op: OpClaim, Seq: seq, Name: name}); err != nil {
		return nil, err
	}
	return j.Open(seq), nil
}

// Decide records the decisions for every row of claim seq.
func (j *Journal) Decide(seq uint64, rows []RowDecision) error {
	if rows == nil {
		rows = []RowDecision{}
	}
	return j.append(Entry{Op: OpDecide, Seq: seq, Rows: rows})
}

// Finish records that claim seq left processing/ with the given outcome.
func (j *Journal) Finish(seq uint64, outcome string, code Code, reason string) error {
	return j.append(Entry{Op: OpFinish, Seq: seq, Outcome: outcome, Code: code, Reason: reason})
}

// Accepted reports whether rollout_id id was ever accepted, and in which claim.
func (j *Journal) Accepted(id string) (seq uint64, ok bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	seq, ok = j.accepted[id]
	return seq, ok
}

// Open returns a copy of the state of unfinished claim seq, or nil.
func (j *Journal) Open(seq uint64) *ClaimState {
	j.mu.Lock()
	defer j.mu.Unlock()
	c, ok := j.claims[seq]
	if !ok {
		return nil
	}
	cp := *c
	return &cp
}

// Unfinished returns the claims that have not left processing/, in claim order.
func (j *Journal) Unfinished() []*ClaimState {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := make([]*ClaimState, 0, len(j.claims))
	for _, c := range j.claims {
		cp := *c
		out = append(out, &cp)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Seq < out[b].Seq })
	return out
}

// Totals returns the lifetime counts.
func (j *Journal) Totals() Totals {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.totals
}

// Close closes the journal file. Everything appended is already durable.
func (j *Journal) Close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return nil
	}
	err := j.f.Close()
	j.f = nil
	return err
}
