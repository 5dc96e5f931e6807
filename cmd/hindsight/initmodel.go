package main

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/hindsight-ai/hindsight/data"
	"github.com/hindsight-ai/hindsight/internal/cliflag"
)

// initModelCmd is `hindsight init-model -out DIR -preset tiny|small|qwen3-…`.
func initModelCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("hindsight init-model", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "", "model `directory` to create (must be empty or absent unless -force)")
	preset := fs.String("preset", "tiny", "model size: tiny (2 layers, hidden 64), small (4 layers, hidden 256), qwen3-tiny, qwen3-0.6b / qwen3-1.7b (shaped like the released Qwen3 models) or smollm2-135m (shaped like SmolLM2-135M)")
	layers := fs.Int("layers", 0, "layer `count` replacing the preset's (0: the preset's)")
	tokenizer := fs.String("tokenizer", "bytes", "`bytes` for the embedded byte tokenizer, or a tokenizer.json (or a directory holding one) to copy")
	seed := fs.Uint64("seed", 1, "random seed; the same seed writes the same weights")
	dtype := fs.String("dtype", "float32", "weight `dtype`: float32 or bfloat16")
	force := fs.Bool("force", false, "replace a non-empty -out directory")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: hindsight init-model -out DIR [-preset tiny|small|qwen3-tiny|qwen3-0.6b|qwen3-1.7b|smollm2-135m] [-layers N] [-tokenizer bytes|PATH] [-seed S] [-dtype float32|bfloat16] [-force]\n\n")
		fmt.Fprintf(stderr, "Writes a randomly initialised Llama-style model directory (config.json, model.safetensors,\n"+
			"tokenizer.json, tokenizer_config.json, generation_config.json) that hindsightd and transformers load.\n\n")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if code, ok := cliflag.Check(fs, stderr, cliflag.Rule{Bad: *out == "", Msg: "-out DIR is required"}, cliflag.NoArgs(fs)); !ok {
		return code
	}
	if !slices.Contains(data.Presets, *preset) {
		fmt.Fprintf(stderr, "hindsight init-model: -preset %q: want one of %s\n", *preset, strings.Join(data.Presets, ", "))
		return 2
	}
	if *dtype != "float32" && *dtype != "bfloat16" {
		fmt.Fprintf(stderr, "hindsight init-model: -dtype %q: want float32 or bfloat16\n", *dtype)
		return 2
	}
	cfg, err := data.InitModel(*out, data.InitOptions{Preset: *preset, Tokenizer: *tokenizer, Seed: *seed, Dtype: *dtype, Force: *force, Layers: *layers})
	if err != nil {
		fmt.Fprintf(stderr, "hindsight init-model: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s: %s %s, %d parameters (%d layers, hidden %d, %d heads / %d KV heads, vocab %d), %s, seed %d\n",
		*out, *preset, cfg.ModelType, cfg.NumParameters(), cfg.NumHiddenLayers, cfg.HiddenSize,
		cfg.NumAttentionHeads, cfg.NumKeyValueHeads, cfg.VocabSize, cfg.TorchDtype, *seed)
	return 0
}
