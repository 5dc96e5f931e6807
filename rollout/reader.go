package rollout

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// ReadOptions are the checks that depend on the model a file is read for.
type ReadOptions struct {
	// VocabSize, when > 0, is the model's vocabulary size: token ids must be below it
	// (E_TOKEN_RANGE). Negative ids are always rejected.
	VocabSize int
	// Tokenizer, when non-empty, is the model's tokenizer fingerprint: a non-null
	// tokenizer value must equal it (E_TOKENIZER).
	Tokenizer string
}

// Format is one of the two Arrow IPC formats.
type Format int

// The Arrow IPC formats. FormatFile is the zero value.
const (
	// FormatFile is the random-access file format: magic "ARROW1", the stream, a
	// footer indexing the record batches, magic again.
	FormatFile Format = iota
	// FormatStream is the streaming format: a schema message, record batch messages,
	// an end-of-stream marker.
	FormatStream
)

// String returns "file" or "stream".
func (f Format) String() string {
	switch f {
	case FormatFile:
		return "file"
	case FormatStream:
		return "stream"
	}
	return fmt.Sprintf("Format(%d)", int(f))
}

// fileMagic opens (and, without its padding, closes) an Arrow IPC file.
var fileMagic = []byte("ARROW1\x00\x00")

// streamContinuation opens every message of an Arrow IPC stream (since Arrow 0.15).
var streamContinuation = []byte{0xff, 0xff, 0xff, 0xff}

// metadataSizeLimit bounds a message's flatbuffer metadata; ours are a few KiB.
const metadataSizeLimit = 64 << 20

// Reader streams the rollouts of one Arrow IPC file, file or stream format, record
// batch by record batch: it holds one batch in memory (two, briefly, while the next
// is read), never the whole file, so its memory is bounded by the collector's batch
// size (16 rollouts of 100k tokens ≈ 13 MB with the Writer's default).
//
//	r, err := rollout.OpenReader(path, opts) // err is a file-level *Problem
//	if err != nil { … }
//	defer r.Close()
//	for r.Next() {
//		if ps := r.Problems(); ps != nil { raw := r.RawRow(); …; raw.Release(); continue }
//		use(r.Rollout())
//	}
//	if err := r.Err(); err != nil { … } // a file-level *Problem
//
// One buffer holds each batch's body and is reused for the next batch (as are the
// buffers that int64 token ids and float64 log-probs are converted into, once per
// batch), so a Rollout's Tokens and LogProbs (and RawRow's data) are overwritten once
// the Reader moves to the next batch: Clone a rollout to keep it. Dictionaries get
// buffers of their own: later batches refer to them. A stream that ends between two
// messages without the end-of-stream marker is read as complete (the Arrow spec
// allows it; collectors rename finished files into place). A rollout_id seen twice is
// E_DUP_ID on its second and later rows, whether or not the first row was valid.
//
// A Reader is not safe for concurrent use.
type Reader struct {
	path   string
	opts   ReadOptions
	f      *os.File
	src    *recordingFile
	format Format
	schema *arrow.Schema
	cols   columns

	msgs   *msgSource
	stream *ipc.Reader

	batch arrow.RecordBatch // current batch, owned (one reference)
	nb    int               // batches loaded so far
	bc    batchCols
	conv  convBuffers // token ids and log-probs converted to int32, float32
	brow  int         // current row within batch
	base  int         // file row of the batch's first row

	cur      *Rollout
	problems []*Problem
	seen     map[string]int // rollout_id → first row
	err      error          // a file-level *Problem once Next has failed
	done     bool
}

// OpenReader opens the rollout file at path, detects its format from the leading bytes
// and checks its schema (CheckSchema). Every error it returns is a file-level *Problem
// with File = path: E_IO, E_NOT_ARROW, E_TRUNCATED, E_MISSING_COLUMN, E_COLUMN_TYPE or
// E_SCHEMA_VERSION.
func OpenReader(path string, opts ReadOptions) (*Reader, error) {
	r := &Reader{path: path, opts: opts, brow: -1, seen: make(map[string]int)}
	if p := r.open(); p != nil {
		r.Close()
		p.File, p.Row = path, -1
		return nil, p
	}
	return r, nil
}

