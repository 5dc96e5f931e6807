package ledger

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/rs/zerolog"

	"github.com/hindsight-ai/hindsight/data/creditfile"
	"github.com/hindsight-ai/hindsight/internal/fsutil"
	"github.com/hindsight-ai/hindsight/rollout"
)

// Retry runs one durable write (op names it, path is where) until it does not fail
// with a full disk; the daemon's pauses the run meanwhile. Other errors, and ctx's,
// are returned.
type Retry func(ctx context.Context, op, path string, write func() error) error

// Finisher finishes a file in the spool (rollout.Spool.Finish, which is idempotent).
type Finisher func(ctx context.Context, c *rollout.ClaimState, rep *rollout.FileReport) error

// Options are what Open needs; every field but Log and Retry is required.
type Options struct {
	SkipLog    string // path of the skip log (<data>/state/skipped.txt)
	StagingDir string // staged credit rows, one folder per file in processing/
	OutputDir  string // published credit files
	// Unfinished are the journal's claims still in processing/ at start-up: only
	// their rollouts matter from here on (finished files are never read again).
	Unfinished []*rollout.ClaimState
	Retry      Retry // nil: each write runs once
	Finish     Finisher
	Log        zerolog.Logger
}

// File is a decided file whose accepted rollouts go to the device.
type File struct {
	Claim  *rollout.ClaimState
	Report *rollout.FileReport
}

// Finished is a file that left processing/ because all its accepted rollouts are
// trained.
type Finished struct {
	Report     *rollout.FileReport
	Rows       int    // credit rows published
	CreditFile string // where they were published
}

// progress tracks one file's accepted rollouts on their way into a checkpoint.
type progress struct {
	file    *File
	ended   bool // every rollout of it has reached the device
	durable int  // trained and in a durable checkpoint, skipped (logged) or dropped
	pending int  // credit staged since the last checkpoint
}

// Ledger is the owner of "trained" (see the package doc). It is not safe for
// concurrent use, except Before, which only reads what Open and Restore set.
type Ledger struct {
	o          Options
	log        zerolog.Logger
	unfinished map[string]bool // accepted rollout_ids of the files in processing/ at start-up
	before     map[string]bool // trained or skipped before this process
	skips      *skipLog
	open       map[uint64]*progress
	unsynced   []string // staged since the last Sync
	// trained are the rollout_ids in the weights whose file is not finished, in
	// step order: the next checkpoint's trained list (Trained).
	trained []string
	// trainedTotal counts the rollouts in the weights over the run's life, those of
	// finished files included.
	trainedTotal int64
}

// Open opens the ledger: it removes the staging folders of finished files (a crash
// between finishing a file and removing its folder leaves one) and opens the skip
// log without the skips of finished files.
func Open(o Options) (*Ledger, error) {
	if o.Finish == nil {
		return nil, errors.New("open ledger: no Finisher")
	}
	if o.Retry == nil {
		o.Retry = func(_ context.Context, _, _ string, write func() error) error { return write() }
	}
	l := &Ledger{o: o, log: o.Log.With().Str("component", "ledger").Logger(), unfinished: map[string]bool{},
		before: map[string]bool{}, open: map[uint64]*progress{}}
	for _, c := range o.Unfinished {
		for _, id := range acceptedIDs(c) {
			l.unfinished[id] = true
		}
	}
	if err := removeStaleStaging(o.StagingDir, o.Unfinished); err != nil {
		return nil, err
	}
	var err error
	if l.skips, err = openSkipLog(o.SkipLog, l.unfinished); err != nil {
		return nil, err
	}
	for id := range l.skips.ids {
		l.before[id] = true
	}
	return l, nil
}

// Close closes the skip log.
func (l *Ledger) Close() error { return l.skips.close() }

// Unfinished reports whether id is an accepted rollout of a file that was in
// processing/ at start-up: a restored checkpoint's trained list keeps only those.
func (l *Ledger) Unfinished(id string) bool { return l.unfinished[id] }

// Restore records the rollouts a restored checkpoint lists as trained (its trained
// list and lifetime count, checkpoint.TrainerState's Trained and TrainedTotal). Only
// the ids of unfinished files are kept: finished files are never read again.
func (l *Ledger) Restore(trained []string, total int64) {
	l.trainedTotal = max(total, int64(len(trained)))
	for _, id := range trained {
		if l.unfinished[id] {
			l.before[id] = true
			l.trained = append(l.trained, id)
		}
	}
}

