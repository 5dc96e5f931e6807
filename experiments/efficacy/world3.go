package efficacy

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/hindsight-ai/hindsight/toolworld"
)

// Protocol3World sizes protocol 3's task world: 320 tokens a rollout, 40 a turn, 8
// calls, where one slip no longer ends a chained task (issue 27: the noisy scripted
// agent with p = 0.25 succeeds 86.4% at 256 tokens / 6 calls, 90.8% at 320 / 8).
func Protocol3World() World { return World{MaxTokens: 320, MaxTurnTokens: 40, MaxCalls: 8} }

// Turn is one call of an episode as the policy saw it: its command line and the
// tool's output.
type Turn struct {
	Call   string
	Out    string
	Failed bool
}

// Tracker follows an episode against its task's solution: which solution call comes
// next, and whether a call was a slip. It is the environment's knowledge (it reads the
// solution) and decides only when a hint is due; what a hint may say is bounded by
// what the visible prefix shows (SlipHint).
type Tracker struct {
	Task  toolworld.Task
	Next  int // index into Task.Solution of the next call on the solution's path
	Turns []Turn
}

// NewTracker starts following an episode of t.
func NewTracker(t toolworld.Task) *Tracker { return &Tracker{Task: t} }

// Expected returns the next call on the solution's path.
func (k *Tracker) Expected() string { return k.Task.Solution[min(k.Next, len(k.Task.Solution)-1)] }

// Observe records a call and its output and says whether it was a slip: a call that
// failed, or a silent slip — a call that worked, of the tool the solution calls next,
// with other arguments (a file, key, directory or number other than the right ones),
// not the exploring call of Explore. A call equal to the expected one advances the
// path; other calls (an exploring `ls`, another tool) are neither.
func (k *Tracker) Observe(call, out string, failed bool) (slip bool) {
	exp := k.Expected()
	k.Turns = append(k.Turns, Turn{Call: call, Out: out, Failed: failed})
	c, e := toolworld.ParseCall(call), toolworld.ParseCall(exp)
	switch {
	case c.Name == toolworld.AnswerCommand:
		return false
	case SameCall(call, exp):
		k.Next++
		return false
	case failed:
		return true
	}
	return c.Name == e.Name && !SameCall(call, Explore(exp))
}

// SameCall reports whether two command lines are the same call (fields compared).
func SameCall(a, b string) bool {
	ca, cb := toolworld.ParseCall(a), toolworld.ParseCall(b)
	return ca.Name != "" && ca.Name == cb.Name && slices.Equal(ca.Args, cb.Args)
}

// Explore is the exploring call that an agent without a hint makes after a slip
// before the call it should have made: `ls DIR` for a call on a path or directory of
// the tree, else `ls`.
func Explore(call string) string {
	c := toolworld.ParseCall(call)
	switch c.Name {
	case "cat":
		if len(c.Args) == 1 {
			if dir, _, ok := strings.Cut(c.Args[0], "/"); ok {
				return "ls " + dir
			}
		}
	case "grep":
		if n := len(c.Args); n >= 2 {
			dir, _, _ := strings.Cut(c.Args[n-1], "/")
			return "ls " + dir
		}
	}
	return "ls"
}

// SiblingText is the sibling context (SDPO's successful-sibling reprompt, issue 26's
// template "A correct attempt:\n{solution}\nNow solve it yourself."): the calls of a
// successful attempt at the same task, one a line.
func SiblingText(calls []string) string {
	return "A correct attempt:\n" + strings.Join(calls, "\n") + "\nNow solve it yourself."
}

// visibleWords are the words (runs of letters and digits) of the episode's visible
// prefix: the system prompt, the task prompt, every call and every tool output.
func visibleWords(t toolworld.Task, turns []Turn) map[string]bool {
	var b strings.Builder
	b.WriteString(toolworld.SystemPrompt + "\n" + t.Prompt + "\n")
	for _, tu := range turns {
		b.WriteString(tu.Call + "\n" + tu.Out + "\n")
	}
	seen := map[string]bool{}
	for _, w := range words(b.String()) {
		seen[w] = true
	}
	return seen
}

func words(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool {
		return !(r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '_')
	})
}

// Nameable reports whether a hint may name call: not the final answer, no word equal
// to the task's answer, and every word of its arguments shown by the visible prefix.
func Nameable(call string, t toolworld.Task, turns []Turn) bool {
	c := toolworld.ParseCall(call)
	if c.Name == toolworld.AnswerCommand || !c.IsTool() {
		return false
	}
	seen := visibleWords(t, turns)
	for _, w := range words(strings.Join(c.Args, " ")) {
		if w == t.Answer || !seen[w] {
			return false
		}
	}
	return true
}

