package rollout

import (
	"errors"
	"fmt"
	"io"
	"os"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/hindsight-ai/hindsight/internal/fsutil"
)

// DefaultBatchRows is the number of rollouts per record batch when
// WriteOptions.BatchRows is 0: 16 rollouts of 100k tokens make a ~13 MB batch.
const DefaultBatchRows = 16

// WriteOptions configure a Writer.
type WriteOptions struct {
	Format    Format // FormatFile (the zero value) or FormatStream
	BatchRows int    // rollouts per record batch; DefaultBatchRows when ≤ 0
}

// Writer writes rollouts in the canonical Schema, one record batch every BatchRows
// rollouts: it holds at most one batch in memory.
type Writer struct {
	rows  int // rollouts in the batch being built
	total int // rollouts written, for errors
	batch int
	b     *array.RecordBuilder
	ipc   interface {
		Write(arrow.RecordBatch) error
		Close() error
	}

	id, task, tokenizer *array.StringBuilder
	policy              *array.Int64Builder
	tokens, logprobs    *array.LargeListBuilder
	tokVals             *array.Int32Builder
	lpVals              *array.Float32Builder
	segs                *array.ListBuilder
	seg                 *array.StructBuilder
	segStart, segEnd    *array.Int32Builder
	segKind, segTool    *array.StringBuilder
	segStatus           *array.Int8Builder
	segFeedback         *array.StringBuilder
	reward              *array.Float32Builder
	feedback            *array.Int8Builder
	temperature         *array.Float32Builder

	valid  []bool // scratch: validity of one rollout's log-probs
	closed bool
}

// NewWriter starts an Arrow IPC file or stream on w with the canonical Schema.
func NewWriter(w io.Writer, opts WriteOptions) (*Writer, error) {
	if opts.BatchRows <= 0 {
		opts.BatchRows = DefaultBatchRows
	}
	schema := Schema()
	wr := &Writer{batch: opts.BatchRows, b: array.NewRecordBuilder(memory.DefaultAllocator, schema)}
	switch opts.Format {
	case FormatFile:
		fw, err := ipc.NewFileWriter(w, ipc.WithSchema(schema), ipc.WithAllocator(memory.DefaultAllocator))
		if err != nil {
			wr.b.Release()
			return nil, fmt.Errorf("create arrow file writer: %w", err)
		}
		wr.ipc = fw
	case FormatStream:
		wr.ipc = ipc.NewWriter(w, ipc.WithSchema(schema), ipc.WithAllocator(memory.DefaultAllocator))
	default:
		wr.b.Release()
		return nil, fmt.Errorf("create rollout writer: unknown format %v", opts.Format)
	}
	f := wr.b.Field
	wr.id = f(0).(*array.StringBuilder)
	wr.task = f(1).(*array.StringBuilder)
	wr.policy = f(2).(*array.Int64Builder)
	wr.tokenizer = f(3).(*array.StringBuilder)
	wr.tokens = f(4).(*array.LargeListBuilder)
	wr.tokVals = wr.tokens.ValueBuilder().(*array.Int32Builder)
	wr.logprobs = f(5).(*array.LargeListBuilder)
	wr.lpVals = wr.logprobs.ValueBuilder().(*array.Float32Builder)
	wr.segs = f(6).(*array.ListBuilder)
	wr.seg = wr.segs.ValueBuilder().(*array.StructBuilder)
	wr.segStart = wr.seg.FieldBuilder(0).(*array.Int32Builder)
	wr.segEnd = wr.seg.FieldBuilder(1).(*array.Int32Builder)
	wr.segKind = wr.seg.FieldBuilder(2).(*array.StringBuilder)
	wr.segTool = wr.seg.FieldBuilder(3).(*array.StringBuilder)
	wr.segStatus = wr.seg.FieldBuilder(4).(*array.Int8Builder)
	wr.segFeedback = wr.seg.FieldBuilder(5).(*array.StringBuilder)
	wr.reward = f(7).(*array.Float32Builder)
	wr.feedback = f(8).(*array.Int8Builder)
	wr.temperature = f(9).(*array.Float32Builder)
	return wr, nil
}

