package rollout

import (
	"fmt"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/stretchr/testify/require"
)

func TestSchema(t *testing.T) {
	s := Schema()
	want := []struct{ name, typ string }{
		{ColRolloutID, "utf8"},
		{ColTaskID, "utf8"},
		{ColPolicyVersion, "int64"},
		{ColTokenizer, "utf8"},
		{ColTokens, "large_list<int32>"},
		{ColLogProbs, "large_list<float32>"},
		{ColSegments, "list<struct{start int32, end int32, kind utf8, tool utf8, status int8, feedback utf8}>"},
		{ColReward, "float32"},
		{ColFeedback, "int8"},
		{ColTemperature, "float32"},
	}
	require.Equal(t, len(want), s.NumFields())
	for i, w := range want {
		require.Equal(t, w.name, s.Field(i).Name)
		require.Equal(t, w.typ, typeString(s.Field(i).Type), w.name)
		require.Equal(t, w.name != ColRolloutID, s.Field(i).Nullable, w.name)
	}
	v, ok := s.Metadata().GetValue(SchemaVersionKey)
	require.True(t, ok)
	require.Equal(t, "1", v)
	require.Nil(t, CheckSchema(s))
}

// fxSchemaWith returns the canonical schema with column name replaced by f (or
// removed when f is nil) and the given metadata (canonical when md is nil).
func fxSchemaWith(name string, f *arrow.Field, md *arrow.Metadata) *arrow.Schema {
	var fields []arrow.Field
	for _, c := range Schema().Fields() {
		switch {
		case c.Name != name:
			fields = append(fields, c)
		case f != nil:
			fields = append(fields, *f)
		}
	}
	if md == nil {
		m := Schema().Metadata()
		md = &m
	}
	return arrow.NewSchema(fields, md)
}

