package xla

import (
	"math"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// layerCache is one layer's KV cache as a graph sees it, one implementation per
// layout (kvcache_graph.go): chunkOnly (no cache: the chunk attends to itself),
// contiguousNodes' layers ([capacity, batch, kv, hd] per layer, the training pass
// and the Sampler) and pagedNodes' layers (the Scorer's pages). attention projects
// a chunk and hands its queries, keys and values to attend, which writes the keys
// and values where the layout keeps them (the layout's outputs) and attends.
type layerCache interface {
	// attend writes the chunk's keys and values at positions start… and returns
	// the attention of each query over the positions ≤ its own that the cache and
	// the chunk hold. start gives every row its own position when it is [batch]
	// (decoding: seq = 1).
	//
	//	q5: [batch, seq, kv, groups, head_dim]; k, v: [seq, batch, kv, head_dim];
	//	start: scalar int32, or [batch] int32 → [batch, kv, seq, groups, head_dim]
	attend(q5, k, v, start *Node) *Node
}

// graphCache is a whole KV cache in a graph: a layerCache per layer, and once
// every layer has attended, the cache with the chunk written, as the executable
// returns it (none for chunkOnly).
type graphCache interface {
	layer(i int) layerCache
	outputs() []*Node
}

// attention is grouped-query self-attention with RoPE, the optional qwen2 biases and
// qwen3 q/k norms, of one chunk against cache (which also takes the chunk's keys
// and values).
//
//	x: [batch, seq, hidden]; start: scalar int32, or [batch] int32 with seq = 1;
//	cos, sin: [seq, head_dim/2], or [batch, 1, head_dim/2] for a [batch] start
//	→ [batch, seq, hidden]
func attention(ctx *context.Context, c Config, x, start, cos, sin *Node, cache layerCache) *Node {
	dims := x.Shape().Dimensions
	b, t := dims[0], dims[1]
	h, kv, hd, grp := c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim, c.groups()
	q, k, v := projectQKV(ctx, c, x, cos, sin)
	// Query head j uses KV head j / groups (transformers' repeat_kv), so the heads
	// axis splits as [kv, groups].
	o := cache.attend(Reshape(q, b, t, kv, grp, hd), k, v, start) // [b, kv, t, grp, hd]
	o = Reshape(TransposeAllAxes(o, 0, 2, 1, 3, 4), b, t, h*hd)
	return linear(ctx.In("o_proj"), o, c.OBias)
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
	// RoPE in float32 (a bfloat16 projection widened: PyTorch promotes q·cos with
	// cos float32 under autocast).
	q = applyRoPE(widen(q), cos, sin)
	k = applyRoPE(widen(k), cos, sin)
	// The keys and values are rounded to the cache's dtype (the weights') here, so
	// that every cache layout, and a pass without a cache, attends over the same
	// values; the queries too, as scaled_dot_product_attention under autocast
	// takes them. Attention itself (scores, softmax, the values' weighted sum) is
	// float32 over these values; its output is rounded to bfloat16 by o_proj.
	cdt := weight(ctx.In("k_proj"), x.Graph(), "weight").DType()
	q, k, v = roundVia(q, cdt), roundVia(k, cdt), widen(v) // v is cdt already (linear)
	return q, TransposeAllAxes(k, 1, 0, 2, 3), TransposeAllAxes(v, 1, 0, 2, 3)
}

// queryPositions are the positions of a chunk's queries: [1, seq] from a scalar
// start, or [batch, 1] from a [batch] start (one position per row).
func queryPositions(start *Node, seq int) *Node {
	if start.Rank() == 1 {
		return Reshape(start, start.Shape().Dimensions[0], 1)
	}
	g := start.Graph()
	return Reshape(Add(Iota(g, shapes.Make(dtypes.Int32, seq), 0), start), 1, seq)
}

// attendMasked is attention of q5 over every key of k, v in one softmax, each query
// seeing the keys at positions ≤ its own.
//
//	q5: [batch, seq, kv, groups, head_dim]; k, v: [keys, batch, kv, head_dim];
//	qPos: [qb, seq] int32 (qb = 1 or batch); kPos: [keys] int32 → [batch, kv, seq, groups, head_dim]
func attendMasked(q5, k, v, qPos, kPos *Node) *Node {
	g := q5.Graph()
	dims := q5.Shape().Dimensions
	b, t, kv, grp, hd := dims[0], dims[1], dims[2], dims[3], dims[4]
	s := k.Shape().Dimensions[0]
	qb := qPos.Shape().Dimensions[0]
	scores := dot(q5, []int{4}, []int{0, 2}, k, []int{3}, []int{1, 2}) // [b, kv, t, grp, s]
	scores = MulScalar(scores, 1/math.Sqrt(float64(hd)))
	visible := LessOrEqual(Reshape(kPos, 1, 1, s), Reshape(qPos, qb, t, 1)) // [qb, t, s]
	visible = BroadcastToDims(Reshape(visible, qb, 1, t, 1, s), b, kv, t, grp, s)
	scores = Where(visible, scores, Const(g, float32(math.Inf(-1))))
	probs := softmax(scores)
	return dot(probs, []int{4}, []int{0, 1}, v, []int{0}, []int{1, 2}) // [b, kv, t, grp, hd]
}

// softmax over the last axis. A row always has a visible entry (the query's own
// position), so the max is finite; it is a constant for the gradient.
func softmax(x *Node) *Node {
	last := x.Rank() - 1
	e := Exp(Sub(x, StopGradient(ReduceAndKeep(x, ReduceMax, last))))
	return Div(e, ReduceAndKeep(e, ReduceSum, last))
}
