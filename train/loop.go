package train

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/hindsight-ai/hindsight/credit"
	"github.com/hindsight-ai/hindsight/ledger"
	"github.com/hindsight-ai/hindsight/xla"
)

// Run takes items in order from in until it is closed or ctx ends, then finishes:
// the step in hand completes under work (the shutdown timeout), a partial batch is
// abandoned (its rollouts are replayed on the next start), and a final checkpoint is
// written if any step happened since the last one. When work ends while a step runs
// on the device, the step is abandoned (deviceStep) and Run returns at once.
//
// While paused it takes no item and starts no step; the step in hand (take runs it
// synchronously) finishes first. Checkpoints of steps already taken are still
// written, except while the disk is full.
func (lp *Loop) Run(ctx, work context.Context, in <-chan *Item, obs Observer) error {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		obs.Heartbeat()
		paused, changed := lp.o.Pause.Paused()
		next := in
		if paused {
			next = nil
		}
		select {
		case <-ctx.Done():
			return lp.shutdown(work, obs)
		case <-changed:
			continue
		case it, ok := <-next:
			if !ok {
				return lp.shutdown(work, obs)
			}
			select {
			case <-it.ready:
			case <-ctx.Done():
				return lp.shutdown(work, obs)
			}
			lp.lastItemAt = time.Now()
			if err := lp.take(work, it, obs); err != nil {
				return fail(ctx, err)
			}
		case <-tick.C:
			idle := lp.o.Config.IdleFlush > 0 && time.Since(lp.lastItemAt) >= lp.o.Config.IdleFlush &&
				len(in) == 0 && !lp.o.Busy()
			if idle && len(lp.batch) > 0 && !paused {
				if err := lp.step(work, obs); err != nil {
					return fail(ctx, err)
				}
			}
			if err := lp.maybeCheckpoint(work, idle && len(lp.batch) == 0, obs); err != nil {
				return fail(ctx, err)
			}
		}
		obs.Awaiting(lp.o.Ledger.Awaiting())
	}
}

