package xla

import (
	"fmt"

	"github.com/gomlx/gomlx/backends"
	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
)

// newZerosExec returns the executable that makes an empty KV cache on the device:
// given a dummy [capacity] float32 (its length is the capacity), every layer's K
// and V as zeros [capacity, 1, kv_heads, head_dim]. Zeros made on the host would
// cost the cache's size in host memory and a copy to the device per Score (0.94 GB
// for a 0.6B model at 4,096 positions).
func newZerosExec(backend backends.Backend, m *Model) (*mlctx.Exec, error) {
	cfg := m.Config
	e, err := mlctx.NewExec(backend, m.ctx, func(ctx *mlctx.Context, in []*Node) []*Node {
		capacity := in[0].Shape().Dimensions[0]
		out := make([]*Node, 2*cfg.NumHiddenLayers)
		for i := range out {
			out[i] = Zeros(in[0].Graph(), shapes.Make(in[0].DType(), capacity, 1, cfg.NumKeyValueHeads, cfg.HeadDim))
		}
		return out
	})
	if err != nil {
		return nil, fmt.Errorf("kv cache zeros: %w", err)
	}
	e.SetMaxCache(-1)
	return e, nil
}