func TestCheckSchema(t *testing.T) {
	i32, i64, str := arrow.PrimitiveTypes.Int32, arrow.PrimitiveTypes.Int64, arrow.BinaryTypes.String
	segWith := func(fields ...arrow.Field) *arrow.Field {
		return &arrow.Field{Name: ColSegments, Type: arrow.ListOf(arrow.StructOf(fields...)), Nullable: true}
	}
	segFields := segmentType.Fields()
	reversed := make([]arrow.Field, len(segFields))
	for i, f := range segFields {
		reversed[len(segFields)-1-i] = f
	}
	v2 := arrow.NewMetadata([]string{SchemaVersionKey}, []string{"2"})
	noMD := arrow.NewMetadata(nil, nil)
	otherMD := arrow.NewMetadata([]string{"pandas"}, []string{"{}"})

	reorderedFields := Schema().Fields()
	for i, j := 0, len(reorderedFields)-1; i < j; i, j = i+1, j-1 {
		reorderedFields[i], reorderedFields[j] = reorderedFields[j], reorderedFields[i]
	}
	md := Schema().Metadata()
	extra := append(Schema().Fields(), arrow.Field{Name: "note", Type: str, Nullable: true})

	tests := []struct {
		name   string
		schema *arrow.Schema
		code   Code // "" for accepted
		column string
		reason string
	}{
		{"canonical", Schema(), "", "", ""},
		{"no metadata", fxSchemaWith("", nil, &noMD), "", "", ""},
		{"other metadata only", fxSchemaWith("", nil, &otherMD), "", "", ""},
		{"reordered", arrow.NewSchema(reorderedFields, &md), "", "", ""},
		{"extra column", arrow.NewSchema(extra, &md), "", "", ""},
		{"segment fields reordered", fxSchemaWith(ColSegments, segWith(reversed...), nil), "", "", ""},
		{"segment extra field", fxSchemaWith(ColSegments, segWith(append(segFields, arrow.Field{Name: "x", Type: i64})...), nil), "", "", ""},
		{"version 2", fxSchemaWith("", nil, &v2), ESchemaVersion, "", `is "2"`},
		{"missing rollout_id", fxSchemaWith(ColRolloutID, nil, nil), EMissingColumn, ColRolloutID, "column rollout_id (utf8) is missing"},
		{"missing feedback", fxSchemaWith(ColFeedback, nil, nil), EMissingColumn, ColFeedback, ""},
		{"tokens as list", fxSchemaWith(ColTokens, &arrow.Field{Name: ColTokens, Type: arrow.ListOf(i32)}, nil), "", "", ""},
		{"tokens of int64", fxSchemaWith(ColTokens, &arrow.Field{Name: ColTokens, Type: arrow.LargeListOf(i64)}, nil), "", "", ""},
		{"tokens as list_view", fxSchemaWith(ColTokens, &arrow.Field{Name: ColTokens, Type: arrow.ListViewOf(i64)}, nil), "", "", ""},
		{"logprobs of float64", fxSchemaWith(ColLogProbs, &arrow.Field{Name: ColLogProbs, Type: arrow.ListOf(arrow.PrimitiveTypes.Float64)}, nil), "", "", ""},
		{"rollout_id as large_utf8", fxSchemaWith(ColRolloutID, &arrow.Field{Name: ColRolloutID, Type: arrow.BinaryTypes.LargeString}, nil), "", "", ""},
		{"rollout_id as utf8_view", fxSchemaWith(ColRolloutID, &arrow.Field{Name: ColRolloutID, Type: arrow.BinaryTypes.StringView}, nil), "", "", ""},
		{"rollout_id as dictionary", fxSchemaWith(ColRolloutID, &arrow.Field{Name: ColRolloutID, Type: &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int8, ValueType: arrow.BinaryTypes.LargeString}}, nil), "", "", ""},
		{"reward as float64", fxSchemaWith(ColReward, &arrow.Field{Name: ColReward, Type: arrow.PrimitiveTypes.Float64}, nil), "", "", ""},
		{"policy_version as uint32", fxSchemaWith(ColPolicyVersion, &arrow.Field{Name: ColPolicyVersion, Type: arrow.PrimitiveTypes.Uint32}, nil), "", "", ""},
		{"segments as large_list", fxSchemaWith(ColSegments, &arrow.Field{Name: ColSegments, Type: arrow.LargeListOf(segmentType)}, nil), "", "", ""},
		{"segment status int32", fxSchemaWith(ColSegments, segWith(segFields[0], segFields[1], segFields[2], segFields[3], arrow.Field{Name: SegStatus, Type: i32}, segFields[5]), nil), "", "", ""},
		{"tokens of float32", fxSchemaWith(ColTokens, &arrow.Field{Name: ColTokens, Type: arrow.LargeListOf(arrow.PrimitiveTypes.Float32)}, nil), EColumnType, ColTokens,
			"column tokens: expected large_list<int32> (or list, large_list, list_view or large_list_view of int32 or int64), found large_list<float32>"},
		{"tokens of int16", fxSchemaWith(ColTokens, &arrow.Field{Name: ColTokens, Type: arrow.ListOf(arrow.PrimitiveTypes.Int16)}, nil), EColumnType, ColTokens, "found list<int16>"},
		{"tokens as a string", fxSchemaWith(ColTokens, &arrow.Field{Name: ColTokens, Type: str}, nil), EColumnType, ColTokens, "found utf8"},
		{"logprobs of int32", fxSchemaWith(ColLogProbs, &arrow.Field{Name: ColLogProbs, Type: arrow.LargeListOf(i32)}, nil), EColumnType, ColLogProbs, "found large_list<int32>"},
		{"rollout_id as binary", fxSchemaWith(ColRolloutID, &arrow.Field{Name: ColRolloutID, Type: arrow.BinaryTypes.Binary}, nil), EColumnType, ColRolloutID,
			"expected utf8 (or utf8, large_utf8, utf8_view or a dictionary of these), found binary"},
		{"rollout_id as dictionary of ints", fxSchemaWith(ColRolloutID, &arrow.Field{Name: ColRolloutID, Type: &arrow.DictionaryType{IndexType: i32, ValueType: i64}}, nil), EColumnType, ColRolloutID, "found dictionary<int32, int64>"},
		{"reward as a string", fxSchemaWith(ColReward, &arrow.Field{Name: ColReward, Type: str}, nil), EColumnType, ColReward, "expected float32 (or float32 or float64), found utf8"},
		{"policy_version as uint64", fxSchemaWith(ColPolicyVersion, &arrow.Field{Name: ColPolicyVersion, Type: arrow.PrimitiveTypes.Uint64}, nil), EColumnType, ColPolicyVersion, "found uint64"},
		{"policy_version as float", fxSchemaWith(ColPolicyVersion, &arrow.Field{Name: ColPolicyVersion, Type: arrow.PrimitiveTypes.Float64}, nil), EColumnType, ColPolicyVersion, "found float64"},
		{"feedback as uint8", fxSchemaWith(ColFeedback, &arrow.Field{Name: ColFeedback, Type: arrow.PrimitiveTypes.Uint8}, nil), EColumnType, ColFeedback, "found uint8"},
		{"segments not a list", fxSchemaWith(ColSegments, &arrow.Field{Name: ColSegments, Type: str}, nil), EColumnType, ColSegments, "found utf8"},
		{"segments of ints", fxSchemaWith(ColSegments, &arrow.Field{Name: ColSegments, Type: arrow.ListOf(i32)}, nil), EColumnType, ColSegments, "found list<int32>"},
		{"segment without kind", fxSchemaWith(ColSegments, segWith(segFields[0], segFields[1], segFields[3], segFields[4], segFields[5]), nil), EMissingColumn, "segments.kind", "no field kind"},
		{"segment status float", fxSchemaWith(ColSegments, segWith(segFields[0], segFields[1], segFields[2], segFields[3], arrow.Field{Name: SegStatus, Type: arrow.PrimitiveTypes.Float32}, segFields[5]), nil), EColumnType, "segments.status",
			"expected int8 (or int8, int16, int32 or int64), found float32"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := CheckSchema(tt.schema)
			if tt.code == "" {
				require.Nil(t, p)
				return
			}
			require.NotNil(t, p)
			require.Equal(t, tt.code, p.Code, p.Error())
			require.Equal(t, tt.column, p.Column)
			require.Equal(t, -1, p.Row)
			require.Contains(t, p.Reason, tt.reason)
		})
	}
}

