package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/internal/cliflag"
	"github.com/hindsight-ai/hindsight/xla"
)

// generateLine is one prompt of a -in file (JSON lines): text, or token ids.
type generateLine struct {
	Prompt *string  `json:"prompt"`
	Tokens *[]int32 `json:"tokens"`
}

// generateOutput is one sample of `hindsight generate -json`.
type generateOutput struct {
	Prompt         int       `json:"prompt"`
	Sample         int       `json:"sample"`
	PromptTokens   int       `json:"prompt_tokens"`
	Tokens         []int32   `json:"tokens"`
	LogProbs       []float32 `json:"logprobs"`
	PolicyLogProbs []float32 `json:"policy_logprobs"`
	Reason         string    `json:"reason"`
	Text           string    `json:"text"`
}

// generateCmd is `hindsight generate -model DIR (-prompt TEXT | -in FILE) …`: it
// samples -n continuations of every prompt in one batch and prints their text, or
// with -json one object per sample (tokens, sampled and policy log-probs).
func generateCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("hindsight generate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	modelDir := fs.String("model", "", "model `directory` (config.json, safetensors, tokenizer.json)")
	prompt := fs.String("prompt", "", "prompt `text` (encoded with added tokens such as <|im_start|> matched)")
	in := fs.String("in", "", "prompts `file`: JSON lines, each {\"prompt\": TEXT} or {\"tokens\": [IDS]}")
	n := fs.Int("n", 1, "samples per prompt")
	maxNew := fs.Int("max-new", 128, "most tokens sampled per sample")
	temp := fs.Float64("temperature", 1, "sampling temperature; 0 is greedy")
	topP := fs.Float64("top-p", 1, "nucleus: keep the most likely tokens up to this probability mass (1: all)")
	topK := fs.Int("top-k", 0, "keep the K most likely tokens (0: all)")
	seed := fs.Uint64("seed", 0, "random seed: the same seed gives the same tokens on the same backend")
	stop := fs.String("stop", "", "comma-separated stop token `ids`, or none (default: the model's eos_token_id)")
	bos := fs.Bool("bos", true, "prepend the model's bos_token_id (if it has one) to text prompts")
	asJSON := fs.Bool("json", false, "print one JSON object per sample")
	precision := fs.String("precision", "f32", "compute precision: f32, or bf16 (bfloat16 weights and KV cache; an XLA backend)")
	backendSpec := fs.String("backend", "", "GoMLX backend: go[:opts], xla:<absolute plugin path>, xla-cpu (default $GOMLX_BACKEND, else "+xla.DefaultBackend+")")
	compileCache := fs.String("compile-cache", "", compileCacheUsage)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: hindsight generate -model DIR (-prompt TEXT | -in FILE) [-n N] [-max-new N] [-temperature T]\n"+
			"       [-top-p P] [-top-k K] [-seed S] [-stop IDS|none] [-bos=false] [-precision f32|bf16] [-backend SPEC]\n"+
			"       [-compile-cache DIR] [-json]\n\n"+
			"Samples continuations of the prompts from the model with a KV cache, all in one batch.\n\n")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if code, ok := cliflag.Check(fs, stderr,
		cliflag.Rule{Bad: *modelDir == "", Msg: "-model DIR is required"},
		cliflag.Rule{Bad: (*prompt == "") == (*in == ""), Msg: "give one of -prompt TEXT and -in FILE"},
		cliflag.Rule{Bad: *n < 1, Msg: fmt.Sprintf("-n %d: want ≥ 1", *n)},
		cliflag.NoArgs(fs)); !ok {
		return code
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "hindsight generate: %v\n", err)
		return 1
	}
	backend, model, err := openModel(*backendSpec, *precision, *modelDir, *compileCache, stderr)
	if err != nil {
		return fail(err)
	}
	tok, mc := model.Tokenizer(), model.HFConfig()
	var prefix []int32
	if *bos {
		for _, id := range mc.BOSTokenID {
			prefix = append(prefix, int32(id))
		}
	}
	prompts, err := readPrompts(*prompt, *in, tok, prefix)
	if err != nil {
		return fail(err)
	}
	opts := xla.SampleOptions{MaxNew: *maxNew, Temperature: *temp, TopK: *topK, TopP: *topP, Seed: *seed}
	if opts.Stop, err = stopIDs(*stop, mc.EOSTokenID); err != nil {
		return fail(err)
	}
	sampler, err := xla.NewSampler(backend, model, 0)
	if err != nil {
		return fail(err)
	}
	var batch [][]int32
	for _, p := range prompts {
		for range *n {
			batch = append(batch, p)
		}
	}
	t0 := time.Now()
	out, err := sampler.Generate(ctx, batch, opts)
	if err != nil {
		return fail(err)
	}
	took := time.Since(t0)
	total := 0
	w := bufio.NewWriter(stdout)
	enc := json.NewEncoder(w)
	for i, s := range out {
		total += len(s.Tokens)
		text, err := tok.Decode(s.Tokens)
		if err != nil {
			return fail(fmt.Errorf("decode sample %d: %w", i, err))
		}
		o := generateOutput{Prompt: i / *n, Sample: i % *n, PromptTokens: len(batch[i]), Tokens: s.Tokens,
			LogProbs: s.LogProbs, PolicyLogProbs: s.PolicyLogProbs, Reason: s.Reason, Text: text}
		if *asJSON {
			if err := enc.Encode(o); err != nil {
				return fail(err)
			}
			continue
		}
		fmt.Fprintf(w, "=== prompt %d, sample %d: %d tokens (%s)\n%s\n", o.Prompt, o.Sample, len(s.Tokens), s.Reason, text)
	}
	if err := w.Flush(); err != nil {
		return fail(err)
	}
	fmt.Fprintf(stderr, "generated %d samples, %d tokens in %v (%.0f tokens/s)\n",
		len(out), total, took.Round(time.Millisecond), float64(total)/took.Seconds())
	if *compileCache != "" {
		fmt.Fprint(stderr, compileSummary(*compileCache))
	}
	return 0
}

