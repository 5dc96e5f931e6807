package rollout

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/hindsight-ai/hindsight/internal/arrowtest"
	"github.com/stretchr/testify/require"
)

// Test fixtures of the rollout file format; the fx prefix keeps them apart from the
// other test files of the package.

// fxRollout returns a valid rollout of n tokens (n a multiple of 8): a system and
// a user segment whose log-probs are null, an assistant and a tool_call segment that
// the policy sampled, and a failed tool_result with a person's feedback.
func fxRollout(id string, n int) *Rollout {
	q := int32(n / 4)
	r := &Rollout{
		ID: id, TaskID: "task-" + id, PolicyVersion: 7, Tokenizer: "bytes-v1",
		Tokens: make([]int32, n), LogProbs: make([]float32, n),
		Segments: []Segment{
			{Start: 0, End: q / 2, Kind: KindSystem, Status: StatusNone},
			{Start: q / 2, End: q, Kind: KindUser, Status: StatusNone},
			{Start: q, End: 2 * q, Kind: KindAssistant, Status: StatusNone},
			{Start: 2 * q, End: 3 * q, Kind: KindToolCall, Tool: "grep", Status: StatusNone},
			{Start: 3 * q, End: int32(n), Kind: KindToolResult, Tool: "grep", Status: StatusError, Feedback: "wrong folder"},
		},
		Reward: 0.5, HasReward: true, Feedback: -1, HasFeedback: true,
	}
	valid := make([]byte, (n+7)/8)
	for i := range r.Tokens {
		r.Tokens[i] = int32(i*7919) % 1000
		if int32(i) >= q && int32(i) < 3*q {
			r.LogProbs[i] = -float32(i%13) / 10
			valid[i/8] |= 1 << (i % 8)
		}
	}
	r.SetLogProbValidity(valid, 0)
	return r
}

// fxWrite writes rs to a new file in a temp folder and returns its path.
func fxWrite(t testing.TB, rs []*Rollout, opts WriteOptions) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "r.arrow")
	require.NoError(t, WriteFile(path, rs, opts))
	return path
}

// fxRow is what the reader returned for one row.
type fxRow struct {
	row      int
	r        *Rollout
	problems []*Problem
}

// fxReadAll reads a whole file; open is OpenReader's error, err the reader's Err.
func fxReadAll(t testing.TB, path string, opts ReadOptions) (rows []fxRow, open, err error) {
	t.Helper()
	rd, open := OpenReader(path, opts)
	if open != nil {
		return nil, open, nil
	}
	defer func() { require.NoError(t, rd.Close()) }()
	for rd.Next() {
		rows = append(rows, fxRow{row: rd.Row(), r: rd.Rollout().Clone(), problems: rd.Problems()})
	}
	return rows, nil, rd.Err()
}

// fxProblem asserts that err is a *Problem with the given code and returns it.
func fxProblem(t testing.TB, err error, code Code) *Problem {
	t.Helper()
	require.Error(t, err)
	var p *Problem
	require.True(t, errors.As(err, &p), "error %v (%T) is not a *Problem", err, err)
	require.Equal(t, code, p.Code, "problem: %v", p)
	require.Equal(t, -1, p.Row)
	require.NotEmpty(t, p.Reason)
	return p
}

// fxComparable flattens a rollout into a form require.Equal can compare: log-probs at
// null positions are dropped, kind names filled in.
type fxComparable struct {
	R        Rollout
	LogProbs []float32
	Valid    []bool
}

func fxCompare(r *Rollout) fxComparable {
	c := fxComparable{R: *r}
	c.R.LogProbs = nil
	c.R.SetLogProbValidity(nil, 0)
	if r.LogProbs != nil {
		c.LogProbs, c.Valid = make([]float32, len(r.LogProbs)), make([]bool, len(r.LogProbs))
		for i := range r.LogProbs {
			c.LogProbs[i], c.Valid[i] = r.LogProb(i)
		}
	}
	c.R.Segments = append([]Segment(nil), r.Segments...)
	for i := range c.R.Segments {
		if c.R.Segments[i].KindName == "" {
			c.R.Segments[i].KindName = c.R.Segments[i].Kind.String()
		}
	}
	return c
}

