package main

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBenchGPULauncher: `hindsight bench-gpu` runs the GPU run's own binary (built
// here from ./bench/gpu and found on PATH) with its arguments and exit code; without
// it, it says how to build it and exits 1.
func TestBenchGPULauncher(t *testing.T) {
	goCmd, err := exec.LookPath("go")
	require.NoError(t, err)
	bin := t.TempDir()
	build := exec.Command(goCmd, "build", "-o", filepath.Join(bin, benchGPUProgram), "github.com/hindsight-ai/hindsight/bench/gpu")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)

	var stdout, stderr bytes.Buffer
	t.Setenv("PATH", t.TempDir())
	require.Equal(t, 1, run(context.Background(), []string{"bench-gpu", "-out", t.TempDir()}, &stdout, &stderr))
	require.Contains(t, stderr.String(), "no hindsight-bench-gpu beside this executable or on PATH")
	require.Contains(t, stderr.String(), "go build -o")

	t.Setenv("PATH", bin)
	dir := filepath.Join(t.TempDir(), "b")
	stdout.Reset()
	stderr.Reset()
	code := run(context.Background(), []string{"bench-gpu", "-cpu", "-out", dir, "-backend", "go", "-stages", "memory", "-long-t", "64"}, &stdout, &stderr)
	require.Equal(t, 0, code, stderr.String())
	require.Contains(t, stdout.String(), "memory    ok")
	require.FileExists(t, filepath.Join(dir, "results.json"))
	require.Equal(t, 2, run(context.Background(), []string{"bench-gpu", "-out", dir, "-speed-t", "8"}, &stdout, &stderr), "its exit code")
	stdout.Reset()
	stderr.Reset()
	require.Equal(t, 2, run(context.Background(), []string{"bench-gpu", "-no-such-flag"}, &stdout, &stderr))
	require.Empty(t, stdout.String())
	require.Equal(t, "hindsight bench-gpu: flag provided but not defined: -no-such-flag (hindsight bench-gpu -h lists the flags)\n",
		stderr.String(), "a bad flag is one line naming the command the user typed")
}
