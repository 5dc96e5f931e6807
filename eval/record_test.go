package eval

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/internal/wlog"
)

func TestRecorderLatestBestAndReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "evals.jsonl")
	rec, err := OpenRecorder(path)
	require.NoError(t, err)
	at := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	results := []Result{
		{Time: at, Step: 1, Suite: "heldout", Kind: KindToolworld, Primary: "success", Metrics: map[string]float64{"success": 0.2}, Complete: true},
		{Time: at, Step: 1, Suite: "ll", Kind: KindLikelihood, Primary: "mean_logprob", Metrics: map[string]float64{"mean_logprob": -3}, Complete: true},
		{Time: at, Step: 2, Suite: "heldout", Kind: KindToolworld, Primary: "success", Metrics: map[string]float64{"success": 0.5}, Complete: true},
		{Time: at, Step: 3, Suite: "heldout", Kind: KindToolworld, Primary: "success", Error: "boom"},
		{Time: at, Step: 3, Suite: "ll", Kind: KindLikelihood, Primary: "mean_logprob", Metrics: map[string]float64{"mean_logprob": -3.5}, Complete: true},
	}
	for _, r := range results {
		require.NoError(t, rec.Record(r))
	}
	check := func(rec *Recorder) {
		latest, best := rec.Latest(), rec.Best()
		require.Len(t, latest, 2)
		require.Equal(t, "heldout", latest[0].Suite)
		require.Equal(t, int64(3), latest[0].Step, "a failed eval is still the latest")
		require.Equal(t, "boom", latest[0].Error)
		require.Equal(t, int64(2), best[0].Step, "best heldout: step 2's success 0.5")
		require.Equal(t, int64(1), best[1].Step, "best likelihood: the higher log-prob")
		require.Equal(t, 5, rec.Count())
		require.Equal(t, map[string]float64{"heldout": 0.2, "ll": -3}, rec.Scores(1), "step 1's primary metrics (the gateway's A/B rule)")
		require.Equal(t, map[string]float64{"ll": -3.5}, rec.Scores(3), "a failed eval has no score")
		require.Empty(t, rec.Scores(9))
	}
	check(rec)
	require.NoError(t, rec.Close())

	// A crash mid-write leaves a torn last line: reopening cuts it and appends after.
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString(`{"time":"2026-12-03T00:00:00Z","step":4,"suite":"heldo`)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	rec, err = OpenRecorder(path)
	require.NoError(t, err)
	check(rec)
	require.NoError(t, rec.Record(Result{Time: at, Step: 4, Suite: "heldout", Primary: "success", Metrics: map[string]float64{"success": 0.9}}))
	require.NoError(t, rec.Close())
	rec, err = OpenRecorder(path)
	require.NoError(t, err)
	defer rec.Close()
	require.Equal(t, int64(4), rec.Best()[0].Step)
	require.Equal(t, 6, rec.Count())
}

// TestRecorderRejectsCorruptLine: an undecodable line with lines after it is not a
// torn append: evals.jsonl is refused, naming the line and its byte offset, and left
// as it is.
func TestRecorderRejectsCorruptLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "evals.jsonl")
	body := "{\"step\":1}\nnot json\n{\"step\":2}\n"
	require.NoError(t, os.WriteFile(path, []byte(body), 0o644))
	_, err := OpenRecorder(path)
	require.ErrorContains(t, err, path+": line 2 is corrupt (byte offset 11)")
	b, rerr := os.ReadFile(path)
	require.NoError(t, rerr)
	require.Equal(t, body, string(b))
}

// TestRecorderDiskFull: a result whose append fails with a full disk, in the middle of
// the write or at its fsync, is an error and is cut off: it is not counted, the next
// result lands on a clean line, and evals.jsonl reopens with both whole results.
func TestRecorderDiskFull(t *testing.T) {
	for _, phase := range []string{wlog.FaultWrite, wlog.FaultSync} {
		t.Run(phase, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "evals.jsonl")
			rec, err := OpenRecorder(path)
			require.NoError(t, err)
			at := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
			res := func(step int64) Result {
				return Result{Time: at, Step: step, Suite: "ll", Kind: KindLikelihood, Primary: "mean_logprob",
					Metrics: map[string]float64{"mean_logprob": float64(-step)}, Complete: true}
			}
			require.NoError(t, rec.Record(res(1)))
			defer wlog.InjectFault(wlog.Fault{Name: "evals.jsonl", Append: 1, Phase: phase})()
			err = rec.Record(res(2))
			require.ErrorIs(t, err, syscall.ENOSPC)
			require.Equal(t, 1, rec.Count())
			require.Equal(t, int64(1), rec.Latest()[0].Step, "the failed result is not the latest")
			require.NoError(t, rec.Record(res(3)))
			require.NoError(t, rec.Close())

			rec, err = OpenRecorder(path)
			require.NoError(t, err)
			defer rec.Close()
			require.Equal(t, 2, rec.Count())
			require.Equal(t, int64(3), rec.Latest()[0].Step)
		})
	}
}
