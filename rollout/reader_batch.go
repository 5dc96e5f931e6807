package rollout

import (
	"fmt"
	"math"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// batchCols holds the columns of one record batch, checked by checkBatch so that
// decoding a row cannot index out of range.
type batchCols struct {
	id, task, tokenizer strCol
	policy, feedback    intCol
	reward              floatCol
	temperature         floatCol // a nil .a: the file has no temperature column

	tokens listCol
	tok    tokenValues

	logprobs listCol
	lpVals   []float32
	lpValid  []byte // validity bitmap of the logprobs values; nil when it has no nulls
	lpBit    int    // bit of lpValid for lpVals[0]

	segs                          listCol
	seg                           *array.Struct
	segStart, segEnd, segStatus   intCol
	segKind, segTool, segFeedback strCol
}

// convBuffers holds the converted token ids and log-probs of a batch whose element
// types are not the canonical ones, reused from batch to batch.
type convBuffers struct {
	tokens   []int32
	logprobs []float32
}

// checkBatch checks the structure of the required columns of rec (lengths, offsets,
// views, dictionary indices, bitmaps): what arrow's IPC loader leaves unchecked and a
// corrupt file could use to make decoding read out of bounds. It costs O(rows +
// segments), not O(tokens), unless tokens or log-probs need converting (int64 ids,
// float64 log-probs), which happens here, once per batch, into conv.
func checkBatch(rec arrow.RecordBatch, c *columns, conv *convBuffers) (b batchCols, err error) {
	n := int(rec.NumRows())
	col := func(i int) (arrow.Array, string, int) { return rec.Column(i), rec.ColumnName(i), n }
	if b.id, err = checkStrCol(col(c.id)); err != nil {
		return b, err
	}
	if b.task, err = checkStrCol(col(c.task)); err != nil {
		return b, err
	}
	if b.policy, err = checkIntCol(col(c.policy)); err != nil {
		return b, err
	}
	if b.tokenizer, err = checkStrCol(col(c.tokenizer)); err != nil {
		return b, err
	}
	if b.reward, err = checkFloatCol(col(c.reward)); err != nil {
		return b, err
	}
	if b.feedback, err = checkIntCol(col(c.feedback)); err != nil {
		return b, err
	}
	if c.temperature >= 0 {
		if b.temperature, err = checkFloatCol(col(c.temperature)); err != nil {
			return b, err
		}
	}

	if b.tokens, err = checkListCol(col(c.tokens)); err != nil {
		return b, err
	}
	if b.tok, err = convertTokens(b.tokens.values, &conv.tokens); err != nil {
		return b, err
	}

	if b.logprobs, err = checkListCol(col(c.logprobs)); err != nil {
		return b, err
	}
	lpv := b.logprobs.values
	if b.lpVals, err = convertLogProbs(lpv, &conv.logprobs); err != nil {
		return b, err
	}
	if bm := lpv.NullBitmapBytes(); lpv.NullN() > 0 && len(bm) > 0 {
		b.lpValid, b.lpBit = bm, lpv.Data().Offset()
	}

	// segments: a list of struct{…}, the struct's fields found by name in checkSchema
	if b.segs, err = checkListCol(col(c.segments)); err != nil {
		return b, err
	}
	var ok bool
	if b.seg, ok = b.segs.values.(*array.Struct); !ok {
		return b, fmt.Errorf("segments values: unexpected array type %T", b.segs.values)
	}
	if err := checkArray(b.seg, "segments values", b.seg.Len()); err != nil {
		return b, err
	}
	field := func(i int) (arrow.Array, string, int) {
		if i >= b.seg.NumField() {
			return nil, fmt.Sprintf("segments field %d", i), b.seg.Len()
		}
		return b.seg.Field(i), ColSegments + "." + b.seg.DataType().(*arrow.StructType).Field(i).Name, b.seg.Len()
	}
	if b.segStart, err = checkIntCol(field(c.segStart)); err != nil {
		return b, err
	}
	if b.segEnd, err = checkIntCol(field(c.segEnd)); err != nil {
		return b, err
	}
	if b.segKind, err = checkStrCol(field(c.segKind)); err != nil {
		return b, err
	}
	if b.segTool, err = checkStrCol(field(c.segTool)); err != nil {
		return b, err
	}
	if b.segStatus, err = checkIntCol(field(c.segStatus)); err != nil {
		return b, err
	}
	b.segFeedback, err = checkStrCol(field(c.segFeedback))
	return b, err
}

// emptyTokens is the Tokens of a non-null empty list, so that only a null list has
// nil Tokens.
var emptyTokens = []int32{}

// emptyLogProbs is the LogProbs of a non-null empty list, for the same reason: a batch
// whose log-prob lists are all null or empty has no values buffer to slice.
var emptyLogProbs = []float32{}

// decode returns row i as a Rollout (strings copied, token and log-prob slices pointing
// into the batch or its conversion) and the problems that only the Arrow data can
// show: null token ids, ids or segment bounds that do not fit int32, a status of −1
// or beyond int8 (−1 would read as StatusNone), a feedback beyond int8.
func (b *batchCols) decode(i int) (*Rollout, []*Problem) {
	var problems []*Problem
	ro := &Rollout{}
	if b.id.valid(i) {
		ro.ID = strings.Clone(b.id.value(i))
	}
	if b.task.valid(i) {
		ro.TaskID = strings.Clone(b.task.value(i))
	}
	if b.policy.a.IsValid(i) {
		ro.PolicyVersion = b.policy.get(i)
	}
	if b.tokenizer.valid(i) {
		ro.Tokenizer = strings.Clone(b.tokenizer.value(i))
	}
	if b.reward.a.IsValid(i) {
		ro.Reward, ro.HasReward = float32(b.reward.get(i)), true
	}
	if b.feedback.a.IsValid(i) {
		if v := b.feedback.get(i); v < math.MinInt8 || v > math.MaxInt8 {
			problems = append(problems, &Problem{Code: EFeedbackRange, Column: ColFeedback,
				Reason: fmt.Sprintf("feedback is %d; want -1, 0 or +1", v)})
		} else {
			ro.Feedback, ro.HasFeedback = int8(v), true
		}
	}

	if b.temperature.a != nil && b.temperature.a.IsValid(i) {
		// float64 beyond float32's range becomes ±Inf, which Validate rejects.
		ro.Temperature, ro.HasTemperature = float32(b.temperature.get(i)), true
	}

	if b.tokens.a.IsValid(i) {
		s, e := b.tokens.span(i)
		ro.Tokens = b.tok.vals[s:e:e] // full slice expression: append must not write into Arrow memory
		if len(ro.Tokens) == 0 {
			ro.Tokens = emptyTokens
		}
		if b.tok.arr.NullN() > 0 {
			if first, count := firstNull(b.tok.arr, s, e); count > 0 {
				problems = append(problems, &Problem{Code: ETokenRange, Column: ColTokens,
					Reason: fmt.Sprintf("tokens[%d] is null (%d null token ids)", first-s, count)})
			}
		}
		if first, id, count := b.tok.outOfInt32(s, e); count > 0 {
			reason := fmt.Sprintf("tokens[%d] = %d does not fit in int32", first-s, id)
			if count > 1 {
				reason += fmt.Sprintf(" (%d token ids out of range)", count)
			}
			problems = append(problems, &Problem{Code: ETokenRange, Column: ColTokens, Reason: reason})
		}
	}
	if b.logprobs.a.IsValid(i) {
		s, e := b.logprobs.span(i)
		ro.LogProbs = b.lpVals[s:e:e]
		if len(ro.LogProbs) == 0 {
			ro.LogProbs = emptyLogProbs
		}
		if b.lpValid != nil {
			ro.SetLogProbValidity(b.lpValid, b.lpBit+s)
		}
	}
	if b.segs.a.IsValid(i) {
		problems = b.decodeSegments(ro, i, problems)
	}
	return ro, problems
}

// decodeSegments fills ro.Segments from row i's segments.
func (b *batchCols) decodeSegments(ro *Rollout, i int, problems []*Problem) []*Problem {
	s, e := b.segs.span(i)
	ro.Segments = make([]Segment, 0, e-s)
	for k := s; k < e; k++ {
		seg := Segment{Start: -1, End: -1, Status: StatusNone}
		if !b.seg.IsValid(k) {
			ro.Segments = append(ro.Segments, seg)
			continue
		}
		for _, f := range []struct {
			col  intCol
			dst  *int32
			name string
		}{{b.segStart, &seg.Start, SegStart}, {b.segEnd, &seg.End, SegEnd}} {
			if !f.col.a.IsValid(k) {
				continue
			}
			if v := f.col.get(k); v < math.MinInt32 || v > math.MaxInt32 {
				problems = append(problems, &Problem{Code: ESegRange, Column: ColSegments,
					Reason: fmt.Sprintf("segment %d: %s %d does not fit in int32", k-s, f.name, v)})
			} else {
				*f.dst = int32(v)
			}
		}
		if b.segKind.valid(k) {
			name := b.segKind.value(k)
			if kind, ok := ParseSegmentKind(name); ok {
				seg.Kind, seg.KindName = kind, kind.String()
			} else {
				seg.KindName = strings.Clone(name)
			}
		}
		if b.segTool.valid(k) {
			seg.Tool = strings.Clone(b.segTool.value(k))
		}
		if b.segFeedback.valid(k) {
			seg.Feedback = strings.Clone(b.segFeedback.value(k))
		}
		if b.segStatus.a.IsValid(k) {
			// −1 would read as StatusNone and a value beyond int8 would wrap: both are
			// reported here; Validate reports the other values but 0 and 1.
			if v := b.segStatus.get(k); v == int64(StatusNone) || v < math.MinInt8 || v > math.MaxInt8 {
				problems = append(problems, &Problem{Code: ESegStatus, Column: ColSegments,
					Reason: fmt.Sprintf("segment %d [%d, %d): status %d; want null, 0 (ok) or 1 (error)", k-s, seg.Start, seg.End, v)})
			} else {
				seg.Status = ToolStatus(v)
			}
		}
		ro.Segments = append(ro.Segments, seg)
	}
	return problems
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
