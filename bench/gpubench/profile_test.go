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

	"github.com/hindsight-ai/hindsight/xla"
)

// TestProfileStage runs the profile stage at a tiny size on the pure-Go backend (xla.DefaultBackend)
// without a PyTorch peer: a load record, a cold pass that compiled the cache's
// zeros and a chunk step, a warm pass that compiled nothing, the pprof files, the
// log-probs file (T−1 finite values), the peer recorded as skipped, and a training
// step's memory by phase.
func TestProfileStage(t *testing.T) {
	out := t.TempDir()
	opts := testDefaults()
	opts.Out, opts.Backend, opts.Stages, opts.ProfileT, opts.Pprof = out, xla.DefaultBackend, []string{"profile"}, 40, true
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
	// A training step's memory in each precision, phase by phase against the
	// memory model.
	byPrecision := map[any]map[string]any{}
	for _, r := range st.Data {
		if r.What == "profile train memory" {
			byPrecision[r.Fields["precision"]] = r.Fields
		}
	}
	require.Contains(t, byPrecision, "f32")
	for p, tm := range byPrecision {
		phases, ok := tm["phase_peak_bytes"].(map[string]any)
		require.True(t, ok, tm)
		for _, ph := range []string{"score", "gradient", "update"} {
			require.Contains(t, phases, ph, p)
		}
		require.Greater(t, tm["predicted_bytes"], 0.0, p)
		require.Greater(t, tm["peak_over_predicted"], 0.0, p)
		require.Contains(t, tm["summary_gib"], "vs predicted", p)
		// The RSS between steps by kind of mapping: code (the Go binary's text at
		// least) and anonymous memory (the Go heap at least).
		kinds, ok := tm["between_steps_rss_by_kind"].(map[string]any)
		require.True(t, ok, tm)
		require.Greater(t, kinds["code"], 0.0, p)
		require.Greater(t, kinds["anon"], 0.0, p)
	}
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
