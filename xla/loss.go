package xla

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
)

// The device loss of docs/design.md "Credit math", for one chunk of one rollout:
//
//	loss = Σ_i −w_i·l_i + c_i·k3_i,   k3_i = exp(r_i − l_i) − (r_i − l_i) − 1
//
// where l_i = log π_θ(y_{i+1} | y_≤i) is the chunk's log-prob of its next token,
// w_i = credit.Result.Weight (m·ρ·A/N), c_i = β/N·m (0 without KL) and r_i the
// reference policy's log-prob. w, c and r are inputs, so no gradient flows through
// ρ, A or the reference: they are constants of the step, as credit.Loss assumes.
// The gradient of a chunk is added to per-parameter accumulators that the same
// executable takes and returns, so a step's gradient stays on the device.

// gradPass runs the loss and its gradient over chunks of a rollout.
type gradPass struct {
	model    *Model
	backend  backends.Backend
	params   []*mlctx.Variable // the trained variables (trainables), in context order
	cached   *mlctx.Exec       // one chunk against a KV cache (earlier K/V constant)
	exact    *mlctx.Exec       // one chunk against a KV cache, with the cache's cotangents
	uncached *mlctx.Exec       // a whole sequence in one causal pass, no cache
	shrink   *Exec             // the first c positions of every cache tensor
	stats    AttentionStats    // chunk executions against a cache (GradientStats)
	seen     map[[2]int]bool   // (chunk, cut) pairs run
}

func newGradPass(backend backends.Backend, m *Model) (*gradPass, error) {
	p := &gradPass{model: m, backend: backend, params: trainables(m), seen: map[[2]int]bool{}}
	cfg := m.Config
	nl := cfg.NumHiddenLayers
	np := len(p.params)
	// mode: 0 no cache, 1 truncated (cache constant), 2 exact (cache cotangents).
	build := func(mode int) (*mlctx.Exec, error) {
		e, err := mlctx.NewExec(backend, m.ctx, func(ctx *mlctx.Context, in []*Node) []*Node {
			tokens, targets, start, w, c, r := in[0], in[1], in[2], in[3], in[4], in[5]
			rest := in[6:]
			var kc, vc, gk, gv []*Node
			if mode > 0 {
				kc, vc, rest = rest[:nl], rest[nl:2*nl], rest[2*nl:]
			}
			if mode == 1 {
				// The scoring pass's K/V are constants: truncated backprop.
				for i := range kc {
					kc[i], vc[i] = StopGradient(kc[i]), StopGradient(vc[i])
				}
			}
			var gkView, gvView []*Node
			if mode == 2 {
				// The cotangents cover the whole cache; the chunk sees a view of
				// its first positions (kc, vc may be cut shorter).
				gk, gv, rest = rest[:nl], rest[nl:2*nl], rest[2*nl:]
				gkView, gvView = make([]*Node, nl), make([]*Node, nl)
				for i := range nl {
					gkView[i], gvView[i] = prefixOf(gk[i], kc[i]), prefixOf(gv[i], vc[i])
				}
			}
			acc := rest[:np]
			hidden, kOut, vOut := decoder(ctx, cfg, tokens, start, kc, vc)
			logp := tokenLogProbs(ctx, cfg, hidden, targets) // [1, n]
			tokLoss := chunkLoss(logp, w, c, r)
			loss := ReduceAllSum(tokLoss)
			g := tokens.Graph()
			nodes := make([]*Node, np, np+2*nl)
			for i, v := range p.params {
				nodes[i] = v.ValueGraph(g)
			}
			total := loss
			if mode == 2 {
				// Later chunks' dependence on this chunk's keys and values, summed up
				// in gk, gv, enters as <g, K>: its gradient carries it back into the
				// weights and into the earlier positions' K/V (vector-Jacobian chain).
				total = Add(loss, cacheCotangentTerm(gkView, gvView, kOut, vOut, start, tokens.Shape().Dimensions[1]))
				nodes = append(append(nodes, kc...), vc...)
			}
			grads := Gradient(total, nodes...)
			out := []*Node{loss, tokLoss, logp}
			for i := range np {
				out = append(out, Add(acc[i], grads[i]))
			}
			if mode == 2 {
				for i := range nl {
					out = append(out, addPrefix(gk[i], grads[np+i]))
				}
				for i := range nl {
					out = append(out, addPrefix(gv[i], grads[np+nl+i]))
				}
			}
			return out
		})
		if err != nil {
			return nil, err
		}
		e.SetMaxCache(-1)
		return e, nil
	}
	var err error
	p.shrink, err = NewExec(backend, func(in []*Node) []*Node {
		// in[0] is a dummy [c] whose length says how many positions to keep.
		c := in[0].Shape().Dimensions[0]
		out := make([]*Node, len(in)-1)
		for i, x := range in[1:] {
			out[i] = Slice(x, AxisRange(0, c))
		}
		return out
	})
	if err != nil {
		return nil, fmt.Errorf("new gradient pass: %w", err)
	}
	p.shrink.SetMaxCache(-1)
	if p.cached, err = build(1); err != nil {
		return nil, fmt.Errorf("new gradient pass: %w", err)
	}
	if p.exact, err = build(2); err != nil {
		return nil, fmt.Errorf("new gradient pass: %w", err)
	}
	if p.uncached, err = build(0); err != nil {
		return nil, fmt.Errorf("new gradient pass: %w", err)
	}
	return p, nil
}

