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
// ≤ their own; without, they attend within the chunk (causally).
//
//	x: [batch, seq, hidden]; start: scalar int32; cos, sin: [seq, head_dim/2];
//	kCache, vCache: [capacity, batch, kv_heads, head_dim] or nil
//	→ [batch, seq, hidden], and the updated caches (nil without)
func attention(ctx *context.Context, c Config, x, start, cos, sin, kCache, vCache *Node) (out, kOut, vOut *Node) {
	g := x.Graph()
	dims := x.Shape().Dimensions
	b, t := dims[0], dims[1]
	h, kv, hd, grp := c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim, c.groups()
	q := Reshape(linear(ctx.In("q_proj"), x, c.QKVBias), b, t, h, hd)
	k := Reshape(linear(ctx.In("k_proj"), x, c.QKVBias), b, t, kv, hd)
	v := Reshape(linear(ctx.In("v_proj"), x, c.QKVBias), b, t, kv, hd)
	if c.QKNorm {
		q = rmsNorm(ctx.In("q_norm"), q, c.RMSNormEps)
		k = rmsNorm(ctx.In("k_norm"), k, c.RMSNormEps)
	}
	q = applyRoPE(q, cos, sin)
	k = applyRoPE(k, cos, sin)
	k = TransposeAllAxes(k, 1, 0, 2, 3) // [seq, batch, kv, hd]
	v = TransposeAllAxes(v, 1, 0, 2, 3)

	qPos := Add(Iota(g, shapes.Make(dtypes.Int32, t), 0), start) // [seq]
	var kPos *Node
	if kCache != nil {
		kOut = writeCache(kCache, k, start)
		vOut = writeCache(vCache, v, start)
		k, v = kOut, vOut
		kPos = Iota(g, shapes.Make(dtypes.Int32, k.Shape().Dimensions[0]), 0)
	} else {
		kPos = qPos
	}
	s := k.Shape().Dimensions[0]

	// Query head j uses KV head j / groups (transformers' repeat_kv), so the heads
	// axis splits as [kv, groups].
	q5 := Reshape(q, b, t, kv, grp, hd)
	scores := dot(q5, []int{4}, []int{0, 2}, k, []int{3}, []int{1, 2}) // [b, kv, t, grp, s]
	scores = MulScalar(scores, 1/math.Sqrt(float64(hd)))
	visible := LessOrEqual(Reshape(kPos, 1, s), Reshape(qPos, t, 1)) // [t, s]
	visible = BroadcastToDims(Reshape(visible, 1, 1, t, 1, s), b, kv, t, grp, s)
	scores = Where(visible, scores, Const(g, float32(math.Inf(-1))))
	probs := softmax(scores)
	o := dot(probs, []int{4}, []int{0, 1}, v, []int{0}, []int{1, 2}) // [b, kv, t, grp, hd]
	o = Reshape(TransposeAllAxes(o, 0, 2, 1, 3, 4), b, t, h*hd)
	return linear(ctx.In("o_proj"), o, c.OBias), kOut, vOut
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
