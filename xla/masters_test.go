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

// TestSplitMastersUpdate: three grouped AdamW updates on split masters (bfloat16
// weights and remainders in, three programs per group: applySplitGroup) give bit
// for bit the float32 masters and moments of the same updates on whole float32
// masters (one program per group), and as weights those masters rounded to
// nearest, ties away from zero (to nearest even but at exact ties).
func TestSplitMastersUpdate(t *testing.T) {
	backend := xlaCPU(t)
	cfg := DefaultAdamW()
	cfg.LR, cfg.WarmupSteps = 1e-2, 0
	dims := [][]int{{30, 100}, {100}, {7, 50}}
	groups := [][]int{{1}, {0, 2}}
	rng := rand.New(rand.NewPCG(3, 4))
	f32s := func(n int, scale float64) []float32 {
		out := make([]float32, n)
		for i := range out {
			out[i] = float32(rng.NormFloat64() * scale)
		}
		return out
	}
	split, err := NewExec(backend, func(p *Node) []*Node { hi, lo := splitMaster(p); return []*Node{hi, lo} })
	require.NoError(t, err)
	defer split.Finalize()
	var masters, his, los []*tensors.Tensor
	for _, d := range dims {
		x := tensors.FromFlatDataAndDimensions(f32s(prod(d), 1), d...)
		masters = append(masters, x)
		parts, err := split.Exec(tensors.FromFlatDataAndDimensions(tensors.MustCopyFlatData[float32](x), d...))
		require.NoError(t, err)
		his, los = append(his, parts[0]), append(los, parts[1])
	}
	whole, err := newAdamW(backend, cfg, masters, groups, wholeMasters)
	require.NoError(t, err)
	sp, err := newAdamW(backend, cfg, his, groups, splitMasters)
	require.NoError(t, err)
	var lows []*tensors.Tensor
	for step := range 3 {
		var g1, g2 []*tensors.Tensor
		for _, d := range dims {
			g := f32s(prod(d), 1e-2)
			g1 = append(g1, tensors.FromFlatDataAndDimensions(g, d...))
			g2 = append(g2, tensors.FromFlatDataAndDimensions(g, d...))
		}
		lows = make([]*tensors.Tensor, len(dims))
		n1, _, err := whole.applyGroups(masters, nil, g1, func(i int, p, low *tensors.Tensor) error {
			masters[i].FinalizeAll()
			masters[i], lows[i] = p, low
			return nil
		})
		require.NoError(t, err)
		n2, _, err := sp.applyGroups(his, los, g2, func(i int, p, low *tensors.Tensor) error {
			los[i].FinalizeAll()
			his[i].FinalizeAll()
			los[i], his[i] = p, low
			return nil
		})
		require.NoError(t, err)
		require.Equal(t, n1, n2, "step %d: gradient norm", step)
	}
	moved := 0
	for i := range dims {
		want := tensors.MustCopyFlatData[float32](masters[i])
		hi := tensors.MustCopyFlatData[bfloat16.BFloat16](his[i])
		lo := tensors.MustCopyFlatData[uint16](los[i])
		for k, w := range want {
			require.Equal(t, math.Float32bits(w), joinBits(hi[k], lo[k]), "master %d[%d]", i, k)
			require.Equal(t, nearestAway(w), hi[k].Bits(), "weight %d[%d]", i, k)
			if math.Float32bits(w)&0xFFFF != 0x8000 {
				require.Equal(t, tensors.MustCopyFlatData[bfloat16.BFloat16](lows[i])[k], hi[k], "weight %d[%d]: the whole masters' rounding", i, k)
			}
			if w != 0 && hi[k].Float32() != w {
				moved++
			}
		}
		for _, mv := range [][2]*tensors.Tensor{{whole.m[i], sp.m[i]}, {whole.v[i], sp.v[i]}} {
			require.Equal(t, tensors.MustCopyFlatData[float32](mv[0]), tensors.MustCopyFlatData[float32](mv[1]), "moments %d", i)
		}
	}
	require.Greater(t, moved, 1000, "the updates left low bits in the masters")
}
