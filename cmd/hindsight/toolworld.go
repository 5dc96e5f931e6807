package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/internal/cliflag"
	"github.com/hindsight-ai/hindsight/rollout"
	"github.com/hindsight-ai/hindsight/toolworld"
)

// toolworldCmd is `hindsight toolworld (-list | -show | -play)`: browse the bundled
// task world, play a task by typing calls, or let a scripted agent play tasks and
// write the episodes as a rollout file.
func toolworldCmd(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("hindsight toolworld", flag.ContinueOnError)
	fs.SetOutput(stderr)
	list := fs.Bool("list", false, "list the tasks of -split (the first -n)")
	show := fs.Bool("show", false, "show task -task of -split: request, files, store, solution")
	play := fs.Bool("play", false, "play task -task of -split: one call per line on stdin (or -agent plays -n tasks)")
	split := fs.String("split", toolworld.SplitHeldout, "`split`: train, validation or heldout")
	task := fs.Int("task", 0, "task `index` within the split")
	n := fs.Int("n", 0, "number of tasks for -list and -agent (0: 20 for -list of train, the whole split otherwise, 1 for -agent)")
	agent := fs.String("agent", "", "with -play: `oracle`, noisy or random plays instead of stdin")
	p := fs.Float64("p", 0.2, "mistake probability of -agent noisy")
	seed := fs.Uint64("seed", 1, "random seed of -agent noisy and random (task i uses seed+i)")
	tokenizerSpec := fs.String("tokenizer", "bytes", "`bytes`, or a tokenizer.json (or a directory holding one) of a ChatML model")
	maxTokens := fs.Int("max-tokens", 256, "token cap of an episode")
	out := fs.String("out", "", "with -play: write the episodes as a rollout `file` (.arrow)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: hindsight toolworld (-list | -show | -play) [-split S] [-task N] [-n N] [-agent oracle|noisy|random] [-out FILE.arrow]\n\n")
		fmt.Fprintf(stderr, "The bundled tool-use task world. -play reads one call per line from stdin\n"+
			"(ls DIR, cat FILE, grep [-i] [-c] WORD PATH, calc EXPR, get KEY, set KEY N, answer X)\n"+
			"and prints each tool result, then the reward.\n\n")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if code, ok := cliflag.Check(fs, stderr,
		cliflag.Rule{Bad: btoi(*list)+btoi(*show)+btoi(*play) != 1, Msg: "give one of -list, -show and -play"},
		cliflag.NoArgs(fs)); !ok {
		return code
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "hindsight toolworld: %v\n", err)
		return 1
	}
	switch {
	case *list:
		count := *n
		if count <= 0 && *split == toolworld.SplitTrain {
			count = 20
		}
		tasks, err := toolworld.Tasks(*split, count)
		if err != nil {
			return fail(err)
		}
		for _, t := range tasks {
			fmt.Fprintf(stdout, "%s\t%s\t%d calls\t%s\n", t.ID, t.Family, t.Calls(), t.Prompt)
		}
		return 0
	case *show:
		t, err := toolworld.Generate(*split, *task)
		if err != nil {
			return fail(err)
		}
		showTask(stdout, t)
		return 0
	}
	tok, err := tokenizer.Load(*tokenizerSpec)
	if err != nil {
		return fail(err)
	}
	opts := toolworld.Options{MaxTokens: *maxTokens}
	if *agent == "" {
		t, err := toolworld.Generate(*split, *task)
		if err != nil {
			return fail(err)
		}
		r, err := playStdin(t, tok, opts, stdin, stdout)
		if err != nil {
			return fail(err)
		}
		return writeEpisodes(*out, []*rollout.Rollout{r}, stdout, stderr)
	}
	count := max(*n, 1)
	var rs []*rollout.Rollout
	wins := 0
	for i := *task; i < *task+count; i++ {
		t, err := toolworld.Generate(*split, i)
		if err != nil {
			return fail(err)
		}
		var a toolworld.Agent
		switch *agent {
		case "oracle":
			a = &toolworld.Oracle{}
		case "noisy":
			a = toolworld.NewNoisy(*p, *seed+uint64(i))
		case "random":
			a = toolworld.NewRandom(*seed + uint64(i))
		default:
			fmt.Fprintf(stderr, "hindsight toolworld: -agent %q: want oracle, noisy or random\n", *agent)
			return 2
		}
		env, err := toolworld.New(t, tok, opts)
		if err != nil {
			return fail(err)
		}
		reward, err := toolworld.Play(env, a, 4*opts.MaxTokens)
		if err != nil {
			return fail(err)
		}
		if reward == 1 {
			wins++
		}
		if count == 1 {
			text, _ := tok.Decode(env.Tokens())
			fmt.Fprintln(stdout, text)
		}
		rs = append(rs, env.Rollout(fmt.Sprintf("%s-%s-%d", t.ID, *agent, *seed)))
	}
	fmt.Fprintf(stdout, "%s on %s[%d:%d]: %d/%d solved\n", *agent, *split, *task, *task+count, wins, count)
	return writeEpisodes(*out, rs, stdout, stderr)
}

