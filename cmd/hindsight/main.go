// Command hindsight is the hindsight CLI: validate rollout files, synthesize test
// rollouts, and query a running hindsightd.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/hindsight-ai/hindsight/internal/buildinfo"
	"github.com/hindsight-ai/hindsight/internal/cliflag"
)

const usage = `usage: hindsight COMMAND [flags]

commands:
  validate FILE...    check rollout files; one line per problem, exit 1 if any file is invalid
  synth -out DIR      write synthetic agent rollouts as .arrow files
  status              print the status of a running hindsightd
  pause [-reason T]   stop a running hindsightd claiming files and stepping until resume
  resume              let a paused hindsightd go on
  ab status|promote|rollback
                      the gateway's A/B test: show it, or promote or roll back the candidate by hand
  tokenize            encode stdin to token ids (JSON), or decode ids with -decode
  init-model -out DIR write a randomly initialised model directory (config, safetensors, tokenizer)
  score -model DIR -in ROLLOUTS.arrow -out SCORES.arrow
                      per-token log-probs of each rollout under the model
  merge -checkpoint DIR -out DIR
                      merge a LoRA checkpoint's adapter into its base: a full model directory
  generate -model DIR (-prompt TEXT | -in FILE)
                      sample continuations from the model (KV cache, batched)
  toolworld (-list | -show | -play)
                      the bundled tool-use task world: list or show tasks, play one by typing calls
  collect -data-dir DIR
                      sample task-world rollouts with the newest checkpoint into a spool
  fetch-xla-cpu       fetch the pinned XLA CPU plugin (PJRT) into the cache for -backend xla-cpu
  bench-gpu -out DIR  run the GPU benchmarks vs PyTorch: hindsight-bench-gpu, their own program (bench/gpu)
  inspect CREDITFILE... (-html OUT | -serve ADDR) [-model DIR]
                      the credit viewer: one self-contained HTML page of the rollouts' per-token credit
  version             print the version

Run 'hindsight COMMAND -h' for a command's flags.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "validate":
		return validateCmd(args[1:], stdout, stderr)
	case "synth":
		return synthCmd(args[1:], stdout, stderr)
	case "status":
		return statusCmd(ctx, args[1:], stdout, stderr)
	case "pause":
		return pauseCmd(ctx, false, args[1:], stdout, stderr)
	case "resume":
		return pauseCmd(ctx, true, args[1:], stdout, stderr)
	case "ab":
		return abCmd(ctx, args[1:], stdout, stderr)
	case "tokenize":
		return tokenizeCmd(args[1:], os.Stdin, stdout, stderr)
	case "init-model":
		return initModelCmd(args[1:], stdout, stderr)
	case "score":
		return scoreCmd(ctx, args[1:], stdout, stderr)
	case "merge":
		return mergeCmd(ctx, args[1:], stdout, stderr)
	case "generate":
		return generateCmd(ctx, args[1:], stdout, stderr)
	case "toolworld":
		return toolworldCmd(args[1:], os.Stdin, stdout, stderr)
	case "collect":
		return collectCmd(ctx, args[1:], stdout, stderr)
	case "fetch-xla-cpu":
		return fetchXLACPUCmd(ctx, args[1:], stdout, stderr)
	case "inspect":
		return inspectCmd(ctx, args[1:], stdout, stderr)
	case "bench-gpu":
		return benchGPUCmd(ctx, args[1:], stdout, stderr)
	case "version", "-version", "--version":
		fmt.Fprintln(stdout, buildinfo.Version())
		return 0
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "hindsight: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
}

// parseFlags parses a command's args into fs, flags before, between or after the
// positional arguments (cliflag.Parse). When ok is false the command returns code: 0
// after -h, 2 on a bad flag (one line on fs's output says which).
func parseFlags(fs *flag.FlagSet, args []string) (code int, ok bool) {
	return cliflag.Run(fs, args, fs.Output())
}
