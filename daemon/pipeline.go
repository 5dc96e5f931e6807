package daemon

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/hindsight-ai/hindsight/ledger"
	"github.com/hindsight-ai/hindsight/rollout"
	"github.com/hindsight-ai/hindsight/train"
)

// The training pipeline (docs/design.md "Data flow"):
//
//	ingest ──files──► feed ──work──► teacher ×K ─┐
//	                   └────ordered (futures)────┴──► train.Loop (score, credit, step, checkpoint)
//
// ingest claims and decides files in journal order and hands the decided ones, with
// the accepted rollouts it kept while deciding them (Spool.ProcessRows: the file is
// read once), to feed; feed sends each accepted rollout, in row order, skipping those
// the ledger says were trained before, both to the teacher workers and, as a future,
// to the ordered queue (a file whose accepted rows are too large to keep, over
// keepTokensMax, is streamed a second time from the spool, Spool.Accepted); the device goroutine takes the futures in order, so rollouts are
// trained in journal order whatever order the hints arrive in. Every channel is
// small: the backlog stays on disk, in the spool.

// keepTokensMax bounds the tokens of the accepted rows ingest keeps in memory for one
// file: 4 Mi tokens are ~32 MiB with their sampler log-probs, and at most three files'
// rows are held at once (one being decided, one queued, one being fed). A file over it
// is read a second time, streamed one record batch at a time, so a huge file never
// sits in memory.
const keepTokensMax = 4 << 20

// keptRow is an accepted rollout of a file, kept from the read that decided it.
type keptRow struct {
	row int
	r   *rollout.Rollout
}

// keptRows collects a file's accepted rows as Spool.ProcessRows decides them, up to
// keepTokensMax tokens.
type keptRows struct {
	rows   []keptRow
	tokens int64
	over   bool
}

func (k *keptRows) add(row int, r *rollout.Rollout) {
	if k.over {
		return
	}
	k.tokens += int64(len(r.Tokens))
	if k.tokens > keepTokensMax {
		k.rows, k.over = nil, true
		return
	}
	k.rows = append(k.rows, keptRow{row, r.Clone()})
}

// final returns the kept rows, or nil when there are none to use (nothing was kept,
// or the file was over keepTokensMax): feed then streams the file from the spool.
func (k *keptRows) final() []keptRow {
	if k == nil || k.over {
		return nil
	}
	return k.rows
}

// decidedFile is a decided file on its way to feed, with its accepted rows when they
// were kept (nil: stream them from the spool).
type decidedFile struct {
	*ledger.File
	rows []keptRow
}

// queues are the pipeline's channels and their depth gauges.
type queues struct {
	files   chan *decidedFile
	work    chan *train.Item
	ordered chan *train.Item
	inTeach atomic.Int64
	feeding atomic.Bool
}

func newQueues(concurrency int) *queues {
	return &queues{
		files:   make(chan *decidedFile, 1),
		work:    make(chan *train.Item),
		ordered: make(chan *train.Item, concurrency+1),
	}
}

// busy reports whether rollouts are on their way to the device queue.
func (q *queues) busy() bool {
	return q.feeding.Load() || len(q.files) > 0 || q.inTeach.Load() > 0
}

// feed streams the accepted rollouts of each file through the spool and sends them
// on, skipping those trained or skipped before this process started (before), after
// join has added late feedback to each (nil: none). It closes work and ordered when
// files is closed or ctx ends.
func feed(ctx context.Context, sp *rollout.Spool, q *queues, before func(id string) bool, join func(*rollout.Rollout)) error {
	defer close(q.work)
	defer close(q.ordered)
	send := func(it *train.Item) bool {
		select {
		case q.ordered <- it:
		case <-ctx.Done():
			return false
		}
		if it.End {
			return true
		}
		select {
		case q.work <- it:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for {
		var f *decidedFile
		select {
		case <-ctx.Done():
			return nil
		case j, ok := <-q.files:
			if !ok {
				return nil
			}
			f = j
		}
		q.feeding.Store(true)
		already, stopped := 0, false
		next := func(row int, r *rollout.Rollout) bool {
			if before(r.ID) {
				already++
				return true
			}
			if join != nil {
				join(r)
			}
			stopped = !send(train.NewItem(f.File, row, r))
			return !stopped
		}
		if f.rows != nil {
			for _, k := range f.rows {
				if !next(k.row, k.r) {
					break
				}
			}
		} else if err := sp.Accepted(f.Claim, func(row int, r *rollout.Rollout) bool { return next(row, r.Clone()) }); err != nil {
			return fmt.Errorf("train %s: %w", f.Report.Claimed, err)
		}
		ok := !stopped && send(train.NewEnd(f.File, already))
		q.feeding.Store(false)
		if !ok {
			return nil
		}
	}
}

// teachRollouts runs rollouts through the teacher until work is closed or ctx ends.
// A teacher failure never stops it: the rollout goes on with the hints it has; with
// on_failure: hold it is retried with backoff first.
func (d *daemon) teachRollouts(ctx context.Context, q *queues, log zerolog.Logger) error {
	for {
		var it *train.Item
		select {
		case <-ctx.Done():
			return nil
		case w, ok := <-q.work:
			if !ok {
				return nil
			}
			it = w
		}
		q.inTeach.Add(1)
		start := time.Now()
		backoff := time.Second
		for {
			h := d.hinter.Load()
			res, err := h.Run(ctx, it.Rollout)
			if err != nil { // only on cancellation
				q.inTeach.Add(-1)
				return nil
			}
			if res.Hold {
				log.Warn().Str("rollout_id", it.Rollout.ID).Stringer("retry_in", backoff).Msg("teacher failed; holding the rollout (on_failure: hold)")
				select {
				case <-time.After(backoff):
				case <-ctx.Done():
					q.inTeach.Add(-1)
					return nil
				}
				backoff = min(2*backoff, time.Minute)
				continue
			}
			d.stats.teacherTook(time.Since(start))
			q.inTeach.Add(-1)
			it.Resolve(res)
			break
		}
	}
}

// joinLate adds the late feedback records on r (a gateway session rated after it
// was written) to r, which is about to be hinted and trained; records that come
// after this are too late (gateway.LateFeedback).
func (d *daemon) joinLate(r *rollout.Rollout) {
	n, err := d.late.Join(r)
	if err != nil {
		d.log.Warn().Err(err).Str("rollout_id", r.ID).Msg("record that late feedback was joined; a restart joins it again")
	}
	if n > 0 {
		d.log.Info().Str("rollout_id", r.ID).Int("records", n).Bool("rating", r.HasFeedback).Msg("late feedback joined")
	}
}
