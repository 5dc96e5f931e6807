package gpubench

import (
	"context"
	"math"
	"math/rand/v2"
	"strconv"
	"time"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // GoMLX's graph DSL
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// stagePeak measures the matmul rate that MFU is taken against: an n×n·n×n f32
// product on this backend (hindsight computes in f32) and, from the peer, f32 (TF32
// off) and bf16 products in PyTorch on the same device. Random inputs, best of 3
// after a warm-up; the product is reduced to a scalar and read back so that the
// time covers the whole computation.
func (b *bench) stagePeak(ctx context.Context) error {
	n := b.opts.PeakN
	exec, err := NewExec(b.backend, func(x, y *Node) *Node { return ReduceAllSum(MatMul(x, y)) })
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(3, 4))
	mk := func() *tensors.Tensor {
		v := make([]float32, n*n)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return tensors.FromFlatDataAndDimensions(v, n, n)
	}
	x, y := mk(), mk()
	best := math.Inf(1)
	for i := range 4 {
		if err := ctx.Err(); err != nil {
			return err
		}
		t0 := time.Now()
		out, err := exec.Exec(x, y)
		if err != nil {
			return err
		}
		_ = out[0].Value()
		if i > 0 {
			best = min(best, time.Since(t0).Seconds())
		}
	}
	b.xlaPeak = 2 * float64(n) * float64(n) * float64(n) / best
	b.record("xla matmul peak", map[string]any{"n": n, "dtype": "float32", "flops": b.xlaPeak, "seconds": best})
	tp, err := b.peer(ctx, "peak", "--device", b.opts.Device, "--n", strconv.Itoa(n), "--reps", "3")
	if err != nil {
		b.record("torch matmul peak skipped", map[string]any{"reason": err.Error()})
		return nil
	}
	b.torchF32Peak, _ = tp["float32_flops"].(float64)
	b.torchBF16Peak, _ = tp["bfloat16_flops"].(float64)
	tp["xla_f32_over_torch_f32"] = b.xlaPeak / b.torchF32Peak
	b.record("torch matmul peak", tp)
	return nil
}
