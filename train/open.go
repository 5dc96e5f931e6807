package train

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/hindsight-ai/hindsight/data"
	"github.com/hindsight-ai/hindsight/data/checkpoint"
	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/xla"
)

// Loop owns the accelerator: Run takes items in order and runs scoring, credit,
// the optimizer step and checkpoints on the Trainer. Only Run's goroutine uses it
// after Open.
type Loop struct {
	o     Options
	tr    *xla.Trainer
	files map[string][]byte // config.json and tokenizer files copied into checkpoints
	rule  Rule              // the trainable-token rule: credit.allow_no_sampler, the role header
	info  Info

	batch       []*entry
	batchTokens int // trainable tokens of batch
	batchAll    int // every token of batch: rollouts, hints and hinted spans
	stepped     int64

	lastCkptStep int64
	lastCkptAt   time.Time
	lastItemAt   time.Time
}

// Open loads the policy, from the newest checkpoint (or ResumeFrom's) or else the
// model directory, on the configured backend, and tells the ledger which rollouts
// the restored checkpoint lists as trained (the ledger keeps only the rollouts of
// files still in processing/).
func Open(o Options) (*Loop, error) {
	if o.Ledger == nil || o.Pause == nil {
		return nil, errors.New("open trainer: no ledger or pause state")
	}
	if o.Busy == nil {
		o.Busy = func() bool { return false }
	}
	if o.Retry == nil {
		o.Retry = func(_ context.Context, _, _ string, write func() error) error { return write() }
	}
	o.Log = o.Log.With().Str("component", "device").Logger()
	lp := &Loop{o: o, lastCkptAt: time.Now(), lastItemAt: time.Now()}
	b, err := xla.NewBackend(o.Backend)
	if err != nil {
		return nil, fmt.Errorf("backend: %w", err)
	}
	name, dev := xla.BackendInfo(b)
	if o.Tokenizer == nil {
		if o.Tokenizer, err = tokenizer.Load(filepath.Join(o.ModelDir, data.TokenizerFileName)); err != nil {
			return nil, fmt.Errorf("open trainer: %w", err)
		}
		lp.o.Tokenizer = o.Tokenizer
	}
	lp.rule = NewRule(o.Credit, o.Tokenizer)
	if lp.files, err = checkpoint.ModelFiles(o.ModelDir); err != nil {
		return nil, err
	}

	var ckdir string
	if o.ResumeFrom >= 0 {
		ckdir = filepath.Join(o.CheckpointDir, checkpoint.StepDirName(o.ResumeFrom))
		if _, err := checkpoint.Verify(ckdir); err != nil {
			return nil, fmt.Errorf("resume from step %d: %w", o.ResumeFrom, err)
		}
	} else if ckdir, _, err = checkpoint.Latest(o.CheckpointDir, o.Log); err != nil {
		return nil, fmt.Errorf("find checkpoint: %w", err)
	}
	src := o.ModelDir
	if ckdir != "" && !o.Config.LoRA.Enabled() { // a LoRA run's root is merged: the base is the model dir
		src = ckdir
	}
	if err := o.Precision.CheckBackend(b); err != nil {
		return nil, fmt.Errorf("model.%w", err)
	}
	m, err := xla.Open(src, xla.OpenOptions{Tokenizer: o.Tokenizer, Precision: o.Precision})
	if err != nil {
		return nil, fmt.Errorf("open policy %s: %w", src, err)
	}
	if err := DeviceCredit(o.Credit, m.Config.VocabSize); err != nil {
		return nil, err
	}
	tc := o.Config
	lora := tc.LoRA
	if lora.Enabled() {
		if lora.BaseModel, err = filepath.Abs(o.ModelDir); err != nil {
			return nil, fmt.Errorf("lora base model: %w", err)
		}
	}
	devices, err := tc.Devices.Resolve(b)
	if err != nil {
		return nil, fmt.Errorf("train.%w", err)
	}
	plog := &progressLog{log: o.Log}
	lp.tr, err = xla.NewTrainer(b, m, xla.TrainerOptions{Budget: tc.TokenBudget, Chunk: tc.Chunk, Backprop: tc.Backprop,
		Scorer: xla.ScorerOptions{Chunk: tc.ScoreChunk, LayerPrograms: tc.LayerPrograms}, Credit: o.Credit, Optimizer: tc.Optimizer,
		TeacherModel: tc.TeacherModel, LoRA: lora, Seed: tc.Seed, TermGradNorms: tc.TermGradNorms, Devices: devices,
		ShardOptimizer: tc.ShardOptimizer, OnProgress: plog.observe})
	if err != nil {
		return nil, err
	}
	plog.tr = lp.tr
	lp.info = Info{BackendName: name + " (" + o.Backend + ")", Device: dev, Parameters: int64(m.NumParameters()), ModelDir: o.ModelDir}
	if ckdir != "" {
		st, err := lp.tr.Restore(ckdir)
		if err != nil {
			return nil, err
		}
		lp.lastCkptStep = st.Step
		lp.info.Checkpoint, lp.info.CheckpointAt = ckdir, st.CreatedAt
		o.Ledger.Restore(st.Trained, st.TrainedTotal)
		o.Log.Info().Int64("step", st.Step).Str("checkpoint", ckdir).Int64("trained", o.Ledger.TrainedTotal()).Msg("restored checkpoint")
	}
	// The weights and moments go to the device now, while the compiled programs
	// preload, not in the first step (xla.Trainer.Prepare).
	start := time.Now()
	if err := lp.tr.Prepare(); err != nil {
		return nil, err
	}
	prepared := time.Since(start)
	lp.info.Step, lp.info.Updates, lp.info.Trained = lp.tr.StepCount(), lp.tr.UpdateCount(), o.Ledger.TrainedTotal()
	o.Log.Info().Dur("prepared_in", prepared).Str("backend", o.Backend).Str("device", dev).Int("parameters", m.NumParameters()).
		Int64("step", lp.tr.StepCount()).Int("devices", lp.tr.Devices()).Str("precision", string(m.Precision())).Int("lora_rank", tc.LoRA.Rank).Str("backprop", string(tc.Backprop)).Int("chunk", tc.Chunk).Bool("layer_programs", tc.LayerPrograms).Msg("policy loaded")
	return lp, nil
}

// Info describes the loaded policy.
func (lp *Loop) Info() Info { return lp.info }