// prefixOf returns the first positions of full, as many as like has: [capacity, …]
// → like's shape.
func prefixOf(full, like *Node) *Node {
	c := like.Shape().Dimensions[0]
	if c == full.Shape().Dimensions[0] {
		return full
	}
	return Slice(full, AxisRange(0, c))
}

// addPrefix returns full with part added to its first positions (part's length):
// part is padded with zeros by concatenation, which every backend has.
func addPrefix(full, part *Node) *Node {
	c, capacity := part.Shape().Dimensions[0], full.Shape().Dimensions[0]
	if c == capacity {
		return Add(full, part)
	}
	dims := slices.Clone(full.Shape().Dimensions)
	dims[0] = capacity - c
	return Add(full, Concatenate([]*Node{part, Zeros(full.Graph(), shapes.Make(part.DType(), dims...))}, 0))
}

// cacheCotangentTerm is Σ_layers <gk, kOut> + <gv, vOut> over the chunk's own
// positions start…start+n-1 (the keys and values it wrote; elsewhere kOut is the
// cache it was given, whose cotangent is not this chunk's to pass on).
//
//	gk, gv, kOut, vOut: layers × [capacity, batch, kv, hd]; start: scalar int32 → scalar
func cacheCotangentTerm(gk, gv, kOut, vOut []*Node, start *Node, n int) *Node {
	g := start.Graph()
	dims := kOut[0].Shape().Dimensions
	rel := Sub(Iota(g, shapes.Make(dtypes.Int32, dims[0]), 0), start)
	own := LogicalAnd(GreaterOrEqual(rel, ScalarZero(g, dtypes.Int32)), LessThan(rel, Const(g, int32(n))))
	own = BroadcastToDims(Reshape(own, dims[0], 1, 1, 1), dims...)
	zero := ScalarZero(g, kOut[0].DType())
	var sum *Node
	for i := range kOut {
		for _, pair := range [][2]*Node{{gk[i], kOut[i]}, {gv[i], vOut[i]}} {
			t := ReduceAllSum(Mul(Where(own, pair[0], zero), pair[1]))
			if sum == nil {
				sum = t
			} else {
				sum = Add(sum, t)
			}
		}
	}
	return sum
}

// chunkLoss is the per-position loss −w·l + c·k3(r − l); k3 is evaluated only where
// c ≠ 0, so a position without a reference log-prob cannot give 0·∞.
//
//	logp, w, c, r: [batch, seq] float32 → [batch, seq] float32
func chunkLoss(logp, w, c, r *Node) *Node {
	g := logp.Graph()
	zero := ScalarZero(g, logp.DType())
	on := NotEqual(c, zero)
	x := Where(on, Sub(r, logp), zero)
	k3 := Sub(Sub(Exp(x), x), OnesLike(x))
	return Add(Neg(Mul(w, logp)), Mul(c, k3))
}

// zeroGrads returns zero accumulators, one per parameter.
func (p *gradPass) zeroGrads() []*tensors.Tensor {
	out := make([]*tensors.Tensor, len(p.params))
	for i, v := range p.params {
		out[i] = tensors.FromShape(v.Shape())
	}
	return out
}

// chunkTerms are the constant per-position inputs of a rollout's loss, indexed by
// token position t (the prediction of y_t): Weight (credit's m·ρ·A/N), KLCoef
// (β/N·m_t, nil without KL) and Ref (log π_ref(y_t | y_<t), nil without KL).
type chunkTerms struct {
	Weight, KLCoef, Ref []float32
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
}

