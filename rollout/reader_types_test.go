package rollout

import (
	"fmt"
	"math"
	"testing"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/stretchr/testify/require"
)

// fxTyped builds rs as one record batch with each column of types (by name; the
// canonical type otherwise) and, in the segments struct, the given field types.
// Values are the rollouts' own; over rides the value of a column for some rows (a
// value fxAppend takes), for values a Rollout cannot hold.
func fxTyped(t testing.TB, rs []*Rollout, types map[string]arrow.DataType, over map[string]map[int]any) arrow.RecordBatch {
	t.Helper()
	mem := memory.DefaultAllocator
	var fields []arrow.Field
	var cols []arrow.Array
	for _, f := range Schema().Fields() {
		if dt, ok := types[f.Name]; ok {
			f.Type = dt
		}
		b := array.NewBuilder(mem, f.Type)
		for i, r := range rs {
			v := fxValue(r, f.Name)
			if o, ok := over[f.Name][i]; ok {
				v = o
			}
			fxAppend(t, b, v)
		}
		fields, cols = append(fields, f), append(cols, b.NewArray())
	}
	md := Schema().Metadata()
	return array.NewRecordBatch(arrow.NewSchema(fields, &md), cols, int64(len(rs)))
}

// fxValue returns column name of r as fxAppend takes it.
func fxValue(r *Rollout, name string) any {
	switch name {
	case ColRolloutID:
		return r.ID
	case ColTaskID:
		return fxNullIf(r.TaskID == "", r.TaskID)
	case ColPolicyVersion:
		return r.PolicyVersion
	case ColTokenizer:
		return fxNullIf(r.Tokenizer == "", r.Tokenizer)
	case ColTokens:
		if r.Tokens == nil {
			return nil
		}
		out := make([]any, len(r.Tokens))
		for i, v := range r.Tokens {
			out[i] = int64(v)
		}
		return out
	case ColLogProbs:
		if r.LogProbs == nil {
			return nil
		}
		out := make([]any, len(r.LogProbs))
		for i := range r.LogProbs {
			if v, ok := r.LogProb(i); ok {
				out[i] = float64(v)
			}
		}
		return out
	case ColSegments:
		if r.Segments == nil {
			return nil
		}
		out := make([]any, len(r.Segments))
		for i, s := range r.Segments {
			status := fxNullIf(s.Status == StatusNone, int64(s.Status))
			kind := s.KindName
			if kind == "" {
				kind = s.Kind.String()
			}
			out[i] = map[string]any{SegStart: int64(s.Start), SegEnd: int64(s.End), SegKind: kind,
				SegTool: fxNullIf(s.Tool == "", s.Tool), SegStatus: status, SegFeedback: fxNullIf(s.Feedback == "", s.Feedback)}
		}
		return out
	case ColReward:
		return fxNullIf(!r.HasReward, float64(r.Reward))
	case ColFeedback:
		return fxNullIf(!r.HasFeedback, int64(r.Feedback))
	case ColTemperature:
		return fxNullIf(!r.HasTemperature, float64(r.Temperature))
	}
	panic(name)
}

func fxNullIf(null bool, v any) any {
	if null {
		return nil
	}
	return v
}

// fxAppend appends v (nil, string, int64, float64, []any, map[string]any) to b.
func fxAppend(t testing.TB, b array.Builder, v any) {
	t.Helper()
	if v == nil {
		b.AppendNull()
		return
	}
	switch b := b.(type) {
	case *array.StringBuilder:
		b.Append(v.(string))
	case *array.LargeStringBuilder:
		b.Append(v.(string))
	case *array.StringViewBuilder:
		b.Append(v.(string))
	case *array.BinaryDictionaryBuilder:
		require.NoError(t, b.AppendString(v.(string)))
	case *array.Int8Builder:
		b.Append(int8(v.(int64)))
	case *array.Int16Builder:
		b.Append(int16(v.(int64)))
	case *array.Int32Builder:
		b.Append(int32(v.(int64)))
	case *array.Int64Builder:
		b.Append(v.(int64))
	case *array.Uint32Builder:
		b.Append(uint32(v.(int64)))
	case *array.Float32Builder:
		b.Append(float32(v.(float64)))
	case *array.Float64Builder:
		b.Append(v.(float64))
	case array.VarLenListLikeBuilder:
		items := v.([]any)
		b.AppendWithSize(true, len(items))
		for _, it := range items {
			fxAppend(t, b.ValueBuilder(), it)
		}
	case *array.StructBuilder:
		b.Append(true)
		st := b.Type().(*arrow.StructType)
		for i, f := range st.Fields() {
			fxAppend(t, b.FieldBuilder(i), v.(map[string]any)[f.Name])
		}
	default:
		t.Fatalf("fxAppend: no case for %T", b)
	}
}

