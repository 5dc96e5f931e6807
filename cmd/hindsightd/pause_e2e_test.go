package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	hindsightv1 "github.com/hindsight-ai/hindsight/api/hindsight/v1"
)

// TestPauseResume pauses a running hindsightd with the CLI, drops rollout files,
// checks that they stay in incoming/ while status says who paused it and why, then
// resumes and waits for them to be trained.
func TestPauseResume(t *testing.T) {
	dataDir := t.TempDir()
	p := startDaemon(t, "-config", trainConfig(t, dataDir))
	addr := p.waitReady(t)

	out, stderr, code := runCLI(t, "pause", "-addr", addr, "-reason", "swap the teacher key")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "paused by ")

	incoming := filepath.Join(dataDir, "spool", "incoming")
	synthInto(t, incoming, 4, 2)
	// The rescan runs every 2 s and fsnotify at once: nothing may be claimed. The
	// sleep gives a claim its chance; on a slow machine it only makes the check
	// weaker, never fails it. Status may count the files a little later.
	time.Sleep(3 * time.Second)
	var st *hindsightv1.Status
	p.waitFor(t, 2*time.Minute, "status to count 2 files in incoming/", func() bool {
		st = statusOf(t, addr)
		return st.GetSpool().GetIncoming() == 2
	})
	require.True(t, st.GetPaused())
	require.True(t, st.GetPause().GetOperator())
	require.Contains(t, st.GetPauseReason(), "swap the teacher key")
	require.NotNil(t, st.GetPause().GetSince())
	require.Equal(t, "STATE_READY", st.GetState().String(), "readiness unchanged")
	require.EqualValues(t, 2, st.GetSpool().GetIncoming())
	require.Len(t, listDir(t, incoming), 2)
	table, _, code := runCLI(t, "status", "-addr", addr)
	require.Equal(t, 0, code)
	require.Contains(t, table, "swap the teacher key")

	out, stderr, code = runCLI(t, "resume", "-addr", addr)
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "running\n", out)
	st = waitTrained(t, p, addr, 4)
	require.False(t, st.GetPaused())
	require.Positive(t, st.GetBackend().GetMemoryBytes())

	p.stop(t, 60*time.Second)
	ents, err := os.ReadDir(filepath.Join(dataDir, "spool", "done"))
	require.NoError(t, err)
	require.Len(t, ents, 2)
}

func TestPauseUnreachable(t *testing.T) {
	_, stderr, code := runCLI(t, "pause", "-addr", "127.0.0.1:1", "-timeout", "2s")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "hindsight pause")
	_, _, code = runCLI(t, "resume", "-addr", "127.0.0.1:1", "extra")
	require.Equal(t, 2, code)
}
