package train

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/hindsight-ai/hindsight/data/checkpoint"
)

// maybeCheckpoint writes a checkpoint when one is due: every_steps steps since the
// last, or `every` elapsed with a step since, or force (idle) with a step since.
// While the disk is full no checkpoint is due: the write that found it full retries.
func (lp *Loop) maybeCheckpoint(ctx context.Context, force bool, obs Observer) error {
	since := lp.tr.StepCount() - lp.lastCkptStep
	if since == 0 || lp.o.Pause.DiskFull() {
		return nil
	}
	ck := lp.o.Config.Checkpoint
	due := force || (ck.EverySteps > 0 && since >= int64(ck.EverySteps)) || (ck.Every > 0 && time.Since(lp.lastCkptAt) >= ck.Every)
	if !due {
		return nil
	}
	return lp.checkpoint(ctx, obs)
}

// checkpoint makes the staged credit rows durable, writes the checkpoint (its
// trained list, the ledger's Trained, is the truth for "trained"), runs the post-checkpoint command, has the
// ledger finish every file now wholly trained, then runs AfterCheckpoint.
func (lp *Loop) checkpoint(ctx context.Context, obs Observer) error {
	t0 := time.Now()
	var dir string
	err := lp.o.Retry(ctx, "checkpoint", lp.o.CheckpointDir, func() error {
		if err := lp.o.Ledger.Sync(); err != nil {
			return err
		}
		extra := map[string]json.RawMessage{}
		extra["daemon"], _ = json.Marshal(map[string]any{"token_budget": lp.o.Config.TokenBudget, "model_dir": lp.o.ModelDir})
		st := checkpoint.TrainerState{CreatedAt: time.Now().UTC(), CodeVersion: lp.o.Version, Config: string(lp.o.ConfigYAML), Extra: extra,
			Trained: lp.o.Ledger.Trained(), TrainedTotal: lp.o.Ledger.TrainedTotal()}
		var err error
		dir, err = lp.tr.SaveCheckpoint(lp.o.CheckpointDir, lp.files, st, lp.o.Config.Checkpoint.Keep)
		return err
	})
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	step := lp.tr.StepCount()
	lp.lastCkptStep, lp.lastCkptAt = step, time.Now()
	obs.Checkpointed(step, dir, time.Now(), lp.o.Ledger.TrainedTotal(), lp.tr.UpdateCount())
	lp.o.Log.Info().Int64("step", step).Str("path", dir).Dur("took", time.Since(t0)).Msg("checkpoint")
	lp.runCommand(dir, step)
	done, err := lp.o.Ledger.Checkpointed(ctx)
	for i := range done {
		lp.finished(obs, &done[i])
	}
	if err != nil {
		return err
	}
	if h := lp.o.AfterCheckpoint; h != nil { // after the files finish: an eval delays no credit file
		if err := h(ctx, Checkpoint{Dir: dir, Step: step, Trainer: lp.tr}); err != nil {
			return fmt.Errorf("after checkpoint %d: %w", step, err)
		}
	}
	return nil
}

// runCommand runs train.checkpoint.command; a failure is logged, never fatal.
func (lp *Loop) runCommand(dir string, step int64) {
	ck := lp.o.Config.Checkpoint
	if len(ck.Command) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), ck.CommandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, ck.Command[0], ck.Command[1:]...)
	cmd.Env = append(os.Environ(), "HINDSIGHT_CHECKPOINT="+dir, "HINDSIGHT_STEP="+strconv.FormatInt(step, 10))
	if out, err := cmd.CombinedOutput(); err != nil {
		lp.o.Log.Warn().Err(err).Str("command", ck.Command[0]).Str("output", string(out)).Msg("post-checkpoint command failed")
	}
}

// shutdown finishes the run: a partial batch is abandoned, a final checkpoint
// written when a step happened since the last one.
func (lp *Loop) shutdown(work context.Context, obs Observer) error {
	if len(lp.batch) > 0 {
		lp.o.Log.Info().Int("rollouts", len(lp.batch)).Int("tokens", lp.batchTokens).
			Msg("abandoning the partial batch; its rollouts are replayed on the next start")
		lp.batch, lp.batchTokens, lp.batchAll = nil, 0, 0
	}
	if work.Err() != nil {
		lp.o.Log.Warn().Msg("shutdown timeout passed; no final checkpoint (the last one stands)")
		return nil
	}
	if lp.tr.StepCount() > lp.lastCkptStep {
		return lp.checkpoint(work, obs)
	}
	return nil
}
