package protocol3

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/hindsight-ai/hindsight/credit"
	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/experiments/efficacy"
	"github.com/hindsight-ai/hindsight/rollout"
	"github.com/hindsight-ai/hindsight/toolworld"
)

// KeyCopyDemos builds the key copy curriculum (attempt 8's next step 1: chain and
// chainset fail at the `get` of the key their prompt names, and chainset again at
// `set`'s key). For each chain and chainset task among train tasks 0..cfg.Tasks-1
// (seeded by seed, apart from CopyDemos' and SiblingCopyDemos' draws), one group at the
// solution's `get` and, for chainset, one at its `set`: up to cfg.Variants rollouts of
// the task whose prompts differ only in the key they name there (the task's own key
// and others, KeyAlternatives), each replaying the solution up to that call and then
// the call with the key its prompt names, the only target. Which key follows is
// decided by the prompt alone.
func KeyCopyDemos(tok tokenizer.Tokenizer, cfg CopyConfig, maxTokens, maxCalls int, seed uint64) ([][]credit.Sequence, CopyCounts, error) {
	return copyCurriculum(tok, cfg, seed, 0x6b6579, func(i int, t toolworld.Task, rng *rand.Rand) ([]copyGroup, error) {
		if t.Family != "chain" && t.Family != "chainset" {
			return nil, nil
		}
		var groups []copyGroup
		for _, cmd := range []string{"get", "set"} {
			at := slices.IndexFunc(t.Solution, func(c string) bool { return toolworld.ParseCall(c).Name == cmd })
			if at < 0 {
				continue // chain has no set
			}
			rs, err := playKeyCopy(tok, t, at, cfg.Variants, maxTokens, maxCalls, rng)
			if err != nil {
				return nil, err
			}
			groups = append(groups, copyGroup{id: fmt.Sprintf("keycopy3-%05d-%s", i, cmd), rs: rs})
		}
		return groups, nil
	})
}

// playKeyCopy returns the variants of t at its solution's call at (a `get` or `set`):
// for the task's own key and up to variants−1 others, the variant task (KeyVariant)
// replayed to that call, then the call. nil when the episode ends first or no other
// key exists.
func playKeyCopy(tok tokenizer.Tokenizer, t toolworld.Task, at, variants, maxTokens, maxCalls int, rng *rand.Rand) ([]*rollout.Rollout, error) {
	c := toolworld.ParseCall(t.Solution[at])
	if len(c.Args) == 0 {
		return nil, nil
	}
	keys := append([]string{c.Args[0]}, KeyAlternatives(t, c.Name, variants-1, rng)...)
	if len(keys) < 2 {
		return nil, nil
	}
	var out []*rollout.Rollout
	for i, key := range keys {
		v, err := KeyVariant(t, c.Name, key)
		if err != nil {
			return nil, err
		}
		e, err := replay(tok, v, v.Solution[:at], maxTokens, maxCalls, efficacy.NewTracker(v))
		if err != nil {
			return nil, err
		}
		gen := []int32(nil)
		if e != nil {
			gen = append(tok.EncodeText(v.Solution[at]), e.StopID())
		}
		if e == nil || len(gen) > e.Budget() {
			if i == 0 {
				return nil, nil // no room for the task's own call
			}
			continue
		}
		if _, _, err := e.Step(gen, nil); err != nil {
			return nil, fmt.Errorf("key copy demo %s: %w", t.ID, err)
		}
		out = append(out, e.Rollout("keycopy"))
	}
	if len(out) < 2 {
		return nil, nil
	}
	return out, nil
}