// fxRecord returns the rollouts as one record batch in the canonical schema, for tests
// that then break the schema on purpose.
func fxRecord(t testing.TB, rs []*Rollout) arrow.RecordBatch {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, WriteOptions{Format: FormatStream, BatchRows: len(rs)})
	require.NoError(t, err)
	for _, r := range rs {
		require.NoError(t, w.Write(r))
	}
	require.NoError(t, w.Close())
	return arrowtest.StreamRecord(t, &buf)
}

// fxWriteRecords writes record batches as they are (any schema) in the given format.
func fxWriteRecords(t testing.TB, format Format, schema *arrow.Schema, recs ...arrow.RecordBatch) string {
	t.Helper()
	return fxWriteRecordsOpts(t, format, schema, nil, recs...)
}

// fxWriteRecordsOpts is fxWriteRecords with extra IPC writer options (compression).
func fxWriteRecordsOpts(t testing.TB, format Format, schema *arrow.Schema, opts []ipc.Option, recs ...arrow.RecordBatch) string {
	t.Helper()
	opts = append([]ipc.Option{ipc.WithSchema(schema)}, opts...)
	path := filepath.Join(t.TempDir(), "raw.arrow")
	f, err := os.Create(path)
	require.NoError(t, err)
	defer f.Close()
	var w interface {
		Write(arrow.RecordBatch) error
		Close() error
	}
	if format == FormatFile {
		w, err = ipc.NewFileWriter(f, opts...)
		require.NoError(t, err)
	} else {
		w = ipc.NewWriter(f, opts...)
	}
	for _, rec := range recs {
		require.NoError(t, w.Write(rec))
	}
	require.NoError(t, w.Close())
	return path
}

// fxReplace returns rec with column name replaced by col (same field name, col's
// type) and the schema metadata kept.
func fxReplace(t testing.TB, rec arrow.RecordBatch, name string, col arrow.Array) arrow.RecordBatch {
	t.Helper()
	s := rec.Schema()
	i := s.FieldIndices(name)[0]
	fields := append([]arrow.Field(nil), s.Fields()...)
	fields[i] = arrow.Field{Name: name, Type: col.DataType(), Nullable: true}
	cols := append([]arrow.Array(nil), rec.Columns()...)
	cols[i] = col
	md := s.Metadata()
	return array.NewRecordBatch(arrow.NewSchema(fields, &md), cols, rec.NumRows())
}

var formats = []Format{FormatFile, FormatStream}

func TestReaderRoundTrip(t *testing.T) {
	noLogProbs := fxRollout("no-logprobs", 12)
	noLogProbs.LogProbs = nil
	noLogProbs.SetLogProbValidity(nil, 0)
	allValid := fxRollout("all-valid", 8)
	allValid.SetLogProbValidity(nil, 0)
	nulls := &Rollout{ID: "nulls", Tokens: []int32{1, 2, 3}} // every nullable column null
	empty := &Rollout{ID: "empty", Tokens: []int32{}, LogProbs: []float32{}, Segments: []Segment{}}
	in := []*Rollout{fxRollout("a", 16), noLogProbs, allValid, nulls, empty, fxRollout("b", 400), fxRollout("c", 8)}

	for _, format := range formats {
		t.Run(format.String(), func(t *testing.T) {
			path := fxWrite(t, in, WriteOptions{Format: format, BatchRows: 3}) // batches of 3, 3, 1
			rd, err := OpenReader(path, ReadOptions{VocabSize: 1000, Tokenizer: "bytes-v1"})
			require.NoError(t, err)
			require.Equal(t, format, rd.Format())
			require.True(t, rd.Schema().Equal(Schema()))
			var got []*Rollout
			for rd.Next() {
				require.Equal(t, len(got), rd.Row())
				require.Nil(t, rd.Problems(), "row %d: %v", rd.Row(), rd.Problems())
				got = append(got, rd.Rollout().Clone())
			}
			require.NoError(t, rd.Err())
			require.False(t, rd.Next())
			require.NoError(t, rd.Close())
			require.NoError(t, rd.Close())

			require.Len(t, got, len(in))
			for i := range in {
				require.Equal(t, fxCompare(in[i]), fxCompare(got[i]), "row %d", i)
			}
			require.Nil(t, got[3].LogProbs, "null logprobs list")
			require.Nil(t, got[3].Segments, "null segments list")
			require.NotNil(t, got[4].Tokens, "empty tokens is not null")
			require.False(t, got[1].HasLogProbs())
			require.True(t, got[0].LogProbValid(4) && !got[0].LogProbValid(0))
		})
	}
}

