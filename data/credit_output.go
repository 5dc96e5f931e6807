package data

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/hindsight-ai/hindsight/internal/fsutil"
)

// Credit output files (`<output_dir>/<claimed>.credit.arrow`, Arrow IPC file format)
// hold one row per trained rollout of one input file: what the trainer saw and the
// per-token credit it applied, for audit and for other trainers. The schema is
// CreditSchema; every per-token list has one entry per rollout token.

// Column names of a credit output file.
const (
	CreditColRolloutID      = "rollout_id"
	CreditColTaskID         = "task_id"
	CreditColTokens         = "tokens"
	CreditColStep           = "step"
	CreditColPolicyVersion  = "policy_version"
	CreditColTeacherVersion = "teacher_version"
	CreditColReward         = "reward"
	CreditColOutcomeAdv     = "outcome_advantage"
	CreditColLossMask       = "loss_mask"
	CreditColStudent        = "student_logprobs"
	CreditColTeacher        = "teacher_logprobs"
	CreditColAdvantages     = "advantages"
	CreditColHints          = "hints"
)

// CreditSchemaVersion is the value of the schema metadata key
// hindsight.credit_schema_version.
const CreditSchemaVersion = "1"

// CreditSuffix ends the name of every credit output file.
const CreditSuffix = ".credit.arrow"

var creditHintType = arrow.StructOf(
	arrow.Field{Name: "segment", Type: arrow.PrimitiveTypes.Int32},
	arrow.Field{Name: "insert_at", Type: arrow.PrimitiveTypes.Int32},
	arrow.Field{Name: "end", Type: arrow.PrimitiveTypes.Int32},
	arrow.Field{Name: "source", Type: arrow.BinaryTypes.String},
	arrow.Field{Name: "reason", Type: arrow.BinaryTypes.String},
	arrow.Field{Name: "text", Type: arrow.BinaryTypes.String},
	arrow.Field{Name: "tokens", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32)},
)

// CreditSchema returns the schema of credit output files.
func CreditSchema() *arrow.Schema {
	md := arrow.NewMetadata([]string{"hindsight.credit_schema_version"}, []string{CreditSchemaVersion})
	return arrow.NewSchema([]arrow.Field{
		{Name: CreditColRolloutID, Type: arrow.BinaryTypes.String},
		{Name: CreditColTaskID, Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: CreditColTokens, Type: arrow.LargeListOf(arrow.PrimitiveTypes.Int32)},
		{Name: CreditColStep, Type: arrow.PrimitiveTypes.Int64},
		{Name: CreditColPolicyVersion, Type: arrow.PrimitiveTypes.Int64},
		{Name: CreditColTeacherVersion, Type: arrow.PrimitiveTypes.Int64},
		{Name: CreditColReward, Type: arrow.PrimitiveTypes.Float32, Nullable: true},
		{Name: CreditColOutcomeAdv, Type: arrow.PrimitiveTypes.Float32},
		{Name: CreditColLossMask, Type: arrow.LargeListOf(arrow.FixedWidthTypes.Boolean)},
		{Name: CreditColStudent, Type: arrow.LargeListOf(arrow.PrimitiveTypes.Float32)},
		{Name: CreditColTeacher, Type: arrow.LargeListOf(arrow.PrimitiveTypes.Float32)},
		{Name: CreditColAdvantages, Type: arrow.LargeListOf(arrow.PrimitiveTypes.Float32)},
		{Name: CreditColHints, Type: arrow.ListOf(creditHintType)},
	}, &md)
}

// CreditHint is one hint that was trained on.
type CreditHint struct {
	Segment  int32  // index of the target segment in the rollout's segments
	InsertAt int32  // token position the hint was inserted at
	End      int32  // exclusive end of the re-scored range
	Source   string // teacher that wrote it: feedback, rules, openai
	Reason   string // selection rule: feedback, negative_rating, tool_error, surprise
	Text     string
	Tokens   []int32 // the hint wrapped in the model's template, as inserted
}

