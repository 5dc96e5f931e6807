package rollout

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"
)

// CompactMinFinished and CompactMinRatio decide automatic compaction (OpenJournal,
// MaybeCompact): the journal is rewritten once at least CompactMinFinished files were
// finished since its last snapshot and the file is more than CompactMinRatio times the
// estimated size of its compacted form. A finished file costs its claim, decide (about
// 60 bytes a row) and finish lines; compacted, only its accepted rollout_ids remain. So
// a spool compacts about once per thousand files, and a journal whose ids are so long
// that compaction would not halve it is left alone.
const (
	CompactMinFinished = 1024
	CompactMinRatio    = 2
)

// AcceptedIDs lists, in a snapshot, the rollout_ids accepted by finished claim Seq.
type AcceptedIDs struct {
	Seq uint64   `json:"seq"`
	IDs []string `json:"ids"`
}

// CompactStats describes a compaction of the journal.
type CompactStats struct {
	At          time.Time
	Took        time.Duration
	BytesBefore int64
	BytesAfter  int64 // 0 when Err is set
	// Err is why the compaction failed. Before the rename the old journal is kept and
	// appended to; after it (fsync of the folder) the compacted one is in use.
	Err error
}

// LastCompaction returns the last compaction this Journal ran or tried (at open or by
// Compact), and false if none.
func (j *Journal) LastCompaction() (CompactStats, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.compacted == nil {
		return CompactStats{}, false
	}
	return *j.compacted, true
}

// MaybeCompact compacts the journal if the rule of CompactMinFinished says it is worth
// it, and reports whether it tried. OpenJournal calls it; a long-running caller may too,
// now and then: the check itself is cheap.
func (j *Journal) MaybeCompact() (bool, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.log == nil || j.finished < CompactMinFinished || j.log.Size() <= CompactMinRatio*j.compactedSizeEstimate() {
		return false, nil
	}
	return true, j.compact()
}

// Compact rewrites the journal as one snapshot line followed by the claim and decide
// lines of the unfinished claims, in claim order; replaying it gives the same state
// (totals, accepted rollout_ids, unfinished claims and their decisions). The new file
// is written beside the journal, fsynced, renamed over it and the folder fsynced, so a
// crash leaves the old journal or the new one, both complete. Appends wait while it
// runs. On a failure before the rename the old journal stays in use, as before.
func (j *Journal) Compact() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.compact()
}

// compact is Compact with mu held; it records its stats.
func (j *Journal) compact() error {
	if j.log == nil {
		return fmt.Errorf("compact journal %s: %w", j.path, os.ErrClosed)
	}
	start := time.Now()
	st := CompactStats{At: start.UTC(), BytesBefore: j.log.Size()}
	st.Err = j.log.Rewrite(j.writeCompacted)
	st.Took = time.Since(start)
	if st.Err == nil {
		st.BytesAfter = j.log.Size()
	} else {
		st.Err = fmt.Errorf("compact journal: %w", st.Err)
	}
	j.finished = 0 // after a failure, MaybeCompact tries again after as many finished files, not at once
	j.compacted = &st
	return st.Err
}

// writeCompacted writes the compacted journal to w.
func (j *Journal) writeCompacted(w io.Writer) error {
	snap := j.snapshot()
	b, err := json.Marshal(snap)
	if err != nil {
		return err
	}
	if _, err := w.Write(append(b, '\n')); err != nil {
		return err
	}
	for _, seq := range snap.Open {
		if _, err := w.Write(j.lines[seq]); err != nil {
			return err
		}
	}
	return nil
}

// snapshot returns the snapshot entry of the journal's state: its totals less what
// the unfinished claims' lines add back, and the rollout_ids of finished claims
// grouped by claim, both in ascending order.
func (j *Journal) snapshot() Entry {
	t := j.totals
	open := make([]uint64, 0, len(j.claims))
	for seq, c := range j.claims {
		open = append(open, seq)
		t.FilesClaimed--
		for _, d := range c.Decisions {
			if d.Accepted {
				t.RolloutsAccepted--
				t.TokensAccepted -= d.Tokens
			} else {
				t.RolloutsRejected--
			}
		}
	}
	slices.Sort(open)
	bySeq := map[uint64][]string{}
	for id, seq := range j.accepted {
		if _, unfinished := j.claims[seq]; !unfinished {
			bySeq[seq] = append(bySeq[seq], id)
		}
	}
	groups := make([]AcceptedIDs, 0, len(bySeq))
	for seq, ids := range bySeq {
		slices.Sort(ids)
		groups = append(groups, AcceptedIDs{Seq: seq, IDs: ids})
	}
	slices.SortFunc(groups, func(a, b AcceptedIDs) int { return cmp.Compare(a.Seq, b.Seq) })
	return Entry{Op: OpSnapshot, At: time.Now().UTC(), Totals: &t, Open: open, Accepted: groups}
}

// applySnapshot sets the state of a journal that starts with snapshot e. The claim
// lines of its open claims must follow.
func (j *Journal) applySnapshot(e *Entry) error {
	if e.Totals == nil {
		return errors.New("snapshot without totals")
	}
	j.totals = *e.Totals
	j.finished = 0
	j.pending = make(map[uint64]bool, len(e.Open))
	for _, seq := range e.Open {
		if seq == 0 || seq > j.totals.LastSeq || j.pending[seq] {
			return fmt.Errorf("snapshot lists open claim %d, after last seq %d or twice", seq, j.totals.LastSeq)
		}
		j.pending[seq] = true
	}
	n := 0
	for _, g := range e.Accepted {
		n += len(g.IDs)
	}
	j.accepted, j.idBytes = make(map[string]uint64, n), 0
	for _, g := range e.Accepted {
		if g.Seq == 0 || g.Seq > j.totals.LastSeq || j.pending[g.Seq] {
			return fmt.Errorf("snapshot lists rollouts of claim %d, which is open or after last seq %d", g.Seq, j.totals.LastSeq)
		}
		for _, id := range g.IDs {
			if _, dup := j.accepted[id]; dup {
				return fmt.Errorf("snapshot lists rollout %s twice", id)
			}
			j.accepted[id] = g.Seq
			j.idBytes += int64(len(id))
		}
	}
	return nil
}

// compactedSizeEstimate is about (a little over) the size in bytes of the compacted
// journal, without building it.
func (j *Journal) compactedSizeEstimate() int64 {
	n := int64(512)                           // op, time, totals
	n += j.idBytes + 3*int64(len(j.accepted)) // "id",
	n += 24 * j.totals.FilesDone              // {"seq":N,"ids":[]}, per file with accepted rollouts
	for _, l := range j.lines {
		n += 21 + int64(len(l)) // the seq in open, and the lines
	}
	return n
}

// sortedSeqs returns the keys of set in ascending order.
func sortedSeqs(set map[uint64]bool) []uint64 {
	out := make([]uint64, 0, len(set))
	for s := range set {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}
