package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/gomlx/gomlx/backends"
	"github.com/rs/zerolog"

	"github.com/hindsight-ai/hindsight/data"
	"github.com/hindsight-ai/hindsight/xla"
)

// device owns the accelerator: one goroutine runs scoring, credit, the optimizer
// step and checkpoints, in order. Nothing else touches the Trainer.
type device struct {
	d        *daemon
	log      zerolog.Logger
	backend  backends.Backend
	tr       *xla.Trainer
	files    map[string][]byte // config.json and tokenizer files copied into checkpoints
	modelDir string
	budget   int

	batch       []*item
	batchTokens int // trainable tokens of batch
	batchAll    int // every token of batch: rollouts, hints and hinted spans

	// Per-file progress, by claim seq.
	open map[uint64]*fileProgress
	// Staged credit rows written since the last checkpoint, not fsynced yet.
	unsynced []string

	skips        *skipLog
	lastCkptStep int64
	lastCkptAt   time.Time
	lastItemAt   time.Time
	// work is run's work context: disk-full retries outside a step wait under it.
	work context.Context
}

// fileProgress tracks one file's accepted rollouts on their way into a checkpoint.
type fileProgress struct {
	job     *fileJob
	ended   bool // every rollout of it has reached the device
	durable int  // trained and in a durable checkpoint, or skipped (durably logged)
	pending int  // trained since the last checkpoint
}

// openDevice loads the policy (from the newest checkpoint, or -resume-from's, or the
// model directory) on the configured backend and returns the rollout_ids it has
// trained or skipped.
func (d *daemon) openDevice() (*device, map[string]bool, error) {
	dv := &device{d: d, log: d.opts.Log.With().Str("component", "device").Logger(), open: map[uint64]*fileProgress{},
		budget: d.cfg.Train.TokenBudget, lastCkptAt: time.Now(), lastItemAt: time.Now()}
	dv.modelDir, _ = d.cfg.ModelDir()
	spec := xla.ResolveBackend(d.opts.Backend, d.cfg.Backend)
	b, err := xla.NewBackend(spec)
	if err != nil {
		return nil, nil, fmt.Errorf("backend: %w", err)
	}
	dv.backend = b
	name, dev := xla.BackendInfo(b)
	if dv.files, err = xla.ModelFiles(dv.modelDir); err != nil {
		return nil, nil, err
	}

	root := d.cfg.CheckpointDir()
	var ckdir string
	if d.opts.ResumeFrom >= 0 {
		ckdir = filepath.Join(root, data.StepDirName(d.opts.ResumeFrom))
		if _, err := data.VerifyCheckpoint(ckdir); err != nil {
			return nil, nil, fmt.Errorf("resume from step %d: %w", d.opts.ResumeFrom, err)
		}
	} else if ckdir, _, err = data.LatestCheckpoint(root, dv.log); err != nil {
		return nil, nil, fmt.Errorf("find checkpoint: %w", err)
	}
	src := dv.modelDir
	if ckdir != "" {
		src = ckdir
	}
	m, err := xla.OpenModelWith(src, d.tokenizer)
	if err != nil {
		return nil, nil, fmt.Errorf("open policy %s: %w", src, err)
	}
	tc := d.cfg.Train
	dv.tr, err = xla.NewTrainer(b, m, xla.TrainerOptions{Budget: tc.TokenBudget, Chunk: tc.Chunk, Backprop: tc.Backprop,
		Scorer: xla.ScorerOptions{Chunk: tc.ScoreChunk}, Credit: d.cfg.Credit, Optimizer: tc.Optimizer,
		Teacher: tc.TeacherModel, Seed: tc.Seed})
	if err != nil {
		return nil, nil, err
	}
	// Only the rollouts of files still in processing/ matter from here on: the
	// journal keeps finished files from being read again.
	open := unfinishedIDs(d.spool.Journal())
	done := map[string]bool{}
	if ckdir != "" {
		st, err := dv.tr.Restore(ckdir)
		if err != nil {
			return nil, nil, err
		}
		dv.lastCkptStep = st.Step
		d.stats.setCheckpoint(st.Step, ckdir, st.CreatedAt)
		dv.log.Info().Int64("step", st.Step).Str("checkpoint", ckdir).Int64("trained", dv.tr.TrainedTotal()).Msg("restored checkpoint")
	}
	dv.tr.ForgetTrained(func(id string) bool { return !open[id] })
	for _, id := range dv.tr.Trained() {
		done[id] = true
	}
	if dv.skips, err = openSkipLog(filepath.Join(d.cfg.DataDir, "state", "skipped.txt"), open); err != nil {
		return nil, nil, err
	}
	for id := range dv.skips.ids {
		done[id] = true
	}
	d.stats.setBackend(name+" ("+spec+")", dev, int64(m.NumParameters()), dv.modelDir)
	d.stats.trainedTotal(dv.tr.TrainedTotal(), dv.tr.StepCount(), dv.tr.UpdateCount(), tc.TokenBudget)
	dv.log.Info().Str("backend", spec).Str("device", dev).Int("parameters", m.NumParameters()).
		Int64("step", dv.tr.StepCount()).Str("backprop", string(tc.Backprop)).Int("chunk", tc.Chunk).Msg("policy loaded")
	return dv, done, nil
}

