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
// ingest claims and decides files in journal order and hands the decided ones to
// feed; feed re-streams each file's accepted rollouts through the spool
// (Spool.Accepted), in row order, skipping those the ledger says were trained
// before, and sends each both to the teacher workers and, as a future, to the
// ordered queue; the device goroutine takes the futures in order, so rollouts are
// trained in journal order whatever order the hints arrive in. Every channel is
// small: the backlog stays on disk, in the spool.

// queues are the pipeline's channels and their depth gauges.
type queues struct {
	files   chan *ledger.File
	work    chan *train.Item
	ordered chan *train.Item
	inTeach atomic.Int64
	feeding atomic.Bool
}

func newQueues(concurrency int) *queues {
	return &queues{
		files:   make(chan *ledger.File, 1),
		work:    make(chan *train.Item),
		ordered: make(chan *train.Item, concurrency+1),
	}
}

// busy reports whether rollouts are on their way to the device queue.
func (q *queues) busy() bool {
	return q.feeding.Load() || len(q.files) > 0 || q.inTeach.Load() > 0
}

// feed streams the accepted rollouts of each file through the spool and sends them
// on, skipping those trained or skipped before this process started (before). It
// closes work and ordered when files is closed or ctx ends.
func feed(ctx context.Context, sp *rollout.Spool, q *queues, before func(id string) bool) error {
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
		var f *ledger.File
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
		err := sp.Accepted(f.Claim, func(row int, r *rollout.Rollout) bool {
			if before(r.ID) {
				already++
				return true
			}
			stopped = !send(train.NewItem(f, row, r.Clone()))
			return !stopped
		})
		if err != nil {
			return fmt.Errorf("train %s: %w", f.Report.Claimed, err)
		}
		ok := !stopped && send(train.NewEnd(f, already))
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
				log.Warn().Str("rollout_id", it.Rollout.ID).Dur("retry_in", backoff).Msg("teacher failed; holding the rollout (on_failure: hold)")
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
