package creditfile

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
// Schema; every per-token list has one entry per rollout token.

// Column names of a credit output file.
const (
	ColRolloutID      = "rollout_id"
	ColTaskID         = "task_id"
	ColTokens         = "tokens"
	ColStep           = "step"
	ColPolicyVersion  = "policy_version"
	ColTeacherVersion = "teacher_version"
	ColReward         = "reward"
	ColOutcomeAdv     = "outcome_advantage"
	ColLossMask       = "loss_mask"
	ColStudent        = "student_logprobs"
	ColTeacher        = "teacher_logprobs"
	ColAdvantages     = "advantages"
	ColHints          = "hints"
	// Schema v2 adds:
	ColBase      = "base_logprobs"    // the log-prob Δ is measured against: s_t or q_t(∅); null outside hinted spans
	ColDelta     = "deltas"           // Δ_t = q_t(h) − base_t, mean over covering spans; null outside
	ColRho       = "rhos"             // ρ_t = min(exp(s_t − μ_t), ρ_max); 0 where not trained
	ColSampler   = "sampler_logprobs" // μ_t, the sampler's log-prob; null where the rollout has none
	ColSegments  = "segments"         // the rollout's segments: start, end, kind, tool, status
	ColTokenizer = "tokenizer"        // tokenizer fingerprint of the rollout ("bytes-v1", "sha256:…")
	// Schema v3 adds fields to each hint of ColHints (HintFields).
	// Schema v4 adds:
	ColTemperature = "temperature" // the sampling temperature the rollout was scored at
)

// Fields of a hint struct (ColHints) that schema v3 adds: what the teacher saw, the
// loss it trained with, and what it predicted over the hint's span.
const (
	HintContext         = "context"          // teacher.Context.Kind: hint, sibling, feedback, or several joined with "+"
	HintLossMode        = "loss_mode"        // credit.distill.mode: sampled_token, topk, full
	HintDivergence      = "divergence"       // credit.distill.divergence (topk, full): reverse_kl, forward_kl, jsd
	HintJSDAlpha        = "jsd_alpha"        // α of jsd
	HintTeacherLogProbs = "teacher_logprobs" // q_t(h) of the sampled token at each position of [insert_at, end)
	HintTopIDs          = "top_ids"          // the teacher's most likely ids at each position, most likely first
	HintTopLogProbs     = "top_logprobs"     // their log-probs, nats
)

// SchemaVersion is the value of the schema metadata key
// hindsight.credit_schema_version written today. Version 1 files (without the v2
// columns), version 2 files (without the v3 hint fields) and version 3 files
// (without the v4 temperature column) stay readable: Read accepts all four.
const SchemaVersion = "4"

// creditVersionKey is the schema metadata key holding the schema version.
const creditVersionKey = "hindsight.credit_schema_version"

// Suffix ends the name of every credit output file.
const Suffix = ".credit.arrow"

// creditHintFieldsV1 are the hint struct's fields of schema versions 1 and 2.
func creditHintFieldsV1() []arrow.Field {
	return []arrow.Field{
		{Name: "segment", Type: arrow.PrimitiveTypes.Int32},
		{Name: "insert_at", Type: arrow.PrimitiveTypes.Int32},
		{Name: "end", Type: arrow.PrimitiveTypes.Int32},
		{Name: "source", Type: arrow.BinaryTypes.String},
		{Name: "reason", Type: arrow.BinaryTypes.String},
		{Name: "text", Type: arrow.BinaryTypes.String},
		{Name: "tokens", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32)},
	}
}

// creditHintTypeV1 is the hint struct of schema versions 1 and 2.
var creditHintTypeV1 = arrow.StructOf(creditHintFieldsV1()...)

// creditHintType is the hint struct of schema version 3: the v1 fields, then
// HintContext … HintTopLogProbs, all nullable.
var creditHintType = arrow.StructOf(append(creditHintFieldsV1(),
	arrow.Field{Name: HintContext, Type: arrow.BinaryTypes.String, Nullable: true},
	arrow.Field{Name: HintLossMode, Type: arrow.BinaryTypes.String, Nullable: true},
	arrow.Field{Name: HintDivergence, Type: arrow.BinaryTypes.String, Nullable: true},
	arrow.Field{Name: HintJSDAlpha, Type: arrow.PrimitiveTypes.Float32, Nullable: true},
	arrow.Field{Name: HintTeacherLogProbs, Type: arrow.ListOf(arrow.PrimitiveTypes.Float32), Nullable: true},
	arrow.Field{Name: HintTopIDs, Type: arrow.ListOf(arrow.ListOf(arrow.PrimitiveTypes.Int32)), Nullable: true},
	arrow.Field{Name: HintTopLogProbs, Type: arrow.ListOf(arrow.ListOf(arrow.PrimitiveTypes.Float32)), Nullable: true},
)...)

