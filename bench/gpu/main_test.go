package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseClientOptions(t *testing.T) {
	m, err := parseClientOptions("preallocate=false,memory_fraction=0.5,n=3,allocator=bfc")
	require.NoError(t, err)
	require.Equal(t, map[string]any{"preallocate": false, "memory_fraction": float32(0.5), "n": int64(3), "allocator": "bfc"}, m)
	m, err = parseClientOptions("")
	require.NoError(t, err)
	require.Nil(t, m)
	_, err = parseClientOptions("preallocate")
	require.ErrorContains(t, err, `"preallocate": want key=value`)
}

// TestBenchGPU runs the memory stage alone on the pure-Go backend: exit 0, a
// line per stage and results.json beside bench.log; bad flags exit 2.
func TestBenchGPU(t *testing.T) {
	out := filepath.Join(t.TempDir(), "b")
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), programName, []string{"-cpu", "-out", out, "-backend", "go", "-stages", "memory", "-long-t", "64"}, &stdout, &stderr)
	require.Equal(t, 0, code, stderr.String())
	require.Contains(t, stdout.String(), "memory    ok")
	raw, err := os.ReadFile(filepath.Join(out, "results.json"))
	require.NoError(t, err)
	var res map[string]any
	require.NoError(t, json.Unmarshal(raw, &res))
	require.Equal(t, "cpu-rehearsal", res["mode"])
	require.FileExists(t, filepath.Join(out, "bench.log"))

	require.Equal(t, 2, run(context.Background(), programName, []string{"-out", out, "-speed-t", "8"}, &stdout, &stderr))
	require.Equal(t, 2, run(context.Background(), programName, []string{"-out", out, "-client-options", "x"}, &stdout, &stderr))
	require.Equal(t, 1, run(context.Background(), programName, []string{"-out", out, "-backend", "go", "-client-options", "preallocate=false"}, &stdout, &stderr))
	require.Contains(t, stderr.String(), "need an xla plugin")
}

// TestBadFlagOneLine: a wrong flag is one line naming it, under the name the program
// was called by, and exit 2.
func TestBadFlagOneLine(t *testing.T) {
	for _, name := range []string{programName, launcherName} {
		var stdout, stderr bytes.Buffer
		require.Equal(t, 2, run(context.Background(), name, []string{"-no-such-flag"}, &stdout, &stderr))
		require.Empty(t, stdout.String())
		require.Equal(t, name+": flag provided but not defined: -no-such-flag ("+name+" -h lists the flags)\n", stderr.String())
	}
}
