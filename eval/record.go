package eval

import (
	"fmt"
	"math"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/hindsight-ai/hindsight/internal/fsutil"
	"github.com/hindsight-ai/hindsight/internal/wlog"
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

// Recorder appends results to evals.jsonl, one fsynced line each (a line log,
// internal/wlog), and keeps the latest and the best result per suite. It is safe for
// concurrent use: command suites finish on their own goroutines.
type Recorder struct {
	mu     sync.Mutex
	log    *wlog.Log
	latest map[string]Result
	best   map[string]Result
	// byStep holds each checkpoint's primary metric per suite (the newest result
	// of the suite for that step), for the gateway's A/B rule.
	byStep map[int64]map[string]float64
	n      int
}

// OpenRecorder opens (or creates) path and reads the results already in it, so the
// latest and best results survive a restart. By the line log's rule a torn last line
// (a crash mid-write) is cut off, and an undecodable line with lines after it is an
// error naming the line and its byte offset, the file left as it is.
func OpenRecorder(path string) (*Recorder, error) {
	r := &Recorder{latest: map[string]Result{}, best: map[string]Result{}, byStep: map[int64]map[string]float64{}}
	if err := fsutil.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("open evals %s: %w", path, err)
	}
	log, err := wlog.Open(path, wlog.Options{Replay: wlog.JSON(func(res *Result) error {
		r.note(*res)
		return nil
	})})
	if err != nil {
		return nil, fmt.Errorf("open evals: %w", err)
	}
	r.log = log
	return r, nil
}

// Record appends res durably and updates the latest and best results. A failed
// append (a full disk) is cut off, so the file ends with whole lines and res is not
// counted.
func (r *Recorder) Record(res Result) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.log.AppendJSON(res); err != nil {
		return fmt.Errorf("append eval result: %w", err)
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
	if r.byStep[res.Step] == nil {
		r.byStep[res.Step] = map[string]float64{}
	}
	r.byStep[res.Step][res.Suite] = v
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

// Scores returns the primary metric of each suite evaluated on the checkpoint of
// step (failed evals left out): empty when none is recorded.
func (r *Recorder) Scores(step int64) map[string]float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]float64{}
	for s, v := range r.byStep[step] {
		out[s] = v
	}
	return out
}

// Count returns how many results evals.jsonl holds.
func (r *Recorder) Count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

// Path returns the evals.jsonl path.
func (r *Recorder) Path() string { return r.log.Path() }

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
	return r.log.Close()
}
