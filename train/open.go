package train

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
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
	// Named before the backend starts (its smoke test starts the program preload),
	// so the programs this run used last time load first.
	xla.SetProgramRun(programRun(o))
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
	// The programs this run used last time finish loading before the first step, so
	// it runs at a warm step's cost (docs/performance.md "Cold start"); never longer
	// than preloadWaitLimit: what is not loaded by then, the step loads itself.
	start = time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), preloadWaitLimit)
	pre, err := xla.WaitProgramsPreloaded(ctx)
	cancel()
	preloadWait := time.Since(start)
	compiles := xla.CompileSnapshot()
	if err != nil {
		o.Log.Warn().Err(err).Int("programs", pre.Expected).Int("preloaded", pre.Loaded).Msg("compiled programs still loading; the first step loads the rest")
	}
	lp.info.Step, lp.info.Updates, lp.info.Trained = lp.tr.StepCount(), lp.tr.UpdateCount(), o.Ledger.TrainedTotal()
	o.Log.Info().Dur("prepared_in", prepared).Str("backend", o.Backend).Str("device", dev).Int("parameters", m.NumParameters()).
		Int64("step", lp.tr.StepCount()).Int("devices", lp.tr.Devices()).Str("precision", string(m.Precision())).Int("lora_rank", tc.LoRA.Rank).Str("backprop", string(tc.Backprop)).Int("chunk", tc.Chunk).Bool("layer_programs", tc.LayerPrograms).
		Int("programs_preloaded", pre.Loaded).Int64("programs_warmed", compiles.Warmed).Dur("warm_took", compiles.WarmTime).
		Dur("preload_wait", preloadWait).Msg("policy loaded")
	return lp, nil
}

// preloadWaitLimit bounds Open's wait for the run's compiled programs to load.
const preloadWaitLimit = 2 * time.Minute

// programRun names the run for the compiled-program cache: what decides its programs
// (the backend, the model's config, the precision, the training and credit settings).
// Settings that change no program (checkpointing, idle_flush) are in it too: a
// restart after changing one waits for nothing once, then records again.
func programRun(o Options) string {
	h := sha256.New()
	fmt.Fprintf(h, "train\nbackend %s\nprecision %s\n", o.Backend, o.Precision)
	if raw, err := os.ReadFile(filepath.Join(o.ModelDir, "config.json")); err == nil {
		h.Write(raw)
	}
	for _, v := range []any{o.Config, o.Credit} {
		raw, err := json.Marshal(v)
		if err != nil {
			raw = fmt.Appendf(nil, "%+v", v)
		}
		h.Write(raw)
	}
	return "train " + hex.EncodeToString(h.Sum(nil))
}

// Info describes the loaded policy.
func (lp *Loop) Info() Info { return lp.info }