// fxSegType returns the segments struct with the ints of type it and strings of type st.
func fxSegType(it, st arrow.DataType) *arrow.StructType {
	return arrow.StructOf(
		arrow.Field{Name: SegStart, Type: it, Nullable: true}, arrow.Field{Name: SegEnd, Type: it, Nullable: true},
		arrow.Field{Name: SegKind, Type: st, Nullable: true}, arrow.Field{Name: SegTool, Type: st, Nullable: true},
		arrow.Field{Name: SegStatus, Type: it, Nullable: true}, arrow.Field{Name: SegFeedback, Type: st, Nullable: true})
}

// fxEquivalentTypes are column types other writers produce, each set read as the
// canonical schema is.
func fxEquivalentTypes() map[string]map[string]arrow.DataType {
	i8, i16, i32, i64 := arrow.PrimitiveTypes.Int8, arrow.PrimitiveTypes.Int16, arrow.PrimitiveTypes.Int32, arrow.PrimitiveTypes.Int64
	f32, f64 := arrow.PrimitiveTypes.Float32, arrow.PrimitiveTypes.Float64
	large, view := arrow.BinaryTypes.LargeString, arrow.BinaryTypes.StringView
	dict := func(idx arrow.DataType, v arrow.DataType) arrow.DataType {
		return &arrow.DictionaryType{IndexType: idx, ValueType: v}
	}
	return map[string]map[string]arrow.DataType{
		"pyarrow defaults": {ColTokens: arrow.ListOf(i64), ColLogProbs: arrow.ListOf(f64), ColReward: f64,
			ColFeedback: i64, ColTemperature: f64, ColSegments: arrow.ListOf(fxSegType(i64, arrow.BinaryTypes.String))},
		"large strings": {ColRolloutID: large, ColTaskID: large, ColTokenizer: large, ColTokens: arrow.LargeListOf(i64),
			ColLogProbs: arrow.LargeListOf(f64), ColSegments: arrow.LargeListOf(fxSegType(i64, large))},
		"views (polars)": {ColRolloutID: view, ColTaskID: view, ColTokenizer: view, ColTokens: arrow.LargeListOf(i64),
			ColLogProbs: arrow.LargeListOf(f64), ColPolicyVersion: arrow.PrimitiveTypes.Uint32,
			ColSegments: arrow.LargeListOf(fxSegType(i64, view))},
		"list views": {ColTokens: arrow.ListViewOf(i32), ColLogProbs: arrow.LargeListViewOf(f32),
			ColSegments: arrow.ListViewOf(fxSegType(i16, arrow.BinaryTypes.String))},
		"dictionaries": {ColRolloutID: dict(i32, arrow.BinaryTypes.String), ColTaskID: dict(i8, arrow.BinaryTypes.String),
			ColTokenizer: dict(i16, arrow.BinaryTypes.String), ColFeedback: i8, ColPolicyVersion: i32,
			ColSegments: arrow.ListOf(fxSegType(i32, dict(i8, arrow.BinaryTypes.String)))},
	}
}

// TestReaderEquivalentTypes writes the same rollouts with the column types other
// writers produce and reads back exactly the rollouts of the canonical schema, in both
// formats and with and without compression.
func TestReaderEquivalentTypes(t *testing.T) {
	nulls := &Rollout{ID: "nulls", Tokens: []int32{1, 2, 3}}
	tempered := fxRollout("b", 40)
	tempered.Temperature, tempered.HasTemperature = 0.7, true
	rs := []*Rollout{fxRollout("a", 16), nulls, tempered, {ID: "empty", Tokens: []int32{}, LogProbs: []float32{}, Segments: []Segment{}}}
	for name, types := range fxEquivalentTypes() {
		rec := fxTyped(t, rs, types, nil)
		require.Nil(t, CheckSchema(rec.Schema()), name)
		for _, format := range formats {
			t.Run(name+"/"+format.String(), func(t *testing.T) {
				path := fxWriteRecords(t, format, rec.Schema(), rec)
				rows, open, err := fxReadAll(t, path, ReadOptions{VocabSize: 1000})
				require.NoError(t, open)
				require.NoError(t, err)
				require.Len(t, rows, len(rs))
				for i, r := range rows {
					require.Nil(t, r.problems, "row %d: %v", i, r.problems)
					require.Equal(t, fxCompare(rs[i]), fxCompare(r.r), "row %d", i)
				}
			})
		}
	}
}

