package teacher

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/rollout"
)

// Context sources for ContextConfig.Sources: what the teacher sees besides a written
// hint (after SDPO's use_successful_as_teacher and include_environment_feedback).
const (
	// ContextSibling: a successful rollout of the same task_id from the same step, for
	// a rollout whose reward is below its group's best.
	ContextSibling = "sibling"
	// ContextFeedback: the environment's own output for the failed call (the tool
	// result already in the rollout), before the policy turn that made the call.
	ContextFeedback = "feedback"
)

var allContexts = []string{ContextSibling, ContextFeedback}

// ContextConfig is `teacher.context`.
type ContextConfig struct {
	// Sources are the contexts used, any of sibling and feedback; empty: written hints
	// only (as before the section existed).
	Sources  []string              `yaml:"sources"`
	Sibling  SiblingContextConfig  `yaml:"sibling"`
	Feedback FeedbackContextConfig `yaml:"feedback"`
}

// SiblingContextConfig configures the sibling context.
type SiblingContextConfig struct {
	// Template renders the sibling; it must hold {solution}, which becomes the
	// sibling's policy turns and the tool results they got.
	Template string `yaml:"template"`
	// SuccessReward is the least reward of a successful sibling.
	SuccessReward float64 `yaml:"success_reward"`
	// MaxTokens caps the rendered sibling in policy tokens; a longer one is not used
	// (counted in Stats.Contexts["sibling_too_long"]). 0: no cap.
	MaxTokens int `yaml:"max_tokens"`
}

// FeedbackContextConfig configures the environment-feedback context.
type FeedbackContextConfig struct {
	// Template renders the feedback; it must hold {feedback}.
	Template string `yaml:"template"`
	// MaxTokens caps the feedback text in policy tokens; a longer one keeps its first
	// MaxTokens tokens (error messages say what went wrong first). 0: no cap.
	MaxTokens int `yaml:"max_tokens"`
}

// DefaultContextConfig returns no sources (written hints only), and for when they are
// turned on: the sibling template "A correct attempt:\n{solution}\nNow solve it
// yourself." for siblings with reward ≥ 1 up to 2048 tokens, and the feedback template
// "The environment answered this turn's call with:\n{feedback}" up to 256 tokens.
func DefaultContextConfig() ContextConfig {
	return ContextConfig{
		Sources: []string{}, // not nil: a YAML round trip gives back an empty list
		Sibling: SiblingContextConfig{Template: "A correct attempt:\n{solution}\nNow solve it yourself.",
			SuccessReward: 1, MaxTokens: 2048},
		Feedback: FeedbackContextConfig{Template: "The environment answered this turn's call with:\n{feedback}", MaxTokens: 256},
	}
}

// Validate reports the first bad field, named by its YAML path under prefix.
func (c ContextConfig) Validate(prefix string) error {
	for i, s := range c.Sources {
		if !slices.Contains(allContexts, s) {
			return fmt.Errorf("%ssources[%d]: unknown context %q (want one of %s)", prefix, i, s, strings.Join(allContexts, ", "))
		}
		if slices.Index(c.Sources, s) != i {
			return fmt.Errorf("%ssources[%d]: context %q listed twice", prefix, i, s)
		}
	}
	switch {
	case !strings.Contains(c.Sibling.Template, "{solution}"):
		return fmt.Errorf("%ssibling.template: must hold {solution}", prefix)
	case c.Sibling.MaxTokens < 0:
		return fmt.Errorf("%ssibling.max_tokens: must be ≥ 0, got %d", prefix, c.Sibling.MaxTokens)
	case !strings.Contains(c.Feedback.Template, "{feedback}"):
		return fmt.Errorf("%sfeedback.template: must hold {feedback}", prefix)
	case c.Feedback.MaxTokens < 0:
		return fmt.Errorf("%sfeedback.max_tokens: must be ≥ 0, got %d", prefix, c.Feedback.MaxTokens)
	}
	return nil
}

