package rollout

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/hindsight-ai/hindsight/internal/fsutil"
)

// FileReport says what became of one claimed file.
type FileReport struct {
	Seq      uint64
	Name     string // original name in incoming/
	Claimed  string // name in processing/, done/ and failed/
	Rows     int
	Accepted int
	Rejected int
	Tokens   int64 // tokens of the accepted rollouts
	// Quarantine is the file-level problem that sent the whole file to failed/, or nil.
	Quarantine *Problem
	// Problems holds every row-level problem (all of them are also in the .error file).
	Problems []*Problem
	// Outcome is set by Finish (OutcomeDone, OutcomeFailed, OutcomeQuarantined).
	Outcome string
	// Dest is the file's path after Finish.
	Dest string
}

// Process reads claim c's file from processing/, decides every row and journals the
// decisions in one entry. Rejected rows are copied, as they were, to
// failed/<claimed>.rejected.arrow and their problems listed in failed/<claimed>.error.
// A file-level problem quarantines the whole file at once: it goes to failed/ with its
// .error, and no row of it is accepted.
//
// A claim that was decided before a crash keeps its journaled decisions: processing
// it again only rewrites its failed/ companions, so no rollout is ever accepted twice.
// The returned error is for the spool itself (journal, disk); problems of the file are
// in the report. After Process, call Finish when the file's rollouts need it no more.
func (s *Spool) Process(ctx context.Context, c *ClaimState) (*FileReport, error) {
	return s.ProcessRows(ctx, c, nil)
}

// ProcessRows is Process that also passes each accepted row, in row order, to keep as
// it is decided, so a caller that trains the rows need not read the file a second
// time (Accepted). r points into the current record batch and is valid only during
// the call (Clone it to keep it). The rows kept are final only when the returned
// report has no Quarantine: a file that turns out unreadable further on is quarantined
// whole, and what keep saw of it must be dropped. A nil keep is Process.
func (s *Spool) ProcessRows(ctx context.Context, c *ClaimState, keep func(row int, r *Rollout)) (*FileReport, error) {
	claimed := c.ClaimedName()
	path := filepath.Join(s.Dir(DirProcessing), claimed)
	rep := &FileReport{Seq: c.Seq, Name: c.Name, Claimed: claimed}

	r, err := OpenReader(path, s.opts)
	if err != nil {
		var p *Problem
		if errors.As(err, &p) {
			return rep, s.quarantine(c, rep, p)
		}
		return nil, fmt.Errorf("process %s: %w", claimed, err)
	}
	defer r.Close()

	var known map[int]RowDecision
	if c.Decided {
		known = make(map[int]RowDecision, len(c.Decisions))
		for _, d := range c.Decisions {
			known[d.Row] = d
		}
	}
	rej := &rejectWriter{path: filepath.Join(s.Dir(DirFailed), stem(claimed)+RejectedSuffix), schema: r.Schema()}
	defer rej.abort()

	decisions := make([]RowDecision, 0, 16)
	for r.Next() {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("process %s: %w", claimed, err)
		}
		ro, probs := r.Rollout(), r.Problems()
		d := RowDecision{Row: r.Row(), ID: ro.ID}
		if known != nil {
			var ok bool
			if d, ok = known[r.Row()]; !ok {
				return nil, fmt.Errorf("process %s: row %d has no journaled decision; the file changed after it was decided", claimed, r.Row())
			}
			if !d.Accepted && len(probs) == 0 {
				probs = []*Problem{{Code: d.Code, Row: r.Row(), RolloutID: d.ID, Column: ColRolloutID,
					Reason: "rejected when first processed"}}
			}
		} else {
			if len(probs) == 0 {
				if seq, dup := s.journal.Accepted(ro.ID); dup {
					probs = []*Problem{{Code: EDupRollout, Row: r.Row(), RolloutID: ro.ID, Column: ColRolloutID,
						Reason: fmt.Sprintf("rollout_id was already accepted from claim %08d", seq)}}
				}
			}
			if len(probs) == 0 {
				d.Accepted, d.Tokens = true, int64(len(ro.Tokens))
			} else {
				d.Code = probs[0].Code
			}
		}
		if d.Accepted {
			rep.Accepted++
			rep.Tokens += d.Tokens
			if keep != nil {
				keep(r.Row(), ro)
			}
		} else {
			rep.Rejected++
			for _, p := range probs {
				p.File = claimed
			}
			rep.Problems = append(rep.Problems, probs...)
			raw := r.RawRow()
			err := rej.write(raw)
			raw.Release()
			if err != nil {
				return nil, fmt.Errorf("process %s: %w", claimed, err)
			}
		}
		decisions = append(decisions, d)
	}
	rep.Rows = len(decisions)
	if err := r.Err(); err != nil {
		var p *Problem
		if !errors.As(err, &p) {
			return nil, fmt.Errorf("process %s: %w", claimed, err)
		}
		if known != nil {
			s.log.Error().Uint64("seq", c.Seq).Str("file", claimed).Err(err).
				Msg("a decided file became unreadable; quarantining it, its accepted rollouts stay accepted")
		}
		rej.abort()
		*rep = FileReport{Seq: c.Seq, Name: c.Name, Claimed: claimed}
		return rep, s.quarantine(c, rep, p)
	}
	if known != nil && len(decisions) != len(known) {
		return nil, fmt.Errorf("process %s: %d rows now, %d when decided; the file changed after it was decided", claimed, len(decisions), len(known))
	}

	if rep.Rejected > 0 {
		if err := rej.commit(); err != nil {
			return nil, fmt.Errorf("process %s: %w", claimed, err)
		}
		if err := s.writeErrorFile(claimed, rep.Problems); err != nil {
			return nil, fmt.Errorf("process %s: %w", claimed, err)
		}
	}
	if known == nil {
		if err := s.journal.Decide(c.Seq, decisions); err != nil {
			return nil, fmt.Errorf("process %s: %w", claimed, err)
		}
		c.Decided, c.Decisions = true, decisions
	}
	return rep, nil
}

