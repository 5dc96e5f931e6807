package gpubench

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/hindsight-ai/hindsight/internal/fsutil"
)

// Stage statuses.
const (
	StatusOK      = "ok"
	StatusFailed  = "failed"
	StatusTimeout = "timeout"
	StatusSkipped = "skipped"
)

// StageResult is one stage's entry of results.json.
type StageResult struct {
	Name    string  `json:"name"`
	Status  string  `json:"status"`
	Error   string  `json:"error,omitempty"`
	Seconds float64 `json:"seconds"`
	Budget  float64 `json:"budget_seconds"`
	// Data is what the stage measured, in the order it measured it (a stage that
	// fails half-way keeps what it had).
	Data []Record `json:"data"`
}

// Record is one measurement: a name and its fields.
type Record struct {
	What   string         `json:"what"`
	Fields map[string]any `json:"fields"`
}

// Results is results.json.
type Results struct {
	Started  time.Time      `json:"started"`
	Mode     string         `json:"mode"` // "gpu" or "cpu-rehearsal"
	Backend  string         `json:"backend"`
	Device   string         `json:"device"`
	Env      map[string]any `json:"env"`
	Stages   []*StageResult `json:"stages"`
	Finished *time.Time     `json:"finished,omitempty"`

	mu   sync.Mutex
	path string
}

func newResults(dir, mode string) *Results {
	return &Results{Started: time.Now().UTC(), Mode: mode, Env: map[string]any{}, path: filepath.Join(dir, "results.json")}
}

// add appends a record to stage st and rewrites results.json.
func (r *Results) add(st *StageResult, what string, fields map[string]any) error {
	r.mu.Lock()
	st.Data = append(st.Data, Record{What: what, Fields: fields})
	r.mu.Unlock()
	return r.save()
}

// save writes results.json durably (temp, fsync, rename, fsync dir).
func (r *Results) save() error {
	r.mu.Lock()
	raw, err := json.MarshalIndent(r, "", "  ")
	r.mu.Unlock()
	if err != nil {
		return fmt.Errorf("marshal results: %w", err)
	}
	if err := fsutil.WriteFileBytes(r.path, append(raw, '\n'), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", r.path, err)
	}
	return nil
}

// Stage returns the named stage's result, or nil.
func (r *Results) Stage(name string) *StageResult {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.Stages {
		if s.Name == name {
			return s
		}
	}
	return nil
}
