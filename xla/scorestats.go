package xla

import (
	"fmt"
	"time"

	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/hindsight-ai/hindsight/internal/benchutil"
)

// ScoreStats says where a Scorer's time went since it was made (or since
// ResetStats): compiling executables, running them, and copying between host and
// device. A program is compiled the first time a shape bucket is met; its compile
// is timed apart from its first run (GoMLX's PreCompile), so ExecuteSeconds is the
// device's work alone.
type ScoreStats struct {
	Passes    int // Score calls and hinted segments run
	Chunks    int // chunk steps executed
	Positions int // positions the chunk steps ran, bucket padding included
	Tokens    int // positions asked for (Positions − Tokens is padding)
	// Programs is the number of executables compiled (chunk steps, cache zeros and grows).
	Programs       int
	CompileSeconds float64 // building and compiling programs
	// CompileCPUSeconds is the process's CPU time (every thread's) while it
	// compiled: on a loaded machine the comparable measure of compile work.
	CompileCPUSeconds float64
	ExecuteSeconds    float64 // running chunk steps and cache grows
	// CopySeconds is host↔device traffic outside the programs: per-chunk inputs
	// (tokens, targets, start) and the chunk's log-probs back to the host.
	CopySeconds  float64
	CacheSeconds float64 // of ExecuteSeconds, making and growing KV caches
	// Attention counts the chunk steps' attention work (attention_blocked.go).
	Attention AttentionStats
}

// AttentionStats count chunk executions against a KV cache, for benchmarks.
type AttentionStats struct {
	Steps int64 // chunk executions
	// AttendedPairs is Σ over chunk executions of chunk × attended cache positions
	// (padding included): query-key pairs whose scores were computed. Causal
	// attention over T positions needs T(T+1)/2.
	AttendedPairs int64
	// Programs is the number of distinct step shapes run: (chunk, capacity, span)
	// for a Scorer, (chunk, cut) for a Trainer's gradient passes. A Scorer's count
	// is since it was made (ResetStats does not forget the shapes seen).
	Programs int
}

// String is one line for logs.
func (st ScoreStats) String() string {
	return fmt.Sprintf("%d passes, %d chunks (%d positions for %d tokens), %d programs compiled in %.2fs, execute %.2fs (caches %.2fs), copies %.3fs",
		st.Passes, st.Chunks, st.Positions, st.Tokens, st.Programs, st.CompileSeconds, st.ExecuteSeconds, st.CacheSeconds, st.CopySeconds)
}

// Stats returns the Scorer's ScoreStats so far.
func (s *Scorer) Stats() ScoreStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// ResetStats zeroes the Scorer's ScoreStats (compiled programs stay compiled).
func (s *Scorer) ResetStats() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats = ScoreStats{}
}

// timedExec runs e on args, compiling it first (timed apart) when key — the shape
// bucket the arguments fall in — is new, and adds the times to s.stats. cache says
// whether e makes or grows a KV cache (else it is a chunk step).
func (s *Scorer) timedExec(e *modelExec, key string, cache bool, args []any) ([]*tensors.Tensor, error) {
	out, d, err := s.execTimed(e, key, args)
	if err != nil {
		return out, err
	}
	if cache {
		s.stats.CacheSeconds += d
	} else {
		s.stats.Chunks++
	}
	return out, nil
}

// execTimed is timedExec without counting the execution as a chunk step or a cache
// operation: it returns the execution's seconds (a part of a chunk step: the layer
// programs, scorer_layers.go).
func (s *Scorer) execTimed(e *modelExec, key string, args []any) ([]*tensors.Tensor, float64, error) {
	if s.compiled == nil {
		s.compiled = map[string]bool{}
	}
	if !s.compiled[key] && s.device == 0 {
		// (PreCompile places arguments on device 0 only: on other devices the
		// compile time counts as execution.)
		t0, c0 := time.Now(), benchutil.CPUTime()
		if err := e.PreCompile(args...); err != nil {
			return nil, 0, fmt.Errorf("compile %s: %w", key, err)
		}
		s.compiled[key] = true
		s.stats.Programs++
		s.stats.CompileSeconds += time.Since(t0).Seconds()
		s.stats.CompileCPUSeconds += (benchutil.CPUTime() - c0).Seconds()
	}
	t0 := time.Now()
	out, err := e.ExecOn(s.device, args...)
	d := time.Since(t0).Seconds()
	s.stats.ExecuteSeconds += d
	return out, d, err
}

// count adds one chunk execution to the gradient pass's stats.
func (p *gradPass) count(n, cut int) {
	p.stats.Steps++
	p.stats.AttendedPairs += int64(n) * int64(cut)
	if key := [2]int{n, cut}; !p.seen[key] {
		p.seen[key] = true
		p.stats.Programs++
	}
}

// GradientStats counts the gradient passes' chunk executions against a KV cache
// (truncated and exact backprop) since the Trainer was made: AttendedPairs sums
// chunk × cache positions attended; Programs counts distinct (chunk, cut) shapes
// (each mode compiles its own). For benchmarks.
func (tr *Trainer) GradientStats() AttentionStats { return tr.grad.stats }
