package teacher

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/rollout"
)

// The rules teacher's patterns; their names are the values of RulesConfig.Patterns.
const (
	PatternFailedCall      = "failed_call"      // a call in the turn fails: say what to do instead
	PatternRepeatedFailure = "repeated_failure" // the same call already failed earlier
	PatternUnusedTool      = "unused_tool"      // a tool in the system prompt that was never used
	PatternIgnoredExit     = "ignored_exit"     // a non-zero exit code before the turn, not addressed
)

var allPatterns = []string{PatternFailedCall, PatternRepeatedFailure, PatternUnusedTool, PatternIgnoredExit}

// RulesConfig configures the rules teacher.
type RulesConfig struct {
	// Patterns are the patterns to apply; a hint joins the messages of all that match,
	// in this order.
	Patterns []string `yaml:"patterns"`
	// MaxTools caps the unused tools one hint names.
	MaxTools int `yaml:"max_tools"`
}

// DefaultRulesConfig returns all patterns and at most 2 tools per hint.
func DefaultRulesConfig() RulesConfig {
	return RulesConfig{Patterns: slices.Clone(allPatterns), MaxTools: 2}
}

// Validate reports the first bad field, named by its YAML path under prefix.
func (c RulesConfig) Validate(prefix string) error {
	for i, p := range c.Patterns {
		if !slices.Contains(allPatterns, p) {
			return fmt.Errorf("%spatterns[%d]: unknown pattern %q (want one of %s)", prefix, i, p, strings.Join(allPatterns, ", "))
		}
	}
	if c.MaxTools < 1 {
		return fmt.Errorf("%smax_tools: must be ≥ 1, got %d", prefix, c.MaxTools)
	}
	return nil
}

// RulesTeacher writes offline, deterministic hints from patterns in the rollout. A
// hint says what to do instead; it names tools but never quotes tool output. It needs
// the rollout's tokenizer to read segment text.
type RulesTeacher struct {
	cfg RulesConfig
	tok tokenizer.Tokenizer
}

// NewRulesTeacher returns a rules teacher that reads text with tok.
func NewRulesTeacher(cfg RulesConfig, tok tokenizer.Tokenizer) *RulesTeacher {
	return &RulesTeacher{cfg: cfg, tok: tok}
}

// Name returns "rules".
func (*RulesTeacher) Name() string { return "rules" }

// Hints implements Teacher.
func (t *RulesTeacher) Hints(_ context.Context, r *rollout.Rollout, sels []Selection) ([]Hint, error) {
	rc := &ruleContext{t: t, r: r, results: pairToolResults(r)}
	out := make([]Hint, len(sels))
	for i, s := range sels {
		var msgs, names []string
		for _, p := range t.cfg.Patterns {
			if m := rc.apply(p, s); m != "" {
				msgs, names = append(msgs, m), append(names, p)
			}
		}
		out[i] = Hint{Selection: s, Source: "rules", Text: strings.Join(msgs, " "), Rule: strings.Join(names, ",")}
	}
	return out, nil
}

// ruleContext holds what the patterns share for one rollout, computed lazily.
type ruleContext struct {
	t       *RulesTeacher
	r       *rollout.Rollout
	results []int
	tools   []string // tools listed in the system prompt
	toolsOK bool
}

func (rc *ruleContext) text(start, end int32) string {
	s, err := rc.t.tok.Decode(rc.r.Tokens[start:end])
	if err != nil {
		return ""
	}
	return s
}

func (rc *ruleContext) apply(pattern string, s Selection) string {
	switch pattern {
	case PatternFailedCall:
		return rc.failedCall(s)
	case PatternRepeatedFailure:
		return rc.repeatedFailure(s)
	case PatternUnusedTool:
		return rc.unusedTool(s)
	case PatternIgnoredExit:
		return rc.ignoredExit(s)
	}
	return ""
}

// failedCalls returns the tool_call segments of the scored range whose call failed.
func (rc *ruleContext) failedCalls(s Selection) []int {
	var out []int
	for i := turnStart(rc.r, s.Segment); i <= s.Segment; i++ {
		if rc.failed(i) {
			out = append(out, i)
		}
	}
	return out
}

func (rc *ruleContext) failed(i int) bool {
	seg := rc.r.Segments[i]
	if seg.Kind != rollout.KindToolCall {
		return false
	}
	return seg.Status == rollout.StatusError || rc.results[i] >= 0 && rc.r.Segments[rc.results[i]].Status == rollout.StatusError
}

var (
	reNotFound   = regexp.MustCompile(`(?i)no such file|not found|does not exist|cannot find|no matches`)
	rePermission = regexp.MustCompile(`(?i)permission denied|not permitted|access denied|forbidden`)
	reTimeout    = regexp.MustCompile(`(?i)timed? ?out|deadline exceeded`)
	reBadArgs    = regexp.MustCompile(`(?i)syntax error|invalid|unexpected|parse error|malformed|missing (required )?argument`)
	reUnknown    = regexp.MustCompile(`(?i)unknown tool|no such tool|unknown function`)
)

// failedCall classifies the failure of each failed call in the turn by its result and
// says what to do instead. The result text is read, never quoted.
func (rc *ruleContext) failedCall(s Selection) string {
	var msgs []string
	for _, i := range rc.failedCalls(s) {
		seg := rc.r.Segments[i]
		name := toolName(seg)
		out := ""
		if j := rc.results[i]; j >= 0 {
			out = rc.text(rc.r.Segments[j].Start, rc.r.Segments[j].End)
		}
		var advice string
		switch {
		case reUnknown.MatchString(out):
			advice = "that tool does not exist; call one of the tools the system prompt lists."
		case reNotFound.MatchString(out):
			advice = "the path or name it uses does not exist. Find the right one first"
			if alt := rc.searchTool(seg.Tool); alt != "" {
				advice += " (for example with `" + alt + "`)"
			}
			advice += " instead of guessing it."
		case rePermission.MatchString(out):
			advice = "it is not allowed there; stay inside the workspace or use another tool."
		case reTimeout.MatchString(out):
			advice = "it runs too long; narrow it down (a smaller path, a more specific pattern)."
		case reBadArgs.MatchString(out):
			advice = "its arguments are malformed; check them against the tool's description."
		default:
			advice = "check its arguments against what earlier results showed instead of guessing."
		}
		msgs = append(msgs, fmt.Sprintf("The %s call here fails: %s", name, advice))
	}
	return strings.Join(msgs, " ")
}