// TestReaderZeroCopy checks that Tokens and LogProbs alias the Arrow buffers of the
// batch rather than copies.
func TestReaderZeroCopy(t *testing.T) {
	for _, format := range formats {
		t.Run(format.String(), func(t *testing.T) {
			path := fxWrite(t, []*Rollout{fxRollout("a", 64), fxRollout("b", 128)}, WriteOptions{Format: format})
			rd, err := OpenReader(path, ReadOptions{})
			require.NoError(t, err)
			defer rd.Close()
			for rd.Next() {
				ro := rd.Rollout()
				raw := rd.RawRow()
				toks := raw.Column(raw.Schema().FieldIndices(ColTokens)[0]).(*array.LargeList).ListValues()
				lps := raw.Column(raw.Schema().FieldIndices(ColLogProbs)[0]).(*array.LargeList).ListValues()
				require.True(t, fxWithin(unsafe.Pointer(&ro.Tokens[0]), toks.Data().Buffers()[1].Bytes()), "tokens copied")
				require.True(t, fxWithin(unsafe.Pointer(&ro.Tokens[len(ro.Tokens)-1]), toks.Data().Buffers()[1].Bytes()))
				require.True(t, fxWithin(unsafe.Pointer(&ro.LogProbs[0]), lps.Data().Buffers()[1].Bytes()), "logprobs copied")
				require.Equal(t, cap(ro.Tokens), len(ro.Tokens), "append must not write into the batch")
				raw.Release()
			}
			require.NoError(t, rd.Err())
		})
	}
}

func fxWithin(p unsafe.Pointer, buf []byte) bool {
	if len(buf) == 0 {
		return false
	}
	lo := uintptr(unsafe.Pointer(&buf[0]))
	return uintptr(p) >= lo && uintptr(p) < lo+uintptr(len(buf))
}

func TestReaderRawRow(t *testing.T) {
	in := []*Rollout{fxRollout("a", 8), fxRollout("b", 12), fxRollout("c", 16)}
	path := fxWrite(t, in, WriteOptions{BatchRows: 2})
	rd, err := OpenReader(path, ReadOptions{})
	require.NoError(t, err)
	defer rd.Close()
	for rd.Next() {
		raw := rd.RawRow()
		require.EqualValues(t, 1, raw.NumRows())
		id := raw.Column(raw.Schema().FieldIndices(ColRolloutID)[0]).(*array.String)
		require.Equal(t, in[rd.Row()].ID, id.Value(0))
		raw.Release()
	}
	require.NoError(t, rd.Err())
}

