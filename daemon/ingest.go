package daemon

import (
	"context"
	"errors"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/hindsight-ai/hindsight/rollout"
)

// watch wakes the ingest loop when a file lands in incoming/: on fsnotify events for
// *.arrow names, and every spool.rescan_interval regardless, since events can be
// missed (overflow, network file systems).
func (d *daemon) watch(ctx context.Context) error {
	poke := func() {
		select {
		case d.wake <- struct{}{}:
		default:
		}
	}
	var events <-chan fsnotify.Event
	var errs <-chan error
	w, err := fsnotify.NewWatcher()
	if err == nil {
		err = w.Add(d.spool.Dir(rollout.DirIncoming))
	}
	if err != nil {
		d.log.Warn().Err(err).Stringer("rescan_interval", d.cfg.Spool.RescanInterval).
			Msg("cannot watch incoming/; relying on the periodic rescan")
	} else {
		defer w.Close()
		events, errs = w.Events, w.Errors
	}
	tick := time.NewTicker(d.cfg.Spool.RescanInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev := <-events:
			if ev.Has(fsnotify.Create|fsnotify.Rename|fsnotify.Write) && rollout.IsRolloutFileName(filepath.Base(ev.Name)) {
				poke()
			}
		case err := <-errs:
			d.log.Warn().Err(err).Msg("file watch error; the rescan still runs")
			poke()
		case <-tick.C:
			poke()
		}
	}
}

// ingestLoop claims and processes incoming files, oldest first, until ctx ends. A
// file in hand is finished under work, which outlives ctx by the shutdown timeout.
func (d *daemon) ingestLoop(ctx, work context.Context) error {
	for {
		if err := d.drainIncoming(ctx, work); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-d.wake:
		}
	}
}

// drainIncoming processes every file now in incoming/; it returns early, with nil,
// when ctx ends between files.
func (d *daemon) drainIncoming(ctx, work context.Context) error {
	d.ingesting.Store(true)
	defer d.ingesting.Store(false)
	for ctx.Err() == nil {
		names, err := d.spool.Pending()
		if err != nil {
			return err
		}
		if len(names) == 0 {
			return nil
		}
		for _, name := range names {
			if paused, _ := d.pauser.state(); paused {
				d.ingesting.Store(false) // paused is idle: the device may flush and checkpoint
				err := d.pauser.wait(ctx)
				d.ingesting.Store(true)
				if err != nil {
					return nil
				}
				break // list incoming/ again: it changed while we waited
			}
			if ctx.Err() != nil {
				return nil
			}
			var c *rollout.ClaimState
			err := d.retryDiskFull(ctx, "claim", filepath.Join(d.spool.Dir(rollout.DirIncoming), name), func() error {
				var err error
				c, err = d.spool.Claim(name)
				return err
			})
			if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
				return nil // stopped while waiting for disk space
			}
			if errors.Is(err, rollout.ErrVanished) {
				d.log.Warn().Str("file", name).Msg("file left incoming/ before it could be claimed")
				continue
			}
			if err != nil {
				return err
			}
			d.stats.claimed()
			if err := d.processClaim(ctx, work, c); err != nil {
				if errors.Is(err, errStopped) {
					return nil
				}
				return err
			}
		}
	}
	return nil
}

// processClaim decides one claimed file's rows. Without training the file is
// finished at once; with training a file with accepted rollouts goes to the
// pipeline (ctx is the ingest stage's), whose ledger finishes it once all of them
// are trained.
func (d *daemon) processClaim(ctx, work context.Context, c *rollout.ClaimState) error {
	start := time.Now()
	var rep *rollout.FileReport
	var kept *keptRows
	err := d.retryDiskFull(work, "decide", filepath.Join(d.spool.Dir(rollout.DirProcessing), c.ClaimedName()), func() error {
		var keep func(int, *rollout.Rollout)
		if d.training() {
			kept = &keptRows{}
			keep = kept.add
		}
		var err error
		rep, err = d.spool.ProcessRows(work, c, keep)
		return err
	})
	toTrain := err == nil && rep.Quarantine == nil && d.training() && rep.Accepted > 0
	if err == nil && rep.Quarantine == nil && !toTrain {
		err = d.finish(work, c, rep)
	}
	if err != nil {
		if work.Err() != nil {
			d.log.Warn().Str("file", c.ClaimedName()).Msg("stopped in the middle of a file; it resumes on restart")
			return errStopped
		}
		return err
	}
	took := time.Since(start)
	if !toTrain {
		d.stats.fileDone(rep, took)
		d.metrics.fileDone(rep)
	}
	log := d.log.Info()
	if rep.Quarantine != nil {
		log = d.log.Warn().Str("code", string(rep.Quarantine.Code)).Str("reason", rep.Quarantine.Error())
		d.stats.setError(rep.Quarantine, rep.Claimed)
	} else if rep.Rejected > 0 {
		log = d.log.Warn().Str("first_problem", rep.Problems[0].Error())
		d.stats.setError(rep.Problems[0], rep.Claimed)
	}
	outcome := rep.Outcome
	if toTrain {
		outcome = "training"
	}
	log.Uint64("seq", rep.Seq).Str("file", rep.Claimed).Int("rows", rep.Rows).Int("accepted", rep.Accepted).
		Int("rejected", rep.Rejected).Int64("tokens", rep.Tokens).Str("outcome", outcome).
		Dur("took", took).Msg("file processed")
	d.events.FileDecided(rep, toTrain)
	d.stats.publish()
	if toTrain {
		return d.handToTrainer(ctx, work, c, rep, kept.final())
	}
	return nil
}

// finish finishes a processed file in the spool (Spool.Finish, idempotent), retrying
// on a full disk, and compacts the journal when due. The ledger finishes trained
// files through it.
func (d *daemon) finish(ctx context.Context, c *rollout.ClaimState, rep *rollout.FileReport) error {
	src := filepath.Join(d.spool.Dir(rollout.DirProcessing), rep.Claimed)
	err := d.retryDiskFull(ctx, "finish", src, func() error { return d.spool.Finish(c, rep) })
	if err == nil {
		d.maybeCompact()
	}
	return err
}

// maybeCompact compacts the journal when enough files have finished since the last
// compaction (rollout.CompactMinFinished): the check is cheap, the rewrite holds the
// journal for well under a second per ten thousand files. A failure is logged; the
// journal goes on as it was.
func (d *daemon) maybeCompact() {
	if tried, _ := d.spool.Journal().MaybeCompact(); tried {
		d.logCompaction()
	}
}

// logCompaction logs the journal's last compaction, if any.
func (d *daemon) logCompaction() {
	st, ok := d.spool.Journal().LastCompaction()
	if !ok {
		return
	}
	if st.Err != nil {
		d.log.Warn().Err(st.Err).Msg("journal compaction failed; the journal goes on uncompacted")
		return
	}
	d.log.Info().Int64("bytes_before", st.BytesBefore).Int64("bytes_after", st.BytesAfter).Dur("took", st.Took).
		Msg("journal compacted")
}
