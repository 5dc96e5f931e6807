package train

import (
	"fmt"
	"time"

	"github.com/hindsight-ai/hindsight/credit"
	"github.com/hindsight-ai/hindsight/xla"
)

// Config is the `train:` section: when the optimizer steps, how the policy and
// its teacher are updated, and when checkpoints are written.
type Config struct {
	// Enabled trains on accepted rollouts. false runs the daemon as a validating
	// ingester: files are finished as soon as their rows are decided.
	Enabled bool `yaml:"enabled"`
	// TokenBudget is N: an optimizer step happens every N trainable tokens, and N is
	// the denominator of the loss (docs/design.md "Credit math").
	TokenBudget int `yaml:"token_budget"`
	// MaxBatchRollouts steps once the batch holds this many rollouts, even short of
	// token_budget trainable tokens (the loss is still divided by N), so rollouts with
	// few trainable tokens do not pile up; 0: no bound.
	MaxBatchRollouts int `yaml:"max_batch_rollouts"`
	// MaxBatchTokens steps once the batch's rollouts hold this many tokens in all
	// (context, trainable and hinted spans), even short of token_budget: the step keeps
	// every rollout's KV cache on the device, so this bounds its memory. A rollout
	// longer than the bound is a batch of its own. 0: no bound.
	MaxBatchTokens int `yaml:"max_batch_tokens"`
	// Chunk is the gradient pass's chunk in tokens (xla.TrainerOptions.Chunk).
	Chunk int `yaml:"chunk"`
	// Backprop is how the gradient reaches across chunks: truncated (earlier chunks'
	// K/V constant), exact (reverse-order chunks carrying K/V cotangents; cotangent
	// buffers the size of the KV cache) or full (one pass, memory grows with T).
	Backprop xla.Backprop `yaml:"backprop"`
	// ScoreChunk is the scoring passes' chunk in tokens (0: the scorer's default).
	ScoreChunk int `yaml:"score_chunk"`
	// LayerPrograms compiles one decoder layer's program and runs it once per layer
	// (scoring and the truncated gradient pass) instead of one program with every
	// layer unrolled (xla.ScorerOptions.LayerPrograms): a cold or restarted daemon
	// compiles or loads far less (docs/performance.md "Cold start"), a warm step
	// costs up to ~7% more. Off by default.
	LayerPrograms bool `yaml:"layer_programs"`
	// Optimizer is AdamW with its learning-rate schedule (warm-up, cosine).
	Optimizer xla.AdamWConfig `yaml:"optimizer"`
	// TeacherModel chooses the hinted pass's weights: live, frozen, ema, or base (with
	// LoRA: the base model, adapters off).
	TeacherModel xla.TeacherModelConfig `yaml:"teacher_model"`
	// LoRA trains rank-r adapters on a frozen base instead of every weight (rank 0,
	// the default: off); checkpoints then also hold the adapter as PEFT saves it
	// (docs/training.md "LoRA").
	LoRA xla.LoRAConfig `yaml:"lora"`
	// MaxPolicyLag skips rollouts sampled more than this many optimizer steps before
	// the current one (policy_version); 0 trains every rollout. Skips are counted.
	MaxPolicyLag int64 `yaml:"max_policy_lag"`
	// TeacherConcurrency is how many rollouts are with the teacher at once.
	TeacherConcurrency int `yaml:"teacher_concurrency"`
	// IdleFlush trains a partial batch (fewer than token_budget tokens, still divided
	// by N) once no rollout has arrived for this long, so a quiet spool's last
	// rollouts are trained and their files finished; 0 waits for a full budget.
	IdleFlush time.Duration `yaml:"idle_flush"`
	// TermGradNorms reports, on each step, the gradient norm of the outcome term and
	// of the distillation term apart (logged as grad_norm_out and grad_norm_distill).
	// It runs the training pass twice on each rollout that has both terms, so it costs
	// up to twice the training pass (xla.TrainerOptions.TermGradNorms); off by default.
	// The two terms' loss values are logged either way.
	TermGradNorms bool `yaml:"term_grad_norms"`
	// CreditFileTopK is how many of the teacher's most likely tokens the credit files
	// keep at each hinted position, with their log-probs, in distillation modes topk
	// and full (creditfile.Hint.TopIDs; at most credit.distill.top_k in mode topk).
	// 0 keeps none.
	CreditFileTopK int `yaml:"credit_file_top_k"`
	// Devices is how many of the backend's devices each step runs on: its rollouts
	// are split over them, balanced by tokens, and their gradients summed on the
	// devices before one AdamW update (xla.TrainerOptions.Devices; data parallel,
	// docs/training.md "Several devices"). A count, or all; default 1. The XLA CPU
	// plugin shows 4 devices unless the backend says `xla-cpu,devices=N`.
	Devices xla.Devices `yaml:"devices"`
	// ShardOptimizer, with more than one device, keeps each trained weight's AdamW
	// moments on one device, which updates it (ZeRO-1): the moments take 1/N of the
	// memory per device. No effect on one device.
	ShardOptimizer bool `yaml:"shard_optimizer"`
	// Seed seeds the trainer's random stream.
	Seed       uint64           `yaml:"seed"`
	Checkpoint CheckpointConfig `yaml:"checkpoint"`
}

// CheckpointConfig says when checkpoints are written and what runs after one.
type CheckpointConfig struct {
	// EverySteps writes a checkpoint every this many optimizer steps (0: off).
	EverySteps int `yaml:"every_steps"`
	// Every writes one when this much time has passed since the last and a step has
	// happened since (0: off).
	Every time.Duration `yaml:"every"`
	// Keep is how many step directories are kept.
	Keep int `yaml:"keep"`
	// Command runs after each checkpoint (argv, no shell), with HINDSIGHT_CHECKPOINT
	// set to the new directory and HINDSIGHT_STEP to its step; e.g. to tell inference
	// servers to load the new weights. Its failure is logged, never fatal.
	Command []string `yaml:"command"`
	// CommandTimeout bounds Command.
	CommandTimeout time.Duration `yaml:"command_timeout"`
}