// TestReaderRowProblems writes one bad rollout between two good ones and checks the
// code, row, rollout_id, column and file of what the reader reports.
func TestReaderRowProblems(t *testing.T) {
	nan := float32(math.NaN())
	inf := float32(math.Inf(1))
	tests := []struct {
		name   string
		opts   ReadOptions
		mutate func(r *Rollout)
		code   Code
		column string
		reason string // a substring of the reason, when it matters
	}{
		{"empty id", ReadOptions{}, func(r *Rollout) { r.ID = "" }, EEmptyID, ColRolloutID, ""},
		{"null tokens", ReadOptions{}, func(r *Rollout) { r.Tokens = nil }, ENullTokens, ColTokens, ""},
		{"len mismatch", ReadOptions{}, func(r *Rollout) { r.LogProbs = r.LogProbs[:15] }, ELenMismatch, ColLogProbs, "tokens has 16 elements, logprobs has 15"},
		{"negative token", ReadOptions{}, func(r *Rollout) { r.Tokens[3] = -5 }, ETokenRange, ColTokens, "tokens[3] = -5 is negative"},
		{"token beyond vocab", ReadOptions{VocabSize: 500}, func(r *Rollout) {}, ETokenRange, ColTokens, "is not below the vocabulary size 500"},
		{"logprob nan", ReadOptions{}, func(r *Rollout) { r.LogProbs[5] = nan }, ELogprobNaN, ColLogProbs, "logprobs[5] = NaN"},
		{"logprob inf", ReadOptions{}, func(r *Rollout) { r.LogProbs[6] = -inf }, ELogprobInf, ColLogProbs, "logprobs[6] = -Inf"},
		{"logprob positive", ReadOptions{}, func(r *Rollout) { r.LogProbs[7] = 0.25 }, ELogprobPositive, ColLogProbs, "logprobs[7] = 0.25 is positive"},
		{"segment end beyond tokens", ReadOptions{}, func(r *Rollout) { r.Segments[4].End = 17 }, ESegRange, ColSegments, "segment 4 [12, 17): end > 16 tokens"},
		{"segment start >= end", ReadOptions{}, func(r *Rollout) { r.Segments[2].End = 4 }, ESegRange, ColSegments, "segment 2 [4, 4): start >= end"},
		{"segment negative start", ReadOptions{}, func(r *Rollout) { r.Segments[0].Start = -1 }, ESegRange, ColSegments, "start < 0"},
		{"segments unsorted", ReadOptions{}, func(r *Rollout) { r.Segments[1], r.Segments[2] = r.Segments[2], r.Segments[1] }, ESegOrder, ColSegments, "segment 2 [2, 4) starts before segment 1 [4, 8)"},
		{"segments overlap", ReadOptions{}, func(r *Rollout) { r.Segments[2].End = 9 }, ESegOverlap, ColSegments, "segment 3 [8, 12) overlaps segment 2 [4, 9)"},
		{"unknown kind", ReadOptions{}, func(r *Rollout) { r.Segments[3].KindName = "tool_use" }, ESegKind, ColSegments, `unknown kind "tool_use"`},
		{"bad status", ReadOptions{}, func(r *Rollout) { r.Segments[4].Status = 2 }, ESegStatus, ColSegments, "status 2"},
		{"feedback range", ReadOptions{}, func(r *Rollout) { r.Feedback = 3 }, EFeedbackRange, ColFeedback, "feedback is 3"},
		{"reward nan", ReadOptions{}, func(r *Rollout) { r.Reward = nan }, ERewardNaN, ColReward, "reward is NaN"},
		{"reward inf", ReadOptions{}, func(r *Rollout) { r.Reward = inf }, ERewardNaN, ColReward, "reward is +Inf"},
		{"tokenizer", ReadOptions{Tokenizer: "sha256:abc"}, func(r *Rollout) {}, ETokenizer, ColTokenizer, `tokenizer is "bytes-v1", the model's is "sha256:abc"`},
	}
	for _, format := range formats {
		for _, tt := range tests {
			t.Run(format.String()+"/"+tt.name, func(t *testing.T) {
				bad := fxRollout("bad", 16)
				if tt.opts.VocabSize > 0 {
					bad.Tokens[9] = 700
				}
				tt.mutate(bad)
				good := func(id string) *Rollout {
					g := fxRollout(id, 16)
					for i := range g.Tokens {
						g.Tokens[i] %= 400
					}
					g.Tokenizer = ""
					return g
				}
				path := fxWrite(t, []*Rollout{good("g0"), bad, good("g2")}, WriteOptions{Format: format, BatchRows: 2})
				rows, open, err := fxReadAll(t, path, tt.opts)
				require.NoError(t, open)
				require.NoError(t, err)
				require.Len(t, rows, 3)
				require.Nil(t, rows[0].problems)
				require.Nil(t, rows[2].problems)
				require.Len(t, rows[1].problems, 1, "%v", rows[1].problems)
				p := rows[1].problems[0]
				require.Equal(t, tt.code, p.Code, p.Error())
				require.Equal(t, path, p.File)
				require.Equal(t, 1, p.Row)
				require.Equal(t, bad.ID, p.RolloutID)
				require.Equal(t, tt.column, p.Column)
				require.Contains(t, p.Reason, tt.reason)
				require.False(t, p.FileLevel())
				require.NotNil(t, rows[1].r, "a bad row is still decoded")
			})
		}
	}
}

func TestReaderDuplicateID(t *testing.T) {
	path := fxWrite(t, []*Rollout{fxRollout("a", 8), fxRollout("b", 8), fxRollout("a", 8), fxRollout("a", 8)}, WriteOptions{BatchRows: 3})
	rows, open, err := fxReadAll(t, path, ReadOptions{})
	require.NoError(t, open)
	require.NoError(t, err)
	require.Len(t, rows, 4)
	require.Nil(t, rows[0].problems)
	require.Nil(t, rows[1].problems)
	for _, i := range []int{2, 3} {
		require.Len(t, rows[i].problems, 1)
		p := rows[i].problems[0]
		require.Equal(t, EDupIDInFile, p.Code)
		require.Equal(t, i, p.Row)
		require.Equal(t, "a", p.RolloutID)
		require.Contains(t, p.Reason, "already appeared at row 0")
	}
}

