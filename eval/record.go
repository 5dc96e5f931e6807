package eval

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/hindsight-ai/hindsight/internal/fsutil"
)

// Result is one suite's eval of one checkpoint: one line of evals.jsonl.
type Result struct {
	Time       time.Time          `json:"time"`
	Step       int64              `json:"step"`
	Checkpoint string             `json:"checkpoint"`
	Suite      string             `json:"suite"`
	Kind       string             `json:"kind"`
	Metrics    map[string]float64 `json:"metrics,omitempty"`
	// Primary is the name of the metric that ranks checkpoints for this suite.
	Primary string `json:"primary,omitempty"`
	// Complete is false when the budget ran out first: the metrics cover the part done.
	Complete bool    `json:"complete"`
	Took     float64 `json:"took_s"`
	Error    string  `json:"error,omitempty"`
}

// Score returns the result's primary metric; ok is false for a failed result or one
// without that metric.
func (r Result) Score() (v float64, ok bool) {
	if r.Error != "" {
		return 0, false
	}
	v, ok = r.Metrics[r.Primary]
	return v, ok && !math.IsNaN(v)
}

// Recorder appends results to evals.jsonl, one fsynced line each, and keeps the latest
// and the best result per suite. It is safe for concurrent use: command suites finish
// on their own goroutines.
type Recorder struct {
	mu     sync.Mutex
	path   string
	f      *os.File
	latest map[string]Result
	best   map[string]Result
	n      int
}

// OpenRecorder opens (or creates) path and reads the results already in it, so the
// latest and best results survive a restart. A torn last line (a crash mid-write) is
// cut off; any other undecodable line is an error naming the line.
func OpenRecorder(path string) (*Recorder, error) {
	r := &Recorder{path: path, latest: map[string]Result{}, best: map[string]Result{}}
	if err := fsutil.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("open evals %s: %w", path, err)
	}
	_, statErr := os.Stat(path)
	f, err := fsutil.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open evals %s: %w", path, err)
	}
	good, err := r.load(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("read evals %s: %w", path, err)
	}
	if err := f.Truncate(good); err != nil {
		f.Close()
		return nil, fmt.Errorf("cut torn line of evals %s: %w", path, err)
	}
	if _, err := f.Seek(good, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("open evals %s: %w", path, err)
	}
	if errors.Is(statErr, os.ErrNotExist) {
		if err := f.Sync(); err == nil {
			err = fsutil.SyncDir(filepath.Dir(path))
		}
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("create evals %s: %w", path, err)
		}
	}
	r.f = f
	return r, nil
}

// load reads every complete line of f and returns the offset after the last one.
func (r *Recorder) load(f *os.File) (int64, error) {
	br := bufio.NewReader(f)
	var off int64
	for line := 1; ; line++ {
		b, err := br.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			return off, nil // a line without its newline is torn: dropped
		}
		if err != nil {
			return 0, err
		}
		var res Result
		if len(bytes.TrimSpace(b)) > 0 {
			if err := json.Unmarshal(b, &res); err != nil {
				return 0, fmt.Errorf("line %d: %w", line, err)
			}
			r.note(res)
		}
		off += int64(len(b))
	}
}

// Record appends res durably and updates the latest and best results.
func (r *Recorder) Record(res Result) error {
	b, err := json.Marshal(res)
	if err != nil {
		return fmt.Errorf("encode eval result: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := r.f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("append to %s: %w", r.path, err)
	}
	if err := r.f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", r.path, err)
	}
	r.note(res)
	return nil
}

func (r *Recorder) note(res Result) {
	r.n++
	r.latest[res.Suite] = res
	v, ok := res.Score()
	if !ok {
		return
	}
	if b, had := r.best[res.Suite]; !had {
		r.best[res.Suite] = res
	} else if bv, _ := b.Score(); v > bv {
		r.best[res.Suite] = res
	}
}

// Latest returns the newest result of each suite, sorted by suite name.
func (r *Recorder) Latest() []Result { return r.sorted(r.latest) }

// Best returns, per suite, the result with the highest primary metric so far.
func (r *Recorder) Best() []Result { return r.sorted(r.best) }

// Count returns how many results evals.jsonl holds.
func (r *Recorder) Count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

// Path returns the evals.jsonl path.
func (r *Recorder) Path() string { return r.path }

func (r *Recorder) sorted(m map[string]Result) []Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Result, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Suite < out[j].Suite })
	return out
}

// Close closes evals.jsonl.
func (r *Recorder) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.f.Close()
}