// readPrompts returns the prompt of -prompt, or those of the -in file, as ids;
// text prompts get prefix (the BOS) in front.
func readPrompts(text, path string, tok tokenizer.Tokenizer, prefix []int32) ([][]int32, error) {
	encode := func(s string) []int32 { return append(append([]int32{}, prefix...), tok.Encode(s)...) }
	if path == "" {
		return [][]int32{encode(text)}, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read prompts: %w", err)
	}
	defer f.Close()
	var out [][]int32
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for line := 1; sc.Scan(); line++ {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var l generateLine
		dec := json.NewDecoder(strings.NewReader(sc.Text()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&l); err != nil {
			return nil, fmt.Errorf("read prompts %s line %d: %w", path, line, err)
		}
		switch {
		case (l.Prompt == nil) == (l.Tokens == nil):
			return nil, fmt.Errorf("read prompts %s line %d: want exactly one of \"prompt\" and \"tokens\"", path, line)
		case l.Prompt != nil:
			out = append(out, encode(*l.Prompt))
		default:
			out = append(out, *l.Tokens)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read prompts %s: %w", path, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("read prompts %s: no prompts", path)
	}
	return out, nil
}

// stopIDs parses -stop: comma-separated ids, "none", or "" for the model's EOS ids.
func stopIDs(flagValue string, eos []int) ([]int32, error) {
	var out []int32
	switch flagValue {
	case "none":
		return nil, nil
	case "":
		for _, id := range eos {
			out = append(out, int32(id))
		}
		return out, nil
	}
	for _, f := range strings.Split(flagValue, ",") {
		id, err := strconv.ParseInt(strings.TrimSpace(f), 10, 32)
		if err != nil {
			return nil, errors.New("-stop: " + strconv.Quote(f) + " is not a token id")
		}
		out = append(out, int32(id))
	}
	return out, nil
}