// TestReaderArrowOnlyProblems covers values the Writer cannot produce: a null
// rollout_id, a status of −1, a null kind, null token ids.
func TestReaderArrowOnlyProblems(t *testing.T) {
	mem := memory.DefaultAllocator
	rs := []*Rollout{fxRollout("a", 8), fxRollout("b", 8)}

	ids := array.NewStringBuilder(mem)
	ids.Append("a")
	ids.AppendNull()

	segs := array.NewListBuilder(mem, segmentType)
	sb := segs.ValueBuilder().(*array.StructBuilder)
	for row := 0; row < 2; row++ {
		segs.Append(true)
		sb.Append(true)
		sb.FieldBuilder(0).(*array.Int32Builder).Append(0)
		sb.FieldBuilder(1).(*array.Int32Builder).Append(8)
		if row == 0 {
			sb.FieldBuilder(2).(*array.StringBuilder).AppendNull() // null kind
			sb.FieldBuilder(4).(*array.Int8Builder).Append(-1)     // status −1
		} else {
			sb.FieldBuilder(2).(*array.StringBuilder).Append("assistant")
			sb.FieldBuilder(4).(*array.Int8Builder).AppendNull()
		}
		sb.FieldBuilder(3).(*array.StringBuilder).AppendNull()
		sb.FieldBuilder(5).(*array.StringBuilder).AppendNull()
	}

	toks := array.NewLargeListBuilder(mem, arrow.PrimitiveTypes.Int32)
	tv := toks.ValueBuilder().(*array.Int32Builder)
	toks.Append(true)
	tv.AppendValues([]int32{1, 2, 3, 4, 5, 6, 7, 8}, nil)
	toks.Append(true)
	tv.AppendValues([]int32{1, 2, 3, 4, 5, 6, 7, 8}, []bool{true, true, false, true, false, true, true, true})

	rec := fxRecord(t, rs)
	rec = fxReplace(t, rec, ColRolloutID, ids.NewArray())
	rec = fxReplace(t, rec, ColSegments, segs.NewArray())
	rec = fxReplace(t, rec, ColTokens, toks.NewArray())
	for _, format := range formats {
		t.Run(format.String(), func(t *testing.T) {
			path := fxWriteRecords(t, format, rec.Schema(), rec)
			rows, open, err := fxReadAll(t, path, ReadOptions{})
			require.NoError(t, open)
			require.NoError(t, err)
			require.Len(t, rows, 2)
			codes := func(ps []*Problem) map[Code]string {
				m := map[Code]string{}
				for _, p := range ps {
					m[p.Code] = p.Reason
				}
				return m
			}
			c0 := codes(rows[0].problems)
			require.Contains(t, c0, ESegStatus)
			require.Contains(t, c0[ESegStatus], "status -1")
			require.Contains(t, c0, ESegKind)
			require.Contains(t, c0[ESegKind], "kind is null")
			c1 := codes(rows[1].problems)
			require.Contains(t, c1, EEmptyID)
			require.Contains(t, c1, ETokenRange)
			require.Contains(t, c1[ETokenRange], "tokens[2] is null (2 null token ids)")
			require.Empty(t, rows[1].problems[0].RolloutID)
		})
	}
}

func TestReaderFileProblems(t *testing.T) {
	dir := t.TempDir()
	good := func(format Format) []byte {
		b, err := os.ReadFile(fxWrite(t, []*Rollout{fxRollout("a", 400), fxRollout("b", 400), fxRollout("c", 400)}, WriteOptions{Format: format, BatchRows: 1}))
		require.NoError(t, err)
		return b
	}
	file, stream := good(FormatFile), good(FormatStream)
	tests := []struct {
		name string
		data []byte
		code Code
	}{
		{"empty", nil, ENotArrow},
		{"text", []byte("rollout_id,tokens\nx,1 2 3\n"), ENotArrow},
		{"parquet", append([]byte("PAR1"), make([]byte, 100)...), ENotArrow},
		{"magic only", []byte("ARRO"), ETruncated},
		{"file cut in half", file[:len(file)/2], ETruncated},
		{"file without footer", file[:len(file)-10], ETruncated},
		{"stream cut in schema", stream[:20], ETruncated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, tt.name+".arrow")
			require.NoError(t, os.WriteFile(path, tt.data, 0o644))
			_, err := OpenReader(path, ReadOptions{})
			p := fxProblem(t, err, tt.code)
			require.Equal(t, path, p.File)
		})
	}
	t.Run("missing file", func(t *testing.T) {
		path := filepath.Join(dir, "nope.arrow")
		_, err := OpenReader(path, ReadOptions{})
		require.Equal(t, path, fxProblem(t, err, EIO).File)
	})
}

