package xla

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/gomlx/gomlx/backends"

	"github.com/hindsight-ai/hindsight/credit"
)

// TrainerOptions configure a Trainer.
type TrainerOptions struct {
	// Budget is N, the step's token budget: the denominator of the loss (credit.Step).
	// The caller gathers rollouts until about N trainable tokens before calling Step;
	// 0 uses the batch's own trainable token count.
	Budget int
	// Chunk is the number of positions one gradient pass holds activations for
	// (rounded up to a power of two ≥ 16; default 256). Earlier positions' K/V come
	// from the scoring pass's cache (see Backprop).
	Chunk int
	// AttentionScores caps the elements of one training chunk's attention scores
	// (chunk × heads × KV-cache capacity; default DefaultTrainAttentionScores): the
	// chunk halves (down to 16) as the cache grows. The backward pass keeps a few
	// tensors of that size, so this bounds activation memory on long rollouts.
	AttentionScores int
	// Backprop chooses how the gradient pass treats earlier chunks' keys and values:
	// truncated (the default), exact or full.
	Backprop Backprop
	// Scorer configures the student and teacher scoring passes.
	Scorer       ScorerOptions
	Credit       credit.Config
	Optimizer    AdamWConfig
	TeacherModel TeacherModelConfig
	// LoRA trains rank-r adapters on a frozen base instead of every weight (rank 0:
	// off). NewTrainer adds fresh adapters to a model without any (lora.go).
	LoRA LoRAConfig
	// Ref is the reference policy of the KL penalty (usually the initial weights);
	// required when Credit.KLBeta > 0. It is only scored, never trained.
	Ref *Model
	// Seed seeds the trainer's random stream (Rand), saved in checkpoints.
	Seed uint64
	// TermGradNorms asks each step for the gradient norm of the outcome term and of
	// the distillation term apart (Metrics.OutGradNorm, DistillGradNorm). It runs the
	// training pass twice per rollout with a hint, once per term, and adds the two
	// gradients: about twice the training pass's cost on those rollouts (scoring is
	// unchanged) and a second set of gradient accumulators (the size of the trained
	// weights). Off, the two norms are NaN; the terms' loss values are always
	// reported (Metrics.Terms).
	TermGradNorms bool
	// Devices is how many of the backend's devices a step runs on (data parallel,
	// dataparallel.go); 0 or 1: device 0 only.
	Devices int
	// ShardOptimizer, with Devices > 1, keeps each trained parameter's AdamW moments
	// on one device, which updates it (ZeRO-1, zero.go); no effect on one device.
	ShardOptimizer bool
	// WholeUpdate runs AdamW as one program over every trained weight, as before
	// issue 42: its inputs (weights, gradients, moments) and its outputs (new
	// weights and moments) are all alive at once, 12 bytes a parameter more than
	// the update by groups. It exists so that before and after run in one process
	// (bench/gpubench's profile stage).
	WholeUpdate bool
	// OnProgress, when set, is called with the Step in progress at its start, after
	// each rollout's scoring and gradient passes and at each phase change, on the
	// goroutine that finished the work (on several devices, each device's); it must
	// be quick and safe for concurrent use. Trainer.Progress reads the same record.
	OnProgress func(StepProgress)
}

// DefaultChunkTrain is the default TrainerOptions.Chunk.
const DefaultChunkTrain = 256

// DefaultTrainAttentionScores is the default TrainerOptions.AttentionScores: 2^24
// float32 (64 MiB per score-sized tensor).
const DefaultTrainAttentionScores = 1 << 24

