package xla

import (
	"fmt"

	"github.com/gomlx/gomlx/backends"
	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
)

// cacheExecs make and reshape contiguous KV caches on the device. Each takes a
// lengthArg first where a size is needed; caches go in and out as kvPair lists.
type cacheExecs struct {
	// zeros: lengthArg(capacity) → an empty cache, every layer's K and V as zeros
	// [capacity, 1, kv_heads, head_dim]. Zeros made on the host would cost the
	// cache's size in host memory and a copy to the device per Score (0.94 GB for a
	// 0.6B model at 4,096 positions).
	zeros *modelExec
	// grow: lengthArg(capacity), a cache → the cache with zeros after its old
	// positions.
	grow *modelExec
	// flat: every layer's K pages, then V pages (as many per layer) → the
	// contiguous cache they make.
	flat *modelExec
}

// newCacheExecs returns m's cache executables on backend.
func newCacheExecs(backend backends.Backend, m *Model) (cacheExecs, error) {
	var e cacheExecs
	var err error
	cfg := m.Config
	e.zeros, err = newModelExec(backend, m, func(ctx *mlctx.Context, in []*Node) []*Node {
		size := listOf(in).next()
		capacity := lengthOf(size)
		out := make([]*Node, 2*cfg.NumHiddenLayers)
		for i := range out {
			out[i] = Zeros(size.Graph(), shapes.Make(m.cacheDType(), capacity, 1, cfg.NumKeyValueHeads, cfg.HeadDim))
		}
		return out
	})
	if err != nil {
		return e, fmt.Errorf("kv cache zeros: %w", err)
	}
	if e.grow, err = newGrowExec(backend, m); err != nil {
		return e, fmt.Errorf("kv cache grow: %w", err)
	}
	layers := 2 * cfg.NumHiddenLayers
	e.flat, err = newModelExec(backend, m, func(ctx *mlctx.Context, in []*Node) []*Node {
		l := listOf(in)
		np := len(in) / layers
		out := make([]*Node, layers)
		for i := range out {
			out[i] = Concatenate(l.take(np), 0)
		}
		return out
	})
	if err != nil {
		return e, fmt.Errorf("kv cache flatten: %w", err)
	}
	return e, nil
}

// newGrowExec returns the executable that copies caches into a larger capacity
// (zeros after the old positions).
//
//	lengthArg(newCapacity), caches [capacity, batch, kv, hd] → [newCapacity, batch, kv, hd] each
func newGrowExec(backend backends.Backend, m *Model) (*modelExec, error) {
	return newModelExec(backend, m, func(ctx *mlctx.Context, in []*Node) []*Node {
		l := listOf(in)
		newCap := lengthOf(l.next())
		out := make([]*Node, 0, l.len())
		for _, x := range l.rest {
			d := x.Shape().Dimensions
			pad := Zeros(x.Graph(), shapes.Make(x.DType(), newCap-d[0], d[1], d[2], d[3]))
			out = append(out, Concatenate([]*Node{x, pad}, 0))
		}
		return out
	})
}

// newShrinkExec returns the executable that cuts tensors to their first positions.
//
//	lengthArg(c), tensors [capacity, …] → [c, …] each
func newShrinkExec(backend backends.Backend) (*Exec, error) {
	e, err := NewExec(backend, func(in []*Node) []*Node {
		l := listOf(in)
		c := lengthOf(l.next())
		out := make([]*Node, 0, l.len())
		for _, x := range l.rest {
			out = append(out, Slice(x, AxisRange(0, c)))
		}
		return out
	})
	if err != nil {
		return nil, err
	}
	e.SetMaxCache(-1)
	return e, nil
}
