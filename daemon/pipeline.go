package daemon

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/hindsight-ai/hindsight/rollout"
	"github.com/hindsight-ai/hindsight/teacher"
)

// The training pipeline (DESIGN.md "Data flow"):
//
//	ingest ──files──► feed ──work──► teacher ×K ─┐
//	                   └────ordered (futures)────┴──► device (score, credit, step, checkpoint)
//
// ingest claims and decides files in journal order and hands the decided ones to
// feed; feed reads each file's accepted rollouts, in row order, that no durable
// checkpoint lists yet, and sends each both to the teacher workers and, as a future,
// to the ordered queue; the device goroutine takes the futures in order, so
// rollouts are trained in journal order whatever order the hints arrive in. Every
// channel is small: the backlog stays on disk, in the spool.

// fileJob is a decided file whose accepted rollouts need training.
type fileJob struct {
	claim *rollout.ClaimState
	rep   *rollout.FileReport
}

// item is one rollout on its way to the device, or the end marker of a file.
type item struct {
	file *fileJob
	row  int
	r    *rollout.Rollout // owned (cloned)
	// end marks the file's last item; already counts its accepted rollouts that a
	// durable checkpoint (or the skip log) held before this process saw the file.
	end     bool
	already int
	res     teacher.Result
	took    time.Duration
	done    chan struct{} // closed when res is set
}

// queues are the pipeline's channels and their depth gauges.
type queues struct {
	files   chan *fileJob
	work    chan *item
	ordered chan *item
	inTeach atomic.Int64
}

func newQueues(concurrency int) *queues {
	return &queues{
		files:   make(chan *fileJob, 1),
		work:    make(chan *item),
		ordered: make(chan *item, concurrency+1),
	}
}

// feed reads the accepted rollouts of each file from processing/ and sends them on,
// skipping those in done (trained or skipped before this process started). It
// closes work and ordered when files is closed or ctx ends.
func (d *daemon) feed(ctx context.Context, q *queues, done map[string]bool) error {
	defer close(q.work)
	defer close(q.ordered)
	send := func(it *item) bool {
		select {
		case q.ordered <- it:
		case <-ctx.Done():
			return false
		}
		if it.end {
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
		var job *fileJob
		select {
		case <-ctx.Done():
			return nil
		case j, ok := <-q.files:
			if !ok {
				return nil
			}
			job = j
		}
		d.feeding.Store(true)
		accepted := map[int]bool{}
		for _, dec := range job.claim.Decisions {
			if dec.Accepted {
				accepted[dec.Row] = true
			}
		}
		path := filepath.Join(d.spool.Dir(rollout.DirProcessing), job.rep.Claimed)
		r, err := rollout.OpenReader(path, d.readOpts)
		if err != nil {
			return fmt.Errorf("read %s for training: %w", job.rep.Claimed, err)
		}
		already := 0
		for r.Next() {
			if !accepted[r.Row()] {
				continue
			}
			ro := r.Rollout()
			if done[ro.ID] {
				already++
				continue
			}
			it := &item{file: job, row: r.Row(), r: ro.Clone(), done: make(chan struct{})}
			if !send(it) {
				r.Close()
				return nil
			}
		}
		err = r.Err()
		r.Close()
		if err != nil {
			return fmt.Errorf("read %s for training: %w", job.rep.Claimed, err)
		}
		end := &item{file: job, end: true, already: already, done: make(chan struct{})}
		close(end.done)
		ok := send(end)
		d.feeding.Store(false)
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
		var it *item
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
			res, err := h.Run(ctx, it.r)
			if err != nil { // only on cancellation
				q.inTeach.Add(-1)
				return nil
			}
			if res.Hold {
				log.Warn().Str("rollout_id", it.r.ID).Dur("retry_in", backoff).Msg("teacher failed; holding the rollout (on_failure: hold)")
				select {
				case <-time.After(backoff):
				case <-ctx.Done():
					q.inTeach.Add(-1)
					return nil
				}
				backoff = min(2*backoff, time.Minute)
				continue
			}
			it.res = res
			break
		}
		it.took = time.Since(start)
		d.stats.teacherTook(it.took)
		q.inTeach.Add(-1)
		close(it.done)
	}
}
