package daemon

import (
	"context"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	hindsightv1 "github.com/hindsight-ai/hindsight/api/hindsight/v1"
	"github.com/hindsight-ai/hindsight/api/hindsight/v1/hindsightv1connect"
	"github.com/hindsight-ai/hindsight/internal/testwait"
	"github.com/hindsight-ai/hindsight/rollout"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b = append(l.b, p...)
	return len(p), nil
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.b)
}

// TestDiskFull runs the daemon with training while checkpoints fail with ENOSPC
// (injected: no small file system is available to fill), and checks that it pauses
// claiming with "disk full" in status, keeps running, leaves no temp file behind, and
// trains everything once the disk has room again.
func TestDiskFull(t *testing.T) {
	dir := t.TempDir()
	cfg := DefaultConfig()
	cfg.DataDir, cfg.Listen = dir, "127.0.0.1:0"
	cfg.Log.Format = "json"
	cfg.DiskFullRetry = 200 * time.Millisecond
	cfg.Spool.RescanInterval = 200 * time.Millisecond
	cfg.Train.TokenBudget, cfg.Train.IdleFlush = 256, 300*time.Millisecond
	cfg.Train.Checkpoint.EverySteps = 1
	cfg.ShutdownTimeout = 20 * time.Second

	var full atomic.Bool
	var attempts atomic.Int64
	full.Store(true)
	injectFault = func(op string) error {
		if op == "checkpoint" && full.Load() {
			attempts.Add(1)
			return &fs.PathError{Op: "write", Path: cfg.CheckpointDir(), Err: syscall.ENOSPC}
		}
		return nil
	}
	t.Cleanup(func() { injectFault = nil })

	incoming := filepath.Join(cfg.SpoolDir(), rollout.DirIncoming)
	require.NoError(t, os.MkdirAll(incoming, 0o755))
	_, err := rollout.WriteSynth(incoming, rollout.SynthOptions{N: 2, Tokens: 256, PerFile: 2, Seed: 5, IDPrefix: "a"})
	require.NoError(t, err)

	logs := &lockedBuffer{}
	ctx, cancel := context.WithTimeout(t.Context(), testwait.Guard(10*time.Minute))
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- Run(ctx, cfg, Options{Version: "test", Log: zerolog.New(logs), ResumeFrom: -1}) }()

	re := regexp.MustCompile(`"listen":"([^"]+)".*"message":"ready"`)
	var addr string
	require.Eventually(t, func() bool {
		m := re.FindStringSubmatch(logs.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	}, testwait.Guard(2*time.Minute), 20*time.Millisecond, "not ready: %s", logs)
	client := hindsightv1connect.NewStatusServiceClient(http.DefaultClient, "http://"+addr)
	status := func() *hindsightv1.Status {
		resp, err := client.GetStatus(ctx, connect.NewRequest(&hindsightv1.GetStatusRequest{}))
		require.NoError(t, err)
		return resp.Msg.GetStatus()
	}

	// The first step's checkpoint fails: the daemon pauses, says why, and keeps retrying.
	require.Eventually(t, func() bool { return attempts.Load() >= 2 }, testwait.Guard(5*time.Minute), 50*time.Millisecond, "%s", logs)
	st := status()
	require.True(t, st.GetPaused())
	require.Equal(t, "disk full: "+cfg.CheckpointDir(), st.GetPauseReason())
	require.True(t, st.GetPause().GetDiskFull())
	require.Equal(t, "checkpoint", st.GetPause().GetDiskFullOp())
	require.Contains(t, st.GetLastError(), "no space left on device")

	// A file dropped now is not claimed: once status counts it in incoming/, it is
	// still there and nothing is done.
	dropped, err := rollout.WriteSynth(incoming, rollout.SynthOptions{N: 2, Tokens: 256, PerFile: 2, Seed: 6, IDPrefix: "b"})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return status().GetSpool().GetIncoming() == 1 }, testwait.Guard(2*time.Minute), 50*time.Millisecond, "%s", logs)
	for _, f := range dropped {
		require.FileExists(t, f)
	}
	require.EqualValues(t, 0, status().GetSpool().GetDone())

	// Room again: the retry succeeds, the pause ends, everything is trained.
	full.Store(false)
	require.Eventually(t, func() bool {
		st := status()
		return !st.GetPaused() && st.GetSpool().GetDone() == 2 && st.GetTraining().GetRolloutsTrained() == 4
	}, testwait.Guard(5*time.Minute), 100*time.Millisecond, "%s", logs)
	checkPagesOfRun(t, "http://"+addr)

	cancel()
	select {
	case err := <-runErr:
		require.NoError(t, err)
	case <-time.After(testwait.Guard(2 * time.Minute)):
		t.Fatal("Run did not return after cancel")
	}
	// No temp file is left anywhere under the data directory.
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if regexp.MustCompile(`\.tmp`).MatchString(d.Name()) {
			return fmt.Errorf("temp file left: %s", p)
		}
		return nil
	}))
}

func TestIsDiskFull(t *testing.T) {
	require.True(t, isDiskFull(fmt.Errorf("checkpoint: %w", &fs.PathError{Op: "write", Path: "/x", Err: syscall.ENOSPC})))
	require.True(t, isDiskFull(syscall.EDQUOT))
	require.False(t, isDiskFull(syscall.EIO))
	require.Equal(t, "/x", errPath(fmt.Errorf("a: %w", &fs.PathError{Op: "write", Path: "/x", Err: syscall.ENOSPC}), "fallback"))
	require.Equal(t, "fallback", errPath(syscall.ENOSPC, "fallback"))
}