// Finish moves a processed claim's file out of processing/: to done/ when any rollout
// was accepted, else to failed/; then journals the outcome. It is the one place a
// file is finished, and it is idempotent: an attempt that failed after the rename (a
// full disk while journaling) is completed by the next call, which only journals, and
// a call for a claim the journal has finished changes nothing.
func (s *Spool) Finish(c *ClaimState, rep *FileReport) error {
	if rep.Quarantine != nil {
		return nil // quarantine already moved and journaled it
	}
	dir, outcome := DirDone, OutcomeDone
	if rep.Accepted == 0 {
		dir, outcome = DirFailed, OutcomeFailed
	}
	src := filepath.Join(s.Dir(DirProcessing), rep.Claimed)
	dst := filepath.Join(s.Dir(dir), rep.Claimed)
	if s.journal.Open(c.Seq) == nil {
		rep.Outcome, rep.Dest = outcome, dst // finished by an earlier call
		return nil
	}
	if err := fsutil.RenameNoReplace(src, dst); err != nil && !(errors.Is(err, os.ErrNotExist) && exists(dst)) {
		return fmt.Errorf("finish %s: %w", rep.Claimed, err)
	}
	if err := s.journal.Finish(c.Seq, outcome, "", ""); err != nil {
		return fmt.Errorf("finish %s: %w", rep.Claimed, err)
	}
	rep.Outcome, rep.Dest = outcome, dst
	return nil
}

