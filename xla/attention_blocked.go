package xla

import (
	"math"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// Causal attention cost for long rollouts (docs/performance.md "Long rollouts: causal attention
// cost"). A scoring chunk at positions start…end-1 needs the keys of positions < end
// only: its own, and those of the pages before it (scorer_paged.go), which it
// attends to in blocks of up to MaxBlockPages pages with an online softmax (running
// max and sum, rescaled per block), so no [chunk, span] score tensor exists, only
// [chunk, block] ones, one after another. The training pass cuts its contiguous
// cache to the same spans (Scorer.trainCut).
//
// Spans come from a bounded set so that a rollout of any length compiles a handful
// of programs: the positions before a chunk are rounded up to whole units (pages,
// the scorer's chunk), exactly up to spanSteps units, then to 2, 4, 8… units so
// that a span is 5…8 × 2^k units (at most a quarter more; 28 spans for 128k
// positions in chunks of 512). A block is at most MaxBlockPages units, so one score
// tensor is chunk × heads × MaxBlockPages·chunk floats however long the rollout.
// A block is a concatenation of whole pages (every backend has Concatenate; the
// pure-Go backend lacks DynamicSlice), one program per span.

// kvSpan is the part of a KV cache one chunk attends to: its first Blocks·Block
// positions, taken Block at a time.
type kvSpan struct{ Blocks, Block int }

// Len is the number of cache positions the span covers.
func (k kvSpan) Len() int { return k.Blocks * k.Block }

// spanSteps is the number of span sizes per doubling of the rollout (beyond the
// first spanSteps units): more compile more programs, fewer waste more attention.
const spanSteps = 8

// MaxBlockPages bounds a block of a span, in units (pages of the scorer's chunk):
// one attention score tensor is at most chunk × heads × MaxBlockPages·chunk floats.
const MaxBlockPages = 4

// spanFor returns the span covering positions 0…end−1 (for a scoring chunk, the
// positions before it; for a training chunk, those up to its last): u = ⌈end/unit⌉
// units rounded up to a multiple of g = 2^k, the smallest with ⌈u/g⌉ ≤ spanSteps;
// blocks of min(g, MaxBlockPages) units. When unit·2^j ≥ end (a cache capacity
// bucket), Len() ≤ unit·2^j.
func spanFor(end, unit int) kvSpan {
	u := (end + unit - 1) / unit
	g := 1
	for (u+g-1)/g > spanSteps {
		g *= 2
	}
	units := (u + g - 1) / g * g
	block := min(g, MaxBlockPages)
	return kvSpan{Blocks: units / block, Block: block * unit}
}

// attendPaged is grouped-query attention of a chunk at positions start… over its
// own keys (causally) and then over the pages before it: the past pages, taken
// perBlock pages at a time, of which only the positions < start are visible. The
// chunk's own keys come first (attendOwn: in halves, without the quarter above the
// diagonal), so every query has a visible key from the start and the running max is
// finite; a past block beyond start adds exp(−∞) = 0.
//
//	q5: [batch, seq, kv, groups, head_dim]; k, v: the chunk's [seq, batch, kv, head_dim];
//	past: pages [page, batch, kv, head_dim]; start: scalar int32 → [batch, kv, seq, groups, head_dim]
func attendPaged(q5, k, v *Node, pastK, pastV []*Node, perBlock int, start *Node) *Node {
	g := q5.Graph()
	t := q5.Shape().Dimensions[1]
	o := attendOwn(q5, k, v)
	for j := 0; j < len(pastK); j += perBlock {
		kj, vj := Concatenate(pastK[j:j+perBlock], 0), Concatenate(pastV[j:j+perBlock], 0)
		kb := kj.Shape().Dimensions[0]
		lo := j * pastK[0].Shape().Dimensions[0]
		kPos := Add(Iota(g, shapes.Make(dtypes.Int32, 1, kb), 1), Const(g, int32(lo))) // [1, kb]
		o.add(q5, kj, vj, BroadcastToDims(LessThan(kPos, start), t, kb))
	}
	return o.result()
}

// ownHalves is the least chunk whose attention over its own keys attendOwn takes
// in halves: below it the products are too small for the quarter saved to pay for
// the extra steps.
const ownHalves = 128

// attendOwn starts the online softmax of a chunk at its own keys, causally. A chunk
// of t ≥ ownHalves positions (t even) is taken in halves: the first half of the
// queries over the first half of the keys, the second half over the first half (all
// visible) and then over the second — 3/4 of one t × t block's products, the
// quarter above the diagonal, which the mask would only hide, not computed.
//
//	q5: [batch, seq, kv, groups, head_dim]; k, v: [seq, batch, kv, head_dim]
func attendOwn(q5, k, v *Node) onlineSoftmax {
	g := q5.Graph()
	t := q5.Shape().Dimensions[1]
	causal := func(n int) *Node {
		rel := Iota(g, shapes.Make(dtypes.Int32, n), 0)
		return LessOrEqual(Reshape(rel, 1, n), Reshape(rel, n, 1))
	}
	var o onlineSoftmax
	if t < ownHalves || t%2 != 0 {
		o.add(q5, k, v, causal(t))
		return o
	}
	h := t / 2
	qLo, qHi := Slice(q5, AxisRange(), AxisRange(0, h)), Slice(q5, AxisRange(), AxisRange(h, t))
	kLo, kHi := Slice(k, AxisRange(0, h)), Slice(k, AxisRange(h, t))
	vLo, vHi := Slice(v, AxisRange(0, h)), Slice(v, AxisRange(h, t))
	var lo, hi onlineSoftmax
	lo.add(qLo, kLo, vLo, causal(h))
	hi.add(qHi, kLo, vLo, BroadcastToDims(Const(g, true), h, h))
	hi.add(qHi, kHi, vHi, causal(h))
	join := func(a, b *Node) *Node { return Concatenate([]*Node{a, b}, 2) } // along seq
	return onlineSoftmax{m: join(lo.m, hi.m), l: join(lo.l, hi.l), acc: join(lo.acc, hi.acc)}
}

// onlineSoftmax accumulates softmax(q·kᵀ/√d)·v over key blocks added one at a
// time: a running max m, the running sum l of exp(score − m) and the running
// weighted sum acc, rescaled by exp(m_old − m_new) when the max grows. No score
// tensor wider than one block exists. The first block added must give every query
// a visible key (else m is −∞ and the rescale is NaN).
type onlineSoftmax struct {
	m, l, acc *Node // [b, kv, t, grp, 1], [b, kv, t, grp, 1], [b, kv, t, grp, hd]
}

// add takes one block of keys and values: kj, vj [kb, batch, kv, head_dim], with
// visible [seq, kb] saying which query sees which key.
func (o *onlineSoftmax) add(q5, kj, vj, visible *Node) {
	g := q5.Graph()
	dims := q5.Shape().Dimensions
	b, t, kv, grp, hd := dims[0], dims[1], dims[2], dims[3], dims[4]
	kb := kj.Shape().Dimensions[0]
	if o.acc != nil {
		// k + 0·max(acc) and v + 0·max(acc) make this block wait for the previous
		// block's sum: without it XLA CPU computed the blocks' score tensors (and
		// the keys' transposed copies) together and held most of them at once.
		after := MulScalar(ReduceAllMax(o.acc), 0)
		kj, vj = Add(kj, after), Add(vj, after)
	}
	s := MulScalar(dot(q5, []int{4}, []int{0, 2}, kj, []int{3}, []int{1, 2}), 1/math.Sqrt(float64(hd))) // [b, kv, t, grp, kb]
	s = Where(BroadcastToDims(Reshape(visible, 1, 1, t, 1, kb), b, kv, t, grp, kb), s, Const(g, float32(math.Inf(-1))))
	mj := StopGradient(ReduceAndKeep(s, ReduceMax, 4))
	if o.acc == nil {
		o.m = mj
		p := Exp(Sub(s, o.m))
		o.l = ReduceAndKeep(p, ReduceSum, 4)
		o.acc = dot(p, []int{4}, []int{0, 1}, vj, []int{0}, []int{1, 2})
		return
	}
	mNew := Max(o.m, mj)
	alpha := Exp(Sub(o.m, mNew))
	p := Exp(Sub(s, mNew))
	o.l = Add(Mul(alpha, o.l), ReduceAndKeep(p, ReduceSum, 4))
	o.acc = Add(Mul(alpha, o.acc), dot(p, []int{4}, []int{0, 1}, vj, []int{0}, []int{1, 2}))
	o.m = mNew
}

// result is the attention output so far: acc / l.
func (o *onlineSoftmax) result() *Node { return Div(o.acc, o.l) }