// LeaksUnseen reports whether hint text gives away more than the visible prefix
// shows: the task's answer as a word (never allowed), or the name of a file the
// solution reads that the episode has not seen (issue 27: a hint may quote anything
// the visible prefix shows, never the answer or a file the episode has not seen).
func LeaksUnseen(text string, t toolworld.Task, turns []Turn) bool {
	ws := words(text)
	if slices.Contains(ws, t.Answer) {
		return true
	}
	seen := visibleWords(t, turns)
	sol := strings.Join(t.Solution, "\n")
	for path := range t.Files {
		if !strings.Contains(sol, path) {
			continue
		}
		base := strings.TrimSuffix(path[strings.LastIndexByte(path, '/')+1:], ".txt")
		if slices.Contains(ws, base) && !seen[base] {
			return true
		}
	}
	return false
}

var reNumber = regexp.MustCompile(`[0-9]+`)

// silentAdvice says what a silent slip got wrong, by the tool it called.
func silentAdvice(call toolworld.Call, line string) string {
	switch call.Name {
	case "cat":
		return fmt.Sprintf("`%s` read a file the task does not ask about.", line)
	case "calc":
		return fmt.Sprintf("`%s` used other numbers than the ones the task needs from the calls above.", line)
	case "get":
		return fmt.Sprintf("`%s` read a key the task does not name.", line)
	case "set":
		return fmt.Sprintf("`%s` stored another key or value than the task wants.", line)
	case "ls":
		return fmt.Sprintf("`%s` lists another directory than the one the task needs.", line)
	case "grep":
		return fmt.Sprintf("`%s` searched with another word or place than the task gives.", line)
	}
	return fmt.Sprintf("`%s` is not the step the task needs next.", line)
}

// SlipHint is protocol 3's world rules: the hint for the retry turn after the last
// turn of k, a slip. It says what went wrong — for a failed call in the wording of
// WorldAdvice (protocol 2's rules), for a silent slip by what the call read or wrote —
// and, when the visible prefix shows every word of it and it is not the answer, names
// the call the task needs next ("Next: `cat tmp/fox.txt`."). "" when the last turn was
// not a slip or the hint would leak (LeaksUnseen).
func SlipHint(k *Tracker) string {
	if len(k.Turns) == 0 {
		return ""
	}
	last := k.Turns[len(k.Turns)-1]
	line := strings.Join(strings.Fields(last.Call), " ")
	call := toolworld.ParseCall(line)
	var diag string
	if last.Failed {
		if diag = WorldAdvice(call, last.Out); diag == "" {
			diag = fmt.Sprintf("`%s` failed.", line)
		}
	} else {
		diag = silentAdvice(call, line)
	}
	if exp := k.Expected(); Nameable(exp, k.Task, k.Turns) {
		diag += fmt.Sprintf(" Next: `%s`.", exp)
	}
	if LeaksUnseen(diag, k.Task, k.Turns) {
		return ""
	}
	return diag
}

// SilentSlip returns a version of call that works but is wrong — another file of the
// tree for `cat`, another directory for `ls DIR`, another key of the store for `get`,
// one number changed for `calc` — or "" for a call it cannot spoil silently. pick
// draws an index below n.
func SilentSlip(call string, t toolworld.Task, pick func(n int) int) string {
	c := toolworld.ParseCall(call)
	other := func(all []string, not string) string {
		var xs []string
		for _, x := range all {
			if x != not {
				xs = append(xs, x)
			}
		}
		if len(xs) == 0 {
			return ""
		}
		sort.Strings(xs)
		return xs[pick(len(xs))]
	}
	switch {
	case c.Name == "cat" && len(c.Args) == 1:
		var files []string
		for p := range t.Files {
			files = append(files, p)
		}
		if f := other(files, c.Args[0]); f != "" {
			return "cat " + f
		}
	case c.Name == "ls" && len(c.Args) == 1:
		var dirs []string
		for p := range t.Files {
			d, _, _ := strings.Cut(p, "/")
			if !slices.Contains(dirs, d) {
				dirs = append(dirs, d)
			}
		}
		if d := other(dirs, c.Args[0]); d != "" {
			return "ls " + d
		}
	case c.Name == "get" && len(c.Args) == 1:
		var keys []string
		for k := range t.KV {
			keys = append(keys, k)
		}
		if k := other(keys, c.Args[0]); k != "" {
			return "get " + k
		}
	case c.Name == "calc" && len(c.Args) == 1:
		nums := reNumber.FindAllStringIndex(c.Args[0], -1)
		if len(nums) == 0 {
			return ""
		}
		at := nums[pick(len(nums))]
		old := c.Args[0][at[0]:at[1]]
		repl := old
		for repl == old {
			repl = fmt.Sprint(10 + pick(90))
		}
		return "calc " + c.Args[0][:at[0]] + repl + c.Args[0][at[1]:]
	}
	return ""
}
