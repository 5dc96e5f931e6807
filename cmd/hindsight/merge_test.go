package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/data"
)

// TestMergeCommand: `hindsight merge` of the committed PEFT adapter writes a model
// directory whose adapted projections are peft's merge_and_unload() weights
// (testdata/lora/peft_goldens.json) and whose other tensors are the base's; bad
// usage exits 2, an existing -out exits 1.
func TestMergeCommand(t *testing.T) {
	t.Setenv("GOMLX_BACKEND", "")
	out := filepath.Join(t.TempDir(), "merged")
	var stdout, stderr bytes.Buffer
	adapter := "../../testdata/lora/adapter"
	require.Equal(t, 0, run(t.Context(), []string{"merge", "-checkpoint", adapter, "-out", out, "-backend", "go"}, &stdout, &stderr), stderr.String())

	var g struct {
		Merged map[string]struct {
			Stride  int       `json:"stride"`
			Samples []float64 `json:"samples"`
		} `json:"merged"`
	}
	raw, err := os.ReadFile("../../testdata/lora/peft_goldens.json")
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &g))
	md, err := data.OpenModelDir(out)
	require.NoError(t, err)
	defer md.Close()
	base, err := data.OpenModelDir("../../testdata/transformers/checkpoints/step-000004")
	require.NoError(t, err)
	defer base.Close()
	require.ElementsMatch(t, base.Weights.Names(), md.Weights.Names())
	for _, name := range md.Weights.Names() {
		v, err := md.Weights.Tensor(name)
		require.NoError(t, err)
		got, err := v.Float32s()
		require.NoError(t, err)
		want, adapted := g.Merged[name]
		if !adapted {
			bv, err := base.Weights.Tensor(name)
			require.NoError(t, err)
			b, err := bv.Float32s()
			require.NoError(t, err)
			require.Equal(t, b, got, "%s is the base's", name)
			continue
		}
		for i, w := range want.Samples {
			require.InDelta(t, w, got[i*want.Stride], 1e-6, "%s[%d]", name, i*want.Stride)
		}
	}
	require.Len(t, g.Merged, 14)

	stderr.Reset()
	require.Equal(t, 1, run(t.Context(), []string{"merge", "-checkpoint", adapter, "-out", out, "-backend", "go"}, &stdout, &stderr))
	require.Contains(t, stderr.String(), "exists")
	require.Equal(t, 2, run(t.Context(), []string{"merge", "-out", out}, &stdout, &stderr))
}