// Accepted streams the accepted rows of decided claim c, in row order, from its file
// in processing/: the spool owns every read of a claimed file. Training reads the rows
// a second time through here only for a file too large to keep its accepted rows in
// memory from ProcessRows. Memory is bounded by one record batch of the file (the
// backlog stays on disk). The rollout yield gets points into that batch and
// is valid only during the call (Clone it to keep it); yield returning false stops
// the stream early, with a nil error.
func (s *Spool) Accepted(c *ClaimState, yield func(row int, r *Rollout) bool) error {
	decs := c.Decisions
	if !c.Decided {
		o := s.journal.Open(c.Seq)
		if o == nil || !o.Decided {
			return fmt.Errorf("read accepted rows of %s: the claim is not decided", c.ClaimedName())
		}
		decs = o.Decisions
	}
	accepted := make(map[int]bool, len(decs))
	for _, d := range decs {
		if d.Accepted {
			accepted[d.Row] = true
		}
	}
	path := filepath.Join(s.Dir(DirProcessing), c.ClaimedName())
	r, err := OpenReader(path, s.opts)
	if err != nil {
		return fmt.Errorf("read accepted rows of %s: %w", c.ClaimedName(), err)
	}
	defer r.Close()
	for r.Next() {
		if accepted[r.Row()] && !yield(r.Row(), r.Rollout()) {
			return nil
		}
	}
	if err := r.Err(); err != nil {
		return fmt.Errorf("read accepted rows of %s: %w", c.ClaimedName(), err)
	}
	return nil
}

// quarantine moves a file with a file-level problem to failed/ beside its .error file
// and journals it as finished.
func (s *Spool) quarantine(c *ClaimState, rep *FileReport, p *Problem) error {
	p.File = rep.Claimed
	rep.Quarantine = p
	if err := s.writeErrorFile(rep.Claimed, []*Problem{p}); err != nil {
		return fmt.Errorf("quarantine %s: %w", rep.Claimed, err)
	}
	src := filepath.Join(s.Dir(DirProcessing), rep.Claimed)
	dst := filepath.Join(s.Dir(DirFailed), rep.Claimed)
	if err := fsutil.RenameNoReplace(src, dst); err != nil {
		return fmt.Errorf("quarantine %s: %w", rep.Claimed, err)
	}
	if err := s.journal.Finish(c.Seq, OutcomeQuarantined, p.Code, p.Reason); err != nil {
		return fmt.Errorf("quarantine %s: %w", rep.Claimed, err)
	}
	rep.Outcome, rep.Dest = OutcomeQuarantined, dst
	return nil
}

// writeErrorFile writes failed/<stem>.error: one line per problem.
func (s *Spool) writeErrorFile(claimed string, probs []*Problem) error {
	var b strings.Builder
	for _, p := range probs {
		b.WriteString(p.Error())
		b.WriteByte('\n')
	}
	return fsutil.WriteFileBytes(filepath.Join(s.Dir(DirFailed), stem(claimed)+ErrorSuffix), []byte(b.String()), 0o644)
}

// rejectWriter copies rejected rows, unchanged and in the input's schema, into an
// Arrow IPC file that appears under its final name only when complete.
type rejectWriter struct {
	path   string
	schema *arrow.Schema
	f      *os.File
	w      *ipc.FileWriter
}

func (rw *rejectWriter) write(rec arrow.RecordBatch) error {
	if rw.w == nil {
		f, err := os.Create(rw.path + ".tmp")
		if err != nil {
			return fmt.Errorf("write rejected rows: %w", err)
		}
		w, err := ipc.NewFileWriter(f, ipc.WithSchema(rw.schema))
		if err != nil {
			f.Close()
			return fmt.Errorf("write rejected rows: %w", err)
		}
		rw.f, rw.w = f, w
	}
	if err := rw.w.Write(rec); err != nil {
		return fmt.Errorf("write rejected rows to %s: %w", rw.path, err)
	}
	return nil
}

func (rw *rejectWriter) commit() error {
	if rw.w == nil {
		return nil
	}
	if err := rw.w.Close(); err != nil {
		return fmt.Errorf("write rejected rows to %s: %w", rw.path, err)
	}
	f := rw.f
	rw.f, rw.w = nil, nil
	return fsutil.Commit(f, rw.path)
}

// abort drops an uncommitted temp file; a no-op after commit.
func (rw *rejectWriter) abort() {
	if rw.f != nil {
		rw.f.Close()
		os.Remove(rw.f.Name())
		rw.f, rw.w = nil, nil
	}
}