// run takes items in order from ordered until it is closed or ctx ends, then
// finishes: the step in hand completes under work (the shutdown timeout), a partial
// batch is abandoned (its rollouts are replayed on the next start), and a final
// checkpoint is written if any step happened since the last one.
//
// While the daemon is paused it takes no item and starts no step; the step in hand
// (take runs it synchronously) finishes first. Checkpoints of steps already taken
// are still written, except while the disk is full.
func (dv *device) run(ctx, work context.Context, q *queues) error {
	dv.work = work
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		dv.d.heartbeat()
		paused, changed := dv.d.pauser.state()
		ordered := q.ordered
		if paused {
			ordered = nil
		}
		select {
		case <-ctx.Done():
			return dv.shutdown(work)
		case <-changed:
			continue
		case it, ok := <-ordered:
			if !ok {
				return dv.shutdown(work)
			}
			select {
			case <-it.done:
			case <-ctx.Done():
				return dv.shutdown(work)
			}
			dv.lastItemAt = time.Now()
			if err := dv.take(work, it); err != nil {
				return dv.fail(ctx, err)
			}
		case <-tick.C:
			idle := dv.d.cfg.Train.IdleFlush > 0 && time.Since(dv.lastItemAt) >= dv.d.cfg.Train.IdleFlush
			idle = idle && !dv.d.ingesting.Load() && !dv.d.feeding.Load() && len(q.files) == 0 &&
				len(q.ordered) == 0 && q.inTeach.Load() == 0
			if idle && len(dv.batch) > 0 && !paused {
				if err := dv.step(work); err != nil {
					return dv.fail(ctx, err)
				}
			}
			if err := dv.maybeCheckpoint(idle && len(dv.batch) == 0); err != nil {
				return dv.fail(ctx, err)
			}
		}
		dv.d.stats.setQueues(int64(len(q.files)), int64(len(q.ordered))+q.inTeach.Load(), dv.awaiting())
	}
}