// Metrics describe one optimizer step.
type Metrics struct {
	Step int64 // steps done, this one included (StepCount)
	// Updated is false for a step whose batch had no signal (no rollout with a
	// non-zero weight or a KL term): the weights, the optimizer's moments and the
	// teacher are left exactly as they were, as if AdamW had not run.
	Updated  bool
	LR       float64 // learning rate used (of the next update, when not Updated)
	GradNorm float64 // global L2 norm of the gradient before clipping
	Loss     float64 // the step's loss at the weights before the update (credit.Loss)
	// Terms are the loss's terms (credit.LossTerms at the training pass's log-probs
	// and divergences): the outcome policy-gradient term, the distillation term (the
	// sampled-token hint part, or Σ DistillWeight·D in modes topk and full) and KL.
	Terms credit.Terms
	// OutGradNorm and DistillGradNorm are the global L2 norms of the gradients of the
	// outcome term (with KL) and of the distillation term, before clipping; NaN unless
	// TrainerOptions.TermGradNorms. Their vector sum is the step's gradient.
	OutGradNorm, DistillGradNorm float64
	Rollouts                     int
	Tokens                       int // tokens the gradient passes ran
	Credit                       credit.Stats
	Took                         time.Duration
	// ScoredTokens and ScoreTook measure the scoring passes alone: the tokens of every
	// student pass plus each hinted segment's hint and span.
	ScoredTokens int
	ScoreTook    time.Duration
	// Inputs and Results are the step's per-rollout credit, in batch order: the
	// log-probs the scoring passes gave (student, teacher) and what credit.Step made
	// of them, at the weights before the update. For audit files; read-only.
	Inputs  []credit.Sequence
	Results []credit.Result
	// Dists are the teacher distributions the teacher pass kept, per rollout and per
	// hint span of Inputs (modes topk and full; nil otherwise). For audit files (the
	// credit files' teacher alternatives); read-only.
	Dists [][]TeacherDist
}

// Trainer owns a policy Model on a backend and applies weighted policy-gradient
// steps to it: score (student, teacher, reference), credit, gradient over chunks and
// rollouts, AdamW. A Trainer is not safe for concurrent use; one goroutine (the one
// that owns the device) calls it.
type Trainer struct {
	opts      TrainerOptions
	backend   backends.Backend
	model     *Model
	scorer    *Scorer
	grad      *gradPass
	opt       *adamW
	masters   *masterWeights // float32 masters of a bf16 policy's trained weights; nil in f32
	trim      bool           // an XLA backend: malloc's free blocks go back to the OS after each step (trimMalloc)
	teacher   *teacher       // nil for the live teacher
	ref       *Scorer        // nil without KL
	baselines *credit.Baselines
	pcg       *rand.PCG
	rng       *rand.Rand
	// steps counts Step calls that succeeded, with or without an update: the policy
	// version and the checkpoint's step. opt.step counts updates only: it drives the
	// learning-rate schedule, the bias correction and the teacher.
	steps int64
	dp    *dataParallel // nil on one device
	// progress is the Step in progress, for status pages and logs (Progress).
	progress progress
}