// fail returns err unless it only reports the shutdown (a step abandoned at the
// shutdown timeout included: Run returns at once, without a final checkpoint).
func fail(ctx context.Context, err error) error {
	if errors.Is(err, errAbandoned) || ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// finished reports the files the ledger finished.
func (lp *Loop) finished(obs Observer, fs ...*ledger.Finished) {
	for _, f := range fs {
		if f != nil {
			obs.FileDone(*f)
		}
	}
}

// take handles one item: an end marker, a skipped or untrainable rollout, or a
// rollout for the batch.
func (lp *Loop) take(ctx context.Context, it *Item, obs Observer) error {
	l := lp.o.Ledger
	if it.End {
		f, err := l.End(ctx, it.File, it.Already)
		lp.finished(obs, f)
		return err
	}
	obs.Hints(it.hints.Hints)
	r := it.Rollout
	if lag := lp.o.Config.MaxPolicyLag; lag > 0 && lp.tr.StepCount()-r.PolicyVersion > lag {
		f, err := l.Skip(ctx, it.File, r.ID)
		if err != nil {
			return err
		}
		lp.o.Log.Debug().Str("rollout_id", r.ID).Int64("policy_version", r.PolicyVersion).
			Int64("step", lp.tr.StepCount()).Msg("rollout skipped: policy lag")
		obs.Skipped()
		lp.finished(obs, f)
		return nil
	}
	e := adapt(it, lp.rule)
	if e.trainable == 0 {
		lp.o.Log.Debug().Str("rollout_id", r.ID).Str("why", lp.rule.Why(r)).Msg("rollout has no trainable token")
	}
	if err := e.fits(lp.tr.Model().Config.MaxPositionEmbeddings); err != nil {
		// A per-rollout problem, not a device failure: the rollout is counted as failed
		// and its file goes on without it (it has no credit row).
		lp.o.Log.Warn().Err(err).Str("rollout_id", r.ID).Str("file", it.File.Report.Claimed).Msg("rollout not trained")
		obs.Failed(err, it.File.Report.Claimed)
		f, err := l.Drop(ctx, it.File)
		lp.finished(obs, f)
		return err
	}
	if bound := lp.o.Config.MaxBatchTokens; bound > 0 && len(lp.batch) > 0 && lp.batchAll+e.all > bound {
		// The batch without it is as large as it may be: it goes first.
		if err := lp.step(ctx, obs); err != nil {
			return err
		}
		if err := lp.maybeCheckpoint(ctx, false, obs); err != nil {
			return err
		}
	}
	lp.batch = append(lp.batch, e)
	lp.batchTokens += e.trainable
	lp.batchAll += e.all
	obs.Batch(len(lp.batch), lp.batchTokens)
	if !lp.batchFull() {
		return nil
	}
	if err := lp.step(ctx, obs); err != nil {
		return err
	}
	return lp.maybeCheckpoint(ctx, false, obs)
}

// batchFull reports whether the batch is due for a step: token_budget trainable
// tokens, or max_batch_rollouts rollouts, or max_batch_tokens tokens in all.
func (lp *Loop) batchFull() bool {
	tc := lp.o.Config
	return lp.batchTokens >= tc.TokenBudget ||
		(tc.MaxBatchRollouts > 0 && len(lp.batch) >= tc.MaxBatchRollouts) ||
		(tc.MaxBatchTokens > 0 && lp.batchAll >= tc.MaxBatchTokens)
}

// step trains the batch: the optimizer step (scoring at the current weights), then
// the credit rows, staged in the ledger.
func (lp *Loop) step(ctx context.Context, obs Observer) error {
	batch := lp.batch
	if lp.o.Siblings != nil {
		var tooLong int
		batch, tooLong = withSiblings(batch, lp.o.Siblings, lp.rule, lp.tr.Model().Config.MaxPositionEmbeddings)
		if tooLong > 0 {
			lp.o.Log.Warn().Int("rollouts", tooLong).Msg("sibling context left out: the hinted sequence would pass max_position_embeddings")
		}
	}
	xb := make([]credit.Sequence, len(batch))
	for i, e := range batch {
		xb[i] = e.xr
	}
	compiledBefore, cpuBefore := xla.CompileSnapshot(), processCPU()
	met, err := lp.deviceStep(ctx, xb)
	compiled, cpuTook := xla.CompileSnapshot(), processCPU()-cpuBefore
	if errors.Is(err, errAbandoned) {
		return err
	}
	if err != nil {
		return fmt.Errorf("device: %w", err)
	}
	for i, e := range batch {
		var dists []xla.TeacherDist
		if met.Dists != nil {
			dists = met.Dists[i]
		}
		rec := record{distill: lp.o.Credit.Distill, top: lp.o.Config.CreditFileTopK}
		if rec.distill.Mode == "" { // a zero credit config: the trainer's defaults
			rec.distill = credit.DefaultDistillConfig()
		}
		row, err := creditRow(e, &met.Inputs[i], &met.Results[i], dists, rec, met.Step)
		if err != nil {
			return err
		}
		if err := lp.o.Ledger.Stage(ctx, e.item.File, e.item.Row, row); err != nil {
			return err
		}
	}
	lp.batch, lp.batchTokens, lp.batchAll = nil, 0, 0
	lp.lastItemAt = time.Now()
	log := lp.o.Log
	if met.Updated {
		ev := log.Info().Int64("step", met.Step).Float64("loss", met.Loss).Float64("lr", met.LR).
			Float64("grad_norm", met.GradNorm).Float64("loss_out", met.Terms.Out).Float64("loss_distill", met.Terms.Distill)
		if !math.IsNaN(met.OutGradNorm) {
			ev = ev.Float64("grad_norm_out", met.OutGradNorm).Float64("grad_norm_distill", met.DistillGradNorm)
		}
		if met.Credit.DistillISMean > 0 { // modes topk and full: the divergence's importance weight
			ev = ev.Float64("distill_is_mean", met.Credit.DistillISMean).Float64("distill_is_capped", met.Credit.DistillISCapped)
		}
		ev = ev.Int("rollouts", met.Rollouts).Int("tokens", met.Tokens).Dur("took", met.Took).Dur("cpu_took", cpuTook)
		ev = compileFields(ev, compiledBefore, compiled)
		ev.Msg("step")
	} else if met.Credit.Tokens == 0 {
		compileFields(log.Warn().Int64("step", met.Step).Int("rollouts", met.Rollouts).Dur("took", met.Took), compiledBefore, compiled).
			Msg("step without update, weights unchanged: no trainable token in the batch: " + lp.untrainable(batch))
	} else {
		compileFields(log.Info().Int64("step", met.Step).Int("rollouts", met.Rollouts).Int("tokens", met.Credit.Tokens).Dur("took", met.Took), compiledBefore, compiled).
			Msg("step without update: no hint credit, outcome advantage or KL term in the batch; weights unchanged")
	}
	for _, e := range batch {
		lp.stepped += int64(len(e.xr.Tokens))
	}
	obs.Batch(0, 0)
	obs.Stepped(met, lp.stepped)
	obs.Heartbeat()
	return nil
}

// maxNamed caps the rollout ids untrainable names for each reason.
const maxNamed = 5

// untrainable says why the rollouts of batch have no trainable token: each reason
// (Rule.Why) with the number of rollouts it holds for and their ids, the first
// maxNamed of them.
func (lp *Loop) untrainable(batch []*entry) string {
	var reasons []string
	ids := map[string][]string{}
	for _, e := range batch {
		r := e.item.Rollout
		why := lp.rule.Why(r)
		if why == "" {
			continue
		}
		if _, seen := ids[why]; !seen {
			reasons = append(reasons, why)
		}
		ids[why] = append(ids[why], r.ID)
	}
	parts := make([]string, len(reasons))
	for k, why := range reasons {
		named := ids[why]
		more := ""
		if len(named) > maxNamed {
			more = fmt.Sprintf(" and %d more", len(named)-maxNamed)
			named = named[:maxNamed]
		}
		noun := "rollouts"
		if len(ids[why]) == 1 {
			noun = "rollout"
		}
		parts[k] = fmt.Sprintf("%d %s (%s%s): %s", len(ids[why]), noun, strings.Join(named, ", "), more, why)
	}
	return strings.Join(parts, "; ")
}

// processCPU is the CPU time (user + system, every thread) the process has used so
// far; a step's is logged beside its wall time (cpu_took), which on a shared
// machine moves with the load far more (bench/coldstart).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// compileFields adds what the step spent compiling (and loading compiled programs
// from the cache) to its log line, when it did: its took includes that time, a warm
// step's does not. The counts are the process's, so a compile the gateway ran
// meanwhile counts here too.
func compileFields(ev *zerolog.Event, before, after xla.CompileStats) *zerolog.Event {
	if n := after.Compiled - before.Compiled; n > 0 {
		ev = ev.Int64("programs_compiled", n).Dur("compile_took", after.CompileTime-before.CompileTime)
	}
	if n := after.Loaded - before.Loaded; n > 0 {
		ev = ev.Int64("programs_loaded", n).Dur("load_took", after.LoadTime-before.LoadTime)
	}
	return ev
}
