package protocol3

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/toolworld"
)

// promptKey returns the key a chain or chainset prompt names at its cmd call ("Add key
// K to …" for get, "…, as key K." for set), read off the prompt's text.
func promptKey(t *testing.T, prompt, cmd string) string {
	t.Helper()
	var k string
	switch cmd {
	case "get":
		_, after, ok := strings.Cut(prompt, "Add key ")
		require.True(t, ok, prompt)
		k, _, _ = strings.Cut(after, " ")
	case "set":
		_, after, ok := strings.Cut(prompt, ", as key ")
		require.True(t, ok, prompt)
		k = strings.TrimSuffix(after, ".")
	}
	require.NotEmpty(t, k, prompt)
	return k
}

// TestKeyCopyDemos builds the key copy curriculum on 300 train tasks with the byte
// tokenizer and checks, for every group, what makes it a lesson in copying the
// prompt's key: every variant's context holds the task's prompt naming a key, and its
// only target is exactly the solution's get (or set) call with that key; the first
// variant's prompt and target are the task's own; the keys differ between variants;
// and the contexts are the same once the prompt's key is put back to the first
// variant's (the key is the only difference, the calls replayed before are the
// solution's).
func TestKeyCopyDemos(t *testing.T) {
	tok := tokenizer.NewBytes()
	cfg := DefaultCopy()
	cfg.Tasks = 300
	groups, cnt, err := KeyCopyDemos(tok, cfg, 512, 12, 3)
	require.NoError(t, err)
	t.Logf("%+v", cnt)
	tasks, err := toolworld.Tasks(toolworld.SplitTrain, cfg.Tasks)
	require.NoError(t, err)
	want := 0
	for _, task := range tasks {
		switch task.Family {
		case "chain":
			want++
		case "chainset":
			want += 2
		}
	}
	require.Equal(t, want, cnt.Groups+cnt.Skipped, "one group at get for chain, at get and set for chainset")
	require.Greater(t, cnt.Groups, want*3/4, "most give a group")
	byCmd := map[string]int{}
	for _, g := range copyLessons(t, tok, groups, cnt, cfg.Variants) {
		var n int
		var cmd string
		_, err := fmt.Sscanf(strings.ReplaceAll(g[0].id, "-", " "), "keycopy3 %d %s 0", &n, &cmd)
		require.NoError(t, err, g[0].id)
		byCmd[cmd]++
		task := tasks[n]
		require.Contains(t, []string{"chain", "chainset"}, task.Family)
		at := slicesIndexName(task.Solution, cmd)
		require.GreaterOrEqual(t, at, 0, "%s: the task's solution has a %s call", g[0].id, cmd)
		var keys []string
		var first string
		for j, l := range g {
			require.Equal(t, 1, strings.Count(l.ctx, "Add key "), "%s: one prompt", l.id)
			key := promptKey(t, promptLine(t, l.ctx), cmd)
			c := toolworld.ParseCall(l.call)
			require.Equal(t, cmd, c.Name, "%s: the target is the %s call: %q", l.id, cmd, l.call)
			require.Equal(t, key, c.Args[0], "%s: the target's key is the one its prompt names: %q", l.id, l.call)
			if cmd == "set" {
				require.Len(t, c.Args, 2, l.id)
			}
			if j == 0 {
				require.Equal(t, task.Solution[at], l.call, "%s: the first variant's target is the task's own call", l.id)
				require.True(t, strings.Contains(l.ctx, task.Prompt), "%s: the first variant's prompt is the task's", l.id)
				first = l.ctx
			} else {
				own := keys[0]
				back := strings.Replace(l.ctx, prefixFor(cmd)+key+suffixFor(cmd), prefixFor(cmd)+own+suffixFor(cmd), 1)
				require.NotEqual(t, first, l.ctx, "%s: the variant's prompt differs", l.id)
				require.Equal(t, first, back, "%s: the variants differ only in the prompt's key", l.id)
			}
			for _, line := range task.Solution[:at] {
				require.Contains(t, l.ctx, line, "%s: the solution's calls before the target are replayed", l.id)
			}
			keys = append(keys, key)
		}
		for j := range keys {
			for k := range j {
				require.NotEqual(t, keys[j], keys[k], "%v: each variant names another key", keys)
			}
		}
	}
	t.Logf("groups by call: %v", byCmd)
	require.Positive(t, byCmd["get"])
	require.Positive(t, byCmd["set"])
}

