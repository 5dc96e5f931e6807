package creditfile

import (
	"fmt"
	"math"
	"os"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Read reads every row of a credit output file of schema version 1 or 2.
// Rows of a version 1 file have nil v2 fields.
func Read(path string) ([]Row, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read credit %s: %w", path, err)
	}
	defer f.Close()
	r, err := ipc.NewFileReader(f, ipc.WithAllocator(memory.DefaultAllocator))
	if err != nil {
		return nil, fmt.Errorf("read credit %s: %w", path, err)
	}
	defer r.Close()
	v2, err := creditFileVersion(r.Schema())
	if err != nil {
		return nil, fmt.Errorf("read credit %s: %w", path, err)
	}
	var rows []Row
	for i := 0; i < r.NumRecords(); i++ {
		rec, err := r.RecordBatch(i)
		if err != nil {
			return nil, fmt.Errorf("read credit %s: %w", path, err)
		}
		rows = append(rows, creditRows(rec, v2)...)
	}
	return rows, nil
}

// creditFileVersion checks schema against the credit schema of the version its
// metadata names; v2 is true for version 2.
func creditFileVersion(schema *arrow.Schema) (v2 bool, err error) {
	v := ""
	if i := schema.Metadata().FindKey(creditVersionKey); i >= 0 {
		v = schema.Metadata().Values()[i]
	}
	var want *arrow.Schema
	switch v {
	case "1":
		want = creditSchemaV1()
	case SchemaVersion:
		want, v2 = Schema(), true
	default:
		return false, fmt.Errorf("credit schema version %q (metadata %s): this build reads 1 and %s", v, creditVersionKey, SchemaVersion)
	}
	if !schema.Equal(want) {
		return false, fmt.Errorf("schema %s is not the credit schema version %s", schema, v)
	}
	return v2, nil
}

func creditRows(rec arrow.RecordBatch, v2 bool) []Row {
	c := rec.Column
	id := c(0).(*array.String)
	task := c(1).(*array.String)
	tok := c(2).(*array.LargeList)
	step := c(3).(*array.Int64)
	pol := c(4).(*array.Int64)
	tv := c(5).(*array.Int64)
	rew := c(6).(*array.Float32)
	aout := c(7).(*array.Float32)
	mask := c(8).(*array.LargeList)
	stu := c(9).(*array.LargeList)
	tea := c(10).(*array.LargeList)
	adv := c(11).(*array.LargeList)
	hints := c(12).(*array.List)
	hs := hints.ListValues().(*array.Struct)
	i32s := func(l *array.LargeList, i int) []int32 {
		a, b := l.ValueOffsets(i)
		return append([]int32(nil), l.ListValues().(*array.Int32).Int32Values()[a:b]...)
	}
	f32s := func(l *array.LargeList, i int, nulls bool) []float32 {
		if l.IsNull(i) {
			return nil
		}
		a, b := l.ValueOffsets(i)
		v := l.ListValues().(*array.Float32)
		out := make([]float32, 0, b-a)
		for j := a; j < b; j++ {
			if nulls && v.IsNull(int(j)) {
				out = append(out, float32(math.NaN()))
			} else {
				out = append(out, v.Value(int(j)))
			}
		}
		return out
	}
	var perToken [4]*array.LargeList
	var segs *array.List
	var tokz *array.String
	if v2 {
		for k := range perToken {
			perToken[k] = c(13 + k).(*array.LargeList)
		}
		segs, tokz = c(17).(*array.List), c(18).(*array.String)
	}
	rows := make([]Row, rec.NumRows())
	for i := range rows {
		r := &rows[i]
		r.RolloutID = id.Value(i)
		if task.IsValid(i) {
			r.TaskID = task.Value(i)
		}
		r.Tokens = i32s(tok, i)
		r.Step, r.PolicyVersion, r.TeacherVersion = step.Value(i), pol.Value(i), tv.Value(i)
		if rew.IsValid(i) {
			r.Reward, r.HasReward = rew.Value(i), true
		}
		r.OutcomeAdv = aout.Value(i)
		a, b := mask.ValueOffsets(i)
		mv := mask.ListValues().(*array.Boolean)
		for j := a; j < b; j++ {
			r.LossMask = append(r.LossMask, mv.Value(int(j)))
		}
		r.Student = f32s(stu, i, false)
		r.Teacher = f32s(tea, i, true)
		r.Advantages = f32s(adv, i, false)
		ha, hb := hints.ValueOffsets(i)
		for j := int(ha); j < int(hb); j++ {
			tl := hs.Field(6).(*array.List)
			ta, tb := tl.ValueOffsets(j)
			r.Hints = append(r.Hints, Hint{
				Segment:  hs.Field(0).(*array.Int32).Value(j),
				InsertAt: hs.Field(1).(*array.Int32).Value(j),
				End:      hs.Field(2).(*array.Int32).Value(j),
				Source:   hs.Field(3).(*array.String).Value(j),
				Reason:   hs.Field(4).(*array.String).Value(j),
				Text:     hs.Field(5).(*array.String).Value(j),
				Tokens:   append([]int32(nil), tl.ListValues().(*array.Int32).Int32Values()[ta:tb]...),
			})
		}
		if v2 {
			r.Base, r.Delta, r.Rho, r.Sampler = f32s(perToken[0], i, true), f32s(perToken[1], i, true),
				f32s(perToken[2], i, true), f32s(perToken[3], i, true)
			r.Segments = creditSegments(segs, i)
			if tokz.IsValid(i) {
				r.Tokenizer = tokz.Value(i)
			}
		}
	}
	return rows
}

// creditSegments returns row i of the segments column; nil when null.
func creditSegments(l *array.List, i int) []Segment {
	if l.IsNull(i) {
		return nil
	}
	st := l.ListValues().(*array.Struct)
	str := func(k, j int) string {
		a := st.Field(k).(*array.String)
		if a.IsNull(j) {
			return ""
		}
		return a.Value(j)
	}
	a, b := l.ValueOffsets(i)
	out := make([]Segment, 0, b-a)
	for j := int(a); j < int(b); j++ {
		out = append(out, Segment{Start: st.Field(0).(*array.Int32).Value(j), End: st.Field(1).(*array.Int32).Value(j),
			Kind: str(2, j), Tool: str(3, j), Status: str(4, j)})
	}
	return out
}
