package daemon

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/rollout"
)

// TestLogFieldUnits: a log field that is a length of time says its unit: a number
// named for it (uptime_s) or, for the documented exception took, milliseconds; never
// a bare number under a name without one (issue 39 item 5).
func TestLogFieldUnits(t *testing.T) {
	dir := t.TempDir()
	cfg := DefaultConfig()
	cfg.DataDir, cfg.Listen = dir, "127.0.0.1:0"
	cfg.Train.Enabled = false
	cfg.Spool.RescanInterval = 100 * time.Millisecond
	incoming := filepath.Join(cfg.SpoolDir(), rollout.DirIncoming)
	require.NoError(t, os.MkdirAll(incoming, 0o755))
	_, err := rollout.WriteSynth(incoming, rollout.SynthOptions{N: 2, Tokens: 256, PerFile: 2, Seed: 5})
	require.NoError(t, err)

	logs := &lockedBuffer{}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- Run(ctx, cfg, Options{Version: "test", Log: zerolog.New(logs), ResumeFrom: -1}) }()
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), `"message":"file processed"`) },
		2*time.Minute, 20*time.Millisecond, "%s", logs)
	cancel()
	select {
	case err := <-runErr:
		require.NoError(t, err)
	case <-time.After(2 * time.Minute):
		t.Fatalf("Run did not return:\n%s", logs)
	}

	lines := map[string]map[string]any{}
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &m), l)
		lines[m["message"].(string)] = m
		require.NotContains(t, m, "uptime", l)
	}
	require.IsType(t, float64(0), lines["stopped"]["uptime_s"], "uptime in seconds")
	require.IsType(t, float64(0), lines["file processed"]["took"], "took in milliseconds")
	require.NoFileExists(t, filepath.Join(dir, "LOCK"))
}
