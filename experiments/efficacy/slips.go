package efficacy

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/hindsight-ai/hindsight/toolworld"
)

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

// VisibleWords are the words (runs of letters and digits) of the episode's visible
// prefix: the system prompt, the task prompt, every call and every tool output.
func VisibleWords(t toolworld.Task, turns []Turn) map[string]bool {
	var b strings.Builder
	b.WriteString(toolworld.SystemPrompt + "\n" + t.Prompt + "\n")
	for _, tu := range turns {
		b.WriteString(tu.Call + "\n" + tu.Out + "\n")
	}
	seen := map[string]bool{}
	for _, w := range Words(b.String()) {
		seen[w] = true
	}
	return seen
}

// Words are the runs of letters, digits and underscores of s.
func Words(s string) []string {
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
	seen := VisibleWords(t, turns)
	for _, w := range Words(strings.Join(c.Args, " ")) {
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
	ws := Words(text)
	if slices.Contains(ws, t.Answer) {
		return true
	}
	seen := VisibleWords(t, turns)
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

// silentAdvice says what a silent slip got wrong, by the tool it called (a silent slip
// calls the tool the task needs next, so naming the tool quotes nothing wrong).
func silentAdvice(tool string) string {
	switch tool {
	case "cat":
		return "That `cat` read a file the task does not ask about."
	case "calc":
		return "That `calc` used other numbers than the ones the task needs from the calls above."
	case "get":
		return "That `get` read a key the task does not name."
	case "set":
		return "That `set` stored another key or value than the task wants."
	case "ls":
		return "That `ls` listed another directory than the one the task needs."
	case "grep":
		return "That `grep` searched with another word or place than the task gives."
	}
	return "That call is not the step the task needs next."
}

// slipAdvice is protocol 3's diagnosis of a failed call (attempt 3): what kind of
// thing went wrong, read from the tool's error message out, and the tool's syntax. It
// never quotes the slipped call or its wrong argument (attempt 2's hints did, in
// WorldAdvice's wording, and raised the repetition of the slip by +5.2 nats): a tool
// name or directory is named only when it is a word of exp, the call the task needs
// next, so that it is not a wrong token of the slip.
func slipAdvice(out, exp string) string {
	right := map[string]bool{}
	for _, w := range Words(exp) {
		right[w] = true
	}
	// lsDir is "`ls DIR` lists the files in DIR/" when path's directory is right.
	lsDir := func(path string) string {
		dir, _, _ := strings.Cut(strings.Trim(path, "./"), "/")
		if dir == "" || !right[dir] {
			return ""
		}
		return fmt.Sprintf("`ls %s` lists the files in %s/", dir, dir)
	}
	switch {
	case reEmpty.MatchString(out):
		return "Write one command per turn: a tool and its arguments, e.g. `ls`."
	case reUnknownTool.MatchString(out):
		switch near := nearTools(reUnknownTool.FindStringSubmatch(out)[1]); len(near) {
		case 0:
		case 1:
			return fmt.Sprintf("Not a tool; you meant `%s`: %s.", near[0], syntax[near[0]])
		default:
			return fmt.Sprintf("Not a tool; you meant `%s` or `%s`.", near[0], near[1])
		}
		return "Not a tool; the tools: " + strings.Join(toolworld.Tools, ", ") + "."
	case reBadOption.MatchString(out):
		tool := reBadOption.FindStringSubmatch(out)[1]
		switch {
		case !right[tool]:
			return "That option does not exist; the tools take no options but `grep -i` and `grep -c`."
		case tool == "grep":
			return "`grep` has no such option (only -i and -c); call " + syntax["grep"] + "."
		}
		return fmt.Sprintf("`%s` takes no options; call %s.", tool, syntax[tool])
	case reMissingPath.MatchString(out):
		m := reMissingPath.FindStringSubmatch(out)
		if ls := lsDir(strings.TrimSpace(m[2])); ls != "" && right[m[1]] {
			return fmt.Sprintf("That file does not exist; %s, then call `%s` on one of them.", ls, m[1])
		} else if ls != "" {
			return "That file does not exist; " + ls + "."
		}
		return "That path does not exist; `ls` lists the directories, `ls DIR` the files in one."
	case reIsDir.MatchString(out):
		if ls := lsDir(reIsDir.FindStringSubmatch(out)[1]); ls != "" {
			return "That is a directory; " + ls + ", and `cat` reads one file: " + syntax["cat"] + "."
		}
		return "That is a directory; `cat` reads one file: " + syntax["cat"] + "."
	case reNoMatch.MatchString(out):
		return "Nothing matched there; try `grep -i`, another word from the task, or `cat` the file."
	case reCalcEmpty.MatchString(out), reCalc.MatchString(out):
		return "`calc` reads digits, not words: " + syntax["calc"] + "."
	case reKey.MatchString(out):
		return "There is no such key; `get` the key the task names: " + syntax["get"] + "."
	case reSetValue.MatchString(out):
		return "`set` stores an integer written in digits: " + syntax["set"] + "."
	case reArgCount.MatchString(out):
		if tool := reArgCount.FindStringSubmatch(out)[1]; right[tool] && syntax[tool] != "" {
			return fmt.Sprintf("Wrong number of arguments to `%s`; call %s.", tool, syntax[tool])
		}
		return "Wrong number of arguments for that tool."
	}
	return "That call failed."
}

// SlipHint is protocol 3's world rules (attempt 3's wording): the hint for the retry
// turn after the last turn of k, a slip. It says what kind of thing went wrong — for a
// failed call from the tool's error message (slipAdvice), for a silent slip by what
// the call read or wrote (silentAdvice) — and, when the visible prefix shows every
// word of it and it is not the answer, names the call the task needs next ("Next:
// `cat tmp/fox.txt`."). It never quotes the slipped call or its wrong argument. ""
// when the last turn was not a slip or the hint would leak (LeaksUnseen).
func SlipHint(k *Tracker) string {
	if len(k.Turns) == 0 {
		return ""
	}
	exp := k.Expected()
	if !Nameable(exp, k.Task, k.Turns) {
		exp = ""
	}
	return SlipHintNaming(k, exp)
}

// SlipHintNaming is SlipHint's text with "Next: `call`." naming call (nothing when
// call is ""): the diagnosis is always of the slip against the call the task needs
// next, so hints that name different calls at one slip differ only in the call named
// (the copy curriculum's contrastive variants, protocol3.CopyDemos). "" when the text would
// leak (LeaksUnseen).
func SlipHintNaming(k *Tracker, call string) string {
	last := k.Turns[len(k.Turns)-1]
	var diag string
	if last.Failed {
		diag = slipAdvice(last.Out, k.Expected())
	} else {
		diag = silentAdvice(toolworld.ParseCall(last.Call).Name)
	}
	if call != "" {
		diag += fmt.Sprintf(" Next: `%s`.", call)
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
