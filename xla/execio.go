package xla

import (
	"slices"

	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// An executable takes and returns flat lists (GoMLX's Exec). What a list holds is
// said once, by the type that owns that part of it: chunkNodes (tokens, targets,
// start), contiguousNodes and pagedNodes (a KV cache in each layout), gradNodes
// (the gradient pass's terms and accumulators). The graph side reads its inputs,
// and the host side its outputs, through a list, in that order.

// list hands out a flat list of executable inputs (nodes, in a graph) or outputs
// (tensors, on the host) front to back.
type list[T any] struct{ rest []T }

// listOf returns a list over xs.
func listOf[T any](xs []T) *list[T] { return &list[T]{rest: xs} }

// next takes one value.
func (l *list[T]) next() T {
	x := l.rest[0]
	l.rest = l.rest[1:]
	return x
}

// take takes the next n values.
func (l *list[T]) take(n int) []T {
	xs := l.rest[:n:n]
	l.rest = l.rest[n:]
	return xs
}

// len is how many values are left.
func (l *list[T]) len() int { return len(l.rest) }

// kvPair is every layer's keys and values as executables take and return them:
// every layer's K, then every layer's V (tensors on the host, nodes in a graph).
type kvPair[T any] struct{ K, V []T }

// takeKV takes nl layers' K, then their V.
func takeKV[T any](l *list[T], nl int) kvPair[T] {
	return kvPair[T]{K: l.take(nl), V: l.take(nl)}
}

// all is K then V, as one list.
func (p kvPair[T]) all() []T { return append(slices.Clone(p.K), p.V...) }

// lengthArg is an input whose only use is its length, n: a graph reads it with
// lengthOf, so that one executable compiles once per n (a capacity, a cut, pages
// per block) without a shape parameter of its own.
func lengthArg(n int) any { return make([]float32, n) }

// lengthOf is the n of a lengthArg input.
func lengthOf(x *Node) int { return x.Shape().Dimensions[0] }

// anys returns ts as executable arguments.
func anys(ts []*tensors.Tensor) []any {
	out := make([]any, len(ts))
	for i, t := range ts {
		out[i] = t
	}
	return out
}

// finalize frees every tensor of ts (what donation left of them); nil entries
// (an accumulator not yet made) are skipped.
func finalize(ts []*tensors.Tensor) {
	for _, t := range ts {
		if t != nil {
			t.FinalizeAll()
		}
	}
}