// open detects the format and reads the schema.
//
// Both formats are read as a stream of messages through msgSource, which checks each
// message's flatbuffer metadata before arrow decodes it: arrow-go trusts the vector
// lengths in it and would try to allocate whatever a corrupt file claims. A stream is
// read from its first byte; a file-format file through its footer (reader_file.go):
// the footer's schema first, then the dictionaries and record batches its blocks
// locate, each block checked to lie inside the file.
func (r *Reader) open() (p *Problem) {
	f, err := os.Open(r.path)
	if err != nil {
		return &Problem{Code: EIO, Reason: fmt.Sprintf("open file: %v", err)}
	}
	r.f = f
	r.src = &recordingFile{f: f}
	st, err := f.Stat()
	if err != nil {
		return &Problem{Code: EIO, Reason: fmt.Sprintf("stat file: %v", err)}
	}
	size := st.Size()
	head := make([]byte, len(fileMagic))
	n, err := r.src.ReadAt(head, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return &Problem{Code: EIO, Reason: fmt.Sprintf("read file: %v", err)}
	}
	head = head[:n]
	switch {
	case n == 0:
		return &Problem{Code: ENotArrow, Reason: "file is empty"}
	case bytes.HasPrefix(head, fileMagic[:6]):
		r.format = FormatFile
	case bytes.HasPrefix(head, streamContinuation):
		r.format = FormatStream
	case bytes.HasPrefix(fileMagic, head) || bytes.HasPrefix(streamContinuation, head):
		return &Problem{Code: ETruncated, Reason: fmt.Sprintf("file has only %d bytes", n)}
	default:
		return &Problem{Code: ENotArrow,
			Reason: fmt.Sprintf("leading bytes %q are neither the Arrow file magic nor a stream message", head)}
	}

	var footerStart int64
	switch r.format {
	case FormatFile:
		var ft fileFooter
		var p *Problem
		if footerStart, ft, p = r.readFooter(size); p != nil {
			return p
		}
		r.msgs = newFileMsgSource(r.src, ft)
	case FormatStream:
		r.msgs = &msgSource{r: bufio.NewReaderSize(io.NewSectionReader(r.src, 0, size), 64<<10), remain: size, mem: memory.DefaultAllocator}
	}

	defer func() {
		if v := recover(); v != nil {
			p = &Problem{Code: ETruncated, Reason: fmt.Sprintf("corrupt schema message: %v", v)}
		}
	}()
	sr, err := ipc.NewReaderFromMessageReader(r.msgs, ipc.WithAllocator(memory.DefaultAllocator))
	if err != nil {
		switch {
		case r.ioProblem() != nil:
			return r.ioProblem()
		case errors.Is(err, io.ErrUnexpectedEOF):
			return &Problem{Code: ETruncated, Reason: fmt.Sprintf("file ends inside the schema message: %v", err)}
		case errors.Is(err, io.EOF):
			return &Problem{Code: ETruncated, Reason: "the stream has no schema message"}
		case r.format == FormatStream:
			return &Problem{Code: ENotArrow, Reason: fmt.Sprintf("invalid arrow stream: %v", err)}
		default:
			return &Problem{Code: ETruncated, Reason: fmt.Sprintf("corrupt schema message: %v", err)}
		}
	}
	r.stream, r.schema = sr, sr.Schema()
	if r.format == FormatFile {
		if p := r.checkLeadingSchema(footerStart); p != nil {
			return p
		}
	}
	cols, sp := checkSchema(r.schema)
	if sp != nil {
		return sp
	}
	r.cols = cols
	return nil
}

// Format returns the IPC format of the file.
func (r *Reader) Format() Format { return r.format }

// Schema returns the file's schema, extra columns included.
func (r *Reader) Schema() *arrow.Schema { return r.schema }

// Next advances to the next row. It returns false at the end of the file or on a
// file-level error; Err tells which.
func (r *Reader) Next() (ok bool) {
	if r.done {
		return false
	}
	defer func() {
		// Defence in depth: checkBatch should have caught any corruption that could
		// make decoding index out of range.
		if v := recover(); v != nil {
			r.fail(&Problem{Code: ETruncated, Reason: fmt.Sprintf("batch %d is corrupt: %v", r.nb-1, v)})
			ok = false
		}
	}()
	for r.batch == nil || r.brow+1 >= int(r.batch.NumRows()) {
		if !r.nextBatch() {
			r.done = true
			r.cur, r.problems = nil, nil
			return false
		}
	}
	r.brow++
	r.decode()
	return true
}

// Row returns the 0-based index in the file of the current row.
func (r *Reader) Row() int { return r.base + r.brow }

// Rollout returns the current row, decoded as far as it could be even when it has
// problems (nil after Next returned false). It is valid until the next call to Next:
// the reader may reuse it, and its Tokens and LogProbs point into the current record
// batch (its strings and Segments are copies). Use Clone to keep it.
func (r *Reader) Rollout() *Rollout { return r.cur }

// Problems returns the row-level problems of the current row, with File, Row and
// RolloutID set, or nil when the row is valid.
func (r *Reader) Problems() []*Problem { return r.problems }

// RawRow returns the current row as a zero-copy one-row slice of its record batch, in
// the file's own schema (for copying a rejected row to failed/). Call it only after
// Next returned true. The caller must Release it.
func (r *Reader) RawRow() arrow.RecordBatch {
	return r.batch.NewSlice(int64(r.brow), int64(r.brow+1))
}

// Err returns nil after a clean end of the file, or the file-level *Problem (E_IO,
// E_TRUNCATED) that stopped Next.
func (r *Reader) Err() error { return r.err }