// Write appends one rollout, flushing a record batch every BatchRows rollouts.
//
// Zero values become nulls: an empty TaskID, Tokenizer, Tool or segment Feedback,
// Status StatusNone, HasReward, HasFeedback or HasTemperature false, nil LogProbs (a
// null list) and the positions LogProbValid reports invalid. Tokens nil is written as a null list.
// A segment's kind is written as KindName when it is set, else Kind.String(), so an
// invalid kind can be written on purpose.
func (w *Writer) Write(r *Rollout) error {
	if w.closed {
		return errors.New("write rollout: writer is closed")
	}
	if err := checkUTF8(r); err != nil {
		return fmt.Errorf("write rollout %d (%q): %w", w.total, r.ID, err)
	}
	w.id.Append(r.ID)
	appendString(w.task, r.TaskID)
	w.policy.Append(r.PolicyVersion)
	appendString(w.tokenizer, r.Tokenizer)

	if r.Tokens == nil {
		w.tokens.AppendNull()
	} else {
		w.tokens.Append(true)
		w.tokVals.AppendValues(r.Tokens, nil)
	}

	if r.LogProbs == nil {
		w.logprobs.AppendNull()
	} else {
		w.logprobs.Append(true)
		if r.logProbValid == nil {
			w.lpVals.AppendValues(r.LogProbs, nil)
		} else {
			w.valid = w.valid[:0]
			for i := range r.LogProbs {
				w.valid = append(w.valid, r.LogProbValid(i))
			}
			w.lpVals.AppendValues(r.LogProbs, w.valid)
		}
	}

	if r.Segments == nil {
		w.segs.AppendNull()
	} else {
		w.segs.Append(true)
		for _, s := range r.Segments {
			w.seg.Append(true)
			w.segStart.Append(s.Start)
			w.segEnd.Append(s.End)
			if s.KindName != "" {
				w.segKind.Append(s.KindName)
			} else {
				w.segKind.Append(s.Kind.String())
			}
			appendString(w.segTool, s.Tool)
			if s.Status == StatusNone {
				w.segStatus.AppendNull()
			} else {
				w.segStatus.Append(int8(s.Status))
			}
			appendString(w.segFeedback, s.Feedback)
		}
	}

	if r.HasReward {
		w.reward.Append(r.Reward)
	} else {
		w.reward.AppendNull()
	}
	if r.HasFeedback {
		w.feedback.Append(r.Feedback)
	} else {
		w.feedback.AppendNull()
	}
	if r.HasTemperature {
		w.temperature.Append(r.Temperature)
	} else {
		w.temperature.AppendNull()
	}

	w.rows++
	w.total++
	if w.rows >= w.batch {
		return w.flush()
	}
	return nil
}

// checkUTF8 refuses a rollout with a string that is not valid UTF-8 before any of
// it is buffered: Arrow's utf8 type requires valid UTF-8, and readers (ours included)
// reject the whole file when one string is not.
func checkUTF8(r *Rollout) error {
	bad := func(field, s string) error {
		if utf8.ValidString(s) {
			return nil
		}
		return fmt.Errorf("field %s: invalid UTF-8 %q", field, s)
	}
	for _, f := range []struct{ name, s string }{
		{ColRolloutID, r.ID}, {ColTaskID, r.TaskID}, {ColTokenizer, r.Tokenizer},
	} {
		if err := bad(f.name, f.s); err != nil {
			return err
		}
	}
	for i, s := range r.Segments {
		for _, f := range []struct{ name, s string }{
			{"kind", s.KindName}, {"tool", s.Tool}, {"feedback", s.Feedback},
		} {
			if err := bad(fmt.Sprintf("%s[%d].%s", ColSegments, i, f.name), f.s); err != nil {
				return err
			}
		}
	}
	return nil
}

func appendString(b *array.StringBuilder, s string) {
	if s == "" {
		b.AppendNull()
	} else {
		b.Append(s)
	}
}

// flush writes the buffered rollouts as one record batch.
func (w *Writer) flush() error {
	if w.rows == 0 {
		return nil
	}
	rec := w.b.NewRecordBatch()
	defer rec.Release()
	w.rows = 0
	if err := w.ipc.Write(rec); err != nil {
		return fmt.Errorf("write record batch: %w", err)
	}
	return nil
}

// Close flushes the buffered rollouts and ends the file (footer) or stream (end
// marker). It does not close the underlying io.Writer.
func (w *Writer) Close() error {
	if w.closed {
		return nil
	}
	w.closed = true
	defer w.b.Release()
	err := w.flush()
	if cerr := w.ipc.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("close arrow writer: %w", cerr)
	}
	return err
}

// WriteFile writes rollouts to path durably: to path+".tmp", fsynced, renamed over
// path, and the folder fsynced. On error path is untouched and the temp file removed.
func WriteFile(path string, rollouts []*Rollout, opts WriteOptions) (err error) {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("create rollout file: %w", err)
	}
	defer func() {
		if err != nil && f != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	w, err := NewWriter(f, opts)
	if err != nil {
		return err
	}
	for _, r := range rollouts {
		if err := w.Write(r); err != nil {
			w.Close()
			return fmt.Errorf("write rollout file %s: %w", path, err)
		}
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("write rollout file %s: %w", path, err)
	}
	if err := fsutil.Commit(f, path); err != nil {
		f = nil
		return fmt.Errorf("write rollout file: %w", err)
	}
	return nil
}
