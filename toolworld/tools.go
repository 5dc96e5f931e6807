package toolworld

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Tools are the commands of the world, in the order the system prompt lists them.
// `answer` is not a tool: it ends the episode.
var Tools = []string{"ls", "cat", "grep", "calc", "get", "set"}

// AnswerCommand is the command that ends an episode with its argument as the answer.
const AnswerCommand = "answer"

// Call is one parsed command line.
type Call struct {
	Name string   // the first word; "" for an empty line
	Args []string // the other words
}

// ParseCall splits the first non-empty line of text into words, as a shell does
// without quoting. Later lines are ignored.
func ParseCall(text string) Call {
	for line := range strings.SplitSeq(text, "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			return Call{Name: f[0], Args: f[1:]}
		}
	}
	return Call{}
}

// IsTool reports whether the call names one of Tools.
func (c Call) IsTool() bool { return slices.Contains(Tools, c.Name) }

// machine is the mutable state of an episode: the tree (read-only) and the store.
type machine struct {
	files map[string]string
	kv    map[string]string
}

func newMachine(t Task) *machine {
	return &machine{files: t.Files, kv: maps.Clone(t.KV)}
}

// run executes a tool call and returns its output and whether it failed. Error texts
// follow the coreutils wording where one exists, so they read as a real shell's.
func (m *machine) run(c Call) (out string, failed bool) {
	fail := func(format string, a ...any) (string, bool) { return fmt.Sprintf(format, a...), true }
	switch {
	case c.Name == "":
		return fail("error: empty command")
	case !c.IsTool():
		return fail("%s: unknown tool", c.Name)
	}
	flags, args := splitFlags(c.Args)
	allowed := map[string]string{"grep": "ic"}[c.Name]
	for _, f := range flags {
		if f == "-" || strings.Trim(f[1:], allowed) != "" || allowed == "" {
			return fail("%s: invalid option %s", c.Name, f)
		}
	}
	switch c.Name {
	case "ls":
		if len(args) > 1 {
			return fail("ls: want at most 1 argument, got %d", len(args))
		}
		if len(args) == 0 {
			return strings.Join(m.dirs(), " "), false
		}
		p := cleanPath(args[0])
		if _, ok := m.files[p]; ok {
			return p, false
		}
		names := m.list(p)
		if len(names) == 0 {
			return fail("ls: cannot access '%s': No such file or directory", args[0])
		}
		return strings.Join(names, " "), false
	case "cat":
		if len(args) != 1 {
			return fail("cat: want 1 file, got %d", len(args))
		}
		p := cleanPath(args[0])
		if s, ok := m.files[p]; ok {
			return s, false
		}
		if len(m.list(p)) > 0 {
			return fail("cat: %s: Is a directory", args[0])
		}
		return fail("cat: %s: No such file or directory", args[0])
	case "grep":
		return m.grep(flags, args)
	case "calc":
		if len(args) == 0 {
			return fail("calc: missing expression")
		}
		v, err := evalExpr(strings.Join(args, ""))
		if err != nil {
			return fail("calc: %v", err)
		}
		return strconv.Itoa(v), false
	case "get":
		if len(args) != 1 {
			return fail("get: want 1 key, got %d", len(args))
		}
		if v, ok := m.kv[args[0]]; ok {
			return v, false
		}
		return fail("get: %s: key not found", args[0])
	case "set":
		if len(args) != 2 {
			return fail("set: want a key and a value, got %d arguments", len(args))
		}
		if _, err := strconv.Atoi(args[1]); err != nil {
			return fail("set: invalid value '%s': want an integer", args[1])
		}
		m.kv[args[0]] = args[1]
		return "ok", false
	}
	panic("unreachable: every tool has a case")
}

// grep PATTERN PATH: the matching lines of a file, or of every file of a directory as
// path:line; -i ignores case, -c prints the number of matching lines instead.
func (m *machine) grep(flags, args []string) (string, bool) {
	if len(args) != 2 {
		return fmt.Sprintf("grep: want PATTERN and PATH, got %d arguments", len(args)), true
	}
	fold := slices.ContainsFunc(flags, func(f string) bool { return strings.Contains(f, "i") })
	count := slices.ContainsFunc(flags, func(f string) bool { return strings.Contains(f, "c") })
	p := cleanPath(args[1])
	paths := []string{p}
	prefix := false
	if _, ok := m.files[p]; !ok {
		if paths = m.list(p); len(paths) == 0 {
			return fmt.Sprintf("grep: %s: No such file or directory", args[1]), true
		}
		for i, name := range paths {
			paths[i] = p + "/" + name
		}
		prefix = true
	}
	pat := args[0]
	if fold {
		pat = strings.ToLower(pat)
	}
	var hits []string
	for _, path := range paths {
		for line := range strings.SplitSeq(m.files[path], "\n") {
			l := line
			if fold {
				l = strings.ToLower(l)
			}
			if strings.Contains(l, pat) {
				if prefix {
					line = path + ":" + line
				}
				hits = append(hits, line)
			}
		}
	}
	if count {
		return strconv.Itoa(len(hits)), false
	}
	if len(hits) == 0 {
		return "grep: no matches", true
	}
	return strings.Join(hits, "\n"), false
}

// dirs returns the tree's directories, sorted, each with a trailing slash.
func (m *machine) dirs() []string {
	var out []string
	for p := range m.files {
		d, _, _ := strings.Cut(p, "/")
		if !slices.Contains(out, d+"/") {
			out = append(out, d+"/")
		}
	}
	slices.Sort(out)
	return out
}

// list returns the names of the files of directory dir, sorted; none when dir is not
// a directory.
func (m *machine) list(dir string) []string {
	var out []string
	for p := range m.files {
		if d, name, _ := strings.Cut(p, "/"); d == dir {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// cleanPath drops a leading "./" or "/" and a trailing "/".
func cleanPath(p string) string {
	p = strings.TrimPrefix(strings.TrimPrefix(p, "./"), "/")
	return strings.TrimSuffix(p, "/")
}

// splitFlags separates words that start with '-' and are not numbers (flags) from
// the others.
func splitFlags(words []string) (flags, args []string) {
	for _, w := range words {
		if strings.HasPrefix(w, "-") && (len(w) == 1 || w[1] < '0' || w[1] > '9') {
			flags = append(flags, w)
		} else {
			args = append(args, w)
		}
	}
	return flags, args
}
