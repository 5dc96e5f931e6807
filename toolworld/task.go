package toolworld

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
)

// Task is one generated task: a virtual file tree and key-value store, the user's
// request, and what the checker wants. The solution is the oracle's calls; nothing in
// an episode shows it to the policy.
type Task struct {
	ID     string // "<split>-<index>", e.g. "heldout-0007"
	Split  string
	Index  int
	Family string // the kind of task (read, sum, lookup, store, chain, chainset)
	Prompt string // the user turn
	// Files maps "dir/name" to its content; the tree is one level deep.
	Files map[string]string
	// KV is the key-value store at the start of an episode.
	KV map[string]string
	// Answer is the value the final `answer` must give.
	Answer string
	// WantKV holds keys the store must map to these values at the end.
	WantKV map[string]string
	// Solution is the oracle's calls in order, the last one `answer <Answer>`.
	Solution []string
}

// Calls returns the number of tool calls of the solution (the final answer excluded).
func (t Task) Calls() int { return len(t.Solution) - 1 }

// Check is the deterministic checker: reward 1 when answer (trimmed) is the task's
// answer and kv holds every wanted value, else 0.
func (t Task) Check(answer string, kv map[string]string) float32 {
	if strings.TrimSpace(answer) != t.Answer {
		return 0
	}
	for k, v := range t.WantKV {
		if kv[k] != v {
			return 0
		}
	}
	return 1
}

// The splits and their fixed seeds. Validation and heldout have a fixed size; train
// has as many tasks as asked for.
const (
	SplitTrain      = "train"
	SplitValidation = "validation"
	SplitHeldout    = "heldout"
)

// SplitSizes are the number of tasks of the fixed-size splits.
var SplitSizes = map[string]int{SplitValidation: 200, SplitHeldout: 250}

var splitSeeds = map[string]uint64{
	SplitTrain:      0x74726169_6e000001,
	SplitValidation: 0x76616c69_64000002,
	SplitHeldout:    0x68656c64_6f000003,
}

// Splits returns the split names in a fixed order.
func Splits() []string { return []string{SplitTrain, SplitValidation, SplitHeldout} }

// Generate returns task i of split: the same task in every build and run.
func Generate(split string, i int) (Task, error) {
	seed, ok := splitSeeds[split]
	if !ok {
		return Task{}, fmt.Errorf("generate task: unknown split %q (want %s)", split, strings.Join(Splits(), ", "))
	}
	if n, fixed := SplitSizes[split]; i < 0 || fixed && i >= n {
		return Task{}, fmt.Errorf("generate task: index %d outside split %s of %d tasks", i, split, n)
	}
	g := &gen{rng: rand.New(rand.NewPCG(seed, uint64(i)))}
	t := g.task()
	t.ID, t.Split, t.Index = fmt.Sprintf("%s-%04d", split, i), split, i
	return t, nil
}

// Tasks returns the first n tasks of split (n ≤ 0: the whole of a fixed-size split).
func Tasks(split string, n int) ([]Task, error) {
	if size, fixed := SplitSizes[split]; fixed && (n <= 0 || n > size) {
		n = size
	}
	out := make([]Task, 0, max(n, 0))
	for i := range n {
		t, err := Generate(split, i)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// words name directories' files and store keys: short, so that calls stay terse.
var words = []string{"owl", "fox", "elk", "bee", "yak", "ant", "cod", "emu", "jay", "ram",
	"hen", "eel", "pig", "rat", "bat", "cow", "dog", "gnu", "koi", "ape"}

var dirs = []string{"docs", "logs", "notes", "data", "src", "tmp"}

// families are the task generators with their weights.
var families = []struct {
	name   string
	weight int
	make   func(g *gen) Task
}{
	{"read", 2, (*gen).read},
	{"sum", 2, (*gen).sum},
	{"lookup", 2, (*gen).lookup},
	{"store", 2, (*gen).store},
	{"chain", 1, (*gen).chain},
	{"chainset", 1, (*gen).chainSet},
}

// gen draws one task: the tree, the store and a family's request over them.
type gen struct {
	rng   *rand.Rand
	files map[string]string
	kv    map[string]string
	dirs  []string // the tree's directories
}

func (g *gen) task() Task {
	g.files, g.kv = map[string]string{}, map[string]string{}
	g.dirs = g.pick(dirs, 2+g.rng.IntN(2))
	for _, d := range g.dirs {
		for _, w := range g.pick(words, 2+g.rng.IntN(2)) {
			g.files[d+"/"+w+".txt"] = g.num()
		}
	}
	for _, w := range g.pick(words, 2+g.rng.IntN(3)) {
		g.kv[w] = g.num()
	}
	total := 0
	for _, f := range families {
		total += f.weight
	}
	k := g.rng.IntN(total)
	for _, f := range families {
		if k -= f.weight; k < 0 {
			t := f.make(g)
			t.Family, t.Files, t.KV = f.name, g.files, g.kv
			return t
		}
	}
	panic("unreachable")
}

func (g *gen) num() string { return strconv.Itoa(10 + g.rng.IntN(90)) }

// pick returns n distinct elements of from in random order.
func (g *gen) pick(from []string, n int) []string {
	idx := g.rng.Perm(len(from))[:n]
	out := make([]string, n)
	for i, j := range idx {
		out[i] = from[j]
	}
	return out
}

// soleDir adds a directory holding one file and returns its name and the file's path.
func (g *gen) soleDir() (dir, path string) {
	free := slices.DeleteFunc(slices.Clone(dirs), func(d string) bool { return slices.Contains(g.dirs, d) })
	dir = g.pick(free, 1)[0]
	g.dirs = append(g.dirs, dir)
	path = dir + "/" + g.pick(words, 1)[0] + ".txt"
	g.files[path] = g.num()
	return dir, path
}

// anyFile returns one file of the tree.
func (g *gen) anyFile() string {
	paths := slices.Sorted(maps.Keys(g.files))
	return paths[g.rng.IntN(len(paths))]
}

// freshKey returns a word that is not a key of the store yet.
func (g *gen) freshKey() string {
	for {
		if w := g.pick(words, 1)[0]; g.kv[w] == "" {
			return w
		}
	}
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }
