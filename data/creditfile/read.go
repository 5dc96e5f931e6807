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

// Read reads every row of a credit output file of schema version 1, 2, 3 or 4.
// Rows of a version 1 file have nil v2 fields; hints of a version 1 or 2 file have
// zero v3 fields; rows of a file before version 4 have Temperature 1 (the trainer
// scored every rollout at 1 then).
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
	v, err := creditFileVersion(r.Schema())
	if err != nil {
		return nil, fmt.Errorf("read credit %s: %w", path, err)
	}
	var rows []Row
	for i := 0; i < r.NumRecords(); i++ {
		rec, err := r.RecordBatch(i)
		if err != nil {
			return nil, fmt.Errorf("read credit %s: %w", path, err)
		}
		rows = append(rows, creditRows(rec, v)...)
	}
	return rows, nil
}

// creditFileVersion checks schema against the credit schema of the version its
// metadata names and returns that version (1 … 4).
func creditFileVersion(schema *arrow.Schema) (int, error) {
	v := ""
	if i := schema.Metadata().FindKey(creditVersionKey); i >= 0 {
		v = schema.Metadata().Values()[i]
	}
	var want *arrow.Schema
	n := 0
	switch v {
	case "1":
		want, n = creditSchemaV1(), 1
	case "2":
		want, n = creditSchemaV2(), 2
	case "3":
		want, n = creditSchemaV3(), 3
	case SchemaVersion:
		want, n = Schema(), 4
	default:
		return 0, fmt.Errorf("credit schema version %q (metadata %s): this build reads 1, 2, 3 and %s", v, creditVersionKey, SchemaVersion)
	}
	if !schema.Equal(want) {
		return 0, fmt.Errorf("schema %s is not the credit schema version %s", schema, v)
	}
	return n, nil
}

func creditRows(rec arrow.RecordBatch, version int) []Row {
	v2 := version >= 2
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
	var temp *array.Float32
	if version >= 4 {
		temp = c(19).(*array.Float32)
	}
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
		r.Temperature = 1
		if temp != nil {
			r.Temperature = temp.Value(i)
		}
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
			if version >= 3 {
				readHintV3(hs, j, &r.Hints[len(r.Hints)-1])
			}
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

// readHintV3 reads the v3 fields of hint j of the hint struct array hs into h.
func readHintV3(hs *array.Struct, j int, h *Hint) {
	str := func(k int) string {
		a := hs.Field(k).(*array.String)
		if a.IsNull(j) {
			return ""
		}
		return a.Value(j)
	}
	h.Context, h.LossMode, h.Divergence = str(7), str(8), str(9)
	if a := hs.Field(10).(*array.Float32); a.IsValid(j) {
		h.JSDAlpha = a.Value(j)
	}
	if tl := hs.Field(11).(*array.List); tl.IsValid(j) {
		a, b := tl.ValueOffsets(j)
		v := tl.ListValues().(*array.Float32)
		h.TeacherLogProbs = make([]float32, 0, b-a)
		for x := a; x < b; x++ {
			if v.IsNull(int(x)) {
				h.TeacherLogProbs = append(h.TeacherLogProbs, float32(math.NaN()))
			} else {
				h.TeacherLogProbs = append(h.TeacherLogProbs, v.Value(int(x)))
			}
		}
	}
	ids, lps := hs.Field(12).(*array.List), hs.Field(13).(*array.List)
	if ids.IsNull(j) {
		return
	}
	rowsOf := func(l *array.List) (*array.List, int64, int64) {
		a, b := l.ValueOffsets(j)
		return l.ListValues().(*array.List), a, b
	}
	il, a, b := rowsOf(ids)
	ll, la, _ := rowsOf(lps)
	h.TopIDs, h.TopLogProbs = make([][]int32, 0, b-a), make([][]float32, 0, b-a)
	for r := a; r < b; r++ {
		x, y := il.ValueOffsets(int(r))
		h.TopIDs = append(h.TopIDs, append([]int32{}, il.ListValues().(*array.Int32).Int32Values()[x:y]...))
		x, y = ll.ValueOffsets(int(la + r - a))
		h.TopLogProbs = append(h.TopLogProbs, append([]float32{}, ll.ListValues().(*array.Float32).Float32Values()[x:y]...))
	}
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
