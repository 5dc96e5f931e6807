package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/hindsight-ai/hindsight/internal/cliflag"
	"github.com/hindsight-ai/hindsight/rollout"
)

// validateCmd is `hindsight validate [-vocab N] [-tokenizer FP] [-v] FILE...`: one line
// per problem on stdout; exit 0 when every file is valid, 1 when any is not, 2 on a
// usage error.
func validateCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("hindsight validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	vocab := fs.Int("vocab", 0, "reject token ids ≥ `N` (0: only negative ids are rejected)")
	tok := fs.String("tokenizer", "", "require this tokenizer `fingerprint` (e.g. bytes-v1, sha256:…)")
	verbose := fs.Bool("v", false, "also print a line for each valid file")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: hindsight validate [-vocab N] [-tokenizer FP] [-v] FILE...\n\n")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if code, ok := cliflag.Check(fs, stderr,
		cliflag.Rule{Bad: fs.NArg() == 0, Msg: "no rollout file given"},
		cliflag.Rule{Bad: *vocab < 0, Msg: fmt.Sprintf("-vocab %d: want ≥ 0", *vocab)}); !ok {
		return code
	}
	opts := rollout.ReadOptions{VocabSize: *vocab, Tokenizer: *tok}
	bad := 0
	for _, path := range fs.Args() {
		rows, problems, err := rollout.ValidateFile(path, opts)
		if err != nil {
			fmt.Fprintf(stdout, "%s: %v\n", path, err)
			bad++
			continue
		}
		for _, p := range problems {
			fmt.Fprintln(stdout, p.Error())
		}
		if len(problems) > 0 {
			bad++
		} else if *verbose {
			fmt.Fprintf(stdout, "%s: ok (%d rollouts)\n", path, rows)
		}
	}
	if bad > 0 {
		fmt.Fprintf(stderr, "hindsight validate: %d of %d files invalid\n", bad, fs.NArg())
		return 1
	}
	return 0
}