// DefaultConfig returns the defaults: a step every 4096 trainable tokens or 64
// rollouts or 1,048,576 tokens in all, whichever comes first, AdamW
// at xla.DefaultAdamW, the live teacher, no lag bound, 4 rollouts with the teacher,
// a partial step after 5s idle, a checkpoint every 10 steps or 10 minutes, 3 kept,
// the teacher's top 5 in the credit files.
func DefaultConfig() Config {
	return Config{
		Enabled:            true,
		TokenBudget:        4096,
		MaxBatchRollouts:   64,
		MaxBatchTokens:     1 << 20,
		Chunk:              xla.DefaultChunkTrain,
		ScoreChunk:         xla.DefaultChunk,
		Backprop:           xla.BackpropTruncated,
		Optimizer:          xla.DefaultAdamW(),
		TeacherModel:       xla.DefaultTeacherModel(),
		LoRA:               xla.LoRAConfig{Targets: xla.DefaultLoRATargets()},
		TeacherConcurrency: 4,
		IdleFlush:          5 * time.Second,
		CreditFileTopK:     5,
		Devices:            1,
		Checkpoint:         CheckpointConfig{EverySteps: 10, Every: 10 * time.Minute, Keep: 3, Command: []string{}, CommandTimeout: time.Minute},
	}
}

// Validate names the first bad field under prefix.
func (c Config) Validate(prefix string) error {
	switch {
	case c.TokenBudget < 1:
		return fmt.Errorf("%stoken_budget: %d, want ≥ 1", prefix, c.TokenBudget)
	case c.MaxBatchRollouts < 0:
		return fmt.Errorf("%smax_batch_rollouts: %d, want ≥ 0 (0: no bound)", prefix, c.MaxBatchRollouts)
	case c.MaxBatchTokens < 0:
		return fmt.Errorf("%smax_batch_tokens: %d, want ≥ 0 (0: no bound)", prefix, c.MaxBatchTokens)
	case c.Chunk < 0:
		return fmt.Errorf("%schunk: %d, want ≥ 0", prefix, c.Chunk)
	case c.ScoreChunk < 0:
		return fmt.Errorf("%sscore_chunk: %d, want ≥ 0", prefix, c.ScoreChunk)
	case c.MaxPolicyLag < 0:
		return fmt.Errorf("%smax_policy_lag: %d, want ≥ 0", prefix, c.MaxPolicyLag)
	case c.TeacherConcurrency < 1:
		return fmt.Errorf("%steacher_concurrency: %d, want ≥ 1", prefix, c.TeacherConcurrency)
	case c.Devices < 0:
		return fmt.Errorf("%sdevices: %d, want ≥ 1 or all", prefix, int(c.Devices))
	case c.CreditFileTopK < 0:
		return fmt.Errorf("%scredit_file_top_k: %d, want ≥ 0 (0: none)", prefix, c.CreditFileTopK)
	case c.IdleFlush < 0:
		return fmt.Errorf("%sidle_flush: %s, want ≥ 0", prefix, c.IdleFlush)
	case c.Checkpoint.EverySteps < 0:
		return fmt.Errorf("%scheckpoint.every_steps: %d, want ≥ 0", prefix, c.Checkpoint.EverySteps)
	case c.Checkpoint.Every < 0:
		return fmt.Errorf("%scheckpoint.every: %s, want ≥ 0", prefix, c.Checkpoint.Every)
	case c.Checkpoint.Keep < 1:
		return fmt.Errorf("%scheckpoint.keep: %d, want ≥ 1", prefix, c.Checkpoint.Keep)
	case len(c.Checkpoint.Command) > 0 && c.Checkpoint.CommandTimeout <= 0:
		return fmt.Errorf("%scheckpoint.command_timeout: %s, want > 0", prefix, c.Checkpoint.CommandTimeout)
	}
	if err := c.Backprop.Validate(); err != nil {
		return fmt.Errorf("%sbackprop: %w", prefix, err)
	}
	if err := c.Optimizer.Validate(); err != nil {
		return fmt.Errorf("%soptimizer.%w", prefix, err)
	}
	if err := c.TeacherModel.Validate(); err != nil {
		return fmt.Errorf("%steacher_model.%w", prefix, err)
	}
	if err := c.LoRA.Validate(); err != nil {
		return fmt.Errorf("%slora.%w", prefix, err)
	}
	if c.TeacherModel.Mode == xla.TeacherBase && !c.LoRA.Enabled() {
		return fmt.Errorf("%steacher_model.mode: base is the base model with the LoRA adapters off; it needs %slora.rank > 0", prefix, prefix)
	}
	return nil
}

// DeviceCredit reports a credit setting that the credit math accepts but the device
// cannot train with a model of vocab ids: distillation mode full keeps the teacher's
// whole log-distribution for every hinted position on the host (xla.TeacherView),
// which is refused above xla.MaxFullVocab (use topk there). Modes sampled_token and
// topk train on any vocabulary.
func DeviceCredit(c credit.Config, vocab int) error {
	if c.Distill.Mode == credit.DistillFull && vocab > xla.MaxFullVocab {
		return fmt.Errorf("credit.distill.mode: full keeps the teacher's whole distribution per hinted position; the model's vocabulary of %d is over %d (use topk)", vocab, xla.MaxFullVocab)
	}
	return nil
}
