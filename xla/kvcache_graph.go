package xla

import (
	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// The layouts a graph reads a KV cache in (layerCache). Each owns its part of an
// executable's inputs and outputs: takeContiguous and takePaged read it from the
// inputs in the order the host packs it (KVCache's layouts, kvcache.go and
// kvcache_paged.go), outputs returns the cache with the chunk written.

// chunkOnly is no cache: the chunk attends to itself, causally (the full-backprop
// gradient pass, reference passes in tests).
type chunkOnly struct{}

func (chunkOnly) layer(int) layerCache { return chunkOnly{} }

func (chunkOnly) outputs() []*Node { return nil }

func (chunkOnly) attend(q5, k, v, start *Node) *Node {
	t := q5.Shape().Dimensions[1]
	qPos := queryPositions(start, t)
	return attendMasked(q5, k, v, qPos, Reshape(qPos, t))
}

// contiguousNodes is a contiguous KV cache in a graph: per layer a K and a V
// [capacity, batch, kv, hd] indexed by absolute position, position first, so that
// writing a chunk is a Where on a [capacity] condition (a prefix of the cache's
// shape) on backends without DynamicUpdateSlice. in is what the executable took,
// out the caches with the chunk written, once every layer has attended. Each query
// attends over the whole capacity, masked (the training pass cuts the cache to the
// chunk's span first).
type contiguousNodes struct {
	in, out kvPair[*Node]
}

// takeContiguous reads a contiguous cache of nl layers from l.
func takeContiguous(l *list[*Node], nl int) *contiguousNodes {
	return &contiguousNodes{in: takeKV(l, nl), out: kvPair[*Node]{K: make([]*Node, nl), V: make([]*Node, nl)}}
}

// constant makes the cache's inputs constants for the gradient (truncated
// backprop).
func (c *contiguousNodes) constant() {
	for i := range c.in.K {
		c.in.K[i], c.in.V[i] = StopGradient(c.in.K[i]), StopGradient(c.in.V[i])
	}
}

// outputs are the written caches, in takeContiguous's order.
func (c *contiguousNodes) outputs() []*Node { return c.out.all() }

func (c *contiguousNodes) layer(i int) layerCache { return contiguousLayer{c, i} }

// contiguousLayer is layer i of a contiguousNodes.
type contiguousLayer struct {
	c *contiguousNodes
	i int
}

func (l contiguousLayer) attend(q5, k, v, start *Node) *Node {
	kc, vc := l.c.in.K[l.i], l.c.in.V[l.i]
	kc, vc = writeCache(kc, like(k, kc), start), writeCache(vc, like(v, vc), start)
	l.c.out.K[l.i], l.c.out.V[l.i] = kc, vc
	kPos := Iota(kc.Graph(), shapes.Make(dtypes.Int32, kc.Shape().Dimensions[0]), 0)
	return attendMasked(q5, like(kc, q5), like(vc, q5), queryPositions(start, q5.Shape().Dimensions[1]), kPos)
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

// pagedNodes is a paged KV cache in a graph (the Scorer's, kvcache_paged.go): per
// layer the past pages of the chunk's causal span, attended perBlock pages per
// online-softmax block (attendPaged), and the head page, the one holding position
// start, which the chunk writes at offset = start − the head's first position. The
// chunk is at most a page long, so it ends in head or in the page after it: both
// come back per layer (written; the second is zeros past the chunk).
//
//	offset: scalar int32; pastK, pastV: [layer][page] [page, 1, kv, hd];
//	head: per layer [page, 1, kv, hd] → written: per layer 2 × [page, 1, kv, hd]
type pagedNodes struct {
	offset       *Node
	perBlock     int
	pastK, pastV [][]*Node
	head         kvPair[*Node]
	written      kvPair[[2]*Node]
}

// takePaged reads a paged cache of nl layers from l, in pagedCache.stepArgs'
// order: offset, pages per block (a lengthArg), every layer's past K pages, then
// V pages (as many per layer), then the head pages; the past pages are all of l
// but the last 2·nl.
func takePaged(l *list[*Node], nl int) *pagedNodes {
	p := &pagedNodes{offset: l.next(), perBlock: lengthOf(l.next())}
	np := (l.len() - 2*nl) / (2 * nl)
	p.pastK, p.pastV = make([][]*Node, nl), make([][]*Node, nl)
	for i := range nl {
		p.pastK[i] = l.take(np)
	}
	for i := range nl {
		p.pastV[i] = l.take(np)
	}
	p.head = takeKV(l, nl)
	p.written = kvPair[[2]*Node]{K: make([][2]*Node, nl), V: make([][2]*Node, nl)}
	return p
}

// outputs are the pages written: per layer the head's K and the next, then the
// same for V (takeWritten reads them).
func (p *pagedNodes) outputs() []*Node { return pagePairs(p.written) }

func (p *pagedNodes) layer(i int) layerCache { return pagedLayer{p, i} }

// pagedLayer is layer i of a pagedNodes.
type pagedLayer struct {
	p *pagedNodes
	i int
}

func (l pagedLayer) attend(q5, k, v, start *Node) *Node {
	p := l.p
	pastK, pastV := make([]*Node, len(p.pastK[l.i])), make([]*Node, len(p.pastV[l.i]))
	for j := range pastK {
		pastK[j], pastV[j] = like(p.pastK[l.i][j], q5), like(p.pastV[l.i][j], q5)
	}
	o := attendPaged(q5, k, v, pastK, pastV, p.perBlock, start)
	p.written.K[l.i] = writePages(p.head.K[l.i], like(k, p.head.K[l.i]), p.offset)
	p.written.V[l.i] = writePages(p.head.V[l.i], like(v, p.head.V[l.i]), p.offset)
	return o
}

// writePages writes update at offset into head and the page after it (zeros), and
// returns both.
//
//	head: [page, 1, kv, hd]; update: [seq ≤ page, 1, kv, hd] → 2 × [page, 1, kv, hd]
func writePages(head, update, offset *Node) [2]*Node {
	size := head.Shape().Dimensions[0]
	both := writeCache(Concatenate([]*Node{head, ZerosLike(head)}, 0), update, offset)
	return [2]*Node{Slice(both, AxisRange(0, size)), Slice(both, AxisRange(size, 2*size))}
}

// pagePairs lists per layer the two pages of K, then of V.
func pagePairs[T any](p kvPair[[2]T]) []T {
	var out []T
	for _, side := range [][][2]T{p.K, p.V} {
		for _, pair := range side {
			out = append(out, pair[0], pair[1])
		}
	}
	return out
}

// takeWritten reads pagePairs' list of nl layers from l.
func takeWritten[T any](l *list[T], nl int) kvPair[[2]T] {
	var p kvPair[[2]T]
	for _, side := range []*[][2]T{&p.K, &p.V} {
		for range nl {
			*side = append(*side, [2]T{l.next(), l.next()})
		}
	}
	return p
}
