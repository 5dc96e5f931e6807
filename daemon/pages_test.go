package daemon

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	hindsightv1 "github.com/hindsight-ai/hindsight/api/hindsight/v1"
	"github.com/hindsight-ai/hindsight/internal/fsutil"
	"github.com/hindsight-ai/hindsight/internal/testwait"
	"github.com/hindsight-ai/hindsight/rollout"

	"github.com/hindsight-ai/hindsight/status"
	"github.com/hindsight-ai/hindsight/status/statustest"
)

func TestPublishRecordsHistory(t *testing.T) {
	dir := t.TempDir()
	sp, err := rollout.OpenSpool(filepath.Join(dir, "spool"), filepath.Join(dir, "journal"), rollout.ReadOptions{}, zerolog.Nop())
	require.NoError(t, err)
	t.Cleanup(func() { _ = sp.Close() })
	s := newStats("test", dir, fsutil.Features{}, time.Now(), sp, func() *hindsightv1.PauseState { return nil })
	s.publish()
	pts := s.hist.Points()
	require.Len(t, pts, 1)
	require.Equal(t, "STATE_STARTING", pts[0].State)
}

// checkPagesOfRun checks the pages of a running daemon (TestDiskFull's, after it has
// trained): the history holds training points, and each credit file it lists opens in
// the viewer.
func checkPagesOfRun(t *testing.T, base string) {
	t.Helper()
	var doc struct {
		History []status.HistoryPoint   `json:"history"`
		Files   []struct{ Name string } `json:"files"`
	}
	require.Eventually(t, func() bool {
		code, body, _ := statustest.Get(t, base+"/status/history.json")
		require.Equal(t, http.StatusOK, code)
		require.NoError(t, json.Unmarshal([]byte(body), &doc))
		return len(doc.Files) > 0 && len(doc.History) > 1 && doc.History[len(doc.History)-1].Step > 0
	}, testwait.Guard(2*time.Minute), 100*time.Millisecond, "no credit file or training point in the history")
	last := doc.History[len(doc.History)-1]
	require.NotZero(t, last.Loss, "a step's loss is sampled")
	require.True(t, slices.IsSortedFunc(doc.History, func(a, b status.HistoryPoint) int { return a.At.Compare(b.At) }), "oldest first")
	for _, f := range doc.Files {
		code, body, _ := statustest.Get(t, base+"/viewer/"+f.Name)
		require.Equal(t, http.StatusOK, code, f.Name)
		require.Contains(t, body, `id="credit-data"`)
	}
	code, body, _ := statustest.Get(t, base+"/")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `id="charts"`)
}