// Close releases the current batch and closes the file. It is safe to call twice.
func (r *Reader) Close() error {
	r.releaseBatch()
	if r.stream != nil {
		r.stream.Release() // releases r.msgs too
		r.stream = nil
	} else if r.msgs != nil {
		r.msgs.Release()
	}
	if r.msgs != nil {
		r.msgs.recycle()
	}
	r.msgs = nil
	r.done = true
	if r.f == nil {
		return nil
	}
	err := r.f.Close()
	r.f = nil
	if err != nil {
		return fmt.Errorf("close rollout file: %w", err)
	}
	return nil
}

func (r *Reader) fail(p *Problem) {
	p.File, p.Row = r.path, -1
	r.err, r.done = p, true
	r.cur, r.problems = nil, nil
	r.releaseBatch()
}

func (r *Reader) releaseBatch() {
	if r.batch != nil {
		r.base += int(r.batch.NumRows())
		r.batch.Release()
		r.batch = nil
	}
	r.brow = -1
}

// ioProblem returns E_IO when the operating system failed a read.
func (r *Reader) ioProblem() *Problem {
	if r.src.err == nil {
		return nil
	}
	return &Problem{Code: EIO, Reason: fmt.Sprintf("read file: %v", r.src.err)}
}

// nextBatch releases the current batch and loads the next one; false at the end or
// on a file-level error (then r.err is set).
func (r *Reader) nextBatch() bool {
	r.releaseBatch()
	if r.stream == nil {
		return false
	}
	if !r.stream.Next() {
		err := r.stream.Err()
		switch {
		case err == nil:
		case r.ioProblem() != nil:
			r.fail(r.ioProblem())
		case errors.Is(err, io.ErrUnexpectedEOF):
			r.fail(&Problem{Code: ETruncated, Reason: fmt.Sprintf("file ends inside the message after batch %d (row %d): %v", r.nb, r.base, err)})
		default:
			r.fail(&Problem{Code: ETruncated, Reason: fmt.Sprintf("read batch %d: %v", r.nb, err)})
		}
		return false
	}
	rec := r.stream.RecordBatch()
	rec.Retain()
	r.nb++
	r.batch = rec
	bc, err := checkBatch(rec, &r.cols, &r.conv)
	if err != nil {
		r.fail(&Problem{Code: ETruncated, Reason: fmt.Sprintf("batch %d is corrupt: %v", r.nb-1, err)})
		return false
	}
	r.bc = bc
	return true
}

// decode fills r.cur and r.problems from row r.brow of the batch.
func (r *Reader) decode() {
	ro, problems := r.bc.decode(r.brow)
	problems = append(problems, Validate(ro, r.opts)...)
	if ro.ID != "" {
		if first, dup := r.seen[ro.ID]; dup {
			problems = append(problems, &Problem{Code: EDupIDInFile, Column: ColRolloutID,
				Reason: fmt.Sprintf("rollout_id %q already appeared at row %d", ro.ID, first)})
		} else {
			r.seen[ro.ID] = r.Row()
		}
	}
	for _, p := range problems {
		p.File, p.Row, p.RolloutID = r.path, r.Row(), ro.ID
	}
	r.cur = ro
	r.problems = nil
	if len(problems) > 0 {
		r.problems = problems
	}
}

// recordingFile remembers the first error the operating system returned, so that a
// failed read (E_IO) is told apart from a malformed file (E_TRUNCATED).
type recordingFile struct {
	f   *os.File
	err error
}

func (s *recordingFile) note(err error) {
	if err != nil && !errors.Is(err, io.EOF) && s.err == nil {
		s.err = err
	}
}

func (s *recordingFile) ReadAt(p []byte, off int64) (int, error) {
	n, err := s.f.ReadAt(p, off)
	s.note(err)
	return n, err
}

// ValidateFile reads the whole file at path and returns how many rows it read and
// every problem found, file-level ones included (then rows counts the rows read before
// it). err is only for what is not a problem of the file: the file does not exist or
// cannot be stat'ed.
func ValidateFile(path string, opts ReadOptions) (rows int, problems []*Problem, err error) {
	if _, err := os.Stat(path); err != nil {
		return 0, nil, fmt.Errorf("validate rollout file: %w", err)
	}
	r, err := OpenReader(path, opts)
	if err != nil {
		var p *Problem
		if errors.As(err, &p) {
			return 0, []*Problem{p}, nil
		}
		return 0, nil, fmt.Errorf("validate rollout file: %w", err)
	}
	defer r.Close()
	for r.Next() {
		rows++
		problems = append(problems, r.Problems()...)
	}
	if err := r.Err(); err != nil {
		var p *Problem
		if errors.As(err, &p) {
			problems = append(problems, p)
		} else {
			return rows, problems, fmt.Errorf("validate rollout file: %w", err)
		}
	}
	return rows, problems, nil
}