// TestReaderSchemaProblems writes files whose schema is wrong and checks that
// OpenReader quarantines them, in both formats.
func TestReaderSchemaProblems(t *testing.T) {
	mem := memory.DefaultAllocator
	rs := []*Rollout{fxRollout("a", 8), fxRollout("b", 12)}
	base := fxRecord(t, rs)

	floatToks := array.NewListBuilder(mem, arrow.PrimitiveTypes.Float32)
	strToks := array.NewStringBuilder(mem)
	for _, r := range rs {
		floatToks.Append(true)
		strToks.Append(fmt.Sprint(r.Tokens))
		for _, tok := range r.Tokens {
			floatToks.ValueBuilder().(*array.Float32Builder).Append(float32(tok))
		}
	}
	drop := func(name string) arrow.RecordBatch {
		i := base.Schema().FieldIndices(name)[0]
		fields := append(append([]arrow.Field(nil), base.Schema().Fields()[:i]...), base.Schema().Fields()[i+1:]...)
		cols := append(append([]arrow.Array(nil), base.Columns()[:i]...), base.Columns()[i+1:]...)
		md := base.Schema().Metadata()
		return array.NewRecordBatch(arrow.NewSchema(fields, &md), cols, base.NumRows())
	}
	withMD := func(md arrow.Metadata) arrow.RecordBatch {
		return array.NewRecordBatch(arrow.NewSchema(base.Schema().Fields(), &md), base.Columns(), base.NumRows())
	}
	tests := []struct {
		name   string
		rec    arrow.RecordBatch
		code   Code
		column string
	}{
		{"missing tokens", drop(ColTokens), EMissingColumn, ColTokens},
		{"missing segments", drop(ColSegments), EMissingColumn, ColSegments},
		{"tokens as list<float32>", fxReplace(t, base, ColTokens, floatToks.NewArray()), EColumnType, ColTokens},
		{"tokens as utf8", fxReplace(t, base, ColTokens, strToks.NewArray()), EColumnType, ColTokens},
		{"schema version 2", withMD(arrow.NewMetadata([]string{SchemaVersionKey}, []string{"2"})), ESchemaVersion, ""},
	}
	for _, format := range formats {
		for _, tt := range tests {
			t.Run(format.String()+"/"+tt.name, func(t *testing.T) {
				path := fxWriteRecords(t, format, tt.rec.Schema(), tt.rec)
				_, err := OpenReader(path, ReadOptions{})
				p := fxProblem(t, err, tt.code)
				require.Equal(t, path, p.File)
				require.Equal(t, tt.column, p.Column)
			})
		}
	}
}

// TestReaderSchemaTolerated reads files whose columns come in another order, with an
// extra column, reordered segment fields and no metadata: the rollouts come out the same.
func TestReaderSchemaTolerated(t *testing.T) {
	rs := []*Rollout{fxRollout("a", 8), fxRollout("b", 12), {ID: "c", Tokens: []int32{5}}}
	base := fxRecord(t, rs)
	s := base.Schema()

	// Segments with the struct fields in reverse order.
	segs := base.Column(s.FieldIndices(ColSegments)[0]).(*array.List)
	st := segs.ListValues().(*array.Struct)
	var children []arrow.Array
	var names []string
	for i := st.NumField() - 1; i >= 0; i-- {
		children = append(children, st.Field(i))
		names = append(names, segmentType.Field(i).Name)
	}
	rst, err := array.NewStructArray(children, names)
	require.NoError(t, err)
	ld := array.NewData(arrow.ListOf(rst.DataType()), segs.Len(), segs.Data().Buffers(), []arrow.ArrayData{rst.Data()}, segs.NullN(), segs.Data().Offset())
	revSegs := array.NewListData(ld)

	note := array.NewStringBuilder(memory.DefaultAllocator)
	note.AppendValues([]string{"x", "y", "z"}, nil)

	var fields []arrow.Field
	var cols []arrow.Array
	for i := s.NumFields() - 1; i >= 0; i-- {
		f, c := s.Field(i), base.Column(i)
		if f.Name == ColSegments {
			f.Type, c = revSegs.DataType(), revSegs
		}
		fields, cols = append(fields, f), append(cols, c)
		if i == 4 {
			fields = append(fields, arrow.Field{Name: "note", Type: arrow.BinaryTypes.String, Nullable: true})
			cols = append(cols, note.NewArray())
		}
	}
	rec := array.NewRecordBatch(arrow.NewSchema(fields, nil), cols, base.NumRows())
	for _, format := range formats {
		t.Run(format.String(), func(t *testing.T) {
			path := fxWriteRecords(t, format, rec.Schema(), rec)
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
