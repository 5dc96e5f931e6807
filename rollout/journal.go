package rollout

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/hindsight-ai/hindsight/internal/wlog"
)

// Journal operations. The journal is a file of JSON lines, one Entry each, appended and
// fsynced before the action it records is taken as done. A compacted journal (see
// Compact) starts with one OpSnapshot line that stands for every file finished before
// it, followed by the claim and decide lines of the files still unfinished, as they were
// written; new entries are appended after them as usual.
const (
	// OpClaim: a file was claimed from incoming/ under sequence Seq. Written before
	// the rename, so a crash between the two is redone from the journal.
	OpClaim = "claim"
	// OpDecide: every row of claimed file Seq was accepted or rejected. One entry holds
	// the whole file's decisions, so a file is decided atomically or not at all.
	OpDecide = "decide"
	// OpFinish: claimed file Seq left processing/ for done/ or failed/ (Outcome).
	OpFinish = "finish"
	// OpSnapshot: the state left by the entries that a compaction replaced: the totals,
	// the rollout_ids accepted by finished files, and the sequences of the unfinished
	// claims whose lines follow. Valid only as the first line.
	OpSnapshot = "snapshot"
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
	Seq     uint64        `json:"seq,omitempty"` // the claim's sequence; none in OpSnapshot
	At      time.Time     `json:"at"`
	Name    string        `json:"name,omitempty"`    // OpClaim: the file's name in incoming/
	Rows    []RowDecision `json:"rows,omitempty"`    // OpDecide
	Outcome string        `json:"outcome,omitempty"` // OpFinish
	Code    Code          `json:"code,omitempty"`    // OpFinish of a quarantined file
	Reason  string        `json:"reason,omitempty"`  // OpFinish of a quarantined file

	// OpSnapshot: Totals are the totals less what the claim and decide lines of the
	// Open claims, which follow the snapshot, add back when they are replayed.
	Totals   *Totals       `json:"totals,omitempty"`
	Open     []uint64      `json:"open,omitempty"`
	Accepted []AcceptedIDs `json:"accepted,omitempty"`
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
	FilesClaimed     int64  `json:"files_claimed"`
	FilesDone        int64  `json:"files_done"`
	FilesFailed      int64  `json:"files_failed"`
	FilesQuarantined int64  `json:"files_quarantined"`
	RolloutsAccepted int64  `json:"rollouts_accepted"`
	RolloutsRejected int64  `json:"rollouts_rejected"`
	TokensAccepted   int64  `json:"tokens_accepted"`
	LastSeq          uint64 `json:"last_seq"`
}

// Journal is the spool's append-only, fsynced record of claims and decisions. It is
// the source of truth for which rollout_ids were ever accepted, so ingestion is
// exactly-once per rollout_id across all files. Compaction (Compact, and OpenJournal by
// itself) keeps its size to about the accepted rollout_ids. Safe for concurrent use.
type Journal struct {
	path string

	mu       sync.Mutex
	log      *wlog.Log              // nil once closed
	claims   map[uint64]*ClaimState // unfinished claims
	accepted map[string]uint64      // rollout_id → seq of the file that holds it
	totals   Totals

	// For compaction.
	lines     map[uint64][]byte // unfinished claims: their claim and decide lines as written
	pending   map[uint64]bool   // replay: open claims of the snapshot whose claim line is to come
	idBytes   int64             // Σ len(rollout_id) over accepted
	finished  int               // finish entries since the last snapshot (or the start)
	compacted *CompactStats     // the last compaction run or tried, or nil
}

// OpenJournal opens (creating if absent) the journal at path and replays it, by the
// line log's rule (internal/wlog): a torn last line, left by a crash during an append,
// is cut off; a corrupt line anywhere else is an error naming the line and its byte
// offset, since the journal can no longer be trusted, and the file is left as it is.
//
// Temp files left by a compaction that a crash interrupted are removed (the journal
// itself is always complete, old or new). When the journal is worth compacting (see
// CompactMinFinished) it is compacted before OpenJournal returns; a failed compaction
// does not fail the open, which goes on with the journal as it was: LastCompaction
// reports it.
func OpenJournal(path string) (*Journal, error) { return openJournal(path, true) }

// openJournal is OpenJournal; autoCompact false leaves the journal as it is.
func openJournal(path string, autoCompact bool) (*Journal, error) {
	j := &Journal{path: path, claims: map[uint64]*ClaimState{}, accepted: map[string]uint64{}, lines: map[uint64][]byte{}}
	line := 0
	log, err := wlog.Open(path, wlog.Options{
		Replay: func(b []byte) error { line++; return j.replayLine(line, b) },
		Torn:   tornSnapshot,
	})
	if err != nil {
		return nil, fmt.Errorf("open journal: %w", err)
	}
	if len(j.pending) > 0 { // the snapshot's open claims must all follow it
		log.Close()
		return nil, fmt.Errorf("open journal: %s: the snapshot's open claims %v have no claim line", path, sortedSeqs(j.pending))
	}
	j.pending, j.log = nil, log
	if autoCompact {
		j.MaybeCompact() // a failure is in LastCompaction; the journal is usable as it was
	}
	return j, nil
}

