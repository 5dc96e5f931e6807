package daemon

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	hindsightv1 "github.com/hindsight-ai/hindsight/api/hindsight/v1"
	"github.com/hindsight-ai/hindsight/internal/fsutil"
	"github.com/hindsight-ai/hindsight/rollout"
	"github.com/hindsight-ai/hindsight/xla"
)

// TestAlertSeries: the series the alerting rules read follow the status: the pause
// causes, training progress (the start before the first step, then the step's time),
// and one disk series per file system however many directories share it
// (cmd/hindsightd's TestAlertRuleMetrics checks them on the real binary).
func TestAlertSeries(t *testing.T) {
	dir := t.TempDir()
	sp, err := rollout.OpenSpool(filepath.Join(dir, "spool"), filepath.Join(dir, "journal"), rollout.ReadOptions{}, zerolog.Nop())
	require.NoError(t, err)
	t.Cleanup(func() { _ = sp.Close() })
	pause := &hindsightv1.PauseState{}
	started := time.Unix(1_700_000_000, 0)
	s := newStats("test", dir, fsutil.Features{}, started, sp, func() *hindsightv1.PauseState {
		if !pause.GetOperator() && !pause.GetDiskFull() {
			return nil
		}
		return pause
	})
	reg := prometheus.NewRegistry()
	newMetrics(reg, s, "test", []string{dir, filepath.Join(dir, "spool"), filepath.Join(dir, "missing")})
	s.publish()
	gauge := func(name string, labels ...string) float64 {
		t.Helper()
		mfs, err := reg.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
		metric:
			for _, m := range mf.GetMetric() {
				for i, l := range m.GetLabel() {
					if l.GetValue() != labels[i] {
						continue metric
					}
				}
				if m.GetCounter() != nil {
					return m.GetCounter().GetValue()
				}
				return m.GetGauge().GetValue()
			}
		}
		return -1
	}
	count := func(name string) int {
		t.Helper()
		mfs, err := reg.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			if mf.GetName() == name {
				return len(mf.GetMetric())
			}
		}
		return 0
	}

	require.Equal(t, 0.0, gauge("hindsight_paused", "operator"))
	require.Equal(t, 0.0, gauge("hindsight_paused", "disk_full"))
	require.Zero(t, count("hindsight_train_progress_timestamp_seconds"), "no training series without training")
	require.Zero(t, count("hindsight_teacher_failures_total"))
	require.Equal(t, 1, count("hindsight_disk_size_bytes"), "the three directories are one file system (one missing)")
	require.Positive(t, gauge("hindsight_disk_size_bytes", dir))
	require.LessOrEqual(t, gauge("hindsight_disk_available_bytes", dir), gauge("hindsight_disk_size_bytes", dir))

	pause.DiskFull = true
	s.publish()
	require.Equal(t, 1.0, gauge("hindsight_paused", "disk_full"))
	require.Equal(t, 0.0, gauge("hindsight_paused", "operator"))
	pause.DiskFull, pause.Operator = false, true
	s.publish()
	require.Equal(t, 1.0, gauge("hindsight_paused", "operator"))

	s.setBackend("go", "cpu", 10, dir, "go from -backend")
	s.setQueues(2, 5, 1)
	s.publish()
	require.Equal(t, float64(started.Unix()), gauge("hindsight_train_progress_timestamp_seconds"))
	require.Equal(t, 2.0, gauge("hindsight_queue_files"))
	require.Equal(t, 1.0, gauge("hindsight_queue_files_awaiting_checkpoint"))
	require.Equal(t, 0.0, gauge("hindsight_teacher_failures_total"))
	before := time.Now()
	s.stepDone(xla.Metrics{Step: 1, Updated: true, Took: time.Second}, 10, time.Second)
	require.GreaterOrEqual(t, gauge("hindsight_train_progress_timestamp_seconds"), float64(before.UnixNano())/1e9)
}
