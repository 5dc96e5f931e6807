package xla

import (
	"fmt"
	"math"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
)

// recentSlots is how many decode steps a decodeCache's recent buffer holds before
// they are merged into its main tensors: a step copies the recent buffer (recentSlots
// positions of every row) instead of the whole cache, and a merge copies the main
// tensors once per recentSlots steps.
const recentSlots = 16

// decodeCache is the K/V of a Batch's decoding rows, in two parts per layer:
//
//   - main, K and V [rows, kv_heads, capacity, head_dim]: row r's positions
//     < base[r]. A decode step only reads it, rows and heads first, so the
//     attention's products take it as it lies (no transposed copy);
//   - recent, K and V [rows, kv_heads, recentSlots, head_dim]: the step j since the
//     last merge writes every row's new key and value in slot j (row r's position
//     base[r]+j), and returns the recent buffer.
//
// GoMLX v0.26 cannot alias a donated input to an output, so whatever a step
// returns is a fresh buffer: a step that returned the whole cache (as one did
// before) copied it every token, 0.4 GB a step for SmolLM2 at 32 rows of 256
// positions. Here a step copies recentSlots positions, and merge writes the
// recent slots into main once every recentSlots steps, before rows join, and
// whenever rows must be at their positions in main.
type decodeCache struct {
	main, recent kvPair[*tensors.Tensor]
	base         []int32 // per row, the positions main holds: 0…base[r]-1
	used         int     // recent slots written since the last merge
}

func (c *decodeCache) capacity() int { return c.main.K[0].Shape().Dimensions[2] }

// tensors lists main, then recent (decodeExecs' order).
func (c *decodeCache) tensors() []*tensors.Tensor { return append(c.main.all(), c.recent.all()...) }

func (c *decodeCache) close() {
	finalize(c.tensors())
	c.main, c.recent, c.base, c.used = kvPair[*tensors.Tensor]{}, kvPair[*tensors.Tensor]{}, nil, 0
}

// pos is row r's next position, the one the next step writes.
func (c *decodeCache) pos(r int) int32 { return c.base[r] + int32(c.used) }

// decodeNodes is a decodeCache in a decode step's graph: main and recent as the
// step took them, and recent with the step's keys and values written at slot (a
// scalar int32, the same for every row), once every layer has attended.
type decodeNodes struct {
	slot         *Node
	main, recent kvPair[*Node]
	written      kvPair[*Node]
}

// takeDecode reads a decodeCache of nl layers from l: the slot, main, then recent.
func takeDecode(l *list[*Node], nl int) *decodeNodes {
	d := &decodeNodes{slot: l.next(), main: takeKV(l, nl), recent: takeKV(l, nl)}
	d.written = kvPair[*Node]{K: make([]*Node, nl), V: make([]*Node, nl)}
	return d
}

func (d *decodeNodes) layer(i int) layerCache { return decodeLayer{d, i} }

// outputs are the recent buffers written.
func (d *decodeNodes) outputs() []*Node { return d.written.all() }

// decodeLayer is layer i of a decodeNodes.
type decodeLayer struct {
	d *decodeNodes
	i int
}

