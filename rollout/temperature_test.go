package rollout

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/hindsight-ai/hindsight/internal/arrowtest"
	"github.com/stretchr/testify/require"
)

// TestTemperatureColumn reads the optional temperature column: written by the writer
// (a value, 0 for greedy, null), and absent from files written before it (a file
// without the column, the committed interop files), where every rollout is scored at
// temperature 1.
func TestTemperatureColumn(t *testing.T) {
	rs := synthRollouts("t", 3)
	rs[0].Temperature, rs[0].HasTemperature = 0.7, true
	rs[1].Temperature, rs[1].HasTemperature = 0, true // greedy
	path := filepath.Join(t.TempDir(), "t.arrow")
	require.NoError(t, WriteFile(path, rs, WriteOptions{}))
	rows, open, err := fxReadAll(t, path, ReadOptions{})
	require.NoError(t, open)
	require.NoError(t, err)
	require.Len(t, rows, 3)
	type got struct {
		T     float32
		Has   bool
		Score float64
	}
	var gs []got
	for _, r := range rows {
		require.Nil(t, r.problems)
		gs = append(gs, got{r.r.Temperature, r.r.HasTemperature, r.r.ScoringTemperature()})
	}
	require.Equal(t, []got{{0.7, true, float64(float32(0.7))}, {0, true, 1}, {0, false, 1}}, gs)

	// The same rollouts without the column: every one at temperature 1.
	rec := fxRecord(t, rs)
	defer rec.Release()
	old := arrowtest.WithoutColumn(rec, ColTemperature)
	defer old.Release()
	require.Nil(t, CheckSchema(old.Schema()))
	for _, format := range formats {
		rows, open, err := fxReadAll(t, fxWriteRecords(t, format, old.Schema(), old), ReadOptions{})
		require.NoError(t, open)
		require.NoError(t, err)
		require.Len(t, rows, 3)
		for _, r := range rows {
			require.Nil(t, r.problems)
			require.False(t, r.r.HasTemperature)
			require.Equal(t, 1.0, r.r.ScoringTemperature())
		}
	}
	rows, open, err = fxReadAll(t, "testdata/interop/js/valid.file.arrow", ReadOptions{})
	require.NoError(t, open)
	require.NoError(t, err)
	require.NotEmpty(t, rows)
	for _, r := range rows {
		require.False(t, r.r.HasTemperature, "a file written before the column")
		require.Equal(t, 1.0, r.r.ScoringTemperature())
	}

	// A column of another type is the file's E_COLUMN_TYPE.
	ib := array.NewInt64Builder(memory.DefaultAllocator)
	ib.AppendValues([]int64{1, 1, 1}, nil)
	bad := fxReplace(t, rec, ColTemperature, ib.NewArray())
	p := CheckSchema(bad.Schema())
	require.NotNil(t, p)
	require.Equal(t, EColumnType, p.Code)
	require.Equal(t, "column temperature: expected float32 (or float32 or float64), found int64", p.Reason)
}

// TestSpoolTemperatureQuarantine: a rollout with a bad temperature is rejected as
// other bad rows are: its row goes to failed/ with a reason naming the file, row,
// rollout_id, column and value; the file's other rows are accepted.
func TestSpoolTemperatureQuarantine(t *testing.T) {
	s := openTestSpool(t, t.TempDir())
	rs := synthRollouts("temp", 3)
	rs[0].Temperature, rs[0].HasTemperature = 0.7, true
	rs[1].Temperature, rs[1].HasTemperature = -1, true
	drop(t, s, "a.arrow", rs)
	reps := ingestAll(t, s)
	require.Len(t, reps, 1)
	rep := reps[0]
	require.Equal(t, OutcomeDone, rep.Outcome)
	require.Equal(t, 2, rep.Accepted)
	require.Equal(t, 1, rep.Rejected)
	errText, err := os.ReadFile(filepath.Join(s.Dir(DirFailed), stem(rep.Claimed)+ErrorSuffix))
	require.NoError(t, err)
	require.Contains(t, string(errText), rep.Claimed+`: row 1 (rollout_id "temp-000001"): column temperature: E_TEMPERATURE: temperature is -1; want a finite value ≥ 0 (0: greedy)`)
	rows, open, err := fxReadAll(t, filepath.Join(s.Dir(DirFailed), stem(rep.Claimed)+RejectedSuffix), ReadOptions{})
	require.NoError(t, open)
	require.NoError(t, err)
	require.Len(t, rows, 1)
	require.Equal(t, "temp-000001", rows[0].r.ID)
	require.Equal(t, float32(-1), rows[0].r.Temperature, "the rejected row is kept unchanged")
}
