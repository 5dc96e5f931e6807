package efficacy

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/rollout"
	"github.com/hindsight-ai/hindsight/teacher"
	"github.com/hindsight-ai/hindsight/toolworld"
)

// WorldRules is the task world's own rules teacher (protocol 2): for each failed call
// in the selected turn it reads the call and the error message the tool printed and
// says what the right next step is, in the tool's own syntax — the tool the typo
// meant, the flags a tool has, "`ls DIR` lists the files", "write digits, not
// words". It reads only the rollout it is given (the experiment cuts it after the
// failed call's result), never the checker, the solution or the answer; the
// experiment's answer guard still drops any hint that names them.
type WorldRules struct{ tok tokenizer.Tokenizer }

// NewWorldRules returns the task-world rules teacher reading text with tok.
func NewWorldRules(tok tokenizer.Tokenizer) *WorldRules { return &WorldRules{tok: tok} }

// Hints implements the hint stage's teacher: one hint per selection, empty when the
// selected turn holds no failed call.
func (w *WorldRules) Hints(_ context.Context, r *rollout.Rollout, sels []teacher.Selection) ([]teacher.Hint, error) {
	out := make([]teacher.Hint, len(sels))
	for i, s := range sels {
		var msgs []string
		for k := turnFirst(r, s.Segment); k <= s.Segment; k++ {
			call, res, ok := w.failedCall(r, k)
			if !ok {
				continue
			}
			if m := WorldAdvice(call, res); m != "" && !slices.Contains(msgs, m) {
				msgs = append(msgs, m)
			}
		}
		out[i] = teacher.Hint{Selection: s, Source: "world-rules", Text: strings.Join(msgs, " "), Rule: "world"}
	}
	return out, nil
}

// failedCall returns the command line of tool-call segment k and the text of its tool
// result when that result is an error.
func (w *WorldRules) failedCall(r *rollout.Rollout, k int) (toolworld.Call, string, bool) {
	seg := r.Segments[k]
	if seg.Kind != rollout.KindToolCall || k+1 >= len(r.Segments) {
		return toolworld.Call{}, "", false
	}
	res := r.Segments[k+1]
	if res.Kind != rollout.KindToolResult || res.Status != rollout.StatusError {
		return toolworld.Call{}, "", false
	}
	call, err1 := w.tok.Decode(r.Tokens[seg.Start:seg.End])
	out, err2 := w.tok.Decode(r.Tokens[res.Start:res.End])
	if err1 != nil || err2 != nil {
		return toolworld.Call{}, "", false
	}
	return toolworld.ParseCall(StripMarkers(call)), strings.TrimSpace(StripMarkers(out)), true
}

// turnFirst returns the first segment of the policy turn holding segment i.
func turnFirst(r *rollout.Rollout, i int) int {
	for i > 0 && r.Segments[i-1].Kind.IsPolicy() {
		i--
	}
	return i
}

var markers = regexp.MustCompile(`<\|[^|<>\s]+\|>`)

// StripMarkers drops the chat markers (<|user|>, <|end|>, …) from s.
func StripMarkers(s string) string { return markers.ReplaceAllString(s, "") }

// syntax is each tool's call syntax, as the hints write it.
var syntax = map[string]string{
	"ls":   "`ls` or `ls DIR`",
	"cat":  "`cat DIR/FILE`",
	"grep": "`grep PATTERN DIR/FILE` (or `grep PATTERN DIR`)",
	"calc": "`calc A+B` with A and B in digits (+ - * / and parentheses)",
	"get":  "`get KEY`",
	"set":  "`set KEY N` with N an integer in digits",
}