// Trained lists the rollout_ids in the weights whose file is not finished, in step
// order: what the next checkpoint's trainer state lists as trained.
func (l *Ledger) Trained() []string { return slices.Clone(l.trained) }

// TrainedTotal counts the rollouts in the weights over the run's life, those of
// finished files included.
func (l *Ledger) TrainedTotal() int64 { return l.trainedTotal }

// Before reports whether id was trained (in the restored checkpoint) or skipped
// before this process started: such a rollout is not sent to the device again. It
// reads only what Open and Restore set, so another goroutine may call it.
func (l *Ledger) Before(id string) bool { return l.before[id] }

func (l *Ledger) progress(f *File) *progress {
	p := l.open[f.Claim.Seq]
	if p == nil {
		p = &progress{file: f}
		l.open[f.Claim.Seq] = p
	}
	return p
}

// End records that every accepted rollout of f has reached the device; already
// counts those that were trained before this process (Before). It returns f when
// that finished it.
func (l *Ledger) End(ctx context.Context, f *File, already int) (*Finished, error) {
	p := l.progress(f)
	p.ended = true
	p.durable += already
	return l.tryFinish(ctx, p)
}

// Skip durably records that rollout id of f is skipped (policy lag): it counts as
// trained and is never taken again.
func (l *Ledger) Skip(ctx context.Context, f *File, id string) (*Finished, error) {
	if err := l.o.Retry(ctx, "skip log", l.o.SkipLog, func() error { return l.skips.add(id) }); err != nil {
		return nil, err
	}
	p := l.progress(f)
	p.durable++
	return l.tryFinish(ctx, p)
}

// Drop records that the device cannot train a rollout of f (too long for the
// model): its file goes on without it, with no credit row.
func (l *Ledger) Drop(ctx context.Context, f *File) (*Finished, error) {
	p := l.progress(f)
	p.durable++
	return l.tryFinish(ctx, p)
}

// Stage writes the credit row of a rollout of f (row is its row in the file) that a
// step trained and adds the rollout (cr.RolloutID) to Trained; the row becomes
// durable at the next Sync and the rollout counts as trained once the checkpoint
// after that Sync is written (Checkpointed).
func (l *Ledger) Stage(ctx context.Context, f *File, row int, cr creditfile.Row) error {
	p := filepath.Join(l.stageDir(f.Report.Claimed), fmt.Sprintf("%06d.arrow", row))
	err := l.o.Retry(ctx, "stage credit rows", p, func() error {
		if err := fsutil.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		return creditfile.Write(p, []creditfile.Row{cr}, false)
	})
	if err != nil {
		return fmt.Errorf("stage credit rows: %w", err)
	}
	l.unsynced = append(l.unsynced, p)
	l.progress(f).pending++
	l.trained = append(l.trained, cr.RolloutID)
	l.trainedTotal++
	return nil
}

// Sync makes the rows staged since the last Sync durable; call it before writing
// the checkpoint that lists their rollouts.
func (l *Ledger) Sync() error {
	if err := creditfile.SyncFiles(l.unsynced); err != nil {
		return err
	}
	l.unsynced = nil
	return nil
}

// Checkpointed records that a durable checkpoint now lists every rollout staged
// before the last Sync, and finishes, in claim order, each file that completes.
func (l *Ledger) Checkpointed(ctx context.Context) ([]Finished, error) {
	ps := make([]*progress, 0, len(l.open))
	for _, p := range l.open {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(a, b int) bool { return ps[a].file.Claim.Seq < ps[b].file.Claim.Seq })
	var done []Finished
	for _, p := range ps {
		p.durable += p.pending
		p.pending = 0
		f, err := l.tryFinish(ctx, p)
		if err != nil {
			return done, err
		}
		if f != nil {
			done = append(done, *f)
		}
	}
	return done, nil
}

// Awaiting counts files whose rollouts all reached the device but are not all
// trained yet.
func (l *Ledger) Awaiting() int64 {
	n := int64(0)
	for _, p := range l.open {
		if p.ended {
			n++
		}
	}
	return n
}

// acceptedIDs returns the rollout_ids that claim c accepted.
func acceptedIDs(c *rollout.ClaimState) []string {
	var ids []string
	for _, r := range c.Decisions {
		if r.Accepted {
			ids = append(ids, r.ID)
		}
	}
	return ids
}

func (l *Ledger) stageDir(claimed string) string {
	return filepath.Join(l.o.StagingDir, strings.TrimSuffix(claimed, ".arrow"))
}