// snapshotPrefix is how every snapshot line starts (json.Marshal keeps field order).
var snapshotPrefix = []byte(`{"op":"` + OpSnapshot + `"`)

// replayLine applies line n (b, without its newline) of the journal.
func (j *Journal) replayLine(n int, b []byte) error {
	var e Entry
	if err := json.Unmarshal(b, &e); err != nil {
		return wlog.Corrupt(err)
	}
	if e.Op == OpSnapshot && n != 1 {
		return errors.New("a snapshot is valid only as the first line")
	}
	if err := j.apply(&e); err != nil {
		return err
	}
	j.keepLine(&e, append(b, '\n'))
	return nil
}

// tornSnapshot refuses to cut a torn first line that is a snapshot: a snapshot is
// never torn, since Compact renames it into place whole, and dropping one would forget
// which rollouts were accepted. Any other torn last line is a crash mid-append: the
// action it would have recorded is redone.
func tornSnapshot(line int, torn []byte) error {
	if line == 1 && bytes.HasPrefix(bytes.TrimSpace(torn), snapshotPrefix) {
		return errors.New("line 1 is a damaged snapshot")
	}
	return nil
}

// check returns why claim, decide or finish entry e cannot follow the state, or nil.
// append checks before it writes, so a wrong call never puts a line in the journal
// that would make every later replay fail.
func (j *Journal) check(e *Entry) error {
	switch e.Op {
	case OpClaim:
		if !j.pending[e.Seq] && e.Seq <= j.totals.LastSeq {
			return fmt.Errorf("claim seq %d after seq %d", e.Seq, j.totals.LastSeq)
		}
	case OpDecide:
		c, ok := j.claims[e.Seq]
		if !ok {
			return fmt.Errorf("decide for unknown or finished claim %d", e.Seq)
		}
		if c.Decided {
			return fmt.Errorf("claim %d decided twice", e.Seq)
		}
	case OpFinish:
		if _, ok := j.claims[e.Seq]; !ok {
			return fmt.Errorf("finish for unknown or finished claim %d", e.Seq)
		}
	case OpSnapshot:
	default:
		return fmt.Errorf("unknown op %q", e.Op)
	}
	return nil
}

// apply updates the in-memory state with one entry. Called with mu held (or before
// the journal is shared).
func (j *Journal) apply(e *Entry) error {
	if err := j.check(e); err != nil {
		return err
	}
	switch e.Op {
	case OpClaim:
		if j.pending[e.Seq] { // an open claim of the snapshot
			delete(j.pending, e.Seq)
		} else {
			j.totals.LastSeq = e.Seq
		}
		j.claims[e.Seq] = &ClaimState{Seq: e.Seq, Name: e.Name}
		j.totals.FilesClaimed++
	case OpDecide:
		c := j.claims[e.Seq]
		c.Decided, c.Decisions = true, e.Rows
		for _, d := range e.Rows {
			if d.Accepted {
				if _, had := j.accepted[d.ID]; !had {
					j.idBytes += int64(len(d.ID))
				}
				j.accepted[d.ID] = e.Seq
				j.totals.RolloutsAccepted++
				j.totals.TokensAccepted += d.Tokens
			} else {
				j.totals.RolloutsRejected++
			}
		}
	case OpFinish:
		delete(j.claims, e.Seq)
		j.finished++
		switch e.Outcome {
		case OutcomeDone:
			j.totals.FilesDone++
		case OutcomeFailed:
			j.totals.FilesFailed++
		case OutcomeQuarantined:
			j.totals.FilesQuarantined++
		}
	case OpSnapshot:
		return j.applySnapshot(e)
	}
	return nil
}

// append writes e durably and then applies it. On a write error the in-memory state is
// unchanged and the journal ends with its last whole line, so the caller may retry.
func (j *Journal) append(e Entry) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.log == nil {
		return fmt.Errorf("append journal %s: %w", j.path, os.ErrClosed)
	}
	if e.Op == OpSnapshot {
		return fmt.Errorf("append journal %s: a snapshot is written only by Compact", j.path)
	}
	if err := j.check(&e); err != nil {
		return fmt.Errorf("append journal %s: %w", j.path, err)
	}
	if e.At.IsZero() {
		e.At = time.Now().UTC()
	}
	b, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("append journal: %w", err)
	}
	if err := j.log.Append(b); err != nil {
		return fmt.Errorf("append journal: %w", err)
	}
	if err := j.apply(&e); err != nil {
		return err
	}
	j.keepLine(&e, append(b, '\n'))
	return nil
}

// keepLine keeps the claim and decide lines of unfinished claims, which Compact copies
// as they are. Called with mu held, after e was applied.
func (j *Journal) keepLine(e *Entry, b []byte) {
	switch e.Op {
	case OpClaim:
		j.lines[e.Seq] = b
	case OpDecide:
		j.lines[e.Seq] = append(j.lines[e.Seq], b...)
	case OpFinish:
		delete(j.lines, e.Seq)
	}
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
	if j.log == nil {
		return nil
	}
	err := j.log.Close()
	j.log = nil
	return err
}