// The error messages of toolworld's tools (tools.go, calc.go), matched by kind.
var (
	reUnknownTool = regexp.MustCompile(`^(\S*): unknown tool`)
	reBadOption   = regexp.MustCompile(`^(\w+): invalid option (\S+)`)
	reArgCount    = regexp.MustCompile(`^(\w+): want `)
	reMissingPath = regexp.MustCompile(`^(\w+): (?:cannot access ')?([^':]+)'?: No such file or directory`)
	reIsDir       = regexp.MustCompile(`^cat: ([^:]+): Is a directory`)
	reNoMatch     = regexp.MustCompile(`^grep: no matches`)
	reCalc        = regexp.MustCompile(`^calc: (?:invalid number|syntax error)`)
	reCalcEmpty   = regexp.MustCompile(`^calc: missing expression`)
	reKey         = regexp.MustCompile(`^get: (\S+): key not found`)
	reSetValue    = regexp.MustCompile(`^set: invalid value`)
	reEmpty       = regexp.MustCompile(`^error: empty command`)
)

// WorldAdvice returns the hint for call, whose tool printed the error out: what went
// wrong, read from the message, and the right next step in the tool's syntax. It
// names only what the episode already showed (the call's own words, the tools of the
// system prompt, a directory the failed path named); "" when the message is not one
// of the world's errors.
func WorldAdvice(call toolworld.Call, out string) string {
	switch {
	case reEmpty.MatchString(out):
		return "Write one command per turn: a tool and its arguments, e.g. `ls`."
	case reUnknownTool.MatchString(out):
		name := reUnknownTool.FindStringSubmatch(out)[1]
		switch near := nearTools(name); len(near) {
		case 0:
		case 1:
			return fmt.Sprintf("`%s` is not a tool; you meant `%s`: %s.", name, near[0], syntax[near[0]])
		default:
			return fmt.Sprintf("`%s` is not a tool; you meant `%s` or `%s`.", name, near[0], near[1])
		}
		return fmt.Sprintf("`%s` is not a tool; the tools are %s.", name, strings.Join(toolworld.Tools, ", "))
	case reBadOption.MatchString(out):
		m := reBadOption.FindStringSubmatch(out)
		if m[1] == "grep" {
			return fmt.Sprintf("`grep` has no option `%s` (only -i and -c); call %s.", m[2], syntax["grep"])
		}
		return fmt.Sprintf("`%s` takes no options; call %s, without `%s`.", m[1], syntax[m[1]], m[2])
	case reMissingPath.MatchString(out):
		m := reMissingPath.FindStringSubmatch(out)
		path := strings.TrimSpace(m[2])
		if dir, _, ok := strings.Cut(strings.Trim(path, "./"), "/"); ok && dir != "" {
			return fmt.Sprintf("`%s` does not exist; `ls %s` lists the files in %s/, then call `%s` on one of them.", path, dir, dir, m[1])
		}
		return fmt.Sprintf("`%s` does not exist; `ls` lists the directories, `ls DIR` the files in one.", path)
	case reIsDir.MatchString(out):
		dir := reIsDir.FindStringSubmatch(out)[1]
		return fmt.Sprintf("`%s` is a directory; `ls %s` lists its files, and `cat` reads one file: %s.", dir, strings.Trim(dir, "/"), syntax["cat"])
	case reNoMatch.MatchString(out):
		return "Nothing matched there; try `grep -i`, another word from the task, or `cat` the file."
	case reCalcEmpty.MatchString(out), reCalc.MatchString(out):
		return "`calc` reads digits, not words: " + syntax["calc"] + "."
	case reKey.MatchString(out):
		return fmt.Sprintf("There is no key `%s`; `get` the key the task names: %s.", reKey.FindStringSubmatch(out)[1], syntax["get"])
	case reSetValue.MatchString(out):
		return "`set` stores an integer written in digits: " + syntax["set"] + "."
	case reArgCount.MatchString(out):
		name := reArgCount.FindStringSubmatch(out)[1]
		if s, ok := syntax[name]; ok {
			return fmt.Sprintf("Wrong number of arguments to `%s`; call %s.", name, s)
		}
	}
	return ""
}

// nearTools returns the tools one edit (a changed, dropped or added byte) from name,
// in the system prompt's order.
func nearTools(name string) []string {
	var out []string
	for _, t := range toolworld.Tools {
		if editDistance(name, t) == 1 {
			out = append(out, t)
		}
	}
	return out
}

// editDistance is the Levenshtein distance of two short strings, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