var creditSegmentType = arrow.StructOf(
	arrow.Field{Name: "start", Type: arrow.PrimitiveTypes.Int32},
	arrow.Field{Name: "end", Type: arrow.PrimitiveTypes.Int32},
	arrow.Field{Name: "kind", Type: arrow.BinaryTypes.String},
	arrow.Field{Name: "tool", Type: arrow.BinaryTypes.String, Nullable: true},
	arrow.Field{Name: "status", Type: arrow.BinaryTypes.String, Nullable: true},
)

// Schema returns the schema of credit output files (version
// SchemaVersion): the version 1 columns followed by the v2 ones and the v4
// temperature; the hints column's struct has the v3 fields.
func Schema() *arrow.Schema {
	s := creditSchema(SchemaVersion, creditHintType)
	md := s.Metadata()
	return arrow.NewSchema(append(s.Fields(), arrow.Field{Name: ColTemperature, Type: arrow.PrimitiveTypes.Float32}), &md)
}

// creditSchemaV3 returns the schema of version 3 credit files.
func creditSchemaV3() *arrow.Schema { return creditSchema("3", creditHintType) }

// creditSchema returns the schema of version 2 or later with hints of type hint.
func creditSchema(version string, hint arrow.DataType) *arrow.Schema {
	md := arrow.NewMetadata([]string{creditVersionKey}, []string{version})
	f32 := func(name string) arrow.Field {
		return arrow.Field{Name: name, Type: arrow.LargeListOf(arrow.PrimitiveTypes.Float32), Nullable: true}
	}
	fields := append(creditFieldsV1(hint),
		f32(ColBase), f32(ColDelta), f32(ColRho), f32(ColSampler),
		arrow.Field{Name: ColSegments, Type: arrow.ListOf(creditSegmentType), Nullable: true},
		arrow.Field{Name: ColTokenizer, Type: arrow.BinaryTypes.String, Nullable: true})
	return arrow.NewSchema(fields, &md)
}

// creditSchemaV1 returns the schema of version 1 credit files.
func creditSchemaV1() *arrow.Schema {
	md := arrow.NewMetadata([]string{creditVersionKey}, []string{"1"})
	return arrow.NewSchema(creditFieldsV1(creditHintTypeV1), &md)
}

// creditSchemaV2 returns the schema of version 2 credit files.
func creditSchemaV2() *arrow.Schema { return creditSchema("2", creditHintTypeV1) }

func creditFieldsV1(hint arrow.DataType) []arrow.Field {
	return []arrow.Field{
		{Name: ColRolloutID, Type: arrow.BinaryTypes.String},
		{Name: ColTaskID, Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: ColTokens, Type: arrow.LargeListOf(arrow.PrimitiveTypes.Int32)},
		{Name: ColStep, Type: arrow.PrimitiveTypes.Int64},
		{Name: ColPolicyVersion, Type: arrow.PrimitiveTypes.Int64},
		{Name: ColTeacherVersion, Type: arrow.PrimitiveTypes.Int64},
		{Name: ColReward, Type: arrow.PrimitiveTypes.Float32, Nullable: true},
		{Name: ColOutcomeAdv, Type: arrow.PrimitiveTypes.Float32},
		{Name: ColLossMask, Type: arrow.LargeListOf(arrow.FixedWidthTypes.Boolean)},
		{Name: ColStudent, Type: arrow.LargeListOf(arrow.PrimitiveTypes.Float32)},
		{Name: ColTeacher, Type: arrow.LargeListOf(arrow.PrimitiveTypes.Float32)},
		{Name: ColAdvantages, Type: arrow.LargeListOf(arrow.PrimitiveTypes.Float32)},
		{Name: ColHints, Type: arrow.ListOf(hint)},
	}
}

// Hint is one hint that was trained on.
type Hint struct {
	Segment  int32  // index of the target segment in the rollout's segments
	InsertAt int32  // token position the hint was inserted at
	End      int32  // exclusive end of the re-scored range
	Source   string // teacher that wrote it: feedback, rules, openai
	Reason   string // selection rule: feedback, negative_rating, tool_error, surprise
	Text     string
	Tokens   []int32 // the hint wrapped in the model's template, as inserted

	// Schema v3; zero (written as null) where unknown, and in hints read from older files.

	// Context names what the teacher's inserted turn held (teacher.Context.Kind):
	// hint, sibling, feedback, or several of them joined with "+" in that order
	// ("sibling+feedback+hint").
	Context string
	// LossMode is the credit.distill.mode the hint trained with: sampled_token, topk
	// or full.
	LossMode string
	// Divergence is credit.distill.divergence in modes topk and full (reverse_kl,
	// forward_kl, jsd); empty in mode sampled_token.
	Divergence string
	JSDAlpha   float32 // α of divergence jsd; 0 otherwise
	// TeacherLogProbs is q_t(h), the teacher's log-prob of the sampled token, at each
	// position t of [InsertAt, End) under this hint (nats; NaN written as null). The
	// row's Teacher column holds the same values where only this hint covers t.
	TeacherLogProbs []float32
	// TopIDs and TopLogProbs are the teacher's most likely tokens at each position of
	// [InsertAt, End), most likely first, and their log-probs (nats): modes topk and
	// full only (train.credit_file_top_k of them), nil otherwise. Both have
	// End−InsertAt rows of the same lengths.
	TopIDs      [][]int32
	TopLogProbs [][]float32
}