// CreditRow is one trained rollout of a credit output file. Per-token slices have
// len(Tokens) entries.
type CreditRow struct {
	RolloutID      string
	TaskID         string // empty: null
	Tokens         []int32
	Step           int64 // optimizer step whose gradient holds this rollout
	PolicyVersion  int64 // checkpoint step that sampled the rollout
	TeacherVersion int64 // optimizer steps in the teacher's weights when it scored
	Reward         float32
	HasReward      bool
	OutcomeAdv     float32 // A_out (reward units)
	LossMask       []bool  // m_t: trained tokens
	Student        []float32
	// Teacher holds q_t(h) inside hinted ranges, NaN (written as null) elsewhere.
	Teacher    []float32
	Advantages []float32 // A_t; 0 where not trained
	Hints      []CreditHint
}

// WriteCredit writes rows as one Arrow IPC file to w.
func WriteCredit(w io.Writer, rows []CreditRow) error {
	schema := CreditSchema()
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	f := b.Field
	id := f(0).(*array.StringBuilder)
	task := f(1).(*array.StringBuilder)
	tok := f(2).(*array.LargeListBuilder)
	step := f(3).(*array.Int64Builder)
	pol := f(4).(*array.Int64Builder)
	tv := f(5).(*array.Int64Builder)
	rew := f(6).(*array.Float32Builder)
	aout := f(7).(*array.Float32Builder)
	mask := f(8).(*array.LargeListBuilder)
	stu := f(9).(*array.LargeListBuilder)
	tea := f(10).(*array.LargeListBuilder)
	adv := f(11).(*array.LargeListBuilder)
	hints := f(12).(*array.ListBuilder)
	hs := hints.ValueBuilder().(*array.StructBuilder)
	for i := range rows {
		r := &rows[i]
		T := len(r.Tokens)
		if len(r.LossMask) != T || len(r.Student) != T || len(r.Teacher) != T || len(r.Advantages) != T {
			return fmt.Errorf("write credit: rollout %q: %d tokens, %d mask, %d student, %d teacher, %d advantages",
				r.RolloutID, T, len(r.LossMask), len(r.Student), len(r.Teacher), len(r.Advantages))
		}
		id.Append(r.RolloutID)
		if r.TaskID == "" {
			task.AppendNull()
		} else {
			task.Append(r.TaskID)
		}
		tok.Append(true)
		tok.ValueBuilder().(*array.Int32Builder).AppendValues(r.Tokens, nil)
		step.Append(r.Step)
		pol.Append(r.PolicyVersion)
		tv.Append(r.TeacherVersion)
		if r.HasReward {
			rew.Append(r.Reward)
		} else {
			rew.AppendNull()
		}
		aout.Append(r.OutcomeAdv)
		mask.Append(true)
		mask.ValueBuilder().(*array.BooleanBuilder).AppendValues(r.LossMask, nil)
		stu.Append(true)
		stu.ValueBuilder().(*array.Float32Builder).AppendValues(r.Student, nil)
		tea.Append(true)
		tb := tea.ValueBuilder().(*array.Float32Builder)
		for _, q := range r.Teacher {
			if math.IsNaN(float64(q)) {
				tb.AppendNull()
			} else {
				tb.Append(q)
			}
		}
		adv.Append(true)
		adv.ValueBuilder().(*array.Float32Builder).AppendValues(r.Advantages, nil)
		hints.Append(true)
		for _, h := range r.Hints {
			hs.Append(true)
			hs.FieldBuilder(0).(*array.Int32Builder).Append(h.Segment)
			hs.FieldBuilder(1).(*array.Int32Builder).Append(h.InsertAt)
			hs.FieldBuilder(2).(*array.Int32Builder).Append(h.End)
			hs.FieldBuilder(3).(*array.StringBuilder).Append(h.Source)
			hs.FieldBuilder(4).(*array.StringBuilder).Append(h.Reason)
			hs.FieldBuilder(5).(*array.StringBuilder).Append(h.Text)
			lb := hs.FieldBuilder(6).(*array.ListBuilder)
			lb.Append(true)
			lb.ValueBuilder().(*array.Int32Builder).AppendValues(h.Tokens, nil)
		}
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	fw, err := ipc.NewFileWriter(w, ipc.WithSchema(schema), ipc.WithAllocator(memory.DefaultAllocator))
	if err != nil {
		return fmt.Errorf("write credit: %w", err)
	}
	if err := fw.Write(rec); err != nil {
		fw.Close()
		return fmt.Errorf("write credit: %w", err)
	}
	if err := fw.Close(); err != nil {
		return fmt.Errorf("write credit: %w", err)
	}
	return nil
}

// WriteCreditFile writes rows to path through a temp file and a rename. With sync
// false the data is not fsynced (the caller syncs it later, SyncCreditFiles); the
// rename still makes a torn file impossible to observe under path.
func WriteCreditFile(path string, rows []CreditRow, sync bool) error {
	if sync {
		return fsutil.WriteFile(path, 0o644, func(w io.Writer) error { return WriteCredit(w, rows) })
	}
	dir, base := filepath.Split(path)
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := WriteCredit(f, rows); err != nil {
		f.Close()
		os.Remove(f.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// SyncFiles fsyncs each file and then each distinct directory holding them.
func SyncFiles(paths []string) error {
	dirs := map[string]bool{}
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return fmt.Errorf("sync %s: %w", p, err)
		}
		err = f.Sync()
		f.Close()
		if err != nil {
			return fmt.Errorf("sync %s: %w", p, err)
		}
		dirs[filepath.Dir(p)] = true
	}
	for d := range dirs {
		if err := fsutil.SyncDir(d); err != nil {
			return err
		}
	}
	return nil
}

// PublishCreditFile writes rows durably to path unless path exists: it never
// replaces a published file, so a replay after a crash cannot publish twice.
// published is false when path was already there.
func PublishCreditFile(path string, rows []CreditRow) (published bool, err error) {
	dir, base := filepath.Split(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, fmt.Errorf("publish %s: %w", path, err)
	}
	if _, err := os.Stat(path); err == nil {
		return false, nil
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return false, fmt.Errorf("publish %s: %w", path, err)
	}
	tmp := f.Name()
	if err := WriteCredit(f, rows); err != nil {
		f.Close()
		os.Remove(tmp)
		return false, fmt.Errorf("publish %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(tmp)
		return false, fmt.Errorf("publish %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return false, fmt.Errorf("publish %s: %w", path, err)
	}
	if err := fsutil.RenameNoReplace(tmp, path); err != nil {
		os.Remove(tmp)
		if errors.Is(err, os.ErrExist) {
			return false, nil
		}
		return false, fmt.Errorf("publish %s: %w", path, err)
	}
	return true, nil
}

// ReadCreditFile reads every row of a credit output file.
func ReadCreditFile(path string) ([]CreditRow, error) {
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
	if !r.Schema().Equal(CreditSchema()) {
		return nil, fmt.Errorf("read credit %s: schema %s is not the credit schema", path, r.Schema())
	}
	var rows []CreditRow
	for i := 0; i < r.NumRecords(); i++ {
		rec, err := r.RecordBatch(i)
		if err != nil {
			return nil, fmt.Errorf("read credit %s: %w", path, err)
		}
		rows = append(rows, creditRows(rec)...)
	}
	return rows, nil
}

func creditRows(rec arrow.RecordBatch) []CreditRow {
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
	rows := make([]CreditRow, rec.NumRows())
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
			r.Hints = append(r.Hints, CreditHint{
				Segment:  hs.Field(0).(*array.Int32).Value(j),
				InsertAt: hs.Field(1).(*array.Int32).Value(j),
				End:      hs.Field(2).(*array.Int32).Value(j),
				Source:   hs.Field(3).(*array.String).Value(j),
				Reason:   hs.Field(4).(*array.String).Value(j),
				Text:     hs.Field(5).(*array.String).Value(j),
				Tokens:   append([]int32(nil), tl.ListValues().(*array.Int32).Int32Values()[ta:tb]...),
			})
		}
	}
	return rows
}
