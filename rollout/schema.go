package rollout

import (
	"fmt"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
)

// Names of the fields of the segments struct, exactly as docs/design.md writes them.
const (
	SegStart    = "start"
	SegEnd      = "end"
	SegKind     = "kind"
	SegTool     = "tool"
	SegStatus   = "status"
	SegFeedback = "feedback"
)

// segmentType is the element type of the segments column.
var segmentType = arrow.StructOf(
	arrow.Field{Name: SegStart, Type: arrow.PrimitiveTypes.Int32, Nullable: true},
	arrow.Field{Name: SegEnd, Type: arrow.PrimitiveTypes.Int32, Nullable: true},
	arrow.Field{Name: SegKind, Type: arrow.BinaryTypes.String, Nullable: true},
	arrow.Field{Name: SegTool, Type: arrow.BinaryTypes.String, Nullable: true},
	arrow.Field{Name: SegStatus, Type: arrow.PrimitiveTypes.Int8, Nullable: true},
	arrow.Field{Name: SegFeedback, Type: arrow.BinaryTypes.String, Nullable: true},
)

// schemaFields lists the columns of Schema in their canonical order.
var schemaFields = []arrow.Field{
	{Name: ColRolloutID, Type: arrow.BinaryTypes.String, Nullable: false},
	{Name: ColTaskID, Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: ColPolicyVersion, Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	{Name: ColTokenizer, Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: ColTokens, Type: arrow.LargeListOf(arrow.PrimitiveTypes.Int32), Nullable: true},
	{Name: ColLogProbs, Type: arrow.LargeListOf(arrow.PrimitiveTypes.Float32), Nullable: true},
	{Name: ColSegments, Type: arrow.ListOf(segmentType), Nullable: true},
	{Name: ColReward, Type: arrow.PrimitiveTypes.Float32, Nullable: true},
	{Name: ColFeedback, Type: arrow.PrimitiveTypes.Int8, Nullable: true},
	{Name: ColTemperature, Type: arrow.PrimitiveTypes.Float32, Nullable: true}, // optional
}

// Schema returns the canonical schema of a rollout file (docs/design.md, "Rollout file"),
// with hindsight.schema_version = SchemaVersion in its metadata. The writer writes
// exactly this schema; the reader accepts any schema that CheckSchema accepts.
func Schema() *arrow.Schema {
	md := arrow.NewMetadata([]string{SchemaVersionKey}, []string{SchemaVersion})
	return arrow.NewSchema(schemaFields, &md)
}

// columns holds the index in a file's schema of each required column, and the index in
// the segments struct of each of its fields.
type columns struct {
	id, task, policy, tokenizer, tokens, logprobs, segments, reward, feedback int
	temperature                                                               int // −1: the file has no temperature column (optional)
	// segStart … segFeedback index the children of the segments struct.
	segStart, segEnd, segKind, segTool, segStatus, segFeedback int
}

// CheckSchema checks that a file's schema can be read as a rollout file: every column
// of Schema but the optional temperature is present (looked up by name, in any
// order), each present column has a type that carries its meaning (below), extra
// columns are ignored, and the schema version is SchemaVersion
// (missing means "1"). It returns the first problem found, with Row −1 and File empty,
// or nil.
//
// Besides Schema's own types, each column accepts the equivalent types other Arrow
// writers produce (pyarrow's defaults, polars, DuckDB, apache-arrow JS), converted
// once per batch by the reader (reader_batch.go):
//
//   - strings: utf8, large_utf8, utf8_view, or a dictionary of one of these;
//   - tokens: list, large_list, list_view or large_list_view of int32 or int64;
//   - logprobs: the same lists of float32 or float64;
//   - reward and temperature: float32 or float64;
//   - policy_version: any integer type but uint64 (which int64 cannot hold);
//   - feedback and the segment ints start, end, status: int8, int16, int32 or int64;
//   - segments: one of the lists above of a struct whose fields are found by name.
//
// The nullability flags and the names of list element fields are not checked.
func CheckSchema(s *arrow.Schema) *Problem {
	_, p := checkSchema(s)
	return p
}

// typeClass is a family of Arrow types that can carry one column's meaning.
type typeClass int

const (
	classString    typeClass = iota // utf8, large_utf8, utf8_view, dictionary of these
	classAnyInt                     // int8…int64, uint8…uint32
	classSignedInt                  // int8…int64
	classFloat                      // float32, float64
	classTokens                     // a list of int32 or int64
	classLogProbs                   // a list of float32 or float64
)

// accepted lists the types of a class, for E_COLUMN_TYPE reasons and docs/rollouts.md.
var accepted = map[typeClass]string{
	classString:    "utf8, large_utf8, utf8_view or a dictionary of these",
	classAnyInt:    "an integer type other than uint64",
	classSignedInt: "int8, int16, int32 or int64",
	classFloat:     "float32 or float64",
	classTokens:    "list, large_list, list_view or large_list_view of int32 or int64",
	classLogProbs:  "list, large_list, list_view or large_list_view of float32 or float64",
}

// columnClass is the class of each column but segments, and of the segment fields
// (as segments.start, …).
var columnClass = map[string]typeClass{
	ColRolloutID: classString, ColTaskID: classString, ColPolicyVersion: classAnyInt,
	ColTokenizer: classString, ColTokens: classTokens, ColLogProbs: classLogProbs,
	ColReward: classFloat, ColFeedback: classSignedInt, ColTemperature: classFloat,
	"segments.start": classSignedInt, "segments.end": classSignedInt, "segments.kind": classString,
	"segments.tool": classString, "segments.status": classSignedInt, "segments.feedback": classString,
}

// accepts reports whether t belongs to class c.
func (c typeClass) accepts(t arrow.DataType) bool {
	switch c {
	case classString:
		if d, ok := t.(*arrow.DictionaryType); ok {
			t = d.ValueType
		}
		switch t.ID() {
		case arrow.STRING, arrow.LARGE_STRING, arrow.STRING_VIEW:
			return true
		}
	case classAnyInt:
		switch t.ID() {
		case arrow.UINT8, arrow.UINT16, arrow.UINT32:
			return true
		}
		return classSignedInt.accepts(t)
	case classSignedInt:
		switch t.ID() {
		case arrow.INT8, arrow.INT16, arrow.INT32, arrow.INT64:
			return true
		}
	case classFloat:
		return t.ID() == arrow.FLOAT32 || t.ID() == arrow.FLOAT64
	case classTokens:
		elem := listElem(t)
		return elem != nil && (elem.ID() == arrow.INT32 || elem.ID() == arrow.INT64)
	case classLogProbs:
		elem := listElem(t)
		return elem != nil && classFloat.accepts(elem)
	}
	return false
}

// listElem returns the element type of a list, large_list, list_view or
// large_list_view, or nil for any other type.
func listElem(t arrow.DataType) arrow.DataType {
	switch t := t.(type) {
	case *arrow.ListType:
		return t.Elem()
	case *arrow.LargeListType:
		return t.Elem()
	case *arrow.ListViewType:
		return t.Elem()
	case *arrow.LargeListViewType:
		return t.Elem()
	}
	return nil
}

// checkSchema is CheckSchema that also returns where each column is.
func checkSchema(s *arrow.Schema) (columns, *Problem) {
	var c columns
	if v, ok := s.Metadata().GetValue(SchemaVersionKey); ok && v != SchemaVersion {
		return c, &Problem{Code: ESchemaVersion, Row: -1,
			Reason: fmt.Sprintf("schema metadata %s is %q, this reader reads %q", SchemaVersionKey, v, SchemaVersion)}
	}
	want := []struct {
		idx *int
		f   arrow.Field
	}{
		{&c.id, schemaFields[0]}, {&c.task, schemaFields[1]}, {&c.policy, schemaFields[2]},
		{&c.tokenizer, schemaFields[3]}, {&c.tokens, schemaFields[4]}, {&c.logprobs, schemaFields[5]},
		{&c.segments, schemaFields[6]}, {&c.reward, schemaFields[7]}, {&c.feedback, schemaFields[8]},
	}
	for _, w := range want {
		idx := s.FieldIndices(w.f.Name)
		if len(idx) == 0 {
			return c, &Problem{Code: EMissingColumn, Row: -1, Column: w.f.Name,
				Reason: fmt.Sprintf("column %s (%s) is missing", w.f.Name, typeString(w.f.Type))}
		}
		*w.idx = idx[0]
		got := s.Field(idx[0]).Type
		if w.f.Name == ColSegments {
			if p := checkSegmentsType(&c, got); p != nil {
				return c, p
			}
			continue
		}
		if cl := columnClass[w.f.Name]; !cl.accepts(got) {
			return c, typeProblem(w.f.Name, w.f.Type, cl, got)
		}
	}
	c.temperature = -1
	if idx := s.FieldIndices(ColTemperature); len(idx) > 0 {
		c.temperature = idx[0]
		if got := s.Field(idx[0]).Type; !classFloat.accepts(got) {
			return c, typeProblem(ColTemperature, schemaFields[9].Type, classFloat, got)
		}
	}
	return c, nil
}

// segmentsAccepted describes the accepted types of the segments column.
const segmentsAccepted = "list, large_list, list_view or large_list_view of a struct with these fields"

// checkSegmentsType checks a list of struct{…}, finding the struct's fields by name.
func checkSegmentsType(c *columns, got arrow.DataType) *Problem {
	want := schemaFields[6].Type
	st, ok := listElem(got).(*arrow.StructType)
	if !ok {
		return &Problem{Code: EColumnType, Row: -1, Column: ColSegments,
			Reason: fmt.Sprintf("column %s: expected %s (or %s), found %s", ColSegments, typeString(want), segmentsAccepted, typeString(got))}
	}
	fields := []struct {
		idx *int
		f   arrow.Field
	}{
		{&c.segStart, segmentType.Field(0)}, {&c.segEnd, segmentType.Field(1)},
		{&c.segKind, segmentType.Field(2)}, {&c.segTool, segmentType.Field(3)},
		{&c.segStatus, segmentType.Field(4)}, {&c.segFeedback, segmentType.Field(5)},
	}
	for _, w := range fields {
		name := ColSegments + "." + w.f.Name
		i, ok := st.FieldIdx(w.f.Name)
		if !ok {
			return &Problem{Code: EMissingColumn, Row: -1, Column: name,
				Reason: fmt.Sprintf("segments struct has no field %s (%s); found %s", w.f.Name, typeString(w.f.Type), typeString(got))}
		}
		*w.idx = i
		if ft := st.Field(i).Type; !columnClass[name].accepts(ft) {
			return typeProblem(name, w.f.Type, columnClass[name], ft)
		}
	}
	return nil
}

func typeProblem(col string, want arrow.DataType, cl typeClass, got arrow.DataType) *Problem {
	return &Problem{Code: EColumnType, Row: -1, Column: col,
		Reason: fmt.Sprintf("column %s: expected %s (or %s), found %s", col, typeString(want), accepted[cl], typeString(got))}
}

// typeString writes a type the way docs/design.md does: large_list<int32>,
// list<struct{start int32, …}>, dictionary<int32, utf8>.
func typeString(t arrow.DataType) string {
	switch t := t.(type) {
	case *arrow.LargeListType:
		return "large_list<" + typeString(t.Elem()) + ">"
	case *arrow.ListType:
		return "list<" + typeString(t.Elem()) + ">"
	case *arrow.ListViewType:
		return "list_view<" + typeString(t.Elem()) + ">"
	case *arrow.LargeListViewType:
		return "large_list_view<" + typeString(t.Elem()) + ">"
	case *arrow.DictionaryType:
		return "dictionary<" + typeString(t.IndexType) + ", " + typeString(t.ValueType) + ">"
	case *arrow.StructType:
		var b strings.Builder
		b.WriteString("struct{")
		for i, f := range t.Fields() {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(f.Name + " " + typeString(f.Type))
		}
		b.WriteString("}")
		return b.String()
	case nil:
		return "null"
	}
	switch t.ID() {
	case arrow.STRING_VIEW:
		return "utf8_view"
	case arrow.NULL:
		return "null"
	}
	return t.String()
}