// TestReaderTruncatedStream cuts a stream inside its last batches: the rows before the
// cut come out, then Err reports E_TRUNCATED.
func TestReaderTruncatedStream(t *testing.T) {
	var in []*Rollout
	for _, id := range []string{"a", "b", "c", "d", "e", "f"} {
		in = append(in, fxRollout(id, 400))
	}
	data, err := os.ReadFile(fxWrite(t, in, WriteOptions{Format: FormatStream, BatchRows: 2}))
	require.NoError(t, err)
	for _, cut := range []int{len(data) * 2 / 3, len(data) - 100, len(data) - 4} {
		path := filepath.Join(t.TempDir(), "cut.arrow")
		require.NoError(t, os.WriteFile(path, data[:cut], 0o644))
		rows, open, err := fxReadAll(t, path, ReadOptions{})
		require.NoError(t, open)
		p := fxProblem(t, err, ETruncated)
		require.Equal(t, path, p.File)
		require.Less(t, len(rows), len(in)+1)
		for i, r := range rows {
			require.Nil(t, r.problems)
			require.Equal(t, in[i].ID, r.r.ID)
		}
		if cut == len(data)*2/3 {
			require.NotEmpty(t, rows, "rows before the cut come out")
			require.Less(t, len(rows), len(in))
		}
	}
}

// TestReaderCorruptBatch flips bytes inside a batch body of a file: the footer still
// reads, the batch must not (or must decode to something harmless), never panic.
func TestReaderCorruptBatch(t *testing.T) {
	data, err := os.ReadFile(fxWrite(t, []*Rollout{fxRollout("a", 400), fxRollout("b", 400)}, WriteOptions{BatchRows: 1}))
	require.NoError(t, err)
	for off := 8; off < len(data)-16; off += 97 {
		bad := append([]byte(nil), data...)
		for j := 0; j < 8; j++ {
			bad[off+j] = 0xff
		}
		path := filepath.Join(t.TempDir(), "bad.arrow")
		require.NoError(t, os.WriteFile(path, bad, 0o644))
		rows, open, err := fxReadAll(t, path, ReadOptions{})
		if open == nil && err == nil {
			require.LessOrEqual(t, len(rows), 2)
		}
	}
}

// TestReaderCompressed reads files whose buffers are LZ4- or zstd-compressed, as
// pyarrow writes them on request.
func TestReaderCompressed(t *testing.T) {
	rs := []*Rollout{fxRollout("a", 800), fxRollout("b", 8), {ID: "c", Tokens: []int32{1}}}
	rec := fxRecord(t, rs)
	for _, format := range formats {
		for name, opt := range map[string]ipc.Option{"lz4": ipc.WithLZ4(), "zstd": ipc.WithZstd()} {
			t.Run(format.String()+"/"+name, func(t *testing.T) {
				path := fxWriteRecordsOpts(t, format, rec.Schema(), []ipc.Option{opt, ipc.WithMinSpaceSavings(0)}, rec)
				rows, open, err := fxReadAll(t, path, ReadOptions{})
				require.NoError(t, open)
				require.NoError(t, err)
				require.Len(t, rows, len(rs))
				for i, r := range rows {
					require.Nil(t, r.problems)
					require.Equal(t, fxCompare(rs[i]), fxCompare(r.r))
				}
			})
		}
	}
}

