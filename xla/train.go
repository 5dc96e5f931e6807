package xla

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/tensors"

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
	Scorer    ScorerOptions
	Credit    credit.Config
	Optimizer AdamWConfig
	Teacher   TeacherConfig
	// LoRA trains rank-r adapters on a frozen base instead of every weight (rank 0:
	// off). NewTrainer adds fresh adapters to a model without any (lora.go).
	LoRA LoRAConfig
	// Ref is the reference policy of the KL penalty (usually the initial weights);
	// required when Credit.KLBeta > 0. It is only scored, never trained.
	Ref *Model
	// Seed seeds the trainer's random stream (Rand), saved in checkpoints.
	Seed uint64
}

// Backprop is how a rollout's gradient reaches across chunks (docs/design.md "Long
// rollouts").
type Backprop string

const (
	// BackpropTruncated: earlier chunks' K/V come from the scoring pass as constants.
	// The cheapest; the gradient misses how a chunk's tokens shape later chunks'
	// attention (cosine with the exact gradient ~0.86–0.96, docs/training.md "Training").
	BackpropTruncated Backprop = "truncated"
	// BackpropExact: the chunks run last to first, each passing the cotangent of the
	// earlier positions' K/V back: the exact gradient, with activation memory bounded
	// by the chunk, plus cotangent buffers the size of the KV cache (~0.95× the
	// tokens/s of truncated on XLA CPU).
	BackpropExact Backprop = "exact"
	// BackpropFull: one causal pass over the rollout without a cache: the exact
	// gradient, with activation memory that grows with the rollout (tests, short
	// rollouts).
	BackpropFull Backprop = "full"
)

// Validate names a mode that is none of the three ("" is truncated).
func (b Backprop) Validate() error {
	switch b {
	case "", BackpropTruncated, BackpropExact, BackpropFull:
		return nil
	}
	return fmt.Errorf("%q, want truncated, exact or full", string(b))
}

// DefaultChunkTrain is the default TrainerOptions.Chunk.
const DefaultChunkTrain = 256

// DefaultTrainAttentionScores is the default TrainerOptions.AttentionScores: 2^24
// float32 (64 MiB per score-sized tensor).
const DefaultTrainAttentionScores = 1 << 24

// Rollout is one rollout as the trainer takes it: its tokens, the sampler's
// log-probs, which tokens are trainable (docs/design.md), its outcome and its hinted
// segments.
type Rollout struct {
	ID        string
	TaskID    string
	Tokens    []int32
	Sampler   []float32 // μ_t; NaN where the token was not sampled (null)
	Trainable []bool    // m_t; position 0 (no context) is never trained
	Reward    float64
	HasReward bool
	Hints     []HintedSegment
}

// HintedSegment is a Segment (hint h inserted at Start, tokens [Start, End)
// re-scored) plus, for credit base empty_hint, the same template with an empty hint.
type HintedSegment struct {
	Segment
	EmptyHint []int32
}

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
	Rollouts int
	Tokens   int // tokens the gradient passes ran
	Credit   credit.Stats
	Took     time.Duration
	// ScoredTokens and ScoreTook measure the scoring passes alone: the tokens of every
	// student pass plus each hinted segment's hint and span.
	ScoredTokens int
	ScoreTook    time.Duration
	// Inputs and Results are the step's per-rollout credit, in batch order: the
	// log-probs the scoring passes gave (student, teacher) and what credit.Step made
	// of them, at the weights before the update. For audit files; read-only.
	Inputs  []credit.Rollout
	Results []credit.Result
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
	teacher   *teacher // nil for the live teacher
	ref       *Scorer  // nil without KL
	baselines *credit.Baselines
	pcg       *rand.PCG
	rng       *rand.Rand
	trained   []string
	// steps counts Step calls that succeeded, with or without an update: the policy
	// version and the checkpoint's step. opt.step counts updates only: it drives the
	// learning-rate schedule, the bias correction and the teacher.
	steps int64
	// trainedTotal counts rollouts trained over the run's life.
	trainedTotal int64
}

