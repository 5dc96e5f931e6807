package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/rs/zerolog"

	"github.com/hindsight-ai/hindsight/collect"
	"github.com/hindsight-ai/hindsight/internal/cliflag"
	"github.com/hindsight-ai/hindsight/toolworld"
	"github.com/hindsight-ai/hindsight/xla"
)

// collectCmd is `hindsight collect`: it samples rollouts of the bundled task world
// with the newest checkpoint and writes them into a spool for hindsightd.
func collectCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("hindsight collect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dataDir := fs.String("data-dir", "", "a hindsightd data `directory`: the defaults of -model, -checkpoints and -out live in it")
	modelDir := fs.String("model", "", "initial policy `directory` (default <data-dir>/model)")
	ckRoot := fs.String("checkpoints", "", "checkpoint `root` whose latest link is followed (default <data-dir>/checkpoints; \"none\": never reload)")
	out := fs.String("out", "", "spool incoming `folder` (default <data-dir>/spool/incoming)")
	group := fs.Int("group", 8, "G: rollouts per task (one task_id group)")
	perFile := fs.Int("tasks-per-file", 2, "tasks per rollout file")
	files := fs.Int("files", 0, "stop after this many files (0: until interrupted)")
	split := fs.String("split", toolworld.SplitTrain, "task split: train, validation or heldout")
	start := fs.Int("start", 0, "index of the first task of the split")
	temp := fs.Float64("temperature", 1, "sampling temperature (0: greedy)")
	topP := fs.Float64("top-p", 1, "nucleus sampling mass (1: all)")
	topK := fs.Int("top-k", 0, "keep the K most likely tokens (0: all)")
	turnTokens := fs.Int("max-turn-tokens", 48, "most tokens of one policy turn")
	maxTokens := fs.Int("max-tokens", 256, "most tokens of one rollout")
	maxCalls := fs.Int("max-calls", 8, "most tool calls of one rollout")
	seed := fs.Uint64("seed", 1, "sampling seed: the same seed, tasks and policy give the same rollouts")
	pendingMax := fs.Int("max-pending", 2, "wait while the spool holds this many unclaimed files")
	runID := fs.String("run-id", "", "prefix of rollout ids and file names (default collect-<unix time>)")
	backendSpec := fs.String("backend", "", "GoMLX backend: go[:opts], xla:<absolute plugin path>, xla-cpu (default $GOMLX_BACKEND, else "+xla.DefaultBackend+")")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: hindsight collect (-data-dir DIR | -model DIR -out DIR) [-checkpoints DIR] [-group G] [-files N] [flags]\n\n"+
			"Samples G rollouts per task of the bundled task world with the newest checkpoint (reloaded when\n"+
			"<checkpoints>/latest moves) and writes them as rollout files into the spool, as a collector does.\n\n")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if code, ok := cliflag.Check(fs, stderr, cliflag.NoArgs(fs)); !ok {
		return code
	}
	def := func(v *string, sub ...string) {
		if *v == "" && *dataDir != "" {
			*v = filepath.Join(append([]string{*dataDir}, sub...)...)
		}
	}
	def(modelDir, "model")
	def(ckRoot, "checkpoints")
	def(out, "spool", "incoming")
	if *ckRoot == "none" {
		*ckRoot = ""
	}
	if *modelDir == "" || *out == "" {
		return cliflag.Fail(fs, stderr, "need -data-dir, or -model and -out")
	}
	if _, err := toolworld.Generate(*split, *start); err != nil {
		fmt.Fprintf(stderr, "hindsight collect: -split/-start: %v\n", err)
		return 2
	}
	opts := collect.Options{ModelDir: *modelDir, Checkpoints: *ckRoot, Out: *out, Backend: *backendSpec, Split: *split,
		StartTask: *start, TasksPerFile: *perFile, Files: *files, MaxPending: *pendingMax, RunID: *runID,
		Episode: collect.EpisodeOptions{Group: *group, MaxTurnTokens: *turnTokens, Temperature: *temp, TopK: *topK, TopP: *topP,
			Seed: *seed, Env: toolworld.Options{MaxTokens: *maxTokens, MaxCalls: *maxCalls}},
		Log: zerolog.New(stderr).With().Timestamp().Logger().Level(zerolog.WarnLevel), Progress: stdout}
	fmt.Fprintf(stdout, "collecting %d rollouts per task from the %s split into %s\n", *group, *split, *out)
	t0 := time.Now()
	tot, err := collect.Run(ctx, opts)
	if err != nil {
		fmt.Fprintf(stderr, "hindsight collect: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "collected %d files, %d rollouts, %d tokens in %v; success %.1f%%; last policy step %d (%d loads)\n",
		tot.Files, tot.Rollouts, tot.Tokens, time.Since(t0).Round(time.Millisecond), 100*tot.Success, tot.PolicyVersion, tot.Reloads)
	return 0
}