// accumulate runs the loss over tokens chunk by chunk against cache (the scoring
// pass's KV cache of the same tokens and the same weights; it may be grown) and adds
// the gradient to acc, which it replaces. chunk is the training chunk (a power of
// two ≥ minChunk); the last chunk is bucketed down like the Scorer's tail, and a
// chunk halves while chunk × heads × cache capacity exceeds scores (attention-score
// elements; ≤ 0: no limit), so activation memory stays flat as rollouts grow. With a
// nil cache the whole rollout runs as one causal pass (exact gradient; activation
// memory grows with the length).
func (p *gradPass) accumulate(ctx context.Context, s *Scorer, tokens []int32, cache *KVCache, terms chunkTerms, chunk, scores int, acc []*tensors.Tensor) (passResult, error) {
	T := len(tokens)
	res := newPassResult(T)
	run := func(e *mlctx.Exec, off, n int, caches []*tensors.Tensor) error {
		_, err := p.runChunk(e, tokens, terms, off, n, caches, nil, acc, &res)
		return err
	}
	if cache == nil {
		return res, run(p.uncached, 0, T, nil)
	}
	if err := p.checkCache(cache, T); err != nil {
		return res, err
	}
	if err := s.flatten(cache); err != nil {
		return res, err
	}
	// A chunk at off sees positions < off+n only, so it gets the cache cut to the
	// span holding them (trainCut: attention cost grows with the cut); the cut copy
	// is shared by the chunks of one span.
	views := cacheViews{shrink: p.shrink}
	defer views.drop()
	heads := p.model.Config.NumAttentionHeads
	for off := 0; off < T; {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		rem := T - off
		n := trainChunkFor(chunk, rem, s.trainCut(off+min(rem, chunk), chunk), heads, scores)
		cut := s.trainCut(off+n, chunk)
		if need := max(off+n, cut); need > cache.Capacity {
			if err := s.ensure(cache, need, true); err != nil {
				return res, err
			}
		}
		p.count(n, cut)
		caches, err := views.of(append(append([]*tensors.Tensor{}, cache.k...), cache.v...), cut)
		if err != nil {
			return res, err
		}
		if err := run(p.cached, off, n, caches); err != nil {
			return res, err
		}
		off += n
	}
	return res, nil
}

// checkCache returns an error unless cache is this model's cache of (at least) the
// T tokens being trained.
func (p *gradPass) checkCache(cache *KVCache, T int) error {
	if cache == nil || cache.model != p.model || cache.closed() || cache.Len < T {
		return fmt.Errorf("gradient pass: the KV cache is not this model's cache of the %d tokens", T)
	}
	return nil
}

// newPassResult is an empty passResult for T tokens.
func newPassResult(T int) passResult {
	res := passResult{TokLoss: make([]float32, T), LogProb: make([]float32, T)}
	res.LogProb[0] = float32(math.NaN())
	return res
}

// runChunk runs executable e on the chunk of n positions at off against caches (nil
// without a cache), with carried (the exact pass's cotangents, donated) after them;
// it replaces acc's tensors with the new sums, adds the chunk's loss, token losses
// and log-probs to res, and returns the new carried tensors.
func (p *gradPass) runChunk(e *mlctx.Exec, tokens []int32, terms chunkTerms, off, n int, caches, carried, acc []*tensors.Tensor, res *passResult) ([]*tensors.Tensor, error) {
	T := len(tokens)
	w, c, r := terms.at(off, n)
	args := append(chunkArgs(tokens, off, n, off),
		tensors.FromFlatDataAndDimensions(w, 1, n),
		tensors.FromFlatDataAndDimensions(c, 1, n),
		tensors.FromFlatDataAndDimensions(r, 1, n),
	)
	for _, t := range caches {
		args = append(args, t)
	}
	for _, t := range carried {
		args = append(args, donated(t, p.backend))
	}
	for _, t := range acc {
		args = append(args, donated(t, p.backend))
	}
	out, err := e.Exec(args...)
	if err != nil {
		return nil, fmt.Errorf("gradient of chunk at %d: %w", off, err)
	}
	loss := tensors.ToScalar[float32](out[0])
	tl := tensors.MustCopyFlatData[float32](out[1])
	lp := tensors.MustCopyFlatData[float32](out[2])
	out[0].FinalizeAll()
	out[1].FinalizeAll()
	out[2].FinalizeAll()
	for i, t := range acc {
		t.FinalizeAll() // what donation left of it
		acc[i] = out[3+i]
	}
	for _, t := range carried {
		t.FinalizeAll()
	}
	res.Loss += float64(loss)
	for i := 0; i < n && off+i+1 < T; i++ {
		res.TokLoss[off+i+1] = tl[i]
		res.LogProb[off+i+1] = lp[i]
	}
	return out[3+len(acc):], nil
}

