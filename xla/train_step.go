package xla

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/hindsight-ai/hindsight/credit"
	"github.com/hindsight-ai/hindsight/internal/progcache"
)

// scored is one rollout after the scoring passes.
type scored struct {
	cache *KVCache
	ref   []float64
	// dists are the teacher's kept distributions per hint span (modes topk and
	// full; nil otherwise).
	dists []TeacherDist
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
func (tr *Trainer) Step(ctx context.Context, batch []credit.Sequence) (met Metrics, err error) {
	t0 := time.Now()
	if len(batch) == 0 {
		return Metrics{}, errors.New("train step: empty batch")
	}
	var batchTokens int64
	for i := range batch {
		batchTokens += int64(len(batch[i].Tokens))
	}
	tr.progress.begin(tr.steps+1, len(batch), batchTokens)
	defer func() { tr.progress.end(err == nil) }()
	defer progcache.Hold()() // no background program load shares the step's CPUs
	rs := make([]credit.Sequence, len(batch))
	sc := make([]scored, len(batch))
	defer func() {
		for _, s := range sc {
			s.cache.Close()
		}
	}()
	var parts [][]int // with several devices, each one's rollouts
	if tr.dp != nil {
		var err error
		if parts, err = tr.scoreParallel(ctx, batch, rs, sc); err != nil {
			return Metrics{}, fmt.Errorf("train step: %w", err)
		}
	} else {
		for i := range batch {
			cr, s, err := tr.score(ctx, &batch[i])
			sc[i] = s
			if err != nil {
				return Metrics{}, fmt.Errorf("train step: rollout %q: %w", batch[i].ID, err)
			}
			rs[i] = cr
			tr.progress.scored(len(batch[i].Tokens))
		}
	}
	count, scoredTokens := 0, 0
	for i := range batch {
		for _, m := range rs[i].Trainable {
			if m {
				count++
			}
		}
		scoredTokens += rolloutTokens(&batch[i])
	}
	scoreTook := time.Since(t0)
	budget := tr.opts.Budget
	if budget == 0 {
		budget = max(count, 1)
	}
	b := cloneBaselines(tr.baselines)
	res, stats, err := credit.Step(tr.opts.Credit, rs, b, budget)
	if err != nil {
		return Metrics{}, fmt.Errorf("train step: %w", err)
	}
	tr.progress.phase(PhaseGradient)
	met = Metrics{Rollouts: len(batch), Credit: stats, ScoredTokens: scoredTokens, ScoreTook: scoreTook,
		Inputs: rs, Results: res, OutGradNorm: math.NaN(), DistillGradNorm: math.NaN()}
	if tr.opts.Credit.Distill.Mode == credit.DistillTopK || tr.opts.Credit.Distill.Mode == credit.DistillFull {
		met.Dists = make([][]TeacherDist, len(sc))
		for i := range sc {
			met.Dists[i] = sc[i].dists
		}
	}
	var acc []*tensors.Tensor
	var signal bool
	if tr.dp != nil {
		acc, signal, err = tr.accumulateParallel(ctx, parts, batch, rs, res, sc, budget, &met)
	} else {
		acc, signal, err = tr.accumulate(ctx, batch, rs, res, sc, budget, &met)
	}
	if err != nil {
		return Metrics{}, fmt.Errorf("train step: %w", err)
	}
	tr.progress.phase(PhaseUpdate)
	if tr.trim {
		// What the passes freed (their temporaries, and in a first step the
		// compiler's memory) goes back before the update allocates.
		trimMalloc()
	}
	if signal {
		if err := tr.update(acc, &met); err != nil {
			return Metrics{}, fmt.Errorf("train step: %w", err)
		}
		if tr.dp != nil {
			if err := tr.dp.settled(tr); err != nil {
				return Metrics{}, fmt.Errorf("train step: %w", err)
			}
		}
	} else {
		finalize(acc)
		met.LR = tr.opts.Optimizer.LRAt(tr.opt.step)
	}
	tr.steps++
	met.Step = tr.steps
	tr.baselines = b
	if tr.trim {
		trimMalloc()
	}
	met.Took = time.Since(t0)
	return met, nil
}

// accumulate runs the gradient pass of every rollout with a signal and returns the
// summed gradient (the caller's to free or apply) and whether any rollout had a
// signal; it fills met's Loss, Tokens, Terms and, with TermGradNorms, the two
// terms' gradient norms (the outcome and distillation parts then run as two passes
// into two sums, added at the end).
func (tr *Trainer) accumulate(ctx context.Context, batch []credit.Sequence, rs []credit.Sequence, res []credit.Result, sc []scored, budget int, met *Metrics) ([]*tensors.Tensor, bool, error) {
	split := tr.opts.TermGradNorms
	acc := tr.grad.zeroGrads()
	var accD []*tensors.Tensor
	if split {
		accD = tr.grad.zeroGrads()
	}
	fail := func(err error) ([]*tensors.Tensor, bool, error) {
		finalize(acc)
		finalize(accD)
		return nil, false, err
	}
	logp, div := make([][]float64, len(batch)), make([][]float64, len(batch))
	signal := false
	on := replica1{scorer: tr.scorer, grad: tr.grad}
	for i := range batch {
		ok, loss, err := tr.accumulateRollout(ctx, on, i, batch, rs, res, sc, budget, acc, accD, logp, div)
		if err != nil {
			return fail(err)
		}
		tr.progress.gradientDone(len(batch[i].Tokens))
		if ok {
			signal = true
			met.Loss += loss
			met.Tokens += len(batch[i].Tokens)
		}
	}
	met.Terms = credit.LossTerms(tr.opts.Credit, rs, res, logp, div, budget)
	if !split {
		return acc, signal, nil
	}
	sum, no, nd, err := tr.grad.combine(acc, accD)
	if err != nil {
		return fail(err)
	}
	met.OutGradNorm, met.DistillGradNorm = no, nd
	return sum, signal, nil
}

// accumulateRollout runs the gradient pass of rollout i of batch on one device's
// scorer and gradient pass (on) into acc, or with TermGradNorms its outcome part
// into acc and its distillation part into accD, and fills logp[i] and div[i] with
// the passes' log-probs and divergences (zeros without a signal). It reports whether
// the rollout had a signal and the passes' loss.
func (tr *Trainer) accumulateRollout(ctx context.Context, on replica1, i int, batch, rs []credit.Sequence, res []credit.Result, sc []scored, budget int,
	acc, accD []*tensors.Tensor, logp, div [][]float64) (bool, float64, error) {
	T := len(batch[i].Tokens)
	logp[i], div[i] = make([]float64, T), make([]float64, T)
	terms, ok, err := tr.terms(&rs[i], &res[i], &sc[i], budget)
	if err != nil {
		return false, 0, fmt.Errorf("rollout %q: %w", batch[i].ID, err)
	}
	if !ok {
		return false, 0, nil
	}
	type pass struct {
		terms chunkTerms
		acc   []*tensors.Tensor
	}
	passes := []pass{{terms, acc}}
	if tr.opts.TermGradNorms {
		out, d := terms.split(&res[i])
		passes = []pass{{out, acc}, {d, accD}}
	}
	loss := 0.0
	for _, p := range passes {
		if p.terms.empty() {
			continue
		}
		pr, err := on.grad.accumulate(ctx, tr.opts.Backprop, on.scorer, batch[i].Tokens, sc[i].cache, p.terms, tr.opts.Chunk, tr.opts.AttentionScores, p.acc)
		if err != nil {
			return false, 0, fmt.Errorf("rollout %q: %w", batch[i].ID, err)
		}
		loss += pr.Loss
		for t := 1; t < T; t++ {
			logp[i][t] = float64(pr.LogProb[t])
			if pr.Div != nil {
				div[i][t] = float64(pr.Div[t])
			}
		}
	}
	return true, loss, nil
}

// update applies AdamW with the accumulated gradient and moves the teacher: a
// group of parameters at a time (adamW.applyGroups), or as one program under
// TrainerOptions.WholeUpdate and ZeRO-1.
func (tr *Trainer) update(acc []*tensors.Tensor, met *Metrics) error {
	if tr.opts.WholeUpdate || tr.opt.owners != nil {
		params, owned, err := tr.updated()
		if err != nil {
			finalize(acc)
			return err
		}
		newP, norm, lr, err := tr.opt.apply(params, acc)
		if owned {
			finalize(params)
		}
		if err != nil {
			return err
		}
		if err := tr.setUpdated(newP); err != nil {
			return err
		}
		met.Updated, met.LR, met.GradNorm = true, lr, norm
		return tr.teacher.update(tr.model, tr.opt.step)
	}
	params, lo := tr.groupInputs()
	norm, lr, err := tr.opt.applyGroups(params, lo, acc, tr.setOne)
	if err != nil {
		finalize(acc)
		return err
	}
	met.Updated, met.LR, met.GradNorm = true, lr, norm
	return tr.teacher.update(tr.model, tr.opt.step)
}

// score runs the student, teacher and reference passes of r and returns a copy of it
// with their log-probs filled in (Student, Ref, each hint's Teacher and EmptyTeacher),
// and its KV cache. r itself is not modified.
func (tr *Trainer) score(ctx context.Context, r *credit.Sequence) (credit.Sequence, scored, error) {
	return tr.scoreWith(ctx, r, replica1{scorer: tr.scorer})
}

// scoreWith is score on one device's scorers (on; under data parallel, the device
// the rollout was given to): the student's, which also runs the hinted passes when
// the teacher is the live policy, and the frozen, EMA or base teacher's and the KL
// reference's where on has them (else the trainer's own, on device 0).
func (tr *Trainer) scoreWith(ctx context.Context, r *credit.Sequence, on replica1) (credit.Sequence, scored, error) {
	student := on.scorer
	T := len(r.Tokens)
	if len(r.Sampler) != T || len(r.Trainable) != T {
		return credit.Sequence{}, scored{}, fmt.Errorf("%d tokens, %d sampler log-probs, %d trainable flags", T, len(r.Sampler), len(r.Trainable))
	}
	temp := r.Temp()
	s, cache, err := student.ScoreAt(ctx, r.Tokens, temp)
	if err != nil {
		return credit.Sequence{}, scored{}, err
	}
	sc := scored{cache: cache}
	cr := *r
	cr.Student, cr.Ref = f64s(s), nil
	cr.Trainable = append([]bool(nil), r.Trainable...)
	cr.Trainable[0] = false
	cr.Hints = slices.Clone(r.Hints)
	if len(cr.Hints) > 0 {
		tsc, shared := tr.teacherScorer()
		switch {
		case shared:
			tsc = student
		case on.teacher != nil:
			tsc = on.teacher
		}
		prefix := cache
		if !shared {
			prefix = nil
		}
		view := viewOf(tr.opts.Credit.Distill)
		var ids []TeacherDist
		if view.takesIDs() {
			// topk_ids student or union: the student's own top k at the hinted
			// positions first, at the weights the training pass runs with.
			if ids, err = student.StudentTopK(ctx, r.Tokens, cache, cr.Hints, view, temp); err != nil {
				return cr, sc, err
			}
		}
		q, dists, err := tsc.ScoreHintedAt(ctx, r.Tokens, prefix, cr.Hints, view, ids, temp)
		if err != nil {
			return cr, sc, fmt.Errorf("teacher pass: %w", err)
		}
		sc.dists = dists
		var e [][]float32
		if tr.opts.Credit.Base == credit.BaseEmptyHint {
			empty := slices.Clone(cr.Hints)
			for k := range empty {
				empty[k].Tokens = empty[k].Empty
			}
			if e, _, err = tsc.ScoreHintedAt(ctx, r.Tokens, prefix, empty, TeacherView{}, nil, temp); err != nil {
				return cr, sc, fmt.Errorf("empty-hint pass: %w", err)
			}
		}
		for k := range cr.Hints {
			cr.Hints[k].Teacher, cr.Hints[k].EmptyTeacher = f64s(q[k]), nil
			if e != nil {
				cr.Hints[k].EmptyTeacher = f64s(e[k])
			}
		}
	}
	if tr.ref != nil {
		refScorer := tr.ref
		if on.ref != nil {
			refScorer = on.ref
		}
		ref, rc, err := refScorer.ScoreAt(ctx, r.Tokens, temp)
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
func (tr *Trainer) terms(r *credit.Sequence, res *credit.Result, sc *scored, budget int) (chunkTerms, bool, error) {
	if res.Skipped {
		return chunkTerms{}, false, nil
	}
	ref := sc.ref
	T := len(res.Weight)
	ct := chunkTerms{Weight: make([]float32, T), Temp: r.Temp()}
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
	if slices.ContainsFunc(res.DistillWeight, func(w float64) bool { return w != 0 }) {
		v := viewOf(tr.opts.Credit.Distill)
		d, err := newDistillTerms(v, tr.model.Config.VocabSize, res.DistillWeight, r.Hints, sc.dists)
		if err != nil {
			return chunkTerms{}, false, err
		}
		ct.Distill, any = d, true
	}
	return ct, any, nil
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