// attend writes each row's key and value in the recent slot and attends over
// main's positions < base (= pos − slot) and the recent slots ≤ slot, in one
// softmax: the scores of both parts side by side ([… , capacity + recentSlots],
// small), the values' products one per part.
//
//	q5: [batch, 1, kv, groups, head_dim]; k, v: [1, batch, kv, head_dim];
//	pos: [batch] int32 → [batch, kv, 1, groups, head_dim]
func (l decodeLayer) attend(q5, k, v, pos *Node) *Node {
	g := q5.Graph()
	d := l.d
	dims := q5.Shape().Dimensions
	b, kv, grp, hd := dims[0], dims[2], dims[3], dims[4]
	mk, mv := like(d.main.K[l.i], q5), like(d.main.V[l.i], q5)
	rk := writeSlot(d.recent.K[l.i], like(k, d.recent.K[l.i]), d.slot)
	rv := writeSlot(d.recent.V[l.i], like(v, d.recent.V[l.i]), d.slot)
	d.written.K[l.i], d.written.V[l.i] = rk, rv
	rk, rv = like(rk, q5), like(rv, q5)
	capacity, slots := mk.Shape().Dimensions[2], rk.Shape().Dimensions[2]

	scale := 1 / math.Sqrt(float64(hd))
	sm := MulScalar(dot(q5, []int{4}, []int{0, 2}, mk, []int{3}, []int{0, 1}), scale) // [b, kv, 1, grp, capacity]
	sr := MulScalar(dot(q5, []int{4}, []int{0, 2}, rk, []int{3}, []int{0, 1}), scale) // [b, kv, 1, grp, slots]
	base := Reshape(Sub(pos, d.slot), b, 1)
	inMain := LessThan(Iota(g, shapes.Make(dtypes.Int32, b, capacity), 1), base)                                // [b, capacity]
	inRecent := LessOrEqual(Iota(g, shapes.Make(dtypes.Int32, b, slots), 1), BroadcastToDims(d.slot, b, slots)) // [b, slots]
	visible := BroadcastToDims(Reshape(Concatenate([]*Node{inMain, inRecent}, 1), b, 1, 1, 1, capacity+slots), b, kv, 1, grp, capacity+slots)
	probs := softmax(Where(visible, Concatenate([]*Node{sm, sr}, 4), Const(g, float32(math.Inf(-1)))))
	pm := Slice(probs, AxisRange(), AxisRange(), AxisRange(), AxisRange(), AxisRange(0, capacity))
	pr := Slice(probs, AxisRange(), AxisRange(), AxisRange(), AxisRange(), AxisRange(capacity, capacity+slots))
	return Add(dot(pm, []int{4}, []int{0, 1}, mv, []int{2}, []int{0, 1}), dot(pr, []int{4}, []int{0, 1}, rv, []int{2}, []int{0, 1})) // [b, kv, 1, grp, hd]
}

// writeSlot returns recent with update written at slot (a Where over the slots: the
// buffer is small, and every backend has it).
//
//	recent: [batch, kv, slots, hd]; update: [1, batch, kv, hd]; slot: scalar int32
func writeSlot(recent, update, slot *Node) *Node {
	g := recent.Graph()
	dims := recent.Shape().Dimensions
	at := Equal(Iota(g, shapes.Make(dtypes.Int32, dims...), 2), BroadcastToDims(slot, dims...))
	return Where(at, BroadcastToDims(TransposeAllAxes(update, 1, 2, 0, 3), dims...), recent)
}

// decodeStep feeds one token per row at the row's own position and returns the
// next-token logits and the recent buffers with the rows' keys and values written.
//
//	tokens, pos: [batch] int32; cache: takeDecode's → [logits [batch, vocab], recent…]
func decodeStep(ctx *mlctx.Context, c Config, tokens, pos *Node, cache *decodeNodes) []*Node {
	b := tokens.Shape().Dimensions[0]
	hidden := decoder(ctx, c, Reshape(tokens, b, 1), pos, cache) // [b, 1, hidden]
	logits := Reshape(headLogits(ctx, c, hidden), b, c.VocabSize)
	return append([]*Node{logits}, cache.outputs()...)
}

// decodeExecs are a Sampler's executables over decodeCaches.
type decodeExecs struct {
	// step: tokens [b], pos [b], slot, main, recent → logits [b, vocab], recent.
	step *modelExec
	// adopt: lengthArg(capacity), a contiguous cache [c, rows, kv, hd] (takeKV's
	// order) → main at capacity (cut or padded with zeros), then an empty recent.
	adopt *modelExec
	// merge: base [b], used (scalar int32), main, recent → main with recent's first
	// used slots written at each row's positions base[r]….
	merge *Exec
	// resize: lengthArg(capacity), main → main cut or padded to capacity.
	resize *Exec
	// join: two caches' main and recent → one, the second's rows after the first's.
	join *Exec
	// rows: keep [k, 1] int32, main and recent → their rows keep.
	rows *Exec
}

