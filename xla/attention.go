package xla

import (
	"math"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// The KV cache of one layer is a pair of [capacity, batch, kv_heads, head_dim]
// tensors indexed by absolute position: position first, so that writing a chunk is
// a Where on a [capacity] condition (a prefix of the cache's shape) on backends
// without DynamicUpdateSlice.

// attention is grouped-query self-attention with RoPE, the optional qwen2 biases and
// qwen3 q/k norms. With a cache (kCache, vCache non-nil), the chunk's keys and values
// are written at positions start… and the queries attend to every cached position
// ≤ their own (the whole cache is scored, masked: the training pass cuts the cache
// to the chunk's span first; the Scorer pages it, attentionPaged); without, they
// attend within the chunk (causally). A start of shape [batch] gives every row its
// own position (decoding: seq = 1, with a cache), so rows of different lengths
// advance together.
//
//	x: [batch, seq, hidden]; start: scalar int32, or [batch] int32 with seq = 1;
//	cos, sin: [seq, head_dim/2], or [batch, 1, head_dim/2] for a [batch] start;
//	kCache, vCache: [capacity, batch, kv_heads, head_dim] or nil
//	→ [batch, seq, hidden], and the updated caches (nil without)
func attention(ctx *context.Context, c Config, x, start, cos, sin, kCache, vCache *Node) (out, kOut, vOut *Node) {
	g := x.Graph()
	dims := x.Shape().Dimensions
	b, t := dims[0], dims[1]
	h, kv, hd, grp := c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim, c.groups()
	q, k, v := projectQKV(ctx, c, x, cos, sin)

	perRow := start.Rank() == 1
	var qPos *Node
	if perRow {
		qPos = Reshape(start, b, 1) // [batch, 1]
	} else {
		qPos = Reshape(Add(Iota(g, shapes.Make(dtypes.Int32, t), 0), start), 1, t) // [1, seq]
	}
	var kPos *Node
	switch {
	case kCache != nil && perRow:
		kOut = writeRows(kCache, k, start)
		vOut = writeRows(vCache, v, start)
	case kCache != nil:
		kOut = writeCache(kCache, k, start)
		vOut = writeCache(vCache, v, start)
	default:
		kPos = Reshape(qPos, t)
	}
	if kCache != nil {
		k, v = kOut, vOut
		kPos = Iota(g, shapes.Make(dtypes.Int32, k.Shape().Dimensions[0]), 0)
	}
	s := k.Shape().Dimensions[0]
	qb := qPos.Shape().Dimensions[0] // 1, or batch with per-row positions

	// Query head j uses KV head j / groups (transformers' repeat_kv), so the heads
	// axis splits as [kv, groups].
	q5 := Reshape(q, b, t, kv, grp, hd)
	scores := dot(q5, []int{4}, []int{0, 2}, k, []int{3}, []int{1, 2}) // [b, kv, t, grp, s]
	scores = MulScalar(scores, 1/math.Sqrt(float64(hd)))
	visible := LessOrEqual(Reshape(kPos, 1, 1, s), Reshape(qPos, qb, t, 1)) // [qb, t, s]
	visible = BroadcastToDims(Reshape(visible, qb, 1, t, 1, s), b, kv, t, grp, s)
	scores = Where(visible, scores, Const(g, float32(math.Inf(-1))))
	probs := softmax(scores)
	o := dot(probs, []int{4}, []int{0, 1}, v, []int{0}, []int{1, 2}) // [b, kv, t, grp, hd]
	o = Reshape(TransposeAllAxes(o, 0, 2, 1, 3, 4), b, t, h*hd)
	return linear(ctx.In("o_proj"), o, c.OBias), kOut, vOut
}

// projectQKV returns a chunk's queries (with RoPE, and the qwen3 q norm) and its
// keys and values laid out as the cache holds them.
//
//	x: [batch, seq, hidden] → q [batch, seq, heads, head_dim], k, v [seq, batch, kv_heads, head_dim]
func projectQKV(ctx *context.Context, c Config, x, cos, sin *Node) (q, k, v *Node) {
	dims := x.Shape().Dimensions
	b, t := dims[0], dims[1]
	h, kv, hd := c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim
	q = Reshape(linear(ctx.In("q_proj"), x, c.QKVBias), b, t, h, hd)
	k = Reshape(linear(ctx.In("k_proj"), x, c.QKVBias), b, t, kv, hd)
	v = Reshape(linear(ctx.In("v_proj"), x, c.QKVBias), b, t, kv, hd)
	if c.QKNorm {
		q = rmsNorm(ctx.In("q_norm"), q, c.RMSNormEps)
		k = rmsNorm(ctx.In("k_norm"), k, c.RMSNormEps)
	}
	q = applyRoPE(q, cos, sin)
	k = applyRoPE(k, cos, sin)
	return q, TransposeAllAxes(k, 1, 0, 2, 3), TransposeAllAxes(v, 1, 0, 2, 3)
}

// softmax over the last axis. A row always has a visible entry (the query's own
// position), so the max is finite; it is a constant for the gradient.
func softmax(x *Node) *Node {
	last := x.Rank() - 1
	e := Exp(Sub(x, StopGradient(ReduceAndKeep(x, ReduceMax, last))))
	return Div(e, ReduceAndKeep(e, ReduceSum, last))
}

// writeCache returns cache with update written at positions start…start+seq-1:
// DynamicUpdateSlice where the backend has it (XLA), else a Gather of the update
// for every cache position and a Where (the pure-Go backend). The caller keeps
// start+seq ≤ capacity (DynamicUpdateSlice would clamp, the Where would drop).
//
//	cache: [capacity, batch, kv, hd]; update: [seq, batch, kv, hd]; start: scalar int32
func writeCache(cache, update, start *Node) *Node {
	g := cache.Graph()
	if g.Backend().Capabilities().Operations[backends.OpTypeDynamicUpdateSlice] {
		zero := ScalarZero(g, dtypes.Int32)
		return DynamicUpdateSlice(cache, update, []*Node{start, zero, zero, zero})
	}
	capacity, seq := cache.Shape().Dimensions[0], update.Shape().Dimensions[0]
	rel := Sub(Iota(g, shapes.Make(dtypes.Int32, capacity), 0), start) // [capacity]
	inside := LogicalAnd(GreaterOrEqual(rel, ScalarZero(g, dtypes.Int32)), LessThan(rel, Const(g, int32(seq))))
	idx := Reshape(ClipScalar(rel, 0, float64(seq-1)), capacity, 1)
	return Where(inside, Gather(update, idx), cache)
}

// writeRows returns cache with row r of update written at position pos[r]: each row
// of a decoding batch has its own position. A Where on a [capacity, batch]
// condition, on every backend (one token per row; the whole cache is read by the
// attention that follows anyway).
//
//	cache: [capacity, batch, kv, hd]; update: [1, batch, kv, hd]; pos: [batch] int32
func writeRows(cache, update, pos *Node) *Node {
	g := cache.Graph()
	dims := cache.Shape().Dimensions
	capacity, b := dims[0], dims[1]
	at := Equal(Iota(g, shapes.Make(dtypes.Int32, capacity, b), 0), BroadcastToDims(Reshape(pos, 1, b), capacity, b))
	return Where(at, BroadcastToDims(update, dims...), cache)
}

// attentionPaged is attention for a chunk against a paged KV cache (KVCache.pages):
// the chunk at positions start… attends to itself and to the positions < start of
// past (the pages of its causal span, perBlock pages per online-softmax block), and
// its keys and values are written into head, the page holding position start, at
// offset = start − that page's first position. The chunk is at most a page long,
// so it ends in head or in the page after it: both come back, as the pages to
// keep (the second is zeros past the chunk).
//
//	x: [1, seq, hidden]; start, offset: scalar int32; cos, sin: [seq, head_dim/2];
//	pastK, pastV: pages [page, 1, kv, hd]; headK, headV: [page, 1, kv, hd]
//	→ [1, seq, hidden], and [2] new K pages and [2] new V pages
func attentionPaged(ctx *context.Context, c Config, x, start, offset, cos, sin *Node, pastK, pastV []*Node, perBlock int, headK, headV *Node) (out *Node, kPages, vPages [2]*Node) {
	dims := x.Shape().Dimensions
	b, t := dims[0], dims[1]
	h, kv, hd, grp := c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim, c.groups()
	q, k, v := projectQKV(ctx, c, x, cos, sin)
	o := attendPaged(Reshape(q, b, t, kv, grp, hd), k, v, pastK, pastV, perBlock, start) // [b, kv, t, grp, hd]
	o = Reshape(TransposeAllAxes(o, 0, 2, 1, 3, 4), b, t, h*hd)
	size := headK.Shape().Dimensions[0]
	write := func(head, update *Node) [2]*Node {
		both := writeCache(Concatenate([]*Node{head, ZerosLike(head)}, 0), update, offset)
		return [2]*Node{Slice(both, AxisRange(0, size)), Slice(both, AxisRange(size, 2*size))}
	}
	return linear(ctx.In("o_proj"), o, c.OBias), write(headK, k), write(headV, v)
}
