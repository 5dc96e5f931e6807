package gpubench

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

// TestProfileStage runs the profile stage at a tiny size on the pure-Go backend
// without a PyTorch peer: a load record, a cold pass that compiled the cache's
// zeros and a chunk step, a warm pass that compiled nothing, the pprof files, the
// log-probs file (T−1 finite values) and the peer recorded as skipped.
func TestProfileStage(t *testing.T) {
	out := t.TempDir()
	opts := testDefaults()
	opts.Out, opts.Backend, opts.Stages, opts.ProfileT, opts.Pprof = out, "go", []string{"profile"}, 40, true
	res, err := Run(context.Background(), opts, nil, zerolog.Nop())
	require.NoError(t, err)
	st := res.Stage("profile")
	require.Equal(t, StatusOK, st.Status, st.Error)
	got := map[string]map[string]any{}
	for _, r := range st.Data {
		got[r.What] = r.Fields
	}
	require.Contains(t, got, "profile load")
	require.Contains(t, got, "profile new scorer")
	require.Greater(t, got["profile load"]["parameters"], 0)
	cold, warm := got["profile score cold"], got["profile score warm"]
	require.NotNil(t, cold)
	require.NotNil(t, warm)
	require.Equal(t, 2, cold["programs_compiled"], cold)
	require.Greater(t, cold["compile_seconds"], 0.0)
	require.Equal(t, 0, warm["programs_compiled"], warm)
	require.Equal(t, 40, warm["tokens"])
	require.GreaterOrEqual(t, warm["positions_run"], 40)
	require.Greater(t, warm["cpu_seconds"], 0.0)
	require.Contains(t, warm, "peak_rss_bytes")
	require.Contains(t, got["torch profile score skipped"]["reason"], "no PyTorch peer")
	for _, f := range []string{"profile-cpu.pprof", "profile-heap.pprof", "profile-tokens.json"} {
		require.FileExists(t, filepath.Join(out, f))
	}
	raw, err := os.ReadFile(filepath.Join(out, "profile-logprobs.json"))
	require.NoError(t, err)
	var lp []float64
	require.NoError(t, json.Unmarshal(raw, &lp))
	require.Len(t, lp, 39)
	for i, v := range lp {
		require.False(t, math.IsNaN(v) || math.IsInf(v, 0) || v > 0, "log-prob %d = %v", i, v)
	}
}
