package rollout

import (
	"errors"
	"fmt"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// batchCols holds the typed columns of one record batch, checked by checkBatch so that
// decoding a row cannot index out of range.
type batchCols struct {
	id, task, tokenizer *array.String
	policy              *array.Int64
	reward              *array.Float32
	feedback            *array.Int8

	tokens    *array.LargeList
	tokOff    []int64 // tokOff[i], tokOff[i+1] bound row i's tokens in tokVals
	tokVals   []int32
	tokValues *array.Int32

	logprobs *array.LargeList
	lpOff    []int64
	lpVals   []float32
	lpValid  []byte // validity bitmap of the logprobs child; nil when it has no nulls
	lpBit    int    // bit of lpValid for lpVals[0]

	segs                          *array.List
	segOff                        []int32
	seg                           *array.Struct
	segStart, segEnd              *array.Int32
	segKind, segTool, segFeedback *array.String
	segStatus                     *array.Int8
}

// checkBatch checks the structure of the required columns of rec (lengths, offsets,
// bitmaps): what arrow's IPC loader leaves unchecked and a corrupt file could use to
// make decoding read out of bounds. It costs O(rows + segments), not O(tokens).
func checkBatch(rec arrow.RecordBatch, c *columns) (b batchCols, err error) {
	n := int(rec.NumRows())
	col := func(i int) (arrow.Array, string, int) { return rec.Column(i), rec.ColumnName(i), n }
	if b.id, err = checkedArray[*array.String](col(c.id)); err != nil {
		return b, err
	}
	if b.task, err = checkedArray[*array.String](col(c.task)); err != nil {
		return b, err
	}
	if b.policy, err = checkedArray[*array.Int64](col(c.policy)); err != nil {
		return b, err
	}
	if b.tokenizer, err = checkedArray[*array.String](col(c.tokenizer)); err != nil {
		return b, err
	}
	if b.reward, err = checkedArray[*array.Float32](col(c.reward)); err != nil {
		return b, err
	}
	if b.feedback, err = checkedArray[*array.Int8](col(c.feedback)); err != nil {
		return b, err
	}

	// tokens: large_list<int32>
	if b.tokens, err = checkedArray[*array.LargeList](col(c.tokens)); err != nil {
		return b, err
	}
	values := b.tokens.ListValues()
	if b.tokValues, err = checkedArray[*array.Int32](values, "tokens values", values.Len()); err != nil {
		return b, err
	}
	b.tokVals = b.tokValues.Int32Values()
	if b.tokOff, err = offsets64(b.tokens, len(b.tokVals)); err != nil {
		return b, fmt.Errorf("tokens: %w", err)
	}

	// logprobs: large_list<float32>
	if b.logprobs, err = checkedArray[*array.LargeList](col(c.logprobs)); err != nil {
		return b, err
	}
	values = b.logprobs.ListValues()
	lpv, err := checkedArray[*array.Float32](values, "logprobs values", values.Len())
	if err != nil {
		return b, err
	}
	b.lpVals = lpv.Float32Values()
	if bm := lpv.NullBitmapBytes(); lpv.NullN() > 0 && len(bm) > 0 {
		b.lpValid, b.lpBit = bm, lpv.Data().Offset()
	}
	if b.lpOff, err = offsets64(b.logprobs, len(b.lpVals)); err != nil {
		return b, fmt.Errorf("logprobs: %w", err)
	}

	// segments: list<struct{…}>, the struct's fields found by name in checkSchema
	if b.segs, err = checkedArray[*array.List](col(c.segments)); err != nil {
		return b, err
	}
	values = b.segs.ListValues()
	if b.seg, err = checkedArray[*array.Struct](values, "segments values", values.Len()); err != nil {
		return b, err
	}
	if b.segOff, err = offsets32(b.segs, b.seg.Len()); err != nil {
		return b, fmt.Errorf("segments: %w", err)
	}
	field := func(i int) (arrow.Array, string, int) {
		if i >= b.seg.NumField() {
			return nil, fmt.Sprintf("segments field %d", i), b.seg.Len()
		}
		return b.seg.Field(i), ColSegments + "." + b.seg.DataType().(*arrow.StructType).Field(i).Name, b.seg.Len()
	}
	if b.segStart, err = checkedArray[*array.Int32](field(c.segStart)); err != nil {
		return b, err
	}
	if b.segEnd, err = checkedArray[*array.Int32](field(c.segEnd)); err != nil {
		return b, err
	}
	if b.segKind, err = checkedArray[*array.String](field(c.segKind)); err != nil {
		return b, err
	}
	if b.segTool, err = checkedArray[*array.String](field(c.segTool)); err != nil {
		return b, err
	}
	if b.segStatus, err = checkedArray[*array.Int8](field(c.segStatus)); err != nil {
		return b, err
	}
	b.segFeedback, err = checkedArray[*array.String](field(c.segFeedback))
	return b, err
}

// checkedArray asserts that a is a T of length n with a validity bitmap that covers
// it, and, for strings, valid offsets.
func checkedArray[T arrow.Array](a arrow.Array, name string, n int) (T, error) {
	t, ok := a.(T)
	switch {
	case !ok:
		return t, fmt.Errorf("%s: unexpected array type %T", name, a)
	case a.Len() != n:
		return t, fmt.Errorf("%s has %d values, want %d", name, a.Len(), n)
	}
	if err := checkBitmap(a); err != nil {
		return t, fmt.Errorf("%s: %w", name, err)
	}
	if s, ok := a.(*array.String); ok {
		if err := s.ValidateFull(); err != nil {
			return t, fmt.Errorf("%s: %w", name, err)
		}
	}
	return t, nil
}

// checkBitmap checks that a's validity bitmap, if it has one, covers its elements.
func checkBitmap(a arrow.Array) error {
	bm := a.NullBitmapBytes()
	if len(bm) == 0 {
		return nil
	}
	if need := (a.Data().Offset() + a.Len() + 7) / 8; len(bm) < need {
		return fmt.Errorf("validity bitmap has %d bytes, needs %d", len(bm), need)
	}
	return nil
}

// offsets64 returns the n+1 offsets of a large list of n elements, checked to be
// non-negative, non-decreasing and within a child of childLen values.
func offsets64(a *array.LargeList, childLen int) ([]int64, error) {
	return checkedOffsets(a.Data(), arrow.Int64Traits.CastFromBytes, childLen)
}

// offsets32 is offsets64 for a list with int32 offsets.
func offsets32(a *array.List, childLen int) ([]int32, error) {
	return checkedOffsets(a.Data(), arrow.Int32Traits.CastFromBytes, childLen)
}

func checkedOffsets[T int32 | int64](d arrow.ArrayData, cast func([]byte) []T, childLen int) ([]T, error) {
	n, o := d.Len(), d.Offset()
	if n == 0 {
		return nil, nil
	}
	buf := d.Buffers()[1]
	if buf == nil {
		return nil, errors.New("offsets buffer is missing")
	}
	raw := cast(buf.Bytes())
	if len(raw) < o+n+1 {
		return nil, fmt.Errorf("offsets buffer has %d offsets, needs %d", len(raw), o+n+1)
	}
	off := raw[o : o+n+1]
	if off[0] < 0 {
		return nil, fmt.Errorf("first offset %d is negative", off[0])
	}
	for i := 1; i <= n; i++ {
		if off[i] < off[i-1] {
			return nil, fmt.Errorf("offsets decrease at element %d: %d < %d", i, off[i], off[i-1])
		}
	}
	if int64(off[n]) > int64(childLen) {
		return nil, fmt.Errorf("last offset %d is beyond the %d values", off[n], childLen)
	}
	return off, nil
}

// emptyTokens is the Tokens of a non-null empty list, so that only a null list has
// nil Tokens.
var emptyTokens = []int32{}

// decode returns row i as a Rollout (strings copied, token and log-prob slices pointing
// into the batch) and the problems that only the Arrow data can show: null token
// elements and a status of −1 (which would otherwise read as StatusNone).
func (b *batchCols) decode(i int) (*Rollout, []*Problem) {
	var problems []*Problem
	ro := &Rollout{}
	if b.id.IsValid(i) {
		ro.ID = strings.Clone(b.id.Value(i))
	}
	if b.task.IsValid(i) {
		ro.TaskID = strings.Clone(b.task.Value(i))
	}
	if b.policy.IsValid(i) {
		ro.PolicyVersion = b.policy.Value(i)
	}
	if b.tokenizer.IsValid(i) {
		ro.Tokenizer = strings.Clone(b.tokenizer.Value(i))
	}
	if b.reward.IsValid(i) {
		ro.Reward, ro.HasReward = b.reward.Value(i), true
	}
	if b.feedback.IsValid(i) {
		ro.Feedback, ro.HasFeedback = b.feedback.Value(i), true
	}

	if b.tokens.IsValid(i) {
		s, e := b.tokOff[i], b.tokOff[i+1]
		ro.Tokens = b.tokVals[s:e:e] // full slice expression: append must not write into Arrow memory
		if len(ro.Tokens) == 0 {
			ro.Tokens = emptyTokens
		}
		if b.tokValues.NullN() > 0 {
			if first, count := firstNull(b.tokValues, int(s), int(e)); count > 0 {
				problems = append(problems, &Problem{Code: ETokenRange, Column: ColTokens,
					Reason: fmt.Sprintf("tokens[%d] is null (%d null token ids)", first-int(s), count)})
			}
		}
	}
	if b.logprobs.IsValid(i) {
		s, e := b.lpOff[i], b.lpOff[i+1]
		ro.LogProbs = b.lpVals[s:e:e]
		if b.lpValid != nil {
			ro.SetLogProbValidity(b.lpValid, b.lpBit+int(s))
		}
	}

	if b.segs.IsValid(i) {
		s, e := int(b.segOff[i]), int(b.segOff[i+1])
		ro.Segments = make([]Segment, 0, e-s)
		for k := s; k < e; k++ {
			seg := Segment{Start: -1, End: -1, Status: StatusNone}
			if b.seg.IsValid(k) {
				if b.segStart.IsValid(k) {
					seg.Start = b.segStart.Value(k)
				}
				if b.segEnd.IsValid(k) {
					seg.End = b.segEnd.Value(k)
				}
				if b.segKind.IsValid(k) {
					name := b.segKind.Value(k)
					if kind, ok := ParseSegmentKind(name); ok {
						seg.Kind, seg.KindName = kind, kind.String()
					} else {
						seg.KindName = strings.Clone(name)
					}
				}
				if b.segTool.IsValid(k) {
					seg.Tool = strings.Clone(b.segTool.Value(k))
				}
				if b.segFeedback.IsValid(k) {
					seg.Feedback = strings.Clone(b.segFeedback.Value(k))
				}
				if b.segStatus.IsValid(k) {
					v := b.segStatus.Value(k)
					seg.Status = ToolStatus(v)
					if ToolStatus(v) == StatusNone {
						problems = append(problems, &Problem{Code: ESegStatus, Column: ColSegments,
							Reason: fmt.Sprintf("segment %d [%d, %d): status -1; want null, 0 (ok) or 1 (error)", k-s, seg.Start, seg.End)})
					}
				}
			}
			ro.Segments = append(ro.Segments, seg)
		}
	}
	return ro, problems
}

// firstNull returns the first null position in a[s:e] and how many there are.
func firstNull(a arrow.Array, s, e int) (first, count int) {
	first = -1
	for j := s; j < e; j++ {
		if a.IsNull(j) {
			if count == 0 {
				first = j
			}
			count++
		}
	}
	return first, count
}
