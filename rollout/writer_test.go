package rollout

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/stretchr/testify/require"
)

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.arrow")
	require.NoError(t, os.WriteFile(path, []byte("old"), 0o644))
	in := []*Rollout{fxRollout("a", 8), fxRollout("b", 8), fxRollout("c", 8), fxRollout("d", 8), fxRollout("e", 8)}
	require.NoError(t, WriteFile(path, in, WriteOptions{BatchRows: 2}))
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, ents, 1, "no temp file left behind")

	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	fr, err := ipc.NewFileReader(f)
	require.NoError(t, err)
	defer fr.Close()
	require.Equal(t, 3, fr.NumRecords(), "5 rows in batches of 2")
	require.True(t, fr.Schema().Equal(Schema()))
	v, _ := fr.Schema().Metadata().GetValue(SchemaVersionKey)
	require.Equal(t, SchemaVersion, v)

	require.Error(t, WriteFile(filepath.Join(dir, "no", "such", "dir.arrow"), in, WriteOptions{}))
}

// TestWriterNulls checks which zero values the writer turns into nulls, by reading
// the Arrow columns directly.
func TestWriterNulls(t *testing.T) {
	r := &Rollout{ID: "n", Tokens: []int32{1, 2}, LogProbs: []float32{-1, 0}, Segments: []Segment{{Start: 0, End: 2, Kind: KindAssistant, Status: StatusNone}}}
	r.SetLogProbValidity([]byte{0b10}, 0) // token 0 not sampled
	var buf bytes.Buffer
	w, err := NewWriter(&buf, WriteOptions{Format: FormatStream})
	require.NoError(t, err)
	require.NoError(t, w.Write(r))
	require.NoError(t, w.Write(&Rollout{ID: "m"})) // tokens, logprobs, segments null
	require.NoError(t, w.Close())
	require.NoError(t, w.Close(), "Close twice")
	require.Error(t, w.Write(r), "Write after Close")

	rd, err := ipc.NewReader(&buf)
	require.NoError(t, err)
	defer rd.Release()
	require.True(t, rd.Next())
	rec := rd.RecordBatch()
	col := func(name string) int { return rec.Schema().FieldIndices(name)[0] }
	for _, name := range []string{ColTaskID, ColTokenizer, ColReward, ColFeedback} {
		require.True(t, rec.Column(col(name)).IsNull(0), name)
	}
	require.False(t, rec.Column(col(ColPolicyVersion)).IsNull(0), "policy_version 0 is a value")
	lp := rec.Column(col(ColLogProbs)).(*array.LargeList).ListValues()
	require.True(t, lp.IsNull(0))
	require.True(t, lp.IsValid(1))
	st := rec.Column(col(ColSegments)).(*array.List).ListValues().(*array.Struct)
	require.Equal(t, "assistant", st.Field(2).(*array.String).Value(0))
	for _, i := range []int{3, 4, 5} { // tool, status, feedback
		require.True(t, st.Field(i).IsNull(0), segmentType.Field(i).Name)
	}
	for _, name := range []string{ColTokens, ColLogProbs, ColSegments} {
		require.True(t, rec.Column(col(name)).IsNull(1), name)
	}
	require.False(t, rd.Next())
}

func TestNewWriterBadFormat(t *testing.T) {
	_, err := NewWriter(&bytes.Buffer{}, WriteOptions{Format: Format(9)})
	require.Error(t, err)
	require.Equal(t, "Format(9)", Format(9).String())
}

// TestWriterRefusesInvalidUTF8 checks that a string Arrow's utf8 type cannot hold is
// refused before any of the rollout is buffered, naming the row and field, and that
// the rows around it still make a readable file.
func TestWriterRefusesInvalidUTF8(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf, WriteOptions{BatchRows: 2})
	require.NoError(t, err)
	require.NoError(t, w.Write(fxRollout("a", 8)))

	bad := fxRollout("b", 8)
	bad.Segments[0].Tool = "ls\xff"
	err = w.Write(bad)
	require.ErrorContains(t, err, `write rollout 1 ("b")`)
	require.ErrorContains(t, err, "segments[0].tool: invalid UTF-8")

	badID := fxRollout("c\xc3", 8)
	require.ErrorContains(t, w.Write(badID), "field rollout_id: invalid UTF-8")

	require.NoError(t, w.Write(fxRollout("d", 8)))
	require.NoError(t, w.Close())

	fr, err := ipc.NewFileReader(bytes.NewReader(buf.Bytes()))
	require.NoError(t, err)
	defer fr.Close()
	rows := 0
	for i := 0; i < fr.NumRecords(); i++ {
		rec, err := fr.Record(i)
		require.NoError(t, err)
		rows += int(rec.NumRows())
		ids := rec.Column(0).(*array.String)
		for j := 0; j < ids.Len(); j++ {
			require.Contains(t, []string{"a", "d"}, ids.Value(j))
		}
	}
	require.Equal(t, 2, rows, "the refused rollouts left nothing behind")
}
