package gateway

import (
	"fmt"
)

// A/B metrics: what the promotion rule compares (ABConfig.Metric).
const (
	MetricThumbsUp = "thumbs_up" // share of rated sessions rated +1 (Wilson, Newcombe)
	MetricReward   = "reward"    // mean outcome reward from /sessions/{id}/close (bootstrap)
)

// ABConfig is gateway.ab: a candidate checkpoint served beside the default one to
// a share of new sessions, and the rule that promotes or rolls it back
// (docs/gateway.md "Which checkpoint do people prefer"). Off by default: the
// gateway then serves the newest checkpoint, as without it.
type ABConfig struct {
	// Enabled turns A/B serving on: each new checkpoint becomes the candidate
	// (when none is being tested) and the default keeps serving until the
	// candidate is promoted.
	Enabled bool `yaml:"enabled"`
	// Share is the fraction of new sessions served by the candidate (0 < share < 1).
	Share float64 `yaml:"share"`
	// Seed makes the assignment reproducible: a session goes to the candidate when
	// abstat.Unit(seed, session id) < share.
	Seed uint64 `yaml:"seed"`
	// Metric is what the rule compares: thumbs_up (the share of rated sessions
	// rated +1) or reward (the mean reward of closed sessions).
	Metric string `yaml:"metric"`
	// MinSessions is the sessions per arm with the metric's data (rated, or closed
	// with a reward) before the rule decides.
	MinSessions int64 `yaml:"min_sessions"`
	// MaxSessions, when > 0, rolls back a candidate still undecided once both arms
	// have this many sessions with data.
	MaxSessions int64 `yaml:"max_sessions"`
	// Margin is how far the candidate's rate (or mean reward) may be below the
	// default's: promoted when the lower bound of the difference (candidate −
	// default) at Confidence is above −margin, rolled back when its upper bound is
	// below −margin.
	Margin float64 `yaml:"margin"`
	// Confidence is the two-sided level of the intervals (0.5 < confidence < 1).
	Confidence float64 `yaml:"confidence"`
	// EvalMargin: no promotion when, in any eval suite with a result for both
	// checkpoints, the candidate's primary metric is below the default's by more
	// than this (a regression rolls it back); a candidate whose evals are not in
	// yet waits for them.
	EvalMargin float64 `yaml:"eval_margin"`
	// Auto lets the rule decide; false: only `hindsight ab promote|rollback`.
	Auto bool `yaml:"auto"`
	// Resamples is the bootstrap's resample count (metric reward and the outcome
	// intervals in status).
	Resamples int `yaml:"resamples"`
	// CandidatePrefix is, with gateway.upstream, how candidates are named on the
	// engine: a candidate of step N is the model (a vLLM LoRA adapter the
	// vllm_lora engine hooks load) <candidate_prefix>-step-<N>; empty:
	// upstream_model.
	CandidatePrefix string `yaml:"candidate_prefix"`
}

// DefaultABConfig returns gateway.ab's defaults (off).
func DefaultABConfig() ABConfig {
	return ABConfig{Share: 0.5, Seed: 1, Metric: MetricThumbsUp, MinSessions: 100, Margin: 0.05,
		Confidence: 0.95, Auto: true, Resamples: 2000}
}

// Validate names the first bad field (with its gateway.ab. path).
func (c ABConfig) Validate() error {
	if !c.Enabled {
		return nil
	}
	switch {
	case !(c.Share > 0 && c.Share < 1):
		return fmt.Errorf("gateway.ab.share %v: want 0 < share < 1", c.Share)
	case c.Metric != MetricThumbsUp && c.Metric != MetricReward:
		return fmt.Errorf("gateway.ab.metric %q: want %s or %s", c.Metric, MetricThumbsUp, MetricReward)
	case c.MinSessions < 1:
		return fmt.Errorf("gateway.ab.min_sessions %d: want ≥ 1", c.MinSessions)
	case c.MaxSessions < 0 || (c.MaxSessions > 0 && c.MaxSessions < c.MinSessions):
		return fmt.Errorf("gateway.ab.max_sessions %d: want 0 (none) or ≥ min_sessions (%d)", c.MaxSessions, c.MinSessions)
	case !(c.Margin >= 0):
		return fmt.Errorf("gateway.ab.margin %v: want ≥ 0", c.Margin)
	case !(c.Confidence > 0.5 && c.Confidence < 1):
		return fmt.Errorf("gateway.ab.confidence %v: want 0.5 < confidence < 1", c.Confidence)
	case !(c.EvalMargin >= 0):
		return fmt.Errorf("gateway.ab.eval_margin %v: want ≥ 0", c.EvalMargin)
	case c.Resamples < 100 || c.Resamples > 100000:
		return fmt.Errorf("gateway.ab.resamples %d: want in [100, 100000]", c.Resamples)
	}
	return nil
}

// candidateModel is the engine's model id of a candidate of step (upstream:
// the default model id the engine began with).
func (c ABConfig) candidateModel(upstream string, step int64) string {
	prefix := c.CandidatePrefix
	if prefix == "" {
		prefix = upstream
	}
	return fmt.Sprintf("%s-step-%d", prefix, step)
}
