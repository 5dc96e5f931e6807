package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/data/checkpoint"
	"github.com/hindsight-ai/hindsight/train"
)

// TestSIGTERMStepInFlight sends SIGTERM while a step is on a device that does not
// return (an injected stall, train.StallStepEnv, as an XLA call that cannot be
// interrupted): hindsightd abandons the step before shutdown_timeout, closes and
// exits 0 within it, by its own log; after a restart every rollout is trained exactly
// once and the weights equal those of a run that was never stopped. No stopwatch
// decides it: a stop past shutdown_timeout would end in the process's own "still
// running at the shutdown timeout" exit (status 1), and the waits are hang guards.
func TestSIGTERMStepInFlight(t *testing.T) {
	_, seed := stagedRollouts(t, 12, 2)
	cfg := func(dataDir string) string {
		path := trainConfigSteps(t, dataDir, 128, 1)
		f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
		require.NoError(t, err)
		_, err = f.WriteString("shutdown_timeout: 10s\n") // work until 8 s, closing within the last 2 s
		require.NoError(t, err)
		require.NoError(t, f.Close())
		return path
	}
	trainAll := func(dataDir string) {
		p := startDaemon(t, "-config", cfg(dataDir))
		waitTrained(t, p, p.waitReady(t), 12)
		p.stop(t, time.Minute)
	}
	ref := t.TempDir()
	seed(ref)
	trainAll(ref)

	stopped := t.TempDir()
	seed(stopped)
	p := startDaemonEnv(t, []string{"NOTIFY_SOCKET=", train.StallStepEnv + "=3"}, "-config", cfg(stopped))
	p.waitReady(t)
	p.waitLog(t, 10*time.Minute, "device stalled (injected fault "+train.StallStepEnv+")", 1)
	p.stop(t, time.Minute)
	log := p.log()
	require.NotContains(t, log, "still running at the shutdown timeout")
	order := []string{`"message":"draining"`, `"message":"shutdown timeout nearly over`, `"message":"step abandoned`, `"message":"stopped"`}
	at := -1
	for k, line := range order {
		i := strings.Index(log, line)
		require.Greater(t, i, at, "line %d of %q in order, in the log:\n%s", k, order, log)
		at = i
	}
	require.Contains(t, log, `"step":3`)
	_, st, err := checkpoint.Latest(filepath.Join(stopped, "checkpoints"), zerolog.Nop())
	require.NoError(t, err)
	require.EqualValues(t, 2, st.Step, "the last checkpoint before the stalled step stands")

	trainAll(stopped)
	requireNoTemps(t, stopped)
	requireLikeCleanRun(t, ref, stopped, 12, false)
}
