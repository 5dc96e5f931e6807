package main

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCollectCmd(t *testing.T) {
	t.Setenv("GOMLX_BACKEND", "")
	dataDir := t.TempDir()
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, run(t.Context(), []string{"init-model", "-out", filepath.Join(dataDir, "model"), "-seed", "2"}, &stdout, &stderr), stderr.String())

	stdout.Reset()
	stderr.Reset()
	code := run(t.Context(), []string{"collect", "-data-dir", dataDir, "-files", "2", "-group", "2", "-tasks-per-file", "1",
		"-max-tokens", "128", "-max-turn-tokens", "16", "-run-id", "t", "-max-pending", "5"}, &stdout, &stderr)
	require.Equal(t, 0, code, stderr.String())
	require.Contains(t, stdout.String(), "t-000000.arrow  2 rollouts")
	require.Contains(t, stdout.String(), "t-000001.arrow  2 rollouts")
	require.Contains(t, stdout.String(), "collected 2 files, 4 rollouts")
	files, err := filepath.Glob(filepath.Join(dataDir, "spool", "incoming", "*.arrow"))
	require.NoError(t, err)
	require.Len(t, files, 2)

	// What the collector wrote is valid for this model's tokenizer and vocabulary.
	stdout.Reset()
	stderr.Reset()
	require.Equal(t, 0, run(t.Context(), append([]string{"validate", "-tokenizer", "bytes-v1", "-vocab", "512"}, files...), &stdout, &stderr),
		stdout.String()+stderr.String())

	for _, bad := range [][]string{
		{"collect"},
		{"collect", "-data-dir", dataDir, "-split", "test"},
		{"collect", "-data-dir", dataDir, "stray"},
	} {
		stderr.Reset()
		require.Equal(t, 2, run(t.Context(), bad, &stdout, &stderr), "%v", bad)
	}
	require.Equal(t, "hindsight collect: unexpected argument \"stray\" (hindsight collect -h lists the flags)\n", stderr.String())
}