// KeyAlternatives returns up to n keys a chain or chainset prompt may name in place of
// its own at the solution's cmd call, in a random order: for `get`, the store's other
// keys (so the variant's `get` reads a value); for `set`, the task's other words (its
// files' names and directories' words are from the same list as keys) that the store
// does not hold, so the variant's `set` writes a new key as the task's does.
func KeyAlternatives(t toolworld.Task, cmd string, n int, rng *rand.Rand) []string {
	at := slices.IndexFunc(t.Solution, func(c string) bool { return toolworld.ParseCall(c).Name == cmd })
	if at < 0 {
		return nil
	}
	own := toolworld.ParseCall(t.Solution[at]).Args[0]
	pool := map[string]bool{}
	switch cmd {
	case "get":
		for k := range t.KV {
			pool[k] = true
		}
	case "set":
		for p := range t.Files {
			_, f, _ := strings.Cut(p, "/")
			if w := strings.TrimSuffix(f, ".txt"); t.KV[w] == "" {
				pool[w] = true
			}
		}
	}
	delete(pool, own)
	all := make([]string, 0, len(pool))
	for k := range pool {
		all = append(all, k)
	}
	sort.Strings(all)
	rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	return all[:min(n, len(all))]
}

// KeyVariant returns chain or chainset task t with its prompt naming key at the
// solution's cmd call (`get`: "Add key K to …"; `set`: "…, as key K.") and its
// solution, answer and wanted store changed to match; t itself when key is t's own.
func KeyVariant(t toolworld.Task, cmd, key string) (toolworld.Task, error) {
	at := slices.IndexFunc(t.Solution, func(c string) bool { return toolworld.ParseCall(c).Name == cmd })
	if at < 0 || len(toolworld.ParseCall(t.Solution[at]).Args) == 0 {
		return t, fmt.Errorf("key variant %s: no %s call in its solution", t.ID, cmd)
	}
	own := toolworld.ParseCall(t.Solution[at]).Args[0]
	var from, to string
	switch cmd {
	case "get":
		from, to = "Add key "+own+" ", "Add key "+key+" "
	case "set":
		from, to = ", as key "+own+".", ", as key "+key+"."
	default:
		return t, fmt.Errorf("key variant %s: %s: not get or set", t.ID, cmd)
	}
	if strings.Count(t.Prompt, from) != 1 {
		return t, fmt.Errorf("key variant %s: prompt %q does not name the %s key %q once", t.ID, t.Prompt, cmd, own)
	}
	v := t
	v.Prompt = strings.Replace(t.Prompt, from, to, 1)
	v.Solution = slices.Clone(t.Solution)
	v.WantKV = nil
	switch cmd {
	case "get":
		val, ok := t.KV[key]
		if !ok {
			return t, fmt.Errorf("key variant %s: get %s: not in the store", t.ID, key)
		}
		calc := toolworld.ParseCall(t.Solution[at+1])
		a, _, ok := strings.Cut(strings.Join(calc.Args, ""), "+")
		if calc.Name != "calc" || !ok {
			return t, fmt.Errorf("key variant %s: the call after get is %q, not calc A+B", t.ID, t.Solution[at+1])
		}
		x, errA := strconv.Atoi(a)
		y, errB := strconv.Atoi(val)
		if errA != nil || errB != nil {
			return t, fmt.Errorf("key variant %s: calc %s+%s: not numbers", t.ID, a, val)
		}
		v.Answer = strconv.Itoa(x + y)
		v.Solution[at] = "get " + key
		v.Solution[at+1] = "calc " + a + "+" + val
		for j, c := range v.Solution {
			switch toolworld.ParseCall(c).Name {
			case "set":
				v.Solution[j] = fmt.Sprintf("set %s %s", toolworld.ParseCall(c).Args[0], v.Answer)
			case toolworld.AnswerCommand:
				v.Solution[j] = "answer " + v.Answer
			}
		}
	case "set":
		if _, held := t.KV[key]; held {
			return t, fmt.Errorf("key variant %s: set %s: the store holds it already", t.ID, key)
		}
		v.Solution[at] = fmt.Sprintf("set %s %s", key, t.Answer)
	}
	for _, c := range v.Solution {
		if p := toolworld.ParseCall(c); p.Name == "set" {
			v.WantKV = map[string]string{p.Args[0]: v.Answer}
		}
	}
	return v, nil
}
