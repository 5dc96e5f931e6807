package eval

import (
	"fmt"
	"time"

	"github.com/hindsight-ai/hindsight/toolworld"
)

// Suite kinds.
const (
	KindToolworld  = "toolworld"  // the bundled task world's split, sampled with the policy
	KindLikelihood = "likelihood" // mean log-prob per trainable token of reference rollouts
	KindCommand    = "command"    // a child process that prints one JSON object of metrics
)

// Config is the `eval:` section of the daemon's config.
type Config struct {
	// Budget is the share of the wall time since the previous eval that the device
	// suites of one checkpoint may take together (0.1: at most 10%); 0 = no limit.
	Budget float64 `yaml:"budget"`
	// MinBudget is the least time a checkpoint's device suites get whatever Budget
	// allows, so a short interval still evaluates something.
	MinBudget time.Duration `yaml:"min_budget"`
	// EveryCheckpoints evaluates every n-th checkpoint (1: each).
	EveryCheckpoints int `yaml:"every_checkpoints"`
	// Suites run in order after each evaluated checkpoint.
	Suites []SuiteConfig `yaml:"suites"`
}

// SuiteConfig is one eval suite.
type SuiteConfig struct {
	Name string `yaml:"name"` // unique; the `suite` label in metrics and evals.jsonl
	Kind string `yaml:"kind"` // toolworld | likelihood | command

	// likelihood: an Arrow rollout file of reference rollouts.
	File string `yaml:"file"`

	// command: argv, run with HINDSIGHT_CHECKPOINT and HINDSIGHT_STEP set; its stdout
	// must be one JSON object whose numeric fields are the metrics.
	Command []string      `yaml:"command"`
	Timeout time.Duration `yaml:"timeout"`

	// toolworld: which split (default heldout), how many of its tasks (0: all), one
	// episode each, decoded at Temperature (0: greedy) with at most MaxTurnTokens per
	// policy turn (default 48) and MaxTokens per rollout (default 256).
	Split         string  `yaml:"split"`
	Tasks         int     `yaml:"tasks"`
	Temperature   float64 `yaml:"temperature"`
	MaxTurnTokens int     `yaml:"max_turn_tokens"`
	MaxTokens     int     `yaml:"max_tokens"`
	Seed          uint64  `yaml:"seed"`

	// Primary names the metric that ranks checkpoints (higher is better); empty takes
	// the kind's own (toolworld: success, likelihood: mean_logprob, command: score).
	Primary string `yaml:"primary"`
}

// DefaultConfig evaluates each checkpoint within 10% of the time since the last eval
// (at least 5 s), with no suite configured.
func DefaultConfig() Config {
	return Config{Budget: 0.1, MinBudget: 5 * time.Second, EveryCheckpoints: 1, Suites: []SuiteConfig{}}
}

// PrimaryMetric returns the metric that ranks checkpoints for this suite.
func (s SuiteConfig) PrimaryMetric() string {
	if s.Primary != "" {
		return s.Primary
	}
	switch s.Kind {
	case KindToolworld:
		return "success"
	case KindLikelihood:
		return "mean_logprob"
	default:
		return "score"
	}
}

// Validate checks c; errors name the field as prefix + path (e.g. "eval.suites[1].file").
func (c Config) Validate(prefix string) error {
	if c.Budget < 0 || c.Budget > 1 {
		return fmt.Errorf("%sbudget: %g is not a share in [0, 1] (0 = no limit)", prefix, c.Budget)
	}
	if c.MinBudget < 0 {
		return fmt.Errorf("%smin_budget: %v is negative", prefix, c.MinBudget)
	}
	if c.EveryCheckpoints < 1 {
		return fmt.Errorf("%severy_checkpoints: %d must be at least 1", prefix, c.EveryCheckpoints)
	}
	seen := map[string]bool{}
	for i, s := range c.Suites {
		p := fmt.Sprintf("%ssuites[%d].", prefix, i)
		if s.Name == "" {
			return fmt.Errorf("%sname: empty", p)
		}
		if seen[s.Name] {
			return fmt.Errorf("%sname: %q is used by an earlier suite", p, s.Name)
		}
		seen[s.Name] = true
		switch s.Kind {
		case KindLikelihood:
			if s.File == "" {
				return fmt.Errorf("%sfile: a likelihood suite needs an Arrow rollout file", p)
			}
		case KindCommand:
			if len(s.Command) == 0 || s.Command[0] == "" {
				return fmt.Errorf("%scommand: a command suite needs argv (e.g. [\"./eval.sh\"])", p)
			}
			if s.Timeout < 0 {
				return fmt.Errorf("%stimeout: %v is negative", p, s.Timeout)
			}
		case KindToolworld:
			if s.Tasks < 0 {
				return fmt.Errorf("%stasks: %d is negative (0 = the whole split)", p, s.Tasks)
			}
			if s.Temperature < 0 {
				return fmt.Errorf("%stemperature: %g is negative (0 = greedy)", p, s.Temperature)
			}
			if s.MaxTurnTokens < 0 || s.MaxTokens < 0 {
				return fmt.Errorf("%smax_turn_tokens/max_tokens: %d/%d: negative", p, s.MaxTurnTokens, s.MaxTokens)
			}
			if s.Split != "" {
				if _, err := toolworld.Generate(s.Split, 0); err != nil {
					return fmt.Errorf("%ssplit: %w", p, err)
				}
			}
		default:
			return fmt.Errorf("%skind: %q is not one of toolworld, likelihood, command", p, s.Kind)
		}
	}
	return nil
}
