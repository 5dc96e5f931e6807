package xla

import (
	"fmt"
	"slices"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/hindsight-ai/hindsight/credit"
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

// gradPass runs the loss and its gradient over chunks of a rollout, one
// executable per Backprop mode (newGradExec).
type gradPass struct {
	model   *Model
	backend backends.Backend
	params  []*mlctx.Variable // the trained variables (trainables), in context order
	execs   map[Backprop]*modelExec
	// dexecs are execs with the distillation term of modes topk and full
	// (withDistill; nil without it).
	dexecs  map[Backprop]*modelExec
	distill credit.DistillConfig
	sum     *Exec              // combine's: two gradient sums added, and their norms
	acc     *accumulator       // adds each chunk's gradient into the step's sums
	shrink  *Exec              // the first c positions of every cache tensor
	device  backends.DeviceNum // runs the passes (dataparallel.go; 0 otherwise)
	stats   AttentionStats     // chunk executions against a cache (GradientStats)
	seen    map[[2]int]bool    // (chunk, cut) pairs run
	layers  *gradLayers        // the truncated pass as layer programs (gradpass_layers.go), else nil
}

func newGradPass(backend backends.Backend, m *Model) (*gradPass, error) {
	p := &gradPass{model: m, backend: backend, params: trainables(m), seen: map[[2]int]bool{}, execs: map[Backprop]*modelExec{}}
	var err error
	if p.shrink, err = newShrinkExec(backend); err != nil {
		return nil, fmt.Errorf("new gradient pass: %w", err)
	}
	if p.acc, err = newAccumulator(backend, p.params); err != nil {
		return nil, fmt.Errorf("new gradient pass: %w", err)
	}
	for _, mode := range []Backprop{BackpropTruncated, BackpropExact, BackpropFull} {
		if p.execs[mode], err = p.newGradExec(mode, TeacherView{}); err != nil {
			return nil, fmt.Errorf("new gradient pass: %s: %w", mode, err)
		}
	}
	return p, nil
}

// withDistill makes the executables whose loss has the divergence term of cfg's
// mode (topk or full); rollouts whose chunkTerms have a Distill term run them.
func (p *gradPass) withDistill(cfg credit.DistillConfig) error {
	v := viewOf(cfg)
	if !v.keeps() {
		return nil
	}
	p.distill, p.dexecs = cfg, map[Backprop]*modelExec{}
	for _, mode := range []Backprop{BackpropTruncated, BackpropExact, BackpropFull} {
		e, err := p.newGradExec(mode, v)
		if err != nil {
			return fmt.Errorf("gradient pass with distill mode %s: %s: %w", cfg.Mode, mode, err)
		}
		p.dexecs[mode] = e
	}
	return nil
}

// newGradExec returns the executable of one chunk's loss and gradient under mode:
//
//	inputs:  chunkArgs, the temperature (tempArg), then w, c, r [1, seq]
//	         (chunkTerms.at);
//	         with a view that keeps: the distillation inputs (distillTerms.at);
//	         the contiguous cache, cut to the chunk's span (truncated, exact);
//	         the cotangents of the whole cache, a kvPair (exact)
//	outputs: loss (scalar), token losses and log-probs [1, seq], with a view the
//	         divergences D [1, seq]; the chunk's gradient, one float32 tensor per
//	         trained variable (summed over chunks by accumulator.addInto: taking
//	         the sums as inputs would hold them twice, there being no aliasing);
//	         the cotangents passed on (exact)
//
// Every log-prob and distribution is the policy's at the rollout's temperature: the
// logits are divided by it (tempered) before anything else reads them.
//
// With a view, each position's loss gains dw·D, D the divergence (p.distill) of the
// student's distribution at the position from the teacher's kept one (distillTopK or
// distillFull on the chunk's logits), so its gradient flows into the weights with
// the policy-gradient term's.
//
// A bfloat16 model's embedding and head take their gradients in float32 from the
// cotangents of the gathered rows and of the logits (vocabTap), not from autodiff.
//
// Truncated makes the cache a constant; full runs the chunk (the whole rollout)
// without a cache; exact adds <cotangent, the chunk's own K/V> to the loss, so that
// its gradient carries what later chunks owe these keys and values back into the
// weights and into the earlier positions' K/V (vector-Jacobian chain).
func (p *gradPass) newGradExec(mode Backprop, view TeacherView) (*modelExec, error) {
	cfg := p.model.Config
	nl, np := cfg.NumHiddenLayers, len(p.params)
	return newModelExec(p.backend, p.model, func(ctx *mlctx.Context, in []*Node) []*Node {
		l := listOf(in)
		ch := takeChunk(l)
		temp := l.next()
		w, c, r := l.next(), l.next(), l.next()
		var dn distillNodes
		if view.keeps() {
			dn = takeDistill(l, view)
		}
		var cache graphCache = chunkOnly{}
		var kv *contiguousNodes
		var cot kvPair[*Node]
		switch mode {
		case BackpropTruncated:
			kv = takeContiguous(l, nl)
			kv.constant() // the scoring pass's K/V are constants: truncated backprop
			cache = kv
		case BackpropExact:
			kv = takeContiguous(l, nl)
			cache = kv
			cot = takeKV(l, nl)
		}
		g := ch.tokens.Graph()
		tap := tapVocab(p.model, p.params)
		if tap != nil {
			defer bindGraph(g, &graphBinds{vocab: tap})()
		}
		hidden := decoder(ctx, cfg, ch.tokens, ch.start, cache)
		logits := tempered(headLogits(ctx, cfg, hidden), temp) // [1, n, vocab]
		logp := targetLogProbs(logits, ch.targets)             // [1, n]
		tokLoss := chunkLoss(logp, w, c, r)
		var div *Node
		if view.keeps() {
			div = dn.divergence(p.distill, Squeeze(logits, 0)) // [1, n]
			tokLoss = Add(tokLoss, Mul(dn.weight, ConvertDType(div, tokLoss.DType())))
		}
		loss := ReduceAllSum(tokLoss)
		nodes := make([]*Node, 0, np+2*nl+2)
		for _, v := range p.params {
			if tap == nil || (v != tap.embed && v != tap.head) {
				nodes = append(nodes, v.ValueGraph(g))
			}
		}
		total := loss
		if mode == BackpropExact {
			// The cotangents cover the whole cache; the chunk sees a view of its
			// first positions (the cache may be cut shorter).
			view := kvPair[*Node]{K: make([]*Node, nl), V: make([]*Node, nl)}
			for i := range nl {
				view.K[i], view.V[i] = prefixOf(cot.K[i], kv.in.K[i]), prefixOf(cot.V[i], kv.in.V[i])
			}
			total = Add(loss, cacheCotangentTerm(view, kv.out, ch.start, ch.tokens.Shape().Dimensions[1]))
			nodes = append(nodes, kv.in.all()...)
		}
		if tap != nil {
			nodes = append(nodes, tap.wrt()...)
		}
		all := Gradient(total, nodes...)
		var vocab map[*mlctx.Variable]*Node
		if tap != nil {
			k := len(tap.wrt())
			vocab, all = tap.grads(all[len(all)-k:]), all[:len(all)-k]
		}
		grads := listOf(all)
		out := []*Node{loss, tokLoss, logp}
		if div != nil {
			out = append(out, div)
		}
		for _, v := range p.params {
			if gv, ok := vocab[v]; ok { // float32 already (vocabgrad.go)
				out = append(out, gv)
				continue
			}
			// A bfloat16 weight's gradient is summed in float32.
			out = append(out, ConvertDType(grads.next(), dtypes.Float32))
		}
		if mode == BackpropExact {
			gkv := takeKV(grads, nl)
			for i := range nl {
				out = append(out, addPrefix(cot.K[i], gkv.K[i]))
			}
			for i := range nl {
				out = append(out, addPrefix(cot.V[i], gkv.V[i]))
			}
		}
		return out
	})
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

// cacheCotangentTerm is Σ_layers <cot.K, out.K> + <cot.V, out.V> over the chunk's
// own positions start…start+n-1 (the keys and values it wrote; elsewhere out is
// the cache it was given, whose cotangent is not this chunk's to pass on).
//
//	cot, out: layers × [capacity, batch, kv, hd]; start: scalar int32 → scalar
func cacheCotangentTerm(cot, out kvPair[*Node], start *Node, n int) *Node {
	g := start.Graph()
	dims := out.K[0].Shape().Dimensions
	rel := Sub(Iota(g, shapes.Make(dtypes.Int32, dims[0]), 0), start)
	own := LogicalAnd(GreaterOrEqual(rel, ScalarZero(g, dtypes.Int32)), LessThan(rel, Const(g, int32(n))))
	own = BroadcastToDims(Reshape(own, dims[0], 1, 1, 1), dims...)
	zero := ScalarZero(g, out.K[0].DType())
	var sum *Node
	for i := range out.K {
		for _, pair := range [][2]*Node{{cot.K[i], out.K[i]}, {cot.V[i], out.V[i]}} {
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
