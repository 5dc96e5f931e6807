package xla

import (
	"context"
	"fmt"
	"math"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// zeroGrads returns empty accumulators, one per parameter: nil until the first
// chunk's gradient (float32 whatever the parameter's dtype) becomes it
// (accumulator.addInto); filled makes the zeros of those still empty.
func (p *gradPass) zeroGrads() []*tensors.Tensor { return make([]*tensors.Tensor, len(p.params)) }

// filled replaces acc's empty accumulators with zeros on the pass's device.
func (p *gradPass) filled(acc []*tensors.Tensor) error { return p.acc.filled(acc, p.params, p.device) }

// chunkTerms are the constant per-position inputs of a rollout's loss, indexed by
// token position t (the prediction of y_t): Weight (credit's m·ρ·A/N), KLCoef
// (β/N·m_t, nil without KL) and Ref (log π_ref(y_t | y_<t), nil without KL), and
// Distill, the divergence term of modes topk and full (nil without it); Temp is the
// rollout's sampling temperature, which divides the chunk's logits (tempered; 0
// means 1).
type chunkTerms struct {
	Weight, KLCoef, Ref []float32
	Distill             *distillTerms
	Temp                float64
}

// temp is ct's temperature, 1 when unset.
func (ct chunkTerms) temp() float64 {
	if ct.Temp == 0 {
		return 1
	}
	return ct.Temp
}

// at returns the three inputs of chunk positions off…off+n-1, which predict
// y_{off+1}…y_{off+n}: 0 past the rollout's end.
func (ct chunkTerms) at(off, n int) (w, c, r []float32) {
	w, c, r = make([]float32, n), make([]float32, n), make([]float32, n)
	for i := range n {
		t := off + i + 1
		if t >= len(ct.Weight) {
			break
		}
		w[i] = ct.Weight[t]
		if ct.KLCoef != nil {
			c[i], r[i] = ct.KLCoef[t], ct.Ref[t]
		}
	}
	return w, c, r
}

// passResult is what a gradient pass over one rollout returns.
type passResult struct {
	Loss    float64   // Σ of the chunk losses
	TokLoss []float32 // per token position t (the term of y_t); 0 at t = 0
	LogProb []float32 // log π_θ(y_t | y_<t) as the training pass computed it; NaN at 0
	// Div is D_t, the divergence from the teacher at t (modes topk and full; nil
	// otherwise); at a position without a teacher it is that of a stand-in
	// distribution, weighted 0.
	Div []float32
}

// newPassResult is an empty passResult for T tokens.
func newPassResult(T int, distill bool) passResult {
	res := passResult{TokLoss: make([]float32, T), LogProb: make([]float32, T)}
	res.LogProb[0] = float32(math.NaN())
	if distill {
		res.Div = make([]float32, T)
	}
	return res
}

// accumulate runs the loss of tokens under mode and adds its gradient to acc, whose
// tensors it replaces. cache is the scoring pass's KV cache of the same tokens and
// the same weights (it may be flattened and grown; full ignores it). chunk is the
// training chunk (a power of two ≥ minChunk); the last chunk is bucketed down like
// the Scorer's tail, and a chunk halves while chunk × heads × cache capacity
// exceeds scores (attention-score elements; ≤ 0: no limit), so activation memory
// stays flat as rollouts grow. Full runs the whole rollout as one causal pass
// (exact gradient; activation memory grows with the length).
func (p *gradPass) accumulate(ctx context.Context, mode Backprop, s *Scorer, tokens []int32, cache *KVCache, terms chunkTerms, chunk, scores int, acc []*tensors.Tensor) (passResult, error) {
	T := len(tokens)
	res := newPassResult(T, terms.Distill != nil)
	if terms.Distill != nil && p.dexecs == nil {
		return res, fmt.Errorf("gradient pass: a distillation term, but no distillation mode set (withDistill)")
	}
	if mode == BackpropFull {
		_, err := p.runChunk(BackpropFull, tokens, terms, 0, T, nil, nil, acc, &res)
		return res, err
	}
	if cache == nil || cache.model != p.model || cache.closed() || cache.Len < T {
		return res, fmt.Errorf("gradient pass: the KV cache is not this model's cache of the %d tokens", T)
	}
	c, err := s.flatten(cache)
	if err != nil {
		return res, err
	}
	if mode == BackpropExact {
		return res, p.exact(ctx, s, tokens, c, terms, chunk, scores, acc, &res)
	}
	return res, p.truncated(ctx, s, tokens, c, terms, chunk, scores, acc, &res)
}

// truncated is accumulate with the cache's keys and values as constants, chunk by
// chunk front to back. A chunk at off sees positions < off+n only, so it gets the
// cache cut to the span holding them (trainCut: attention cost grows with the
// cut); the cut copy is shared by the chunks of one span.
func (p *gradPass) truncated(ctx context.Context, s *Scorer, tokens []int32, cache *contiguousCache, terms chunkTerms, chunk, scores int, acc []*tensors.Tensor, res *passResult) error {
	T := len(tokens)
	views := cacheViews{shrink: p.shrink, device: p.device}
	defer views.drop()
	heads := p.model.Config.NumAttentionHeads
	for off := 0; off < T; {
		if err := ctx.Err(); err != nil {
			return err
		}
		rem := T - off
		n := trainChunkFor(chunk, rem, s.trainCut(off+min(rem, chunk), chunk), heads, scores, s.quarter)
		cut := s.trainCut(off+n, chunk)
		if err := s.ensure(cache, max(off+n, cut)); err != nil {
			return err
		}
		p.count(n, cut)
		caches, err := views.of(cache.kv.all(), cut)
		if err != nil {
			return err
		}
		if p.layersFor(terms) {
			if err := p.runChunkLayers(tokens, terms, off, n, caches, acc, res); err != nil {
				return err
			}
		} else if _, err := p.runChunk(BackpropTruncated, tokens, terms, off, n, caches, nil, acc, res); err != nil {
			return err
		}
		off += n
	}
	return nil
}

// exact is accumulate with the exact gradient through the cache: the chunks run
// last to first, and each passes the cotangent of the earlier positions' keys and
// values (what its loss and the later chunks' losses owe them) on to the chunks
// before it, so the sum over chunks is the gradient of one causal pass over the
// rollout, with activation memory bounded by the chunk. The chunks are those of
// truncated, against the same cache cuts; the cotangents take as much device
// memory as the cache.
func (p *gradPass) exact(ctx context.Context, s *Scorer, tokens []int32, cache *contiguousCache, terms chunkTerms, chunk, scores int, acc []*tensors.Tensor, res *passResult) error {
	T := len(tokens)
	heads := p.model.Config.NumAttentionHeads
	var offs, ns []int
	for off := 0; off < T; {
		rem := T - off
		n := trainChunkFor(chunk, rem, s.trainCut(off+min(rem, chunk), chunk), heads, scores, s.quarter)
		offs, ns = append(offs, off), append(ns, n)
		off += n
	}
	last := len(offs) - 1
	if err := s.ensure(cache, max(offs[last]+ns[last], s.trainCut(offs[last]+ns[last], chunk))); err != nil {
		return err
	}
	full := cache.kv.all()
	carried := make([]*tensors.Tensor, len(full))
	for i, t := range full {
		carried[i] = tensors.FromShape(t.Shape())
	}
	defer func() { finalize(carried) }()
	views := cacheViews{shrink: p.shrink, device: p.device}
	defer views.drop()
	for i := len(offs) - 1; i >= 0; i-- {
		if err := ctx.Err(); err != nil {
			return err
		}
		cut := s.trainCut(offs[i]+ns[i], chunk)
		p.count(ns[i], cut)
		caches, err := views.of(full, cut)
		if err != nil {
			return err
		}
		next, err := p.runChunk(BackpropExact, tokens, terms, offs[i], ns[i], caches, carried, acc, res)
		if err != nil {
			carried = nil // donated or finalized by runChunk
			return err
		}
		carried = next
	}
	return nil
}

// runChunk runs mode's executable (newGradExec's; the distillation one when terms
// have a Distill term) on the chunk of n positions at off against caches (nil
// without a cache), with carried (the exact pass's cotangents, donated) after them;
// it adds the chunk's gradient into acc (accumulator.addInto, replacing its tensors), adds the chunk's loss, token losses,
// log-probs and divergences to res, and returns the new carried tensors.
func (p *gradPass) runChunk(mode Backprop, tokens []int32, terms chunkTerms, off, n int, caches, carried, acc []*tensors.Tensor, res *passResult) ([]*tensors.Tensor, error) {
	T := len(tokens)
	e := p.execs[mode]
	w, c, r := terms.at(off, n)
	args := append(chunkArgs(tokens, off, n, off), tempArg(terms.temp()),
		tensors.FromFlatDataAndDimensions(w, 1, n),
		tensors.FromFlatDataAndDimensions(c, 1, n),
		tensors.FromFlatDataAndDimensions(r, 1, n),
	)
	if terms.Distill != nil {
		e = p.dexecs[mode]
		args = append(args, terms.Distill.at(off, n)...)
	}
	args = append(args, anys(caches)...)
	for _, t := range carried {
		args = append(args, donatedOn(t, p.backend, p.device))
	}
	out, err := e.ExecOn(p.device, args...)
	if err != nil {
		return nil, fmt.Errorf("gradient of chunk at %d: %w", off, err)
	}
	l := listOf(out)
	lossT, tlT, lpT := l.next(), l.next(), l.next()
	loss := tensors.ToScalar[float32](lossT)
	tl := tensors.MustCopyFlatData[float32](tlT)
	lp := tensors.MustCopyFlatData[float32](lpT)
	finalize([]*tensors.Tensor{lossT, tlT, lpT})
	var div []float32
	if terms.Distill != nil {
		divT := l.next()
		div = tensors.MustCopyFlatData[float32](divT)
		divT.FinalizeAll()
	}
	if err := p.acc.addInto(acc, l.take(len(acc)), p.device); err != nil {
		return nil, fmt.Errorf("gradient of chunk at %d: %w", off, err)
	}
	finalize(carried)
	res.Loss += float64(loss)
	for i := 0; i < n && off+i+1 < T; i++ {
		res.TokLoss[off+i+1] = tl[i]
		res.LogProb[off+i+1] = lp[i]
		if div != nil {
			res.Div[off+i+1] = div[i]
		}
	}
	return l.rest, nil
}

// cacheViews hands out a cache's tensors cut to a capacity bucket, keeping the last
// cut for the chunks of the same bucket.
type cacheViews struct {
	shrink   *graph.Exec
	device   backends.DeviceNum
	view     []*tensors.Tensor
	capacity int
}

// of returns caches (every layer's K then V, at full capacity) cut to their first c
// positions, or caches itself when c covers them all. The cut belongs to v.
func (v *cacheViews) of(caches []*tensors.Tensor, c int) ([]*tensors.Tensor, error) {
	if c >= caches[0].Shape().Dimensions[0] {
		return caches, nil
	}
	if c != v.capacity {
		v.drop()
		out, _, err := v.shrink.ExecWithGraphOnDevice(v.device, append([]any{lengthArg(c)}, anys(caches)...)...)
		if err != nil {
			return nil, fmt.Errorf("cut kv cache to %d: %w", c, err)
		}
		v.view, v.capacity = out, c
	}
	return v.view, nil
}

// drop frees the cut.
func (v *cacheViews) drop() {
	finalize(v.view)
	v.view, v.capacity = nil, 0
}

// trainCut is how many cache positions a training chunk whose last position is
// end-1 attends to: the chunk gets the cache cut to them. The span of
// spanFor(end, unit) (unit: the training chunk), or with BucketAttention the
// capacity bucket ≥ end. The training graph attends over the cut in one masked
// softmax, since its backward keeps the probabilities anyway (there is no
// recompute backward here): chunk × heads × cut floats, which the trainer's
// AttentionScores budget bounds by halving the chunk.
func (s *Scorer) trainCut(end, unit int) int {
	if s.bucket {
		return s.capacityFor(end)
	}
	return spanFor(end, unit).Len()
}

// trainChunkFor is the training chunk for rem remaining positions against a cache
// of capacity positions: chunkRung(chunk, rem, quarter), then halved (≥ minChunk)
// while chunk × heads × capacity > scores.
func trainChunkFor(chunk, rem, capacity, heads, scores int, quarter bool) int {
	n := chunkRung(chunk, rem, quarter)
	for scores > 0 && n/2 >= minChunk && n*heads*capacity > scores {
		n /= 2
	}
	return n
}

// combine returns a + b (freeing both) and the global L2 norms of a and of b: the
// step's gradient from its two terms' gradients (TrainerOptions.TermGradNorms).
func (p *gradPass) combine(a, b []*tensors.Tensor) (sum []*tensors.Tensor, na, nb float64, err error) {
	np := len(a)
	if err := p.filled(a); err != nil {
		return nil, 0, 0, err
	}
	if err := p.filled(b); err != nil {
		return nil, 0, 0, err
	}
	if p.sum == nil {
		e, err := graph.NewExec(p.backend, func(in []*graph.Node) []*graph.Node {
			l := listOf(in)
			xs, ys := l.take(np), l.take(np)
			out := []*graph.Node{globalNorm(xs), globalNorm(ys)}
			for i := range np {
				out = append(out, graph.Add(xs[i], ys[i]))
			}
			return out
		})
		if err != nil {
			return nil, 0, 0, fmt.Errorf("combine gradient terms: %w", err)
		}
		p.sum = e
	}
	args := make([]any, 0, 2*np)
	for _, t := range a {
		args = append(args, donated(t, p.backend))
	}
	for _, t := range b {
		args = append(args, donated(t, p.backend))
	}
	out, _, err := p.sum.ExecWithGraphOnDevice(p.device, args...)
	finalize(a)
	finalize(b)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("combine gradient terms: %w", err)
	}
	na = float64(tensors.ToScalar[float32](out[0]))
	nb = float64(tensors.ToScalar[float32](out[1]))
	finalize(out[:2])
	return out[2:], na, nb, nil
}

// globalNorm is √Σ x² over every element of xs.
//
//	xs: tensors of any shapes → scalar
func globalNorm(xs []*graph.Node) *graph.Node { return graph.Sqrt(sumSquares(xs)) }