// TestReaderZeroCopyEquivalent checks that list<int32> and list_view<int32> tokens and
// float32 log-probs still alias the batch, as large_list does.
func TestReaderZeroCopyEquivalent(t *testing.T) {
	i32, f32 := arrow.PrimitiveTypes.Int32, arrow.PrimitiveTypes.Float32
	for name, types := range map[string]map[string]arrow.DataType{
		"list":      {ColTokens: arrow.ListOf(i32), ColLogProbs: arrow.ListOf(f32)},
		"list_view": {ColTokens: arrow.ListViewOf(i32), ColLogProbs: arrow.LargeListViewOf(f32)},
	} {
		t.Run(name, func(t *testing.T) {
			rec := fxTyped(t, []*Rollout{fxRollout("a", 64), fxRollout("b", 128)}, types, nil)
			path := fxWriteRecords(t, FormatFile, rec.Schema(), rec)
			rd, err := OpenReader(path, ReadOptions{})
			require.NoError(t, err)
			defer rd.Close()
			for rd.Next() {
				ro := rd.Rollout()
				raw := rd.RawRow()
				toks := raw.Column(raw.Schema().FieldIndices(ColTokens)[0]).(array.ListLike).ListValues()
				lps := raw.Column(raw.Schema().FieldIndices(ColLogProbs)[0]).(array.ListLike).ListValues()
				require.True(t, fxWithin(unsafe.Pointer(&ro.Tokens[0]), toks.Data().Buffers()[1].Bytes()), "tokens copied")
				require.True(t, fxWithin(unsafe.Pointer(&ro.LogProbs[0]), lps.Data().Buffers()[1].Bytes()), "logprobs copied")
				require.Equal(t, cap(ro.Tokens), len(ro.Tokens))
				raw.Release()
			}
			require.NoError(t, rd.Err())
		})
	}
}

// TestReaderConversionRange puts values that do not fit the canonical types into the
// wider columns: each gives its row-level code naming row and position.
func TestReaderConversionRange(t *testing.T) {
	i64 := arrow.PrimitiveTypes.Int64
	types := map[string]arrow.DataType{ColTokens: arrow.LargeListOf(i64), ColFeedback: i64,
		ColSegments: arrow.ListOf(fxSegType(i64, arrow.BinaryTypes.String)), ColReward: arrow.PrimitiveTypes.Float64}
	rs := []*Rollout{fxRollout("g0", 16), fxRollout("bad", 16), fxRollout("g2", 16)}
	big := func(r *Rollout, pos map[int]int64) []any {
		v := fxValue(r, ColTokens).([]any)
		for i, x := range pos {
			v[i] = x
		}
		return v
	}
	segs := func(k int, field string, v int64) []any {
		s := fxValue(rs[1], ColSegments).([]any)
		m := map[string]any{}
		for kk, vv := range s[k].(map[string]any) {
			m[kk] = vv
		}
		m[field] = v
		s[k] = m
		return s
	}
	tests := []struct {
		name   string
		col    string
		value  any
		code   Code
		reason string
	}{
		{"token beyond int32", ColTokens, big(rs[1], map[int]int64{5: 1 << 32}), ETokenRange, "tokens[5] = 4294967296 does not fit in int32"},
		{"tokens beyond int32", ColTokens, big(rs[1], map[int]int64{9: -1 << 40, 3: math.MaxInt32 + 1}), ETokenRange,
			"tokens[3] = 2147483648 does not fit in int32 (2 token ids out of range)"},
		{"feedback beyond int8", ColFeedback, int64(300), EFeedbackRange, "feedback is 300; want -1, 0 or +1"},
		{"segment end beyond int32", ColSegments, segs(4, SegEnd, 1<<33), ESegRange, "segment 4: end 8589934592 does not fit in int32"},
		{"status beyond int8", ColSegments, segs(4, SegStatus, 257), ESegStatus, "segment 4 [12, 16): status 257"},
		{"reward beyond float32", ColReward, 1e300, ERewardNaN, "reward is +Inf"},
	}
	for _, tt := range tests {
		for _, format := range formats {
			t.Run(format.String()+"/"+tt.name, func(t *testing.T) {
				rec := fxTyped(t, rs, types, map[string]map[int]any{tt.col: {1: tt.value}})
				path := fxWriteRecords(t, format, rec.Schema(), rec)
				rows, open, err := fxReadAll(t, path, ReadOptions{})
				require.NoError(t, open)
				require.NoError(t, err)
				require.Len(t, rows, 3)
				require.Nil(t, rows[0].problems)
				require.Nil(t, rows[2].problems)
				require.NotEmpty(t, rows[1].problems)
				p := rows[1].problems[0]
				require.Equal(t, tt.code, p.Code, p.Error())
				require.Equal(t, 1, p.Row)
				require.Equal(t, "bad", p.RolloutID)
				require.Contains(t, p.Reason, tt.reason)
			})
		}
	}
}

