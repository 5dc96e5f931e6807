package gpubench

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLoRATable: the memory model's LoRA rows. The adapter count is r·Σ(in + out)
// over the seven projections of every layer; LoRA's state is the f32 base plus 3×
// the adapters; Qwen3-8B-shaped full AdamW (16 bytes a parameter, 122 GiB) fits one
// H200 only up to 32k tokens by the model and not at 128k, where LoRA fits with room.
func TestLoRATable(t *testing.T) {
	c, err := Qwen3_8BShape()
	require.NoError(t, err)
	require.InDelta(t, 8.19e9, float64(c.NumParameters()), 0.05e9)
	rows, err := LoRATable(LoRAModels, []int{8192, 32768, 131072})
	require.NoError(t, err)
	require.Len(t, rows, 9)
	for _, r := range rows {
		require.Less(t, r.LoRAState, r.FullState, r.Model)
		require.Less(t, r.LoRATotal, r.FullTotal, r.Model)
		require.Equal(t, 4*r.Parameters+16*r.Adapters, r.LoRAState, r.Model)
		require.Equal(t, 16*r.Parameters, r.FullState, r.Model)
	}
	r8 := rows[6]
	require.Equal(t, "qwen3-8b-shape", r8.Model)
	// 36 layers × 16 × (2·(4096+4096) + 2·(4096+1024) + 3·(4096+12288)).
	require.EqualValues(t, 36*16*(2*(4096+4096)+2*(4096+1024)+3*(4096+12288)), r8.Adapters)
	// 16 bytes a parameter of state and, from a step's second chunk on, a chunk's
	// gradient beside the sum (4 more: no input–output aliasing) exceed one H200.
	require.False(t, r8.FullFits, "8B full AdamW at 8k")
	require.False(t, rows[8].FullFits, "8B full AdamW at 128k")
	require.True(t, rows[8].LoRAFits, "8B LoRA at 128k")
	var sb strings.Builder
	WriteLoRATable(&sb, rows)
	t.Log("\n" + sb.String())
	require.Contains(t, sb.String(), "| qwen3-8b-shape | 8.19B | 8192 |")
}

// TestPrecisionTable: the memory model's bf16 rows. bf16 halves the weights and the
// KV cache; full AdamW keeps a 16-bit remainder beside each bf16 weight (the two
// are the float32 master): its state is 16 bytes a parameter, as f32's, and the
// bf16 step is below f32's by the halved cache; LoRA's base halves. Qwen3-8B-shaped: full AdamW fits one
// H200 in neither precision (a chunk's gradient beside the sum adds 4 bytes a
// parameter), but over a node's 8 with ZeRO-1 at 32k in both; LoRA fits at 128k in
// both, in bf16 with 33 GiB less.
func TestPrecisionTable(t *testing.T) {
	c, err := Qwen3_8BShape()
	require.NoError(t, err)
	P := int64(c.NumParameters())
	f := EstimateMemoryAs(c, 32768, 256, false, false, "f32")
	h := EstimateMemoryAs(c, 32768, 256, false, false, "bf16")
	require.Equal(t, 16*P, f.State())
	require.Equal(t, 16*P, h.State())
	require.Equal(t, 2*P, h.Masters)
	require.Equal(t, f.KVCache, 2*h.KVCache)
	require.Less(t, h.Update, f.Update, "the update's outputs: 8 bytes a parameter of a group at a time under bf16, 12 under f32")
	require.Less(t, h.Total(), f.Total())
	require.Equal(t, f.Score, h.Score, "activations modelled as float32 in both")
	lf := EstimateMemoryAs(c, 32768, 256, true, false, "f32")
	lh := EstimateMemoryAs(c, 32768, 256, true, false, "bf16")
	require.Equal(t, lf.Weights-lh.Weights, 2*P, "the LoRA base halves")
	require.Zero(t, lh.Masters, "LoRA's adapters are float32: no masters")
	rows, err := PrecisionTable(LoRAModels, []int{32768, 131072})
	require.NoError(t, err)
	require.Len(t, rows, 6)
	var sb strings.Builder
	WritePrecisionTable(&sb, rows)
	t.Log("\n" + sb.String())
	r32, r128 := rows[4], rows[5]
	require.Equal(t, "qwen3-8b-shape", r32.Model)
	require.Greater(t, r32.F32Full, int64(H200Bytes))
	require.Greater(t, r32.BF16Full, int64(H200Bytes))
	require.LessOrEqual(t, r32.F32FullZeRO, int64(H200Bytes), "f32 full AdamW fits at 32k over a node's 8 H200s")
	require.Greater(t, r128.BF16Full, int64(H200Bytes))
	require.LessOrEqual(t, r128.BF16LoRA, int64(H200Bytes))
	require.Less(t, r128.BF16LoRA, r128.F32LoRA)
	// ZeRO-1 over 8: the moments (8 bytes a parameter) shrink to an eighth.
	require.Equal(t, r32.F32Full-7*P, r32.F32FullZeRO)
	require.Equal(t, r32.BF16Full-7*P, r32.BF16FullZeRO)
	require.LessOrEqual(t, r32.BF16FullZeRO, int64(H200Bytes), "bf16 full AdamW fits at 32k over a node's 8 H200s")
}