// Uses reports whether source is one of the configured sources.
func (c ContextConfig) Uses(source string) bool { return slices.Contains(c.Sources, source) }

// Member is what sibling selection needs of one rollout of a step.
type Member struct {
	TaskID    string
	Reward    float64
	HasReward bool
	// Accepted: the journal has accepted the rollout. Only accepted rollouts are ever
	// siblings (a rejected or not yet validated one is no success to learn from).
	Accepted bool
}

// SiblingMiss says why a rollout got no sibling.
type SiblingMiss string

// The reasons a rollout has no sibling; "" when it has one.
const (
	// MissNoTask: no task_id, so no group.
	MissNoTask SiblingMiss = "no_task"
	// MissNoReward: a rollout without a reward cannot be below its group's best.
	MissNoReward SiblingMiss = "no_reward"
	// MissSuccess: the rollout is a success and none of its group did better (SDPO's
	// dont_reprompt_on_self_success).
	MissSuccess SiblingMiss = "success"
	// MissNoSuccess: a failed rollout whose group has no other accepted rollout that
	// reached success_reward (counted: such groups learn from the outcome alone).
	MissNoSuccess SiblingMiss = "no_success"
)

// SiblingPick is the sibling chosen for one rollout of a step.
type SiblingPick struct {
	// Sibling is the index in the step of the successful sibling; -1 when none.
	Sibling int
	// Miss says why there is none.
	Miss SiblingMiss
}

// PickSiblings chooses, for each rollout of one step, the successful sibling its
// teacher sees: another accepted rollout of the same task_id in step, with reward ≥
// successReward and above the rollout's own (so only a rollout below its group's best
// gets one). Of several it takes the highest reward, then the earliest in step order,
// so the choice is deterministic. It never picks a rollout of another task, one not
// accepted, or the rollout itself. It is pure: the caller says what a step is (the
// rollouts of one optimizer step, the group the outcome baseline uses).
func PickSiblings(step []Member, successReward float64) []SiblingPick {
	out := make([]SiblingPick, len(step))
	for i, m := range step {
		out[i] = SiblingPick{Sibling: -1}
		switch {
		case m.TaskID == "":
			out[i].Miss = MissNoTask
			continue
		case !m.HasReward:
			out[i].Miss = MissNoReward
			continue
		}
		for j, s := range step {
			if j == i || !s.Accepted || !s.HasReward || s.TaskID != m.TaskID || s.Reward < successReward || s.Reward <= m.Reward {
				continue
			}
			if k := out[i].Sibling; k < 0 || s.Reward > step[k].Reward {
				out[i].Sibling = j
			}
		}
		switch {
		case out[i].Sibling >= 0:
		case m.Reward >= successReward:
			out[i].Miss = MissSuccess
		default:
			out[i].Miss = MissNoSuccess
		}
	}
	return out
}

// specialRE finds special-token markers and the role word a chat header puts after
// them ("<|im_start|>assistant\n"), which a rendered solution leaves out.
var specialRE = regexp.MustCompile(`(?:<\|[^|<>\s]+\|>|<｜[^｜<>\s]+｜>)(?:(?:system|user|assistant|tool|ipython)\n?)?`)

// RenderSolution returns the text of r's policy turns and the tool results they got,
// from its first policy segment on, one segment a paragraph, with the chat format's
// special-token markers and role headers removed: what a teacher reads as "a correct
// attempt". It leaves out system and user turns (the task prompt is already in the
// teacher's own prefix).
func RenderSolution(tok tokenizer.Tokenizer, r *rollout.Rollout) (string, error) {
	var parts []string
	started := false
	for _, s := range r.Segments {
		started = started || s.Kind.IsPolicy()
		if !started || !(s.Kind.IsPolicy() || s.Kind == rollout.KindToolResult) {
			continue
		}
		text, err := tok.Decode(r.Tokens[s.Start:s.End])
		if err != nil {
			return "", fmt.Errorf("render sibling %s: %w", r.ID, err)
		}
		if text = strings.TrimSpace(specialRE.ReplaceAllString(text, "")); text != "" {
			parts = append(parts, text)
		}
	}
	return strings.Join(parts, "\n"), nil
}