// NewTrainer returns a Trainer that updates m in place.
// A zero Credit, Optimizer or Teacher takes credit.DefaultConfig, DefaultAdamW or
// DefaultTeacher.
func NewTrainer(backend backends.Backend, m *Model, opts TrainerOptions) (*Trainer, error) {
	if opts.Credit == (credit.Config{}) {
		opts.Credit = credit.DefaultConfig()
	}
	if opts.Optimizer == (AdamWConfig{}) {
		opts.Optimizer = DefaultAdamW()
	}
	if opts.Teacher == (TeacherConfig{}) {
		opts.Teacher = DefaultTeacher()
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
	tr := &Trainer{opts: opts, backend: backend, model: m, baselines: credit.NewBaselines()}
	tr.pcg = rand.NewPCG(opts.Seed, 0x68696e64)
	tr.rng = rand.New(tr.pcg)
	var err error
	if tr.scorer, err = NewScorer(backend, m, opts.Scorer); err != nil {
		return nil, fmt.Errorf("new trainer: %w", err)
	}
	if tr.grad, err = newGradPass(backend, m); err != nil {
		return nil, fmt.Errorf("new trainer: %w", err)
	}
	params := make([]*tensors.Tensor, len(tr.grad.params))
	for i, v := range tr.grad.params {
		params[i] = v.MustValue()
	}
	if tr.opt, err = newAdamW(backend, opts.Optimizer, params); err != nil {
		return nil, fmt.Errorf("new trainer: %w", err)
	}
	if tr.teacher, err = newTeacher(backend, opts.Teacher, m, opts.Scorer); err != nil {
		return nil, fmt.Errorf("new trainer: %w", err)
	}
	if opts.Ref != nil && opts.Credit.KLBeta > 0 {
		if tr.ref, err = NewScorer(backend, opts.Ref, opts.Scorer); err != nil {
			return nil, fmt.Errorf("new trainer: reference: %w", err)
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

// Trained lists the rollout_ids whose gradient is in the weights, in step order,
// less those dropped by ForgetTrained.
func (tr *Trainer) Trained() []string { return tr.trained }

// TrainedTotal counts the rollouts whose gradient is in the weights, those dropped
// from Trained included.
func (tr *Trainer) TrainedTotal() int64 { return tr.trainedTotal }

// ForgetTrained drops from Trained the ids for which drop is true and returns how
// many it dropped. The daemon drops a file's rollouts once the journal records the
// file finished, so checkpoints list only unfinished work; TrainedTotal still counts
// them.
func (tr *Trainer) ForgetTrained(drop func(id string) bool) int {
	n := len(tr.trained)
	tr.trained = slices.DeleteFunc(tr.trained, drop)
	return n - len(tr.trained)
}

// teacherScorer is the scorer of the hinted passes and whether it shares the
// student's prefix KV cache.
func (tr *Trainer) teacherScorer() (*Scorer, bool) {
	if tr.teacher == nil {
		return tr.scorer, true
	}
	return tr.teacher.scorer, false
}

// scored is one rollout after the scoring passes.
type scored struct {
	cache *KVCache
	ref   []float64
}

// Step applies one optimizer step for batch: the student pass of every rollout
// (log-probs and KV cache), the teacher pass of every hinted segment, credit.Step
// over the batch, the gradient of the loss over chunks and rollouts, and AdamW. The
// outcome baselines are updated only when the step succeeds. An error leaves the
// weights as they were unless it came from the device during the update.
//
// A batch without signal (every rollout skipped or weighted 0, and no KL term) is a
// step without an update (Metrics.Updated false): AdamW with a zero gradient would
// still move the weights through momentum and weight decay, so it does not run. The
// rollouts count as trained and the step is counted (StepCount), not the update.
func (tr *Trainer) Step(ctx context.Context, batch []Rollout) (Metrics, error) {
	t0 := time.Now()
	if len(batch) == 0 {
		return Metrics{}, errors.New("train step: empty batch")
	}
	rs := make([]credit.Rollout, len(batch))
	sc := make([]scored, len(batch))
	defer func() {
		for _, s := range sc {
			s.cache.Close()
		}
	}()
	budget := tr.opts.Budget
	count, scoredTokens := 0, 0
	for i := range batch {
		r := &batch[i]
		cr, s, err := tr.score(ctx, r)
		if err != nil {
			return Metrics{}, fmt.Errorf("train step: rollout %q: %w", r.ID, err)
		}
		rs[i], sc[i] = cr, s
		for _, m := range cr.Trainable {
			if m {
				count++
			}
		}
		scoredTokens += len(r.Tokens)
		for _, h := range r.Hints {
			scoredTokens += len(h.Hint) + h.End - h.Start
		}
	}
	scoreTook := time.Since(t0)
	if budget == 0 {
		budget = max(count, 1)
	}
	b := cloneBaselines(tr.baselines)
	res, stats, err := credit.Step(tr.opts.Credit, rs, b, budget)
	if err != nil {
		return Metrics{}, fmt.Errorf("train step: %w", err)
	}
	acc := tr.grad.zeroGrads()
	met := Metrics{Rollouts: len(batch), Credit: stats, ScoredTokens: scoredTokens, ScoreTook: scoreTook,
		Inputs: rs, Results: res}
	signal := false
	for i := range batch {
		terms, ok := tr.terms(&rs[i], &res[i], sc[i].ref, budget)
		if !ok {
			continue
		}
		signal = true
		pass := tr.grad.accumulate
		cache := sc[i].cache
		switch tr.opts.Backprop {
		case BackpropExact:
			pass = tr.grad.accumulateExact
		case BackpropFull:
			cache = nil
		}
		pr, err := pass(ctx, tr.scorer, batch[i].Tokens, cache, terms, tr.opts.Chunk, tr.opts.AttentionScores, acc)
		if err != nil {
			for _, a := range acc {
				a.FinalizeAll()
			}
			return Metrics{}, fmt.Errorf("train step: rollout %q: %w", batch[i].ID, err)
		}
		met.Loss += pr.Loss
		met.Tokens += len(batch[i].Tokens)
	}
	if signal {
		if err := tr.update(acc, &met); err != nil {
			return Metrics{}, fmt.Errorf("train step: %w", err)
		}
	} else {
		for _, a := range acc {
			a.FinalizeAll()
		}
		met.LR = tr.opts.Optimizer.LRAt(tr.opt.step)
	}
	tr.steps++
	met.Step = tr.steps
	tr.baselines = b
	for i := range batch {
		tr.trained = append(tr.trained, batch[i].ID)
	}
	tr.trainedTotal += int64(len(batch))
	met.Took = time.Since(t0)
	return met, nil
}

// update applies AdamW with the accumulated gradient and moves the teacher.
func (tr *Trainer) update(acc []*tensors.Tensor, met *Metrics) error {
	params := make([]*tensors.Tensor, len(tr.grad.params))
	for i, v := range tr.grad.params {
		params[i] = v.MustValue()
	}
	newP, norm, lr, err := tr.opt.apply(params, acc)
	if err != nil {
		return err
	}
	for i, v := range tr.grad.params {
		if err := v.SetValue(newP[i]); err != nil {
			return fmt.Errorf("set %s: %w", v.ScopeAndName(), err)
		}
	}
	met.Updated, met.LR, met.GradNorm = true, lr, norm
	return tr.teacher.update(tr.model, tr.opt.step)
}

// score runs the student, teacher and reference passes of r and returns its credit
// inputs and its KV cache.
func (tr *Trainer) score(ctx context.Context, r *Rollout) (credit.Rollout, scored, error) {
	T := len(r.Tokens)
	if len(r.Sampler) != T || len(r.Trainable) != T {
		return credit.Rollout{}, scored{}, fmt.Errorf("%d tokens, %d sampler log-probs, %d trainable flags", T, len(r.Sampler), len(r.Trainable))
	}
	s, cache, err := tr.scorer.Score(ctx, r.Tokens)
	if err != nil {
		return credit.Rollout{}, scored{}, err
	}
	sc := scored{cache: cache}
	cr := credit.Rollout{ID: r.ID, TaskID: r.TaskID, Student: f64s(s), Sampler: f64s(r.Sampler),
		Trainable: append([]bool(nil), r.Trainable...), Reward: r.Reward, HasReward: r.HasReward}
	cr.Trainable[0] = false
	if len(r.Hints) > 0 {
		tsc, shared := tr.teacherScorer()
		prefix := cache
		if !shared {
			prefix = nil
		}
		segs := make([]Segment, len(r.Hints))
		for k, h := range r.Hints {
			segs[k] = h.Segment
		}
		q, err := tsc.ScoreHinted(ctx, r.Tokens, prefix, segs)
		if err != nil {
			return cr, sc, fmt.Errorf("teacher pass: %w", err)
		}
		var e [][]float32
		if tr.opts.Credit.Base == credit.BaseEmptyHint {
			for k, h := range r.Hints {
				segs[k].Hint = h.EmptyHint
			}
			if e, err = tsc.ScoreHinted(ctx, r.Tokens, prefix, segs); err != nil {
				return cr, sc, fmt.Errorf("empty-hint pass: %w", err)
			}
		}
		for k, h := range r.Hints {
			span := credit.HintSpan{Start: h.Start, End: h.End, Teacher: f64s(q[k])}
			if e != nil {
				span.EmptyHint = f64s(e[k])
			}
			cr.Hints = append(cr.Hints, span)
		}
	}
	if tr.ref != nil {
		ref, rc, err := tr.ref.Score(ctx, r.Tokens)
		if err != nil {
			return cr, sc, fmt.Errorf("reference pass: %w", err)
		}
		rc.Close()
		cr.Ref = f64s(ref)
		sc.ref = cr.Ref
	}
	return cr, sc, nil
}

// terms turns one rollout's credit into the loss inputs; ok is false when the
// rollout contributes nothing (skipped, or every weight 0 without KL).
func (tr *Trainer) terms(r *credit.Rollout, res *credit.Result, ref []float64, budget int) (chunkTerms, bool) {
	if res.Skipped {
		return chunkTerms{}, false
	}
	T := len(res.Weight)
	ct := chunkTerms{Weight: make([]float32, T)}
	any := false
	for t, w := range res.Weight {
		ct.Weight[t] = float32(w)
		any = any || w != 0
	}
	if beta := tr.opts.Credit.KLBeta; beta > 0 {
		ct.KLCoef, ct.Ref = make([]float32, T), make([]float32, T)
		for t, m := range r.Trainable {
			if m {
				ct.KLCoef[t] = float32(beta / float64(budget))
				ct.Ref[t] = float32(ref[t])
				any = true
			}
		}
	}
	return ct, any
}

func f64s(xs []float32) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = float64(x)
	}
	return out
}

func cloneBaselines(b *credit.Baselines) *credit.Baselines {
	c := &credit.Baselines{Task: make(map[string]float64, len(b.Task)), Global: b.Global, Seen: b.Seen}
	for k, v := range b.Task {
		c.Task[k] = v
	}
	return c
}
