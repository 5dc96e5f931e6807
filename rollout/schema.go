package rollout

import (
	"fmt"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
)

// Names of the fields of the segments struct, exactly as DESIGN.md writes them.
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
}

// Schema returns the canonical schema of a rollout file (DESIGN.md, "Rollout file"),
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
	// segStart … segFeedback index the children of the segments struct.
	segStart, segEnd, segKind, segTool, segStatus, segFeedback int
}

// CheckSchema checks that a file's schema can be read as a rollout file: every column
// of Schema is present (looked up by name, in any order) with its type, extra columns
// are ignored, and the schema version is SchemaVersion (missing means "1"). It returns
// the first problem found, with Row −1 and File empty, or nil.
//
// Types must match exactly (utf8 is not large_utf8, large_list is not list); the
// nullability flags and the names of list element fields are not checked.
func CheckSchema(s *arrow.Schema) *Problem {
	_, p := checkSchema(s)
	return p
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
		if !sameType(w.f.Type, got) {
			return c, typeProblem(w.f.Name, w.f.Type, got)
		}
	}
	return c, nil
}

// checkSegmentsType checks list<struct{…}>, finding the struct's fields by name.
func checkSegmentsType(c *columns, got arrow.DataType) *Problem {
	want := schemaFields[6].Type
	lt, ok := got.(*arrow.ListType)
	if !ok {
		return typeProblem(ColSegments, want, got)
	}
	st, ok := lt.Elem().(*arrow.StructType)
	if !ok {
		return typeProblem(ColSegments, want, got)
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
		if ft := st.Field(i).Type; !arrow.TypeEqual(w.f.Type, ft) {
			return typeProblem(name, w.f.Type, ft)
		}
	}
	return nil
}

func typeProblem(col string, want, got arrow.DataType) *Problem {
	return &Problem{Code: EColumnType, Row: -1, Column: col,
		Reason: fmt.Sprintf("column %s: expected %s, found %s", col, typeString(want), typeString(got))}
}

// sameType compares types ignoring field names and nullability inside lists.
func sameType(want, got arrow.DataType) bool {
	switch w := want.(type) {
	case *arrow.LargeListType:
		g, ok := got.(*arrow.LargeListType)
		return ok && arrow.TypeEqual(w.Elem(), g.Elem())
	case *arrow.ListType:
		g, ok := got.(*arrow.ListType)
		return ok && sameType(w.Elem(), g.Elem())
	default:
		return arrow.TypeEqual(want, got)
	}
}

// typeString writes a type the way DESIGN.md does: large_list<int32>,
// list<struct{start int32, …}>.
func typeString(t arrow.DataType) string {
	switch t := t.(type) {
	case *arrow.LargeListType:
		return "large_list<" + typeString(t.Elem()) + ">"
	case *arrow.ListType:
		return "list<" + typeString(t.Elem()) + ">"
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
	default:
		return t.String()
	}
}
