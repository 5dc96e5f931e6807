package xla

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/stretchr/testify/require"
)

// xlaCPU is an XLA CPU backend for a test (skipped without the plugin, as cpuPlugin).
func xlaCPU(t *testing.T) backends.Backend {
	t.Helper()
	b, err := NewBackend("xla:" + cpuPlugin(t))
	require.NoError(t, err)
	t.Cleanup(b.Finalize)
	return b
}

// masterCases are float32 values for the split-master tests: every kind of bit
// pattern the split has to carry (zeros, subnormals, exact ties on even and odd
// weights, ties and near-ties of both signs, the largest finite values, which
// round to infinity, infinities) and random values over a wide range of scales.
func masterCases() []float32 {
	bits := []uint32{0, 0x80000000, 1, 0x8000, 0x80008000, 0x00018000, 0x3F808000, 0x3F818000, 0xBF808000, 0xBF818000,
		0x3F807FFF, 0x3F808001, 0xBF807FFF, 0xBF808001, 0x3F80FFFF, 0xBF80FFFF, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F7F7FFF,
		0x7F800000, 0xFF800000, 0x007FFFFF, 0x3F7FFFFF, 0x3F7F8000}
	out := make([]float32, 0, len(bits)+4096)
	for _, b := range bits {
		out = append(out, math.Float32frombits(b))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 4096 {
		out = append(out, float32(rng.NormFloat64()*math.Pow(10, float64(rng.IntN(16)-8))))
	}
	return out
}

// nearestAway is the bfloat16 nearest to x, ties away from zero, by float64
// arithmetic: the reference splitMaster's weight is held to.
func nearestAway(x float32) uint16 {
	b := math.Float32bits(x)
	down := b &^ 0xFFFF // toward zero, as a float32 bit pattern
	if b&0xFFFF == 0 || math.IsInf(float64(x), 0) {
		return uint16(down >> 16)
	}
	up := down + 0x10000 // the next bfloat16 away from zero (an infinity past the largest)
	lo, hi := float64(math.Float32frombits(down)), float64(math.Float32frombits(up))
	if math.IsInf(hi, 0) {
		// Past the largest finite bfloat16 the spacing continues: the tie point is
		// halfway to 2¹²⁸.
		hi = math.Copysign(math.Ldexp(1, 128), lo)
	}
	if math.Abs(float64(x)-lo) < math.Abs(hi-float64(x)) {
		return uint16(down >> 16)
	}
	return uint16(up >> 16)
}

// TestSplitMasters: splitMaster and joinMaster on XLA CPU give every float32 back
// bit for bit (NaNs aside, which a master never is), on the device and on the
// host (joinBits); the weight is the nearest bfloat16 with ties away from zero
// (nearestAway, float64), which is XLA's round-to-nearest-even conversion except
// at exact ties.
func TestSplitMasters(t *testing.T) {
	backend := xlaCPU(t)
	require.True(t, canSplitMasters(backend))
	simple, err := NewBackend(DefaultBackend)
	require.NoError(t, err)
	defer simple.Finalize()
	require.False(t, canSplitMasters(simple), "the pure-Go backend keeps whole masters")

	vals := masterCases()
	exec, err := NewExec(backend, func(p *Node) []*Node {
		hi, lo := splitMaster(p)
		return []*Node{hi, lo, joinMaster(hi, lo), convert(p, dtypes.BFloat16)}
	})
	require.NoError(t, err)
	defer exec.Finalize()
	out, err := exec.Exec(tensors.FromValue(vals))
	require.NoError(t, err)
	his := tensors.MustCopyFlatData[bfloat16.BFloat16](out[0])
	los := tensors.MustCopyFlatData[uint16](out[1])
	back := tensors.MustCopyFlatData[float32](out[2])
	even := tensors.MustCopyFlatData[bfloat16.BFloat16](out[3])
	ties := 0
	for i, x := range vals {
		xb := math.Float32bits(x)
		require.Equal(t, xb, math.Float32bits(back[i]), "value %d (%#08x): joined on the device", i, xb)
		require.Equal(t, xb, joinBits(his[i], los[i]), "value %d (%#08x): joined on the host", i, xb)
		require.Equal(t, nearestAway(x), his[i].Bits(), "value %d (%#08x): weight", i, xb)
		if xb&0xFFFF == 0x8000 {
			ties++
			continue
		}
		require.Equal(t, even[i].Bits(), his[i].Bits(), "value %d (%#08x): not a tie, so round to nearest even's weight", i, xb)
	}
	require.GreaterOrEqual(t, ties, 8)
}

// TestSplitMastersUpdate: one grouped AdamW update on split masters (bfloat16
// weights and remainders in, new remainders and weights out) gives bit for bit the
// float32 masters and moments of the same update on whole float32 masters, and as
// weights those masters rounded (to nearest even but at exact ties).
func TestSplitMastersUpdate(t *testing.T) {
	backend := xlaCPU(t)
	cfg := DefaultAdamW()
	cfg.LR = 1e-2
	const n = 3000
	rng := rand.New(rand.NewPCG(3, 4))
	f32s := func(scale float64) []float32 {
		out := make([]float32, n)
		for i := range out {
			out[i] = float32(rng.NormFloat64() * scale)
		}
		return out
	}
	masters, grads, m, v := f32s(1), f32s(1e-2), f32s(1e-3), f32s(1e-4)
	for i := range v {
		v[i] *= v[i]
	}
	scalars := []any{float32(cfg.LR), float32(1 - cfg.LR*cfg.WeightDecay), float32(1 / 0.1), float32(1 / math.Sqrt(0.001)), float32(1), float32(0.5)}
	run := func(form masterForm, params ...*tensors.Tensor) [][]float32 {
		exec, err := NewExec(backend, adamWGraph(cfg, 1, true, form))
		require.NoError(t, err)
		defer exec.Finalize()
		args := append([]any{}, scalars...)
		for _, p := range params {
			args = append(args, p)
		}
		for _, x := range [][]float32{grads, m, v} {
			args = append(args, tensors.FromFlatDataAndDimensions(x, 30, 100))
		}
		out, err := exec.Exec(args...)
		require.NoError(t, err)
		var res [][]float32
		for k, o := range out[1:] {
			if form == splitMasters && k == 0 {
				res = append(res, nil) // the remainders: joined below
				continue
			}
			res = append(res, float32sOf(o))
		}
		if form == splitMasters {
			lo := tensors.MustCopyFlatData[uint16](out[1])
			hi := tensors.MustCopyFlatData[bfloat16.BFloat16](out[4])
			joined := make([]float32, n)
			for i := range joined {
				joined[i] = math.Float32frombits(joinBits(hi[i], lo[i]))
			}
			res[0] = joined
		}
		return res
	}
	whole := run(wholeMasters, tensors.FromFlatDataAndDimensions(masters, 30, 100))
	split, err := NewExec(backend, func(p *Node) []*Node { hi, lo := splitMaster(p); return []*Node{hi, lo} })
	require.NoError(t, err)
	defer split.Finalize()
	parts, err := split.Exec(tensors.FromFlatDataAndDimensions(masters, 30, 100))
	require.NoError(t, err)
	got := run(splitMasters, parts[0], parts[1])
	require.Len(t, got, 4)
	for k, what := range []string{"masters", "first moments", "second moments"} {
		for i := range n {
			require.Equal(t, math.Float32bits(whole[k][i]), math.Float32bits(got[k][i]), "%s[%d]", what, i)
		}
	}
	moved := 0
	for i := range n {
		require.Equal(t, nearestAway(whole[0][i]), uint16(math.Float32bits(got[3][i])>>16), "weight %d", i)
		if whole[0][i] != masters[i] {
			moved++
		}
	}
	require.Greater(t, moved, n/2, "the update moved the masters")
}
