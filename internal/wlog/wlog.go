package wlog

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/hindsight-ai/hindsight/internal/fsutil"
)

// Options say how Open reads a log.
type Options struct {
	// Replay is called with each whole line in order, without its newline; the slice
	// is the callee's to keep. An error wrapped by Corrupt says the line cannot be
	// decoded: Open cuts it when it is the last line and refuses the log otherwise.
	// Any other error fails Open wherever the line is. Nil: lines are not read.
	Replay func(line []byte) error
	// Torn, when set, is shown a torn last line (1-based number, bytes) before Open
	// cuts it; an error keeps the file as it is and fails Open.
	Torn func(line int, tail []byte) error
}

// Log is an open line log. Its methods are safe for concurrent use.
type Log struct {
	path string

	mu    sync.Mutex
	f     *os.File // nil once closed
	size  int64    // bytes of whole lines: where the next append goes
	dirty bool     // a failed append whose cut failed may have left bytes past size
}

// Open opens the log at path, creating it (and fsyncing its folder) when absent,
// removes temp files a crashed Rewrite left, replays it through o.Replay and cuts a
// torn last line. See the package comment for the rule.
func Open(path string, o Options) (*Log, error) {
	if err := removeTemps(path); err != nil {
		return nil, err
	}
	f, err := fsutil.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	good, err := replay(path, f, o)
	if err == nil {
		err = cut(path, f, good)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return &Log{path: path, f: f, size: good}, nil
}

// CorruptionError is a line that cannot be decoded and is not the last: the log is
// refused, since reading on would mean dropping the records after it.
type CorruptionError struct {
	Path   string
	Line   int   // 1-based
	Offset int64 // of the line's first byte
	After  int64 // bytes from the end of the line to the end of the file
	Err    error // why the line does not decode
}

func (e *CorruptionError) Error() string {
	return fmt.Sprintf("%s: line %d is corrupt (byte offset %d): %v; %d bytes of later lines follow it, so it is not "+
		"a torn last write: refusing to read on and drop them (nothing was changed; fix or remove the line by hand: "+
		"docs/storage.md, \"The line log\")", e.Path, e.Line, e.Offset, e.Err, e.After)
}

func (e *CorruptionError) Unwrap() error { return e.Err }

// corrupt marks a Replay error as an undecodable line.
type corrupt struct{ err error }

func (c corrupt) Error() string { return c.err.Error() }
func (c corrupt) Unwrap() error { return c.err }

// Corrupt marks err, returned by a Replay function, as "this line cannot be decoded".
func Corrupt(err error) error { return corrupt{err} }

// JSON is a Replay function that decodes each line into a new T and passes it to
// apply; a line that does not decode is Corrupt.
func JSON[T any](apply func(*T) error) func([]byte) error {
	return func(line []byte) error {
		v := new(T)
		if err := json.Unmarshal(line, v); err != nil {
			return Corrupt(err)
		}
		return apply(v)
	}
}

// replay reads every line of f through o and returns the length of the whole lines
// to keep.
func replay(path string, f *os.File, o Options) (int64, error) {
	br := bufio.NewReaderSize(f, 1<<20)
	var good int64
	for n := 1; ; n++ {
		b, err := br.ReadBytes('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, fmt.Errorf("read %s: %w", path, err)
		}
		if errors.Is(err, io.EOF) { // no newline: a torn append, or nothing
			return good, torn(path, o, n, b)
		}
		if o.Replay != nil {
			if rerr := o.Replay(b[:len(b)-1]); rerr != nil {
				var c corrupt
				if !errors.As(rerr, &c) {
					return 0, fmt.Errorf("%s: line %d: %w (byte offset %d)", path, n, rerr, good)
				}
				if _, perr := br.Peek(1); errors.Is(perr, io.EOF) {
					return good, torn(path, o, n, b) // the last line, garbled by a crash mid-write
				}
				st, serr := f.Stat()
				if serr != nil {
					return 0, fmt.Errorf("stat %s: %w", path, serr)
				}
				return 0, &CorruptionError{Path: path, Line: n, Offset: good, After: st.Size() - good - int64(len(b)), Err: c.err}
			}
		}
		good += int64(len(b))
	}
}

// torn asks o.Torn about a torn last line; an empty one is no line.
func torn(path string, o Options, n int, tail []byte) error {
	if len(tail) == 0 || o.Torn == nil {
		return nil
	}
	if err := o.Torn(n, tail); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// cut cuts f back to good bytes, durably, when it is longer.
func cut(path string, f *os.File, good int64) error {
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("stat %s: %w", path, err)
	}
	if st.Size() == good {
		return nil
	}
	if err := f.Truncate(good); err != nil {
		return fmt.Errorf("cut torn last line of %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("cut torn last line of %s: %w", path, err)
	}
	return nil
}

// Append writes rec and a newline at the end of the log and fsyncs it. A failed
// write or fsync is cut off again before Append returns, so the log ends with a
// whole line and a retry is safe. rec must not hold a newline.
func (l *Log) Append(rec []byte) error {
	if bytes.IndexByte(rec, '\n') >= 0 {
		return fmt.Errorf("append %s: the record holds a newline", l.path)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return fmt.Errorf("append %s: %w", l.path, os.ErrClosed)
	}
	if l.dirty { // an earlier failure's cut failed too: cut now, before appending
		if err := l.f.Truncate(l.size); err != nil {
			return fmt.Errorf("append %s: cut the torn record of an earlier failed append: %w", l.path, err)
		}
		l.dirty = false
	}
	line := append(rec[:len(rec):len(rec)], '\n')
	if err := l.write(line); err != nil { // a *fs.PathError: it names the file
		if terr := l.f.Truncate(l.size); terr != nil {
			l.dirty = true
			return fmt.Errorf("%w (and cut off the torn record: %v)", err, terr)
		}
		return err
	}
	l.size += int64(len(line))
	return nil
}

// write writes line at the end of the log and fsyncs it, or fails as an injected
// fault says.
func (l *Log) write(line []byte) error {
	phase := faultFor(l.path)
	if phase == FaultWrite {
		l.f.WriteAt(line[:len(line)/2], l.size)
		return &fs.PathError{Op: "write", Path: l.path, Err: errNoSpace}
	}
	if _, err := l.f.WriteAt(line, l.size); err != nil {
		return err
	}
	if phase == FaultSync {
		return &fs.PathError{Op: "sync", Path: l.path, Err: errNoSpace}
	}
	return l.f.Sync()
}

// AppendJSON appends v encoded as JSON.
func (l *Log) AppendJSON(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("append %s: encode: %w", l.path, err)
	}
	return l.Append(b)
}

// Rewrite replaces the whole log with what fill writes (whole lines): into a temp
// file beside it, fsynced, renamed over the log, the folder fsynced. A crash leaves
// the old log or the new one; a failure before the rename leaves the old one in use
// and no temp file.
func (l *Log) Rewrite(fill func(w io.Writer) error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return fmt.Errorf("rewrite %s: %w", l.path, os.ErrClosed)
	}
	dir, base := filepath.Split(l.path)
	if dir == "" {
		dir = "."
	}
	info, err := l.f.Stat()
	if err != nil {
		return fmt.Errorf("rewrite %s: %w", l.path, err)
	}
	f, err := os.CreateTemp(dir, tempPrefix(base)+"*")
	if err != nil {
		return fmt.Errorf("rewrite %s: %w", l.path, err)
	}
	fail := func(err error) error {
		f.Close()
		os.Remove(f.Name())
		return fmt.Errorf("rewrite %s: %w", l.path, err)
	}
	w := &countWriter{w: bufio.NewWriterSize(f, 1<<20)}
	if err := fill(w); err != nil {
		return fail(err)
	}
	if w.n > 0 && w.last != '\n' {
		return fail(errors.New("the new content does not end with a whole line"))
	}
	if err := w.w.Flush(); err != nil {
		return fail(err)
	}
	if err := f.Chmod(info.Mode().Perm()); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if err := os.Rename(f.Name(), l.path); err != nil {
		return fail(err)
	}
	old := l.f
	l.f, l.size, l.dirty = f, w.n, false
	old.Close()
	if err := fsutil.SyncDir(dir); err != nil {
		return fmt.Errorf("rewrite %s: the new log is in use, but: %w", l.path, err)
	}
	return nil
}

// countWriter counts what goes through it and keeps the last byte.
type countWriter struct {
	w    *bufio.Writer
	n    int64
	last byte
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	if n > 0 {
		c.last = p[n-1]
	}
	return n, err
}

// Size returns the log's length in bytes (its whole lines).
func (l *Log) Size() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.size
}

// Path returns the log's file.
func (l *Log) Path() string { return l.path }

// Close closes the log. Everything appended is already durable.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// tempPrefix is how Rewrite's temp files for the log named base start: hidden, as
// fsutil.WriteFile names its temps.
func tempPrefix(base string) string { return "." + base + ".tmp-" }

// removeTemps deletes the temp files of a Rewrite of the log at path that a crash
// interrupted. They are never needed: until the rename the old log is the whole truth.
func removeTemps(path string) error {
	dir, prefix := filepath.Dir(path), tempPrefix(filepath.Base(path))
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // OpenFile says so
	}
	if err != nil {
		return fmt.Errorf("remove temp files of %s: %w", path, err)
	}
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), prefix) || !e.Type().IsRegular() {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove temp files of %s: %w", path, err)
		}
	}
	return nil
}