func toolName(seg rollout.Segment) string {
	if seg.Tool == "" {
		return "tool"
	}
	return "`" + seg.Tool + "`"
}

// searchTools are tools that find things, in the order they are suggested.
var searchTools = []string{"search_code", "grep", "find", "glob", "list_files", "ls", "search"}

// searchTool returns a search tool from the system prompt other than failing.
func (rc *ruleContext) searchTool(failing string) string {
	tools := rc.systemTools()
	for _, name := range searchTools {
		if name != failing && slices.Contains(tools, name) {
			return name
		}
	}
	return ""
}

// repeatedFailure fires when a failed call in the turn repeats, token for token, a
// call that already failed earlier in the rollout.
func (rc *ruleContext) repeatedFailure(s Selection) string {
	for _, i := range rc.failedCalls(s) {
		seg := rc.r.Segments[i]
		body := rc.r.Tokens[seg.Start:seg.End]
		for j := 0; j < turnStart(rc.r, i); j++ {
			prev := rc.r.Segments[j]
			if rc.failed(j) && prev.Tool == seg.Tool && slices.Equal(rc.r.Tokens[prev.Start:prev.End], body) {
				return fmt.Sprintf("This exact %s call already failed earlier; do not repeat it: change the arguments or use another tool.", toolName(seg))
			}
		}
	}
	return ""
}

// unusedTool names tools that the system prompt lists but the rollout never calls. It
// speaks only where something went wrong: a failed call in the turn, a negative
// rating, or a low-reward surprise.
func (rc *ruleContext) unusedTool(s Selection) string {
	if s.Reason != ReasonNegativeRating && s.Reason != ReasonSurprise && len(rc.failedCalls(s)) == 0 {
		return ""
	}
	var unused []string
	for _, name := range rc.systemTools() {
		used := slices.ContainsFunc(rc.r.Segments, func(seg rollout.Segment) bool {
			return seg.Kind == rollout.KindToolCall && seg.Tool == name
		})
		if !used {
			unused = append(unused, "`"+name+"`")
		}
	}
	switch n := min(len(unused), rc.t.cfg.MaxTools); n {
	case 0:
		return ""
	case 1:
		return "The " + unused[0] + " tool is available and was never used; consider it."
	default:
		return "The " + strings.Join(unused[:n-1], ", ") + " and " + unused[n-1] + " tools are available and were never used; consider them."
	}
}

var (
	reToolsLine = regexp.MustCompile(`(?im)\btools?\s*:\s*([^\n]+)`)
	reToolName  = regexp.MustCompile(`"name"\s*:\s*"([A-Za-z_][A-Za-z0-9_.\-]*)"`)
	reIdent     = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_\-]*$`)
)

// systemTools returns the tool names the system segments list, in order: a
// "Tools: a, b, c." line, or JSON tool definitions ("name": "a").
func (rc *ruleContext) systemTools() []string {
	if rc.toolsOK {
		return rc.tools
	}
	rc.toolsOK = true
	for _, seg := range rc.r.Segments {
		if seg.Kind != rollout.KindSystem {
			continue
		}
		text := rc.text(seg.Start, seg.End)
		for _, m := range reToolsLine.FindAllStringSubmatch(text, -1) {
			list, _, _ := strings.Cut(m[1], ". ")
			for _, name := range strings.Split(strings.TrimSuffix(strings.TrimSpace(list), "."), ",") {
				if name = strings.TrimSpace(name); reIdent.MatchString(name) && !slices.Contains(rc.tools, name) {
					rc.tools = append(rc.tools, name)
				}
			}
		}
		for _, m := range reToolName.FindAllStringSubmatch(text, -1) {
			if !slices.Contains(rc.tools, m[1]) {
				rc.tools = append(rc.tools, m[1])
			}
		}
	}
	return rc.tools
}

var (
	reExit     = regexp.MustCompile(`(?i)exit(?:ed with)? (?:status|code)[:= ]*(-?\d+)`)
	reAddresed = regexp.MustCompile(`(?i)exit|error|fail|status`)
)

// ignoredExit fires when the last tool result before the turn reports a non-zero exit
// code and the turn does not mention it.
func (rc *ruleContext) ignoredExit(s Selection) string {
	ts := turnStart(rc.r, s.Segment)
	j := ts - 1
	for j >= 0 && rc.r.Segments[j].Kind != rollout.KindToolResult {
		if rc.r.Segments[j].Kind == rollout.KindUser {
			return ""
		}
		j--
	}
	if j < 0 {
		return ""
	}
	out := rc.text(rc.r.Segments[j].Start, rc.r.Segments[j].End)
	code := 0
	for _, m := range reExit.FindAllStringSubmatch(out, -1) {
		if n, err := strconv.Atoi(m[1]); err == nil && n != 0 {
			code = n
		}
	}
	if code == 0 || reAddresed.MatchString(rc.text(s.InsertAt, s.End)) {
		return ""
	}
	return fmt.Sprintf("The previous %s command exited with status %d; deal with that failure before going on.", toolName(rc.r.Segments[j]), code)
}
