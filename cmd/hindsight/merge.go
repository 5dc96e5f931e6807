package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/hindsight-ai/hindsight/internal/cliflag"
	"github.com/hindsight-ai/hindsight/xla"
)

// mergeCmd is `hindsight merge -checkpoint DIR -out DIR [-base DIR]`: the model
// directory of a LoRA run's base with its adapter merged in (docs/training.md "LoRA").
func mergeCmd(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("hindsight merge", flag.ContinueOnError)
	fs.SetOutput(stderr)
	ckpt := fs.String("checkpoint", "", "checkpoint step `directory` of a LoRA run (its adapter/ is used), or a PEFT adapter directory")
	out := fs.String("out", "", "model `directory` to write (must not exist)")
	base := fs.String("base", "", "base model `directory` (default: the adapter's base_model_name_or_path)")
	backendSpec := fs.String("backend", "", "GoMLX backend: go[:opts], xla:<absolute plugin path>, xla-cpu (default $GOMLX_BACKEND, else "+xla.DefaultBackend+")")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: hindsight merge -checkpoint DIR -out DIR [-base DIR] [-backend SPEC]\n\n"+
			"Writes base + (alpha/r)·B·A of every adapted projection as a Hugging Face model directory\n"+
			"(model.safetensors in the base's torch_dtype, config.json and tokenizer files of the base).\n\n")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if code, ok := cliflag.Check(fs, stderr,
		cliflag.Rule{Bad: *ckpt == "", Msg: "-checkpoint DIR is required"},
		cliflag.Rule{Bad: *out == "", Msg: "-out DIR is required"},
		cliflag.NoArgs(fs)); !ok {
		return code
	}
	backend, err := xla.NewBackend(xla.ResolveBackend(*backendSpec, ""))
	if err != nil {
		fmt.Fprintf(stderr, "hindsight merge: %v\n", err)
		return 1
	}
	if err := xla.WriteMerged(backend, *ckpt, *base, *out); err != nil {
		fmt.Fprintf(stderr, "hindsight merge: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "wrote %s\n", *out)
	return 0
}