// TestReaderDictionaryBatches reads a stream whose dictionary-encoded ids change from
// batch to batch (a replacement dictionary before each batch).
func TestReaderDictionaryBatches(t *testing.T) {
	types := map[string]arrow.DataType{ColRolloutID: &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: arrow.BinaryTypes.String}}
	var recs []arrow.RecordBatch
	var want []string
	for b := 0; b < 3; b++ {
		var rs []*Rollout
		for i := 0; i < 2; i++ {
			id := fmt.Sprintf("r%d-%d", b, i)
			rs, want = append(rs, fxRollout(id, 8)), append(want, id)
		}
		recs = append(recs, fxTyped(t, rs, types, nil))
	}
	path := fxWriteRecords(t, FormatStream, recs[0].Schema(), recs...)
	rows, open, err := fxReadAll(t, path, ReadOptions{})
	require.NoError(t, open)
	require.NoError(t, err)
	var got []string
	for _, r := range rows {
		require.Nil(t, r.problems)
		got = append(got, r.r.ID)
	}
	require.Equal(t, want, got)
}

// TestReaderEmptyLogProbsBatch reads a batch whose log-prob lists are all null or
// empty, so that its values buffer is empty: an empty list must still read as empty,
// not as null.
func TestReaderEmptyLogProbsBatch(t *testing.T) {
	rs := []*Rollout{{ID: "null", Tokens: []int32{1}}, {ID: "empty", Tokens: []int32{}, LogProbs: []float32{}}}
	for _, format := range formats {
		t.Run(format.String(), func(t *testing.T) {
			rows, open, err := fxReadAll(t, fxWrite(t, rs, WriteOptions{Format: format}), ReadOptions{})
			require.NoError(t, open)
			require.NoError(t, err)
			require.Len(t, rows, 2)
			require.Nil(t, rows[0].r.LogProbs)
			require.NotNil(t, rows[1].r.LogProbs)
			require.Empty(t, rows[1].r.LogProbs)
		})
	}
}

// BenchmarkReadTypes100k reads 8 rollouts of 100k tokens written with the canonical
// types and with pyarrow's defaults (list<int64> ids and list<double> log-probs,
// converted once per batch), file format: the conversion's cost against the
// zero-copy path in the same run.
func BenchmarkReadTypes100k(b *testing.B) {
	const n, tokens = 8, 100_000
	rs := make([]*Rollout, n)
	for i := range rs {
		rs[i] = fxRollout(fmt.Sprintf("r%d", i), tokens)
	}
	i64, f64 := arrow.PrimitiveTypes.Int64, arrow.PrimitiveTypes.Float64
	for _, c := range []struct {
		name  string
		types map[string]arrow.DataType
	}{
		{"canonical", nil},
		{"pyarrow_defaults", map[string]arrow.DataType{ColTokens: arrow.ListOf(i64), ColLogProbs: arrow.ListOf(f64)}},
	} {
		b.Run(c.name, func(b *testing.B) {
			rec := fxTyped(b, rs, c.types, nil)
			path := fxWriteRecords(b, FormatFile, rec.Schema(), rec)
			b.SetBytes(fileSize(b, path))
			benchRead(b, path, n*tokens)
		})
	}
}