// EnvFeedback returns the environment's own output for the failed calls of sel: the
// text of each tool result with status error that answers a tool call of sel's
// policy turn ([InsertAt, End)), in order, markers removed; "" when the turn made no
// failed call. A tool call whose own status is error counts when its result is in
// the rollout.
func EnvFeedback(tok tokenizer.Tokenizer, r *rollout.Rollout, sel Selection) (string, error) {
	results := pairToolResults(r)
	var parts []string
	for i, s := range r.Segments {
		if s.Kind != rollout.KindToolCall || s.Start < sel.InsertAt || s.End > sel.End || results[i] < 0 {
			continue
		}
		res := r.Segments[results[i]]
		if res.Status != rollout.StatusError && s.Status != rollout.StatusError {
			continue
		}
		text, err := tok.Decode(r.Tokens[res.Start:res.End])
		if err != nil {
			return "", fmt.Errorf("feedback of %s: %w", r.ID, err)
		}
		if text = strings.TrimSpace(specialRE.ReplaceAllString(text, "")); text != "" {
			parts = append(parts, text)
		}
	}
	return strings.Join(parts, "\n"), nil
}

// Context is what the teacher's context holds in front of one policy turn, each part
// "" when absent, in the order the turn shows them: the sibling's solution, the
// environment's feedback, the written hint.
type Context struct {
	Sibling, Feedback, Hint string
}

// Kind names the parts present, joined by "+" ("sibling+feedback+hint"); "" when
// none is: the credit files record it as the selection's context kind.
func (c Context) Kind() string {
	var k []string
	if c.Sibling != "" {
		k = append(k, ContextSibling)
	}
	if c.Feedback != "" {
		k = append(k, ContextFeedback)
	}
	if c.Hint != "" {
		k = append(k, "hint")
	}
	return strings.Join(k, "+")
}

// Shown is the context's text other than the hint, for the answer guard: a hint may
// repeat what the teacher is shown anyway.
func (c Context) Shown() []string {
	var s []string
	for _, x := range []string{c.Sibling, c.Feedback} {
		if x != "" {
			s = append(s, x)
		}
	}
	return s
}

// text renders the context as one turn's text: the sibling and feedback in their
// templates, then the label and the hint, paragraphs apart.
func (c Context) text(cfg ContextConfig, label string) string {
	var parts []string
	if c.Sibling != "" {
		parts = append(parts, strings.ReplaceAll(cfg.Sibling.Template, "{solution}", c.Sibling))
	}
	if c.Feedback != "" {
		parts = append(parts, strings.ReplaceAll(cfg.Feedback.Template, "{feedback}", c.Feedback))
	}
	if c.Hint != "" || len(parts) == 0 {
		parts = append(parts, label+strings.TrimSpace(c.Hint))
	}
	return strings.Join(parts, "\n\n")
}

// WrapContext returns the template tokens of a teacher context: prefix ids, the
// EncodeText ids of the rendered context (sibling and feedback in their templates,
// then the label and the hint), suffix ids. Like Wrap it can never produce an
// added-token id from the context's text, which holds model and tool output. The caps
// (max_hint_tokens on the hint, the sources' max_tokens) are the caller's.
func (in *Inserter) WrapContext(cfg ContextConfig, c Context) []int32 {
	if c.Sibling == "" && c.Feedback == "" {
		return in.wrap(strings.TrimSpace(c.Hint))
	}
	out := append([]int32(nil), in.prefix...)
	out = append(out, in.tok.EncodeText(c.text(cfg, in.label))...)
	return append(out, in.suffix...)
}
