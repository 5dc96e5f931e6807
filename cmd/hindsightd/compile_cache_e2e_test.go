package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCompiledProgramsSurviveRestart trains on XLA, stops the daemon and starts it
// again on the same data directory: the second run loads every program it needs from
// <data_dir>/state/programs instead of compiling it, says so in its log and in status,
// and its step line says what it loaded.
func TestCompiledProgramsSurviveRestart(t *testing.T) {
	xlaCPUOrSkip(t)
	train := "  token_budget: 256\n  idle_flush: 500ms\n  checkpoint: {every_steps: 1, keep: 2}\n"
	dataDir := t.TempDir()
	path := filepath.Join(t.TempDir(), "train.yaml")
	require.NoError(t, os.WriteFile(path, []byte(fmt.Sprintf("data_dir: %s\nlisten: 127.0.0.1:0\ntrain:\n%s", dataDir, train)), 0o644))
	// Rollouts of the same length and content under new ids each run: the same
	// programs (seed 4's make an update step, so the optimizer's program too).
	synth := func(prefix string) {
		incoming := filepath.Join(dataDir, "spool", "incoming")
		_, stderr, code := runCLI(t, "synth", "-out", incoming, "-n", "2", "-tokens", "256", "-per-file", "2", "-seed", "4", "-prefix", prefix)
		require.Equal(t, 0, code, stderr)
	}
	synth("first")
	cacheDir := filepath.Join(dataDir, "state", "programs")

	p := startDaemon(t, "-config", path, "-backend", "xla-cpu")
	addr := p.waitReady(t)
	st := waitTrained(t, p, addr, 2)
	c := st.GetBackend().GetCompile()
	require.Positive(t, c.GetProgramsCompiled(), "first run compiles")
	require.Positive(t, c.GetCompileTime().AsDuration())
	require.Zero(t, c.GetProgramsLoaded(), "an empty cache loads nothing")
	require.Equal(t, cacheDir, c.GetCacheDir())
	p.stop(t, 60*time.Second)
	require.Contains(t, p.log(), `"programs_compiled":`)
	entries, err := filepath.Glob(filepath.Join(cacheDir, "*.xlaprog"))
	require.NoError(t, err)
	require.NotEmpty(t, entries)

	synth("again")
	p = startDaemon(t, "-config", path, "-backend", "xla-cpu")
	addr = p.waitReady(t)
	st = waitTrained(t, p, addr, 4)
	c = st.GetBackend().GetCompile()
	require.Positive(t, c.GetProgramsLoaded(), p.log())
	require.Zero(t, c.GetProgramsCompiled(), "every program came from the cache:\n%s", p.log())
	require.Zero(t, c.GetCacheRejected())
	require.Contains(t, p.log(), `"message":"compiled program loaded from cache"`)
	require.Contains(t, p.log(), `"programs_loaded":`)
	out, _, code := runCLI(t, "status", "-addr", addr)
	require.Equal(t, 0, code)
	require.Contains(t, out, fmt.Sprintf("0 programs compiled in 0s; %d loaded from the cache", c.GetProgramsLoaded()))
	p.stop(t, 60*time.Second)
}
