package xla

import (
	"math"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// invFreq returns RoPE's inverse frequencies, head_dim/2 of them, as transformers
// computes them: 1/θ^(2i/d), then, with rope_scaling of type llama3, low
// frequencies divided by factor and the band between them smoothly interpolated
// (_compute_llama3_parameters). Computed in float64, rounded once to float32.
func (c Config) invFreq() []float32 {
	half := c.HeadDim / 2
	out := make([]float32, half)
	for i := range half {
		// transformers: 1 / theta ** (arange(0, dim, 2, int64).float() / dim), in float32.
		f := float64(float32(1 / math.Pow(c.RopeTheta, float64(float32(float64(2*i)/float64(c.HeadDim))))))
		if s := c.RopeScaling; s != nil {
			old := float64(s.OriginalMaxPositionEmbeddings)
			lowWavelen := old / s.LowFreqFactor
			highWavelen := old / s.HighFreqFactor
			wavelen := 2 * math.Pi / f
			switch {
			case wavelen < highWavelen: // high frequency: unchanged
			case wavelen > lowWavelen: // low frequency: slowed down by factor
				f /= s.Factor
			default:
				smooth := (old/wavelen - s.LowFreqFactor) / (s.HighFreqFactor - s.LowFreqFactor)
				f = (1-smooth)*f/s.Factor + smooth*f
			}
		}
		out[i] = float32(f)
	}
	return out
}

// ropeTables returns cos and sin of the rotation angles of positions
// start … start+seq-1, as float32 like transformers (position × inverse frequency
// in float32). A [batch] start (per-row positions, seq = 1) gives per-row tables.
//
//	start: scalar int32 → cos, sin: [seq, head_dim/2] float32
//	start: [batch] int32, seq = 1 → cos, sin: [batch, 1, head_dim/2] float32
func ropeTables(c Config, start *Node, seq int) (cos, sin *Node) {
	g := start.Graph()
	inv := Const(g, [][]float32{c.invFreq()}) // [1, half]
	var pos *Node
	if start.Rank() == 1 {
		pos = Reshape(start, start.Shape().Dimensions[0], 1, 1) // [batch, 1, 1]
		inv = Reshape(inv, 1, 1, c.HeadDim/2)
	} else {
		pos = Add(Iota(g, shapes.Make(dtypes.Int32, seq, 1), 0), start) // [seq, 1]
	}
	angles := Mul(ConvertDType(pos, dtypes.Float32), inv) // [seq, half] or [batch, 1, half]
	return Cos(angles), Sin(angles)
}

// applyRoPE rotates the two halves of each head of x (transformers'
// rotate_half convention) without slicing x, so the gradient needs no Pad, which
// the pure-Go backend lacks: the halves are split by a masked reduce over a
// reshape and joined by Concatenate (whose gradient is a forward Slice).
//
//	x: [batch, seq, heads, head_dim]; cos, sin: [seq, head_dim/2] or [batch, seq, head_dim/2]
//	→ [batch, seq, heads, head_dim]
func applyRoPE(x, cos, sin *Node) *Node {
	dims := x.Shape().Dimensions
	b, t, h, d := dims[0], dims[1], dims[2], dims[3]
	g := x.Graph()
	halves := Reshape(x, b, t, h, 2, d/2)
	first := Reshape(Const(g, []float32{1, 0}), 1, 1, 1, 2, 1)
	second := Reshape(Const(g, []float32{0, 1}), 1, 1, 1, 2, 1)
	x1 := ReduceSum(Mul(halves, first), 3) // [b, t, h, d/2]
	x2 := ReduceSum(Mul(halves, second), 3)
	lead := 1
	if cos.Rank() == 3 { // per-row positions
		lead = b
	}
	cos = Reshape(cos, lead, t, 1, d/2)
	sin = Reshape(sin, lead, t, 1, d/2)
	return Concatenate([]*Node{
		Sub(Mul(x1, cos), Mul(x2, sin)),
		Add(Mul(x2, cos), Mul(x1, sin)),
	}, 3)
}