// newDecodeExecs returns m's decodeExecs on backend.
func newDecodeExecs(backend backends.Backend, m *Model) (decodeExecs, error) {
	var e decodeExecs
	var err error
	cfg := m.Config
	nl := cfg.NumHiddenLayers
	e.step, err = newModelExec(backend, m, func(ctx *mlctx.Context, in []*Node) []*Node {
		l := listOf(in)
		tokens, pos := l.next(), l.next()
		return decodeStep(ctx, cfg, tokens, pos, takeDecode(l, nl))
	})
	if err != nil {
		return e, fmt.Errorf("decode step: %w", err)
	}
	e.adopt, err = newModelExec(backend, m, func(ctx *mlctx.Context, in []*Node) []*Node {
		l := listOf(in)
		capacity := lengthOf(l.next())
		var main, recent []*Node
		for _, x := range l.rest {
			y := resizeAxis(TransposeAllAxes(x, 1, 2, 0, 3), 2, capacity) // [rows, kv, capacity, hd]
			d := y.Shape().Dimensions
			main = append(main, y)
			recent = append(recent, Zeros(x.Graph(), shapes.Make(x.DType(), d[0], d[1], recentSlots, d[3])))
		}
		return append(main, recent...)
	})
	if err != nil {
		return e, fmt.Errorf("decode cache adopt: %w", err)
	}
	if e.merge, err = NewExec(backend, func(in []*Node) []*Node {
		l := listOf(in)
		base, used := l.next(), l.next()
		main, recent := l.take(2*nl), l.take(2*nl)
		out := make([]*Node, 2*nl)
		for i := range out {
			out[i] = mergeRecent(main[i], recent[i], base, used)
		}
		return out
	}); err != nil {
		return e, fmt.Errorf("decode cache merge: %w", err)
	}
	if e.resize, err = NewExec(backend, func(in []*Node) []*Node {
		l := listOf(in)
		capacity := lengthOf(l.next())
		var out []*Node
		for _, x := range l.rest {
			out = append(out, resizeAxis(x, 2, capacity))
		}
		return out
	}); err != nil {
		return e, fmt.Errorf("decode cache resize: %w", err)
	}
	if e.join, err = NewExec(backend, func(in []*Node) []*Node {
		l := listOf(in)
		a, b := l.take(4*nl), l.take(4*nl)
		out := make([]*Node, 4*nl)
		for i := range out {
			out[i] = Concatenate([]*Node{a[i], b[i]}, 0)
		}
		return out
	}); err != nil {
		return e, fmt.Errorf("decode cache join: %w", err)
	}
	if e.rows, err = NewExec(backend, func(in []*Node) []*Node {
		l := listOf(in)
		keep := l.next()
		var out []*Node
		for _, x := range l.rest {
			out = append(out, Gather(x, keep))
		}
		return out
	}); err != nil {
		return e, fmt.Errorf("decode cache rows: %w", err)
	}
	for _, x := range []*Exec{e.merge, e.resize, e.join, e.rows} {
		x.SetMaxCache(-1)
	}
	return e, nil
}

// resizeAxis cuts x to n positions along axis, or pads it with zeros to n.
func resizeAxis(x *Node, axis, n int) *Node {
	d := x.Shape().Dimensions
	switch {
	case n < d[axis]:
		ranges := make([]SliceAxisSpec, len(d))
		for i := range ranges {
			ranges[i] = AxisRange()
		}
		ranges[axis] = AxisRange(0, n)
		return Slice(x, ranges...)
	case n > d[axis]:
		pad := append([]int(nil), d...)
		pad[axis] = n - d[axis]
		return Concatenate([]*Node{x, Zeros(x.Graph(), shapes.Make(x.DType(), pad...))}, axis)
	}
	return x
}

// mergeRecent writes recent's first used slots into main at each row's positions
// base[r]…base[r]+used-1 (positions past the capacity are dropped: the caller grows
// main first): a Gather of the recent slot for every position and a Where, one pass
// over main, on every backend.
//
//	main: [b, kv, capacity, hd]; recent: [b, kv, slots, hd]; base: [b] int32;
//	used: scalar int32 → [b, kv, capacity, hd]
func mergeRecent(main, recent, base, used *Node) *Node {
	g := main.Graph()
	d := main.Shape().Dimensions
	b, capacity, slots := d[0], d[2], recent.Shape().Dimensions[2]
	rel := Sub(Iota(g, shapes.Make(dtypes.Int32, b, capacity), 1), Reshape(base, b, 1)) // [b, capacity]
	inside := LogicalAnd(GreaterOrEqual(rel, ScalarZero(g, dtypes.Int32)), LessThan(rel, BroadcastToDims(used, b, capacity)))
	row := Iota(g, shapes.Make(dtypes.Int32, b, capacity, 1), 0)
	idx := Concatenate([]*Node{row, Reshape(ClipScalar(rel, 0, float64(slots-1)), b, capacity, 1)}, 2) // [b, capacity, 2]
	slotted := TransposeAllAxes(Gather(TransposeAllAxes(recent, 0, 2, 1, 3), idx), 0, 2, 1, 3)         // [b, kv, capacity, hd]
	return Where(BroadcastToDims(Reshape(inside, b, 1, capacity, 1), d...), slotted, main)
}