// showTask prints a task, its answer and solution included.
func showTask(w io.Writer, t toolworld.Task) {
	fmt.Fprintf(w, "task %s (%s, %d calls)\nrequest: %s\nfiles:\n", t.ID, t.Family, t.Calls(), t.Prompt)
	for _, p := range slices.Sorted(maps.Keys(t.Files)) {
		fmt.Fprintf(w, "  %s: %q\n", p, t.Files[p])
	}
	fmt.Fprintf(w, "store:\n")
	for _, k := range slices.Sorted(maps.Keys(t.KV)) {
		fmt.Fprintf(w, "  %s = %s\n", k, t.KV[k])
	}
	fmt.Fprintf(w, "answer: %s\n", t.Answer)
	for _, k := range slices.Sorted(maps.Keys(t.WantKV)) {
		fmt.Fprintf(w, "wants store: %s = %s\n", k, t.WantKV[k])
	}
	fmt.Fprintf(w, "solution:\n  %s\n", strings.Join(t.Solution, "\n  "))
}

// playStdin plays t with the calls a person types, one per line.
func playStdin(t toolworld.Task, tok tokenizer.Tokenizer, opts toolworld.Options, stdin io.Reader, stdout io.Writer) (*rollout.Rollout, error) {
	env, err := toolworld.New(t, tok, opts)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(stdout, "task %s\nsystem: %s\nuser: %s\n", t.ID, toolworld.SystemPrompt, t.Prompt)
	in := bufio.NewScanner(stdin)
	for !env.Done() {
		fmt.Fprint(stdout, "> ")
		if !in.Scan() {
			fmt.Fprintln(stdout)
			break
		}
		gen := append(tok.EncodeText(in.Text()), env.StopID())
		gen = gen[:min(len(gen), env.Budget())]
		before, _ := env.Calls()
		if _, _, err := env.Step(gen, nil); err != nil {
			return nil, err
		}
		if after, _ := env.Calls(); after > before {
			out, failed := env.Last()
			mark := ""
			if failed {
				mark = " (error)"
			}
			fmt.Fprintf(stdout, "%s%s\n", out, mark)
		}
	}
	if err := in.Err(); err != nil {
		return nil, fmt.Errorf("read calls: %w", err)
	}
	calls, failed := env.Calls()
	state := "answered"
	switch {
	case env.Truncated():
		state = "out of room"
	case !env.Done():
		state = "no answer"
	}
	fmt.Fprintf(stdout, "reward %g (%s; %d calls, %d failed; %d tokens)\n", env.Reward(), state, calls, failed, len(env.Tokens()))
	return env.Rollout(t.ID + "-play"), nil
}

// writeEpisodes writes rs to path as a rollout file when path is set.
func writeEpisodes(path string, rs []*rollout.Rollout, stdout, stderr io.Writer) int {
	if path == "" {
		return 0
	}
	if err := rollout.WriteFile(path, rs, rollout.WriteOptions{}); err != nil {
		fmt.Fprintf(stderr, "hindsight toolworld: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "wrote %d rollouts to %s\n", len(rs), path)
	return 0
}