// TestReaderCompressionBomb patches a compressed buffer to claim 1 TiB decompressed:
// the reader must refuse the batch before arrow allocates that.
func TestReaderCompressionBomb(t *testing.T) {
	rec := fxRecord(t, []*Rollout{fxRollout("a", 800)})
	path := fxWriteRecordsOpts(t, FormatStream, rec.Schema(), []ipc.Option{ipc.WithZstd(), ipc.WithMinSpaceSavings(0)}, rec)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	patched := false
	for pos := 0; pos+8 <= len(data) && !patched; {
		n := int(int32(binary.LittleEndian.Uint32(data[pos+4:])))
		if n == 0 {
			break
		}
		info, err := checkMessage(data[pos+8 : pos+8+n])
		require.NoError(t, err)
		body := pos + 8 + n
		if info.kind == fbRecordBatch {
			require.True(t, info.compressed)
			for _, b := range info.buffers {
				if b[1] >= 8 {
					binary.LittleEndian.PutUint64(data[body+int(b[0]):], 1<<40)
					patched = true
					break
				}
			}
		}
		pos = body + int(info.bodyLen)
	}
	require.True(t, patched)
	require.NoError(t, os.WriteFile(path, data, 0o644))
	rows, open, err := fxReadAll(t, path, ReadOptions{})
	require.NoError(t, open)
	require.Empty(t, rows)
	p := fxProblem(t, err, ETruncated)
	require.Contains(t, p.Reason, "claims 1099511627776 bytes decompressed")
}

func TestValidateFile(t *testing.T) {
	bad := fxRollout("bad", 8)
	bad.Tokens[0] = -1
	path := fxWrite(t, []*Rollout{fxRollout("a", 8), bad, fxRollout("a", 8)}, WriteOptions{})
	rows, problems, err := ValidateFile(path, ReadOptions{})
	require.NoError(t, err)
	require.Equal(t, 3, rows)
	require.Len(t, problems, 2)
	require.Equal(t, ETokenRange, problems[0].Code)
	require.Equal(t, 1, problems[0].Row)
	require.Equal(t, EDupIDInFile, problems[1].Code)
	require.Equal(t, 2, problems[1].Row)

	notArrow := filepath.Join(t.TempDir(), "x.arrow")
	require.NoError(t, os.WriteFile(notArrow, []byte("hello"), 0o644))
	rows, problems, err = ValidateFile(notArrow, ReadOptions{})
	require.NoError(t, err)
	require.Zero(t, rows)
	require.Len(t, problems, 1)
	require.Equal(t, ENotArrow, problems[0].Code)
	require.True(t, problems[0].FileLevel())

	_, _, err = ValidateFile(filepath.Join(t.TempDir(), "missing.arrow"), ReadOptions{})
	require.ErrorIs(t, err, os.ErrNotExist)
}

// FuzzReader feeds arbitrary bytes to the reader: it may reject them, never panic.
func FuzzReader(f *testing.F) {
	for _, format := range formats {
		var buf bytes.Buffer
		w, err := NewWriter(&buf, WriteOptions{Format: format, BatchRows: 1})
		require.NoError(f, err)
		require.NoError(f, w.Write(fxRollout("a", 8)))
		r := fxRollout("b", 12)
		r.LogProbs[3] = float32(math.NaN())
		require.NoError(f, w.Write(r))
		require.NoError(f, w.Close())
		data := buf.Bytes()
		f.Add(data)
		f.Add(data[:len(data)/2])
		f.Add(data[:len(data)-3])
	}
	// Other writers' files: the schema only in the footer (JS), dictionaries, views.
	for _, name := range []string{"js/valid.file.arrow", "pyarrow/valid_dictionary.file.arrow", "pyarrow/valid_views.stream.arrow", "arrow-go/valid.file.zstd.arrow"} {
		data, err := os.ReadFile(filepath.Join(interopDir, name))
		require.NoError(f, err)
		f.Add(data)
	}
	f.Add([]byte("ARROW1\x00\x00"))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x10, 0, 0, 0})
	f.Add([]byte("not arrow at all"))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "fuzz.arrow")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		rd, err := OpenReader(path, ReadOptions{VocabSize: 1000})
		if err != nil {
			var p *Problem
			if !errors.As(err, &p) {
				t.Fatalf("OpenReader returned %T, want *Problem", err)
			}
			return
		}
		defer rd.Close()
		for n := 0; rd.Next() && n < 1000; n++ {
			_ = rd.Rollout()
			_ = rd.Problems()
			raw := rd.RawRow()
			raw.Release()
		}
		if err := rd.Err(); err != nil {
			var p *Problem
			if !errors.As(err, &p) || !p.FileLevel() {
				t.Fatalf("Err returned %v, want a file-level *Problem", err)
			}
		}
	})
}