// NewTrainer returns a Trainer that updates m in place.
// A zero Credit, Optimizer or TeacherModel takes credit.DefaultConfig, DefaultAdamW
// or DefaultTeacherModel.
func NewTrainer(backend backends.Backend, m *Model, opts TrainerOptions) (*Trainer, error) {
	if opts.Credit == (credit.Config{}) {
		opts.Credit = credit.DefaultConfig()
	}
	if opts.Optimizer == (AdamWConfig{}) {
		opts.Optimizer = DefaultAdamW()
	}
	if opts.TeacherModel == (TeacherModelConfig{}) {
		opts.TeacherModel = DefaultTeacherModel()
	}
	if err := opts.Credit.Validate(); err != nil {
		return nil, fmt.Errorf("new trainer: credit: %w", err)
	}
	if opts.Budget < 0 {
		return nil, fmt.Errorf("new trainer: budget %d must be ≥ 0", opts.Budget)
	}
	if err := opts.Backprop.Validate(); err != nil {
		return nil, fmt.Errorf("new trainer: backprop: %w", err)
	}
	if opts.Backprop == "" {
		opts.Backprop = BackpropTruncated
	}
	if opts.Chunk <= 0 {
		opts.Chunk = DefaultChunkTrain
	}
	if opts.AttentionScores <= 0 {
		opts.AttentionScores = DefaultTrainAttentionScores
	}
	c := minChunk
	for c < opts.Chunk {
		c *= 2
	}
	opts.Chunk = c
	if opts.Credit.KLBeta > 0 && opts.Ref == nil {
		return nil, errors.New("new trainer: kl_beta > 0 needs a reference model")
	}
	if err := setupLoRA(m, opts.LoRA, opts.Seed); err != nil {
		return nil, fmt.Errorf("new trainer: %w", err)
	}
	name, _ := BackendInfo(backend)
	if name == "xla" {
		setMallocThresholds()
	}
	tr := &Trainer{opts: opts, backend: backend, model: m, baselines: credit.NewBaselines(), trim: name == "xla"}
	tr.progress.notify = opts.OnProgress
	tr.pcg = rand.NewPCG(opts.Seed, 0x68696e64)
	tr.rng = rand.New(tr.pcg)
	var err error
	if tr.scorer, err = NewScorer(backend, m, opts.Scorer); err != nil {
		return nil, fmt.Errorf("new trainer: %w", err)
	}
	if tr.grad, err = newGradPass(backend, m); err != nil {
		return nil, fmt.Errorf("new trainer: %w", err)
	}
	if opts.Scorer.LayerPrograms {
		if err := tr.grad.withLayerPrograms(); err != nil {
			return nil, fmt.Errorf("new trainer: %w", err)
		}
	}
	if opts.Credit.Distill.Mode == credit.DistillFull && m.Config.VocabSize > MaxFullVocab {
		return nil, fmt.Errorf("new trainer: credit.distill.mode full keeps the teacher's whole distribution per hinted position: vocabulary %d is over %d, use topk", m.Config.VocabSize, MaxFullVocab)
	}
	if err := tr.grad.withDistill(opts.Credit.Distill); err != nil {
		return nil, fmt.Errorf("new trainer: %w", err)
	}
	if tr.masters, err = newMasters(backend, m, tr.grad.params); err != nil {
		return nil, fmt.Errorf("new trainer: %w", err)
	}
	params, _ := tr.groupInputs()
	if tr.opt, err = newAdamW(backend, opts.Optimizer, params, paramGroups(tr.grad.params), tr.form()); err != nil {
		return nil, fmt.Errorf("new trainer: %w", err)
	}
	if tr.teacher, err = newTeacher(backend, opts.TeacherModel, m, opts.Scorer); err != nil {
		return nil, fmt.Errorf("new trainer: %w", err)
	}
	if opts.Ref != nil && opts.Credit.KLBeta > 0 {
		if tr.ref, err = NewScorer(backend, opts.Ref, opts.Scorer); err != nil {
			return nil, fmt.Errorf("new trainer: reference: %w", err)
		}
	}
	if tr.dp, err = newDataParallel(tr, opts.Devices); err != nil {
		return nil, fmt.Errorf("new trainer: %w", err)
	}
	if opts.ShardOptimizer && tr.dp != nil {
		if err := tr.opt.shard(len(tr.dp.replicas)); err != nil {
			return nil, fmt.Errorf("new trainer: %w", err)
		}
	}
	return tr, nil
}

// Model is the policy the Trainer updates.
func (tr *Trainer) Model() *Model { return tr.model }

// Backend returns the backend the trainer runs on.
func (tr *Trainer) Backend() backends.Backend { return tr.backend }

// Scorer is the Trainer's scorer of the current policy.
func (tr *Trainer) Scorer() *Scorer { return tr.scorer }

// StepCount is the number of steps taken (restored from a checkpoint), those whose
// batch had no signal and so made no update included: the policy version.
func (tr *Trainer) StepCount() int64 { return tr.steps }

// UpdateCount is the number of optimizer updates applied: StepCount less the steps
// without signal. The learning-rate schedule and the teacher follow it.
func (tr *Trainer) UpdateCount() int64 { return tr.opt.step }

// Rand is the trainer's random stream; its state is part of the checkpoint.
func (tr *Trainer) Rand() *rand.Rand { return tr.rng }

// Baselines are the running outcome baselines credit.Step updates.
func (tr *Trainer) Baselines() *credit.Baselines { return tr.baselines }

// teacherScorer is the scorer of the hinted passes and whether it shares the
// student's prefix KV cache.
func (tr *Trainer) teacherScorer() (*Scorer, bool) {
	if tr.teacher == nil {
		return tr.scorer, true
	}
	return tr.teacher.scorer, false
}