// promptLine returns the line of ctx that holds a chain prompt (chat markers end lines).
func promptLine(t *testing.T, ctx string) string {
	t.Helper()
	for line := range strings.SplitSeq(regexp.MustCompile(`<\|[^|<>\s]+\|>`).ReplaceAllString(ctx, "\n"), "\n") {
		if strings.Contains(line, "Add key ") {
			return strings.TrimSpace(line)
		}
	}
	require.Fail(t, "no chain prompt", ctx)
	return ""
}

func prefixFor(cmd string) string {
	if cmd == "get" {
		return "Add key "
	}
	return ", as key "
}

func suffixFor(cmd string) string {
	if cmd == "get" {
		return " "
	}
	return "."
}

func slicesIndexName(calls []string, name string) int {
	for i, c := range calls {
		if toolworld.ParseCall(c).Name == name {
			return i
		}
	}
	return -1
}

// TestKeyVariant plays every key variant of the first 300 train tasks' chain and
// chainset tasks with its own solution in the real tool world: each must be solved
// (reward 1: its answer and, for chainset, the stored key are right), so a variant's
// prompt, solution, answer and wanted store agree. A key the store does not hold
// (get) or holds already (set) is refused.
func TestKeyVariant(t *testing.T) {
	tok := tokenizer.NewBytes()
	tasks, err := toolworld.Tasks(toolworld.SplitTrain, 300)
	require.NoError(t, err)
	played := map[string]int{}
	for i, task := range tasks {
		if task.Family != "chain" && task.Family != "chainset" {
			continue
		}
		for _, cmd := range []string{"get", "set"} {
			if slicesIndexName(task.Solution, cmd) < 0 {
				continue
			}
			for _, key := range KeyAlternatives(task, cmd, 10, rand.New(rand.NewPCG(1, uint64(i)))) {
				v, err := KeyVariant(task, cmd, key)
				require.NoError(t, err)
				require.Equal(t, key, promptKey(t, v.Prompt, cmd), v.Prompt)
				require.NotEqual(t, task.Prompt, v.Prompt)
				env, err := toolworld.New(v, tok, toolworld.Options{MaxTokens: 512, MaxCalls: 12})
				require.NoError(t, err)
				for _, line := range v.Solution {
					require.False(t, env.Done(), "%s %s %s: ended before %q", task.ID, cmd, key, line)
					_, _, err := env.Step(append(tok.EncodeText(line), env.StopID()), nil)
					require.NoError(t, err)
					_, failed := env.Last()
					require.False(t, failed && !env.Done(), "%s %s %s: %q failed", task.ID, cmd, key, line)
				}
				require.True(t, env.Done())
				require.Equal(t, float32(1), env.Reward(), "%s %s %s: %q %v", task.ID, cmd, key, v.Prompt, v.Solution)
				played[cmd]++
			}
		}
		_, err := KeyVariant(task, "get", "zzz")
		require.ErrorContains(t, err, "not in the store")
		if task.Family == "chainset" {
			held := toolworld.ParseCall(task.Solution[slicesIndexName(task.Solution, "get")]).Args[0]
			_, err := KeyVariant(task, "set", held)
			require.ErrorContains(t, err, "holds it already")
		}
	}
	t.Logf("variants played: %v", played)
	require.Positive(t, played["get"])
	require.Positive(t, played["set"])
}

// TestWarmStartKeyCopy runs the warm start for 3 steps on a tiny untrained model with
// the key copy groups pooled in (Copy.Key; the plumbing, not the answer): the key copy
// curriculum is built and counted, every eval is recorded and the kept checkpoint is
// written.
func TestWarmStartKeyCopy(t *testing.T) {
	backend, cfg := tinyCopyWarmStart(t)
	cfg.Copy.Tasks, cfg.Copy.PerBatch, cfg.Copy.Key = 40, 4, true
	res, err := WarmStart(t.Context(), backend, cfg, func(s string) { t.Log(s) })
	require.NoError(t, err)
	require.Positive(t, res.KeyCopy.Groups)
	require.Len(t, res.Validation, 3)
	_, err = os.Stat(filepath.Join(cfg.Out, "model.safetensors"))
	require.NoError(t, err)
}