// Row is one trained rollout of a credit output file. Per-token slices have
// len(Tokens) entries.
type Row struct {
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
	Hints      []Hint

	// Schema v2. Each per-token slice is nil (written as a null list; always nil
	// in rows read from a v1 file) or has len(Tokens) entries; NaN is written as null.
	Base      []float32 // base_t that Δ_t is measured against; NaN outside hinted spans
	Delta     []float32 // Δ_t; NaN outside hinted spans
	Rho       []float32 // ρ_t; 0 where not trained
	Sampler   []float32 // μ_t; NaN where the sampler gave none
	Segments  []Segment
	Tokenizer string // tokenizer fingerprint; empty: null

	// Schema v4. Temperature is the sampling temperature the rollout was scored at:
	// every log-prob of the row (and the teacher's alternatives) is the policy's
	// with its logits divided by it (docs/distillation.md "The sampling
	// temperature"); 1 for a rollout that recorded none or was sampled greedily, and
	// in rows read from files before v4 (which always scored at 1).
	Temperature float32
}

// Segment is one segment of a trained rollout (rollout.Segment as written).
type Segment struct {
	Start, End int32
	Kind       string // system, user, assistant, reasoning, tool_call, tool_result
	Tool       string // tool name; empty: null
	Status     string // ok, error; empty: null (not a tool)
}

