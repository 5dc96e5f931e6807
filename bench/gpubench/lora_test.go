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
	require.True(t, r8.FullFits, "by the model, with 10 GiB to spare")
	require.False(t, rows[8].FullFits, "8B full AdamW at 128k")
	require.True(t, rows[8].LoRAFits, "8B LoRA at 128k")
	var sb strings.Builder
	WriteLoRATable(&sb, rows)
	t.Log("\n" + sb.String())
	require.Contains(t, sb.String(), "| qwen3-8b-shape | 8.19B | 8192 |")
}
