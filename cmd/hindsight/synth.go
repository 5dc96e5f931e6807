package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/internal/cliflag"
	"github.com/hindsight-ai/hindsight/rollout"
)

// synthCmd is `hindsight synth -out DIR -n N -tokens T -seed S`.
func synthCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("hindsight synth", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "", "output `directory` (created if missing); point it at a spool's incoming/ to feed a daemon")
	n := fs.Int("n", 16, "number of rollouts")
	tokens := fs.Int("tokens", 8192, "approximate tokens per rollout (byte-level ids)")
	seed := fs.Uint64("seed", 1, "random seed; the same seed writes the same files")
	perFile := fs.Int("per-file", 4, "rollouts per file")
	group := fs.Int("group", 4, "rollouts per task_id (outcome baseline groups)")
	prefix := fs.String("prefix", "synth", "rollout_id and file name prefix")
	format := fs.String("format", "file", "Arrow IPC `format`: file or stream")
	tokSpec := fs.String("tokenizer", "bytes", "`bytes`, or a tokenizer.json file or a model directory holding one: the rollouts are its ids (-tokens counts them) and carry its fingerprint")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: hindsight synth -out DIR [-n N] [-tokens T] [-seed S] [-per-file K] [-format file|stream] [-tokenizer PATH]\n\n")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	opts := rollout.SynthOptions{N: *n, Tokens: *tokens, Seed: *seed, PerFile: *perFile, GroupSize: *group, IDPrefix: *prefix}
	switch *format {
	case "file":
		opts.Format = rollout.FormatFile
	case "stream":
		opts.Format = rollout.FormatStream
	default:
		fmt.Fprintf(stderr, "hindsight synth: -format %q: want file or stream\n", *format)
		return 2
	}
	if code, ok := cliflag.Check(fs, stderr,
		cliflag.Rule{Bad: *out == "", Msg: "-out DIR is required"},
		cliflag.Rule{Bad: *n <= 0, Msg: fmt.Sprintf("-n %d: want ≥ 1", *n)},
		cliflag.Rule{Bad: *tokens <= 0, Msg: fmt.Sprintf("-tokens %d: want ≥ 1", *tokens)},
		cliflag.Rule{Bad: *perFile <= 0, Msg: fmt.Sprintf("-per-file %d: want ≥ 1", *perFile)},
		cliflag.Rule{Bad: *group <= 0, Msg: fmt.Sprintf("-group %d: want ≥ 1", *group)},
		cliflag.NoArgs(fs)); !ok {
		return code
	}
	if *tokSpec != "bytes" {
		tok, err := tokenizer.Load(*tokSpec)
		if err != nil {
			fmt.Fprintf(stderr, "hindsight synth: %v\n", err)
			return 1
		}
		opts.Tokenizer = tok
	}
	paths, err := rollout.WriteSynth(*out, opts)
	if err != nil {
		fmt.Fprintf(stderr, "hindsight synth: %v\n", err)
		return 1
	}
	for _, p := range paths {
		fmt.Fprintln(stdout, p)
	}
	fmt.Fprintf(stderr, "hindsight synth: wrote %d rollouts in %d files to %s\n", *n, len(paths), *out)
	return 0
}
