package toolworld

import (
	"fmt"
	"strconv"
	"strings"
)

// The task families. Each reads what it needs from the tree and store that gen drew
// and may add a directory, file or key. Its numbers are drawn at random, so no answer
// can be guessed without the calls.

// read: find the only file of a directory, then read it (2 calls).
func (g *gen) read() Task {
	dir, path := g.soleDir()
	n := g.files[path]
	return Task{
		Prompt:   fmt.Sprintf("Give the number in the only file in %s/.", dir),
		Answer:   n,
		Solution: []string{"ls " + dir, "cat " + path, "answer " + n},
	}
}

// sum: read two named files and add their numbers (3 calls).
func (g *gen) sum() Task {
	a := g.anyFile()
	b := a
	for b == a {
		b = g.anyFile()
	}
	s := strconv.Itoa(atoi(g.files[a]) + atoi(g.files[b]))
	return Task{
		Prompt:   fmt.Sprintf("Add the numbers in %s and %s.", a, b),
		Answer:   s,
		Solution: []string{"cat " + a, "cat " + b, "calc " + g.files[a] + "+" + g.files[b], "answer " + s},
	}
}

// lookup: grep a directory for the line naming a key, then read the key (2 calls).
func (g *gen) lookup() Task {
	key := g.freshKey()
	g.kv[key] = g.num()
	pattern := key
	for pattern == key {
		pattern = g.pick(words, 1)[0]
	}
	dir := g.dirs[g.rng.IntN(len(g.dirs))]
	var path string
	for path == "" || g.files[path] != "" {
		path = dir + "/" + g.pick(words, 1)[0] + ".txt"
	}
	g.files[path] = pattern + "=" + key
	return Task{
		Prompt:   fmt.Sprintf("A file in %s/ has %s=KEY. Give the value of KEY.", dir, pattern),
		Answer:   g.kv[key],
		Solution: []string{fmt.Sprintf("grep %s %s", pattern, dir), "get " + key, "answer " + g.kv[key]},
	}
}

// store: read a file, multiply, store the product (3 calls).
func (g *gen) store() Task {
	path := g.anyFile()
	k := 2 + g.rng.IntN(8)
	key := g.freshKey()
	p := strconv.Itoa(atoi(g.files[path]) * k)
	return Task{
		Prompt:   fmt.Sprintf("Set key %s to the number in %s times %d.", key, path, k),
		Answer:   p,
		WantKV:   map[string]string{key: p},
		Solution: []string{"cat " + path, fmt.Sprintf("calc %s*%d", g.files[path], k), fmt.Sprintf("set %s %s", key, p), "answer " + p},
	}
}

// chain: find and read the only file of a directory, read a key, add (4 calls).
func (g *gen) chain() Task {
	t, _ := g.chainTask()
	return t
}

// chainSet: chain, then store the sum under a new key (5 calls).
func (g *gen) chainSet() Task {
	t, s := g.chainTask()
	key := g.freshKey()
	t.Prompt = strings.TrimSuffix(t.Prompt, ".") + ", as key " + key + "."
	t.WantKV = map[string]string{key: s}
	t.Solution = append(t.Solution[:len(t.Solution)-1], fmt.Sprintf("set %s %s", key, s), "answer "+s)
	return t
}

func (g *gen) chainTask() (Task, string) {
	dir, path := g.soleDir()
	keys := make([]string, 0, len(g.kv))
	for _, w := range words { // in a fixed order: map order would differ run to run
		if g.kv[w] != "" {
			keys = append(keys, w)
		}
	}
	key := keys[g.rng.IntN(len(keys))]
	s := strconv.Itoa(atoi(g.files[path]) + atoi(g.kv[key]))
	return Task{
		Prompt: fmt.Sprintf("Add key %s to the number in the only file in %s/.", key, dir),
		Answer: s,
		Solution: []string{"ls " + dir, "cat " + path, "get " + key,
			fmt.Sprintf("calc %s+%s", g.files[path], g.kv[key]), "answer " + s},
	}, s
}
