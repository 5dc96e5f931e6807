package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCompiledProgramsSurviveRestart trains on XLA, stops the daemon and starts it
// again on the same data directory: the second run loads every program it needs from
// <data_dir>/state/programs instead of compiling it, says so in its log and in status,
// and its step line says what it loaded. Each run prepares the trainer at start (its
// "policy loaded" line gives prepared_in), so even the optimizer's zero moments come
// from programs compiled, then loaded, before the first step.
func TestCompiledProgramsSurviveRestart(t *testing.T) {
	xlaCPUOrSkip(t)
	compiledProgramsSurviveRestart(t, false)
}

// TestLayerProgramsSurviveRestart: the same with train.layer_programs (one decoder
// layer's programs run per layer), which the daemon's "policy loaded" line names.
func TestLayerProgramsSurviveRestart(t *testing.T) {
	xlaCPUOrSkip(t)
	compiledProgramsSurviveRestart(t, true)
}

func compiledProgramsSurviveRestart(t *testing.T, layerPrograms bool) {
	train := fmt.Sprintf("  token_budget: 256\n  idle_flush: 500ms\n  checkpoint: {every_steps: 1, keep: 2}\n  layer_programs: %t\n", layerPrograms)
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
	require.Contains(t, p.log(), fmt.Sprintf(`"layer_programs":%t`, layerPrograms))
	require.Regexp(t, `"prepared_in":[0-9.]+`, p.log(), "the trainer's state made resident at start")
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
	// The run's record of its programs (one run, one record), and the restart waited
	// for them to load before its first step.
	orders, err := filepath.Glob(filepath.Join(cacheDir, "*.order"))
	require.NoError(t, err)
	require.Len(t, orders, 1)
	loaded := regexp.MustCompile(`.*"message":"policy loaded".*`).FindString(p.log())
	m := regexp.MustCompile(`"programs_preloaded":(\d+),"programs_warmed":(\d+),"warm_took":[0-9.]+,"preload_wait":[0-9.]+`).FindStringSubmatch(loaded)
	require.NotNil(t, m, p.log())
	n, _ := strconv.Atoi(m[1])
	require.Positive(t, n, "the restart preloads the programs its run used before the first step")
	w, _ := strconv.Atoi(m[2])
	require.Positive(t, w, "and executes them once (compile_cache.warm, the default) before it")
	out, _, code := runCLI(t, "status", "-addr", addr)
	require.Equal(t, 0, code)
	require.Contains(t, out, fmt.Sprintf("0 programs compiled in 0s; %d loaded from the cache", c.GetProgramsLoaded()))
	p.stop(t, 60*time.Second)
}

// TestCLIProgramsSurviveRestart: `hindsight generate -compile-cache DIR` on XLA keeps
// the programs it compiles in DIR; the same command run again loads every one of them
// instead of compiling, says so on stderr, and samples the same tokens.
func TestCLIProgramsSurviveRestart(t *testing.T) {
	xlaCPUOrSkip(t)
	model, cache := filepath.Join(t.TempDir(), "model"), t.TempDir()
	_, stderr, code := runCLI(t, "init-model", "-out", model, "-seed", "2")
	require.Equal(t, 0, code, stderr)
	gen := func() (stdout string, compiled, loaded int) {
		stdout, stderr, code := runCLI(t, "generate", "-model", model, "-prompt", "hi", "-n", "2", "-max-new", "20",
			"-seed", "3", "-stop", "none", "-json", "-backend", "xla-cpu", "-compile-cache", cache)
		require.Equal(t, 0, code, stderr)
		m := regexp.MustCompile(`programs: (\d+) compiled in \S+, (\d+) loaded from (\S+) in`).FindStringSubmatch(stderr)
		require.NotNil(t, m, stderr)
		require.Equal(t, cache, m[3])
		compiled, _ = strconv.Atoi(m[1])
		loaded, _ = strconv.Atoi(m[2])
		return stdout, compiled, loaded
	}
	first, compiled, loaded := gen()
	require.Positive(t, compiled)
	require.Zero(t, loaded, "an empty cache loads nothing")
	entries, err := filepath.Glob(filepath.Join(cache, "*.xlaprog"))
	require.NoError(t, err)
	require.NotEmpty(t, entries)
	require.LessOrEqual(t, len(entries), compiled, "one entry per program (a program two executables compile is one)")

	again, compiled2, loaded2 := gen()
	require.Zero(t, compiled2, "every program came from the cache")
	require.Equal(t, compiled, loaded2)
	require.Equal(t, first, again)
}
