package xla

import (
	"math"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// Causal attention cost for long rollouts (README "Long rollouts: causal attention
// cost"). A scoring chunk at positions start…end-1 needs the keys of positions < end
// only, so it attends to the first span.Len() ≥ end positions of the cache, not to
// the whole capacity bucket, in span.Blocks blocks of span.Block positions, with an
// online softmax (running max and sum, rescaled per block): no [chunk, span] score
// tensor exists, only [chunk, Block] ones, one after another.
//
// Spans come from a bounded set so that a rollout of any length compiles a handful
// of programs: end is rounded up to whole units (the scorer's chunk), exactly up to
// spanSteps units, then to 2, 4, 8… units so that a span is 5…8 × 2^k units (at
// most a quarter more than end; 28 spans for 128k positions in chunks of 512). A
// block is at most maxBlockUnits units, so one score tensor is chunk × heads ×
// maxBlockUnits·chunk floats however long the rollout. The blocks are static
// slices of the cache (every backend has Slice; the pure-Go backend lacks
// DynamicSlice), one program per span.

// kvSpan is the part of a KV cache one chunk attends to: its first Blocks·Block
// positions, taken Block at a time. The zero kvSpan is the whole cache, attended in
// one masked softmax (decoding, prefill, training).
type kvSpan struct{ Blocks, Block int }

// Len is the number of cache positions the span covers.
func (k kvSpan) Len() int { return k.Blocks * k.Block }

// spanSteps is the number of span sizes per doubling of the rollout (beyond the
// first spanSteps units): more compile more programs, fewer waste more attention.
const spanSteps = 8

// maxBlockUnits bounds a block, in units.
const maxBlockUnits = 4

// spanFor returns the span of a chunk whose last position is end-1: u = ⌈end/unit⌉
// units rounded up to a multiple of g = 2^k, the smallest with ⌈u/g⌉ ≤ spanSteps;
// blocks of min(g, maxBlockUnits) units. When unit·2^j ≥ end (a cache capacity
// bucket), Len() ≤ unit·2^j.
func spanFor(end, unit int) kvSpan {
	u := (end + unit - 1) / unit
	g := 1
	for (u+g-1)/g > spanSteps {
		g *= 2
	}
	units := (u + g - 1) / g * g
	block := min(g, maxBlockUnits)
	return kvSpan{Blocks: units / block, Block: block * unit}
}

// attendBlocks is grouped-query attention of q5 over the first span.Len() positions
// of the (already written) cache k, v, causal by absolute position, with an online
// softmax over span.Blocks blocks. Block 0 holds position 0, which every query sees,
// so the running max is finite from the first block on; a block a query cannot see
// at all adds exp(−∞) = 0.
//
//	q5: [batch, seq, kv, groups, head_dim]; k, v: [capacity, batch, kv, head_dim];
//	qPos: [1, seq] int32 absolute positions → [batch, kv, seq, groups, head_dim]
func attendBlocks(q5, k, v, qPos *Node, span kvSpan) *Node {
	g := q5.Graph()
	dims := q5.Shape().Dimensions
	b, t, kv, grp, hd := dims[0], dims[1], dims[2], dims[3], dims[4]
	kb := span.Block
	scale := 1 / math.Sqrt(float64(hd))
	qCol := Reshape(qPos, t, 1)
	negInf := Const(g, float32(math.Inf(-1)))
	var m, l, acc *Node // [b, kv, t, grp, 1], [b, kv, t, grp, 1], [b, kv, t, grp, hd]
	for j := range span.Blocks {
		lo := j * kb
		kj := Slice(k, AxisRange(lo, lo+kb)) // [kb, b, kv, hd]
		vj := Slice(v, AxisRange(lo, lo+kb))
		qj := q5
		if j > 0 {
			// q + 0·max(acc) makes block j's scores wait for block j-1's sum:
			// without it XLA CPU computed the blocks' score tensors together and
			// held most of them at once (1.2 GB against 0.44 GB for 16 blocks of
			// 2048 keys, one layer, 512 queries).
			qj = Add(q5, MulScalar(ReduceAllMax(acc), 0))
		}
		s := MulScalar(dot(qj, []int{4}, []int{0, 2}, kj, []int{3}, []int{1, 2}), scale) // [b, kv, t, grp, kb]
		kPos := Add(Iota(g, shapes.Make(dtypes.Int32, 1, kb), 1), Const(g, int32(lo)))   // [1, kb]
		visible := BroadcastToDims(Reshape(LessOrEqual(kPos, qCol), 1, 1, t, 1, kb), b, kv, t, grp, kb)
		s = Where(visible, s, negInf)
		mj := StopGradient(ReduceAndKeep(s, ReduceMax, 4))
		if j == 0 {
			m = mj
			p := Exp(Sub(s, m))
			l = ReduceAndKeep(p, ReduceSum, 4)
			acc = dot(p, []int{4}, []int{0, 1}, vj, []int{0}, []int{1, 2})
			continue
		}
		mNew := Max(m, mj)
		alpha := Exp(Sub(m, mNew))
		p := Exp(Sub(s, mNew))
		l = Add(Mul(alpha, l), ReduceAndKeep(p, ReduceSum, 4))
		acc = Add(Mul(alpha, acc), dot(p, []int{4}, []int{0, 1}, vj, []int{0}, []int{1, 2}))
		m = mNew
	}
	return Div(acc, l)
}