// Encode writes rows as one Arrow IPC file to w.
func Encode(w io.Writer, rows []Row) error {
	schema := Schema()
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
	perToken := []*array.LargeListBuilder{f(13).(*array.LargeListBuilder), f(14).(*array.LargeListBuilder),
		f(15).(*array.LargeListBuilder), f(16).(*array.LargeListBuilder)}
	segs := f(17).(*array.ListBuilder)
	tokz := f(18).(*array.StringBuilder)
	temp := f(19).(*array.Float32Builder)
	for i := range rows {
		r := &rows[i]
		T := len(r.Tokens)
		if len(r.LossMask) != T || len(r.Student) != T || len(r.Teacher) != T || len(r.Advantages) != T {
			return fmt.Errorf("write credit: rollout %q: %d tokens, %d mask, %d student, %d teacher, %d advantages",
				r.RolloutID, T, len(r.LossMask), len(r.Student), len(r.Teacher), len(r.Advantages))
		}
		for k, v := range r.v2PerToken() {
			if v != nil && len(v) != T {
				return fmt.Errorf("write credit: rollout %q: %d tokens, %d %s", r.RolloutID, T, len(v), creditV2PerTokenCols[k])
			}
			appendF32s(perToken[k], v)
		}
		appendSegments(segs, r.Segments)
		temp.Append(r.Temperature)
		if r.Tokenizer == "" {
			tokz.AppendNull()
		} else {
			tokz.Append(r.Tokenizer)
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
		appendF32s(tea, r.Teacher)
		adv.Append(true)
		adv.ValueBuilder().(*array.Float32Builder).AppendValues(r.Advantages, nil)
		for k := range r.Hints {
			if err := r.Hints[k].check(); err != nil {
				return fmt.Errorf("write credit: rollout %q: hint %d: %w", r.RolloutID, k, err)
			}
		}
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
			appendHintV3(hs, &h)
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

// creditV2PerTokenCols names the v2 per-token columns in the order of v2PerToken.
var creditV2PerTokenCols = [...]string{ColBase, ColDelta, ColRho, ColSampler}

func (r *Row) v2PerToken() [4][]float32 {
	return [4][]float32{r.Base, r.Delta, r.Rho, r.Sampler}
}

// appendF32s appends v as one list (null when v is nil), NaN values as nulls.
func appendF32s(b *array.LargeListBuilder, v []float32) {
	if v == nil {
		b.AppendNull()
		return
	}
	b.Append(true)
	vb := b.ValueBuilder().(*array.Float32Builder)
	for _, x := range v {
		if math.IsNaN(float64(x)) {
			vb.AppendNull()
		} else {
			vb.Append(x)
		}
	}
}

func appendSegments(b *array.ListBuilder, segs []Segment) {
	if segs == nil {
		b.AppendNull()
		return
	}
	b.Append(true)
	sb := b.ValueBuilder().(*array.StructBuilder)
	str := func(k int, v string) {
		if v == "" {
			sb.FieldBuilder(k).(*array.StringBuilder).AppendNull()
		} else {
			sb.FieldBuilder(k).(*array.StringBuilder).Append(v)
		}
	}
	for _, s := range segs {
		sb.Append(true)
		sb.FieldBuilder(0).(*array.Int32Builder).Append(s.Start)
		sb.FieldBuilder(1).(*array.Int32Builder).Append(s.End)
		sb.FieldBuilder(2).(*array.StringBuilder).Append(s.Kind)
		str(3, s.Tool)
		str(4, s.Status)
	}
}

// check reports a v3 hint field whose length does not match the hint's span.
func (h *Hint) check() error {
	n := int(h.End - h.InsertAt)
	if h.TeacherLogProbs != nil && len(h.TeacherLogProbs) != n {
		return fmt.Errorf("%s: %d values for the %d positions of [%d, %d)", HintTeacherLogProbs, len(h.TeacherLogProbs), n, h.InsertAt, h.End)
	}
	if (h.TopIDs == nil) != (h.TopLogProbs == nil) || len(h.TopIDs) != len(h.TopLogProbs) {
		return fmt.Errorf("%s: %d rows, %s: %d rows", HintTopIDs, len(h.TopIDs), HintTopLogProbs, len(h.TopLogProbs))
	}
	if h.TopIDs == nil {
		return nil
	}
	if len(h.TopIDs) != n {
		return fmt.Errorf("%s: %d rows for the %d positions of [%d, %d)", HintTopIDs, len(h.TopIDs), n, h.InsertAt, h.End)
	}
	for r := range h.TopIDs {
		if len(h.TopIDs[r]) != len(h.TopLogProbs[r]) {
			return fmt.Errorf("position %d: %d %s, %d %s", int(h.InsertAt)+r, len(h.TopIDs[r]), HintTopIDs, len(h.TopLogProbs[r]), HintTopLogProbs)
		}
	}
	return nil
}

// appendHintV3 appends h's v3 fields to the hint struct builder hs (fields 7…13).
func appendHintV3(hs *array.StructBuilder, h *Hint) {
	str := func(k int, v string) {
		b := hs.FieldBuilder(k).(*array.StringBuilder)
		if v == "" {
			b.AppendNull()
		} else {
			b.Append(v)
		}
	}
	str(7, h.Context)
	str(8, h.LossMode)
	str(9, h.Divergence)
	if a := hs.FieldBuilder(10).(*array.Float32Builder); h.JSDAlpha == 0 {
		a.AppendNull()
	} else {
		a.Append(h.JSDAlpha)
	}
	tl := hs.FieldBuilder(11).(*array.ListBuilder)
	if h.TeacherLogProbs == nil {
		tl.AppendNull()
	} else {
		tl.Append(true)
		vb := tl.ValueBuilder().(*array.Float32Builder)
		for _, x := range h.TeacherLogProbs {
			if math.IsNaN(float64(x)) {
				vb.AppendNull()
			} else {
				vb.Append(x)
			}
		}
	}
	ids, lps := hs.FieldBuilder(12).(*array.ListBuilder), hs.FieldBuilder(13).(*array.ListBuilder)
	if h.TopIDs == nil {
		ids.AppendNull()
		lps.AppendNull()
		return
	}
	ids.Append(true)
	lps.Append(true)
	ib, lb := ids.ValueBuilder().(*array.ListBuilder), lps.ValueBuilder().(*array.ListBuilder)
	for r := range h.TopIDs {
		ib.Append(true)
		ib.ValueBuilder().(*array.Int32Builder).AppendValues(h.TopIDs[r], nil)
		lb.Append(true)
		lb.ValueBuilder().(*array.Float32Builder).AppendValues(h.TopLogProbs[r], nil)
	}
}

// Write writes rows to path through a temp file and a rename. With sync
// false the data is not fsynced (the caller syncs it later, SyncCreditFiles); the
// rename still makes a torn file impossible to observe under path.
func Write(path string, rows []Row, sync bool) error {
	if sync {
		return fsutil.WriteFile(path, 0o644, func(w io.Writer) error { return Encode(w, rows) })
	}
	dir, base := filepath.Split(path)
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := Encode(f, rows); err != nil {
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

// Publish writes rows durably to path unless path exists: it never
// replaces a published file, so a replay after a crash cannot publish twice.
// published is false when path was already there.
func Publish(path string, rows []Row) (published bool, err error) {
	dir, base := filepath.Split(path)
	if err := fsutil.MkdirAll(dir, 0o755); err != nil {
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
	if err := Encode(f, rows); err != nil {
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