// fail returns err unless it only reports the shutdown.
func (dv *device) fail(ctx context.Context, err error) error {
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// take handles one item: an end marker, a skipped rollout, or a rollout for the batch.
func (dv *device) take(ctx context.Context, it *item) error {
	f := dv.progress(it.file)
	if it.end {
		f.ended = true
		f.durable += it.already
		return dv.tryFinish(f)
	}
	d := dv.d
	d.stats.hintsTrained(it.res.Hints)
	if lag := d.cfg.Train.MaxPolicyLag; lag > 0 && dv.tr.StepCount()-it.r.PolicyVersion > lag {
		if err := d.retryDiskFull(ctx, "skip log", dv.skips.f.Name(), func() error { return dv.skips.add(it.r.ID) }); err != nil {
			return err
		}
		dv.log.Debug().Str("rollout_id", it.r.ID).Int64("policy_version", it.r.PolicyVersion).
			Int64("step", dv.tr.StepCount()).Msg("rollout skipped: policy lag")
		d.stats.skipped()
		f.durable++
		return dv.tryFinish(f)
	}
	if err := dv.fits(it); err != nil {
		// A per-rollout problem, not a device failure: the rollout is counted as failed
		// and its file goes on without it (it has no credit row).
		dv.log.Warn().Err(err).Str("rollout_id", it.r.ID).Str("file", it.file.rep.Claimed).Msg("rollout not trained")
		d.stats.failed(err, it.file.rep.Claimed)
		f.durable++
		return dv.tryFinish(f)
	}
	all := len(it.r.Tokens)
	for _, h := range it.res.Hints {
		all += len(h.Tokens) + int(h.End-h.InsertAt)
	}
	if bound := d.cfg.Train.MaxBatchTokens; bound > 0 && len(dv.batch) > 0 && dv.batchAll+all > bound {
		// The batch without it is as large as it may be: it goes first.
		if err := dv.step(ctx); err != nil {
			return err
		}
		if err := dv.maybeCheckpoint(false); err != nil {
			return err
		}
	}
	dv.batch = append(dv.batch, it)
	for i := range it.r.Tokens {
		if i > 0 && it.r.Trainable(i) {
			dv.batchTokens++
		}
	}
	dv.batchAll += all
	d.stats.setBatch(len(dv.batch), dv.batchTokens)
	if !dv.batchFull() {
		return nil
	}
	if err := dv.step(ctx); err != nil {
		return err
	}
	return dv.maybeCheckpoint(false)
}

// batchFull reports whether the batch is due for a step: token_budget trainable
// tokens, or max_batch_rollouts rollouts, or max_batch_tokens tokens in all.
func (dv *device) batchFull() bool {
	tc := dv.d.cfg.Train
	return dv.batchTokens >= dv.budget ||
		(tc.MaxBatchRollouts > 0 && len(dv.batch) >= tc.MaxBatchRollouts) ||
		(tc.MaxBatchTokens > 0 && dv.batchAll >= tc.MaxBatchTokens)
}

// fits reports, wrapping xla.ErrTooLong, a rollout or hinted sequence longer than
// the model's context: scoring it would fail the whole step.
func (dv *device) fits(it *item) error {
	max := dv.tr.Model().Config.MaxPositionEmbeddings
	if n := len(it.r.Tokens); n > max {
		return fmt.Errorf("rollout %q: %d tokens, max_position_embeddings is %d: %w", it.r.ID, n, max, xla.ErrTooLong)
	}
	for _, h := range it.res.Hints {
		if n := int(h.End) + len(h.Tokens); n > max {
			return fmt.Errorf("rollout %q: hinted segment %d: %d positions with the hint, max_position_embeddings is %d: %w",
				it.r.ID, h.Segment, n, max, xla.ErrTooLong)
		}
	}
	return nil
}

func (dv *device) progress(job *fileJob) *fileProgress {
	f := dv.open[job.claim.Seq]
	if f == nil {
		f = &fileProgress{job: job}
		dv.open[job.claim.Seq] = f
	}
	return f
}

// step trains the batch: credit rows for the output (scoring at the current
// weights), the optimizer step, staging of the rows.
func (dv *device) step(ctx context.Context) error {
	batch := dv.batch
	xb := make([]xla.Rollout, len(batch))
	for i, it := range batch {
		xb[i] = dv.toXLA(it)
	}
	met, err := dv.tr.Step(ctx, xb)
	if err != nil {
		return fmt.Errorf("device: %w", err)
	}
	rows := creditRows(batch, met)
	teacherVersion := met.Step - 1
	for i := range rows {
		rows[i].Step, rows[i].TeacherVersion = met.Step, teacherVersion
		it := batch[i]
		p := dv.stagedPath(it.file, it.row)
		err := dv.d.retryDiskFull(ctx, "stage credit rows", p, func() error {
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			return data.WriteCreditFile(p, rows[i:i+1], false)
		})
		if err != nil {
			return fmt.Errorf("stage credit rows: %w", err)
		}
		dv.unsynced = append(dv.unsynced, p)
		dv.progress(it.file).pending++
	}
	dv.batch, dv.batchTokens, dv.batchAll = nil, 0, 0
	dv.lastItemAt = time.Now()
	dv.d.stats.stepDone(met, met.ScoredTokens, met.ScoreTook)
	dv.d.stats.setBatch(0, 0)
	if met.Updated {
		dv.log.Info().Int64("step", met.Step).Float64("loss", met.Loss).Float64("lr", met.LR).
			Float64("grad_norm", met.GradNorm).Int("rollouts", met.Rollouts).Int("tokens", met.Tokens).
			Dur("took", met.Took).Msg("step")
	} else {
		dv.log.Info().Int64("step", met.Step).Int("rollouts", met.Rollouts).Dur("took", met.Took).
			Msg("step without update: no hint credit, outcome advantage or KL term in the batch; weights unchanged")
	}
	dv.d.heartbeat()
	for _, it := range batch {
		dv.d.steppedTokens += int64(len(it.r.Tokens))
	}
	if dv.d.onStep != nil {
		dv.d.onStep(met, dv.d.steppedTokens)
	}
	return nil
}

// toXLA converts a rollout and its hints to the trainer's input.
func (dv *device) toXLA(it *item) xla.Rollout {
	r := it.r
	T := len(r.Tokens)
	xr := xla.Rollout{ID: r.ID, TaskID: r.TaskID, Tokens: r.Tokens, Sampler: make([]float32, T),
		Trainable: make([]bool, T), Reward: float64(r.Reward), HasReward: r.HasReward}
	for i := range T {
		if lp, ok := r.LogProb(i); ok {
			xr.Sampler[i] = lp
		} else {
			xr.Sampler[i] = float32(math.NaN())
		}
		xr.Trainable[i] = r.Trainable(i)
	}
	empty := dv.d.hinter.Load().Inserter().Empty()
	for _, h := range it.res.Hints {
		xr.Hints = append(xr.Hints, xla.HintedSegment{
			Segment:   xla.Segment{Start: int(h.InsertAt), End: int(h.End), Hint: h.Tokens},
			EmptyHint: empty,
		})
	}
	return xr
}

// creditRows builds the credit output rows of a step from the credit the trainer
// computed (the weights before the update; teacher_logprobs from the teacher it
// used, live or snapshot).
func creditRows(batch []*item, met xla.Metrics) []data.CreditRow {
	rows := make([]data.CreditRow, len(batch))
	for i, it := range batch {
		cr, c := &met.Inputs[i], &met.Results[i]
		r := it.r
		T := len(r.Tokens)
		row := data.CreditRow{RolloutID: r.ID, TaskID: r.TaskID, Tokens: append([]int32(nil), r.Tokens...),
			PolicyVersion: r.PolicyVersion, Reward: r.Reward, HasReward: r.HasReward,
			OutcomeAdv: float32(c.AOut), LossMask: make([]bool, T), Student: make([]float32, T),
			Teacher: make([]float32, T), Advantages: make([]float32, T)}
		for t := range T {
			row.LossMask[t] = cr.Trainable[t] && !c.Skipped
			row.Student[t] = float32(cr.Student[t])
			row.Teacher[t] = float32(math.NaN())
			row.Advantages[t] = float32(c.Adv[t])
		}
		for _, h := range cr.Hints {
			for t := h.Start; t < h.End; t++ {
				row.Teacher[t] = float32(h.Teacher[t-h.Start])
			}
		}
		for _, h := range it.res.Hints {
			row.Hints = append(row.Hints, data.CreditHint{Segment: int32(h.Segment), InsertAt: h.InsertAt, End: h.End,
				Source: h.Source, Reason: string(h.Reason), Text: h.Text, Tokens: append([]int32(nil), h.Tokens...)})
		}
		rows[i] = row
	}
	return rows
}

// maybeCheckpoint writes a checkpoint when one is due: every_steps steps since the
// last, or `every` elapsed with a step since, or force (idle) with a step since.
// While the disk is full no checkpoint is due: the write that found it full retries.
func (dv *device) maybeCheckpoint(force bool) error {
	since := dv.tr.StepCount() - dv.lastCkptStep
	if since == 0 || dv.d.pauser.diskIsFull() {
		return nil
	}
	ck := dv.d.cfg.Train.Checkpoint
	due := force || (ck.EverySteps > 0 && since >= int64(ck.EverySteps)) || (ck.Every > 0 && time.Since(dv.lastCkptAt) >= ck.Every)
	if !due {
		return nil
	}
	return dv.checkpoint()
}

// checkpoint makes the staged credit rows durable, writes the checkpoint (its
// Trained list is the truth for "trained"), runs the post-checkpoint command, and
// finishes every file whose rollouts are now all durable.
func (dv *device) checkpoint() error {
	d := dv.d
	t0 := time.Now()
	var dir string
	err := d.retryDiskFull(dv.work, "checkpoint", d.cfg.CheckpointDir(), func() error {
		if err := data.SyncFiles(dv.unsynced); err != nil {
			return err
		}
		dv.unsynced = nil
		cfgYAML, _ := d.cfg.YAML()
		extra := map[string]json.RawMessage{}
		extra["daemon"], _ = json.Marshal(map[string]any{"token_budget": dv.budget, "model_dir": dv.modelDir})
		st := data.TrainerState{CreatedAt: time.Now().UTC(), CodeVersion: d.opts.Version, Config: string(cfgYAML), Extra: extra}
		var err error
		dir, err = dv.tr.SaveCheckpoint(d.cfg.CheckpointDir(), dv.files, st, d.cfg.Train.Checkpoint.Keep)
		return err
	})
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	step := dv.tr.StepCount()
	dv.lastCkptStep, dv.lastCkptAt = step, time.Now()
	d.stats.setCheckpoint(step, dir, time.Now())
	d.stats.trainedTotal(dv.tr.TrainedTotal(), step, dv.tr.UpdateCount(), dv.budget)
	dv.log.Info().Int64("step", step).Str("path", dir).Dur("took", time.Since(t0)).Msg("checkpoint")
	dv.runCommand(dir, step)
	for _, f := range dv.sortedOpen() {
		f.durable += f.pending
		f.pending = 0
		if err := dv.tryFinish(f); err != nil {
			return err
		}
	}
	return nil
}

// runCommand runs train.checkpoint.command; a failure is logged, never fatal.
func (dv *device) runCommand(dir string, step int64) {
	ck := dv.d.cfg.Train.Checkpoint
	if len(ck.Command) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), ck.CommandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, ck.Command[0], ck.Command[1:]...)
	cmd.Env = append(os.Environ(), "HINDSIGHT_CHECKPOINT="+dir, "HINDSIGHT_STEP="+strconv.FormatInt(step, 10))
	if out, err := cmd.CombinedOutput(); err != nil {
		dv.log.Warn().Err(err).Str("command", ck.Command[0]).Str("output", string(out)).Msg("post-checkpoint command failed")
	}
}

// shutdown finishes the run: a partial batch is abandoned, a final checkpoint
// written when a step happened since the last one.
func (dv *device) shutdown(work context.Context) error {
	if len(dv.batch) > 0 {
		dv.log.Info().Int("rollouts", len(dv.batch)).Int("tokens", dv.batchTokens).
			Msg("abandoning the partial batch; its rollouts are replayed on the next start")
		dv.batch, dv.batchTokens, dv.batchAll = nil, 0, 0
	}
	if work.Err() != nil {
		dv.log.Warn().Msg("shutdown timeout passed; no final checkpoint (the last one stands)")
		return nil
	}
	if dv.tr.StepCount() > dv.lastCkptStep {
		return dv.checkpoint()
	}
	return nil
}

// awaiting counts files whose rollouts all reached the device but are not all durable.
func (dv *device) awaiting() int64 {
	n := int64(0)
	for _, f := range dv.open {
		if f.ended {
			n++
		}
	}
	return n
}

func (dv *device) close() {
	if dv.skips != nil {
		dv.skips.close()
	}
}
