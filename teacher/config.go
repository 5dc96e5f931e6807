package teacher

import (
	"fmt"
	"slices"
	"strings"
)

// Teacher names for Config.Chain.
const (
	TeacherFeedback = "feedback"
	TeacherRules    = "rules"
	TeacherOpenAI   = "openai"
)

var allTeachers = []string{TeacherFeedback, TeacherRules, TeacherOpenAI}

// What Run does with a rollout whose teacher failed on a selection (Config.OnFailure).
const (
	// OnFailureOutcomeOnly: the selection gets no hint; the rollout trains on its
	// outcome signal alone there.
	OnFailureOutcomeOnly = "outcome_only"
	// OnFailureHold: Result.Hold is set; the caller keeps the rollout back and runs it
	// again later (cached hints make the retry cheap).
	OnFailureHold = "hold"
)

// Config is the `teacher:` section of the daemon's config.
type Config struct {
	// Chain lists the teachers asked, in order; the first with a hint wins.
	Chain  []string     `yaml:"chain"`
	Select SelectConfig `yaml:"select"`
	Rules  RulesConfig  `yaml:"rules"`
	OpenAI OpenAIConfig `yaml:"openai"`
	// OnFailure is outcome_only or hold.
	OnFailure string   `yaml:"on_failure"`
	Template  Template `yaml:"template"`
	// MaxHintTokens caps every hint, from any teacher, in policy tokens; longer ones
	// are dropped and counted (Stats.TooLong). 0: no cap.
	MaxHintTokens int        `yaml:"max_hint_tokens"`
	Leak          LeakConfig `yaml:"leak"`
	// CacheDir holds the on-disk cache of LLM hints; empty disables it (the daemon
	// points it under its data directory).
	CacheDir string `yaml:"cache_dir"`
	// Context is what the teacher sees besides a written hint: a successful sibling,
	// the environment's feedback (docs/distillation.md).
	Context ContextConfig `yaml:"context"`
}

// DefaultConfig returns the defaults: the feedback and rules teachers (openai needs a
// server, so it is off until configured), outcome_only, ChatML template, 256-token
// cap, the default selection, rules, LLM client and leak guard settings.
func DefaultConfig() Config {
	return Config{
		Chain:         []string{TeacherFeedback, TeacherRules},
		Select:        DefaultSelectConfig(),
		Rules:         DefaultRulesConfig(),
		OpenAI:        DefaultOpenAIConfig(),
		OnFailure:     OnFailureOutcomeOnly,
		Template:      DefaultTemplate(),
		MaxHintTokens: 256,
		Leak:          DefaultLeakConfig(),
		Context:       DefaultContextConfig(),
	}
}

// Validate reports the first bad field with its path under prefix ("teacher." in the
// daemon's config). The openai section is checked only when the chain uses it.
func (c Config) Validate(prefix string) error {
	if len(c.Chain) == 0 {
		return fmt.Errorf("%schain: at least one teacher is needed (%s)", prefix, strings.Join(allTeachers, ", "))
	}
	for i, name := range c.Chain {
		if !slices.Contains(allTeachers, name) {
			return fmt.Errorf("%schain[%d]: unknown teacher %q (want one of %s)", prefix, i, name, strings.Join(allTeachers, ", "))
		}
		if slices.Index(c.Chain, name) != i {
			return fmt.Errorf("%schain[%d]: teacher %q listed twice", prefix, i, name)
		}
	}
	if err := c.Select.Validate(prefix + "select."); err != nil {
		return err
	}
	if slices.Contains(c.Chain, TeacherRules) {
		if err := c.Rules.Validate(prefix + "rules."); err != nil {
			return err
		}
	}
	if slices.Contains(c.Chain, TeacherOpenAI) {
		if err := c.OpenAI.Validate(prefix + "openai."); err != nil {
			return err
		}
	}
	if c.OnFailure != OnFailureOutcomeOnly && c.OnFailure != OnFailureHold {
		return fmt.Errorf("%son_failure: want %s or %s, got %q", prefix, OnFailureOutcomeOnly, OnFailureHold, c.OnFailure)
	}
	if err := c.Template.Validate(prefix + "template."); err != nil {
		return err
	}
	if c.MaxHintTokens < 0 {
		return fmt.Errorf("%smax_hint_tokens: must be ≥ 0, got %d", prefix, c.MaxHintTokens)
	}
	if err := c.Leak.Validate(prefix + "leak."); err != nil {
		return err
	}
	return c.Context.Validate(prefix + "context.")
}