// cacheViews hands out a cache's tensors cut to a capacity bucket, keeping the last
// cut for the chunks of the same bucket.
type cacheViews struct {
	shrink   *Exec
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
		args := []any{make([]float32, c)}
		for _, t := range caches {
			args = append(args, t)
		}
		out, err := v.shrink.Exec(args...)
		if err != nil {
			return nil, fmt.Errorf("cut kv cache to %d: %w", c, err)
		}
		v.view, v.capacity = out, c
	}
	return v.view, nil
}

// drop frees the cut.
func (v *cacheViews) drop() {
	for _, t := range v.view {
		t.FinalizeAll()
	}
	v.view, v.capacity = nil, 0
}

// accumulateExact is accumulate with the exact gradient through the cache: the
// chunks run last to first, and each passes the cotangent of the earlier
// positions' keys and values (what its loss and the later chunks' losses owe them)
// on to the chunks before it, so the sum over chunks is the gradient of one causal
// pass over the rollout, with activation memory bounded by the chunk. The chunks
// are those of accumulate, against the same cache cuts; the cotangents take as much
// device memory as the cache.
func (p *gradPass) accumulateExact(ctx context.Context, s *Scorer, tokens []int32, cache *KVCache, terms chunkTerms, chunk, scores int, acc []*tensors.Tensor) (passResult, error) {
	T := len(tokens)
	res := newPassResult(T)
	if err := p.checkCache(cache, T); err != nil {
		return res, err
	}
	if err := s.flatten(cache); err != nil {
		return res, err
	}
	heads := p.model.Config.NumAttentionHeads
	var offs, ns []int
	for off := 0; off < T; {
		rem := T - off
		n := trainChunkFor(chunk, rem, s.trainCut(off+min(rem, chunk), chunk), heads, scores)
		offs, ns = append(offs, off), append(ns, n)
		off += n
	}
	last := len(offs) - 1
	if end := max(offs[last]+ns[last], s.trainCut(offs[last]+ns[last], chunk)); end > cache.Capacity {
		if err := s.ensure(cache, end, true); err != nil {
			return res, err
		}
	}
	full := append(append([]*tensors.Tensor{}, cache.k...), cache.v...)
	carried := make([]*tensors.Tensor, len(full))
	for i, t := range full {
		carried[i] = tensors.FromShape(t.Shape())
	}
	defer func() {
		for _, t := range carried {
			t.FinalizeAll()
		}
	}()
	views := cacheViews{shrink: p.shrink}
	defer views.drop()
	for i := len(offs) - 1; i >= 0; i-- {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		cut := s.trainCut(offs[i]+ns[i], chunk)
		p.count(ns[i], cut)
		caches, err := views.of(full, cut)
		if err != nil {
			return res, err
		}
		next, err := p.runChunk(p.exact, tokens, terms, offs[i], ns[i], caches, carried, acc, &res)
		if err != nil {
			carried = nil // donated or finalized by runChunk
			return res, err
		}
		carried = next
	}
	return res, nil
}

// donated returns t's buffer donated to the next execution where the backend allows
// (the executable then updates it in place), else t itself.
func donated(t *tensors.Tensor, backend backends.Backend) any {
	if !t.IsShared() {
		if d, err := DonateTensorBuffer(t, backend, 0); err == nil {
			return d
		}
	}
	return t
}

// trainChunkFor is the training chunk for rem remaining positions against a cache
// of capacity positions: chunk, divided by 4 (≥ minChunk) while that still holds
// rem, then halved (≥ minChunk) while chunk × heads × capacity > scores.
func trainChunkFor(chunk, rem, capacity, heads, scores int) int {
	n := chunk
	for n/4 >= minChunk && n/4 >= rem {
		n /= 4
	}
	for scores > 0 && n/2 >= minChunk && n*heads*capacity > scores {
		n /= 2
	}
	return n
}
