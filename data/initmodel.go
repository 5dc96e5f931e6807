package data

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/hindsight-ai/hindsight/data/safetensors"
	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/internal/fsutil"
)

// InitOptions say what InitModel writes.
type InitOptions struct {
	Preset string // "tiny", "small", "qwen3-tiny", "qwen3-0.6b", "qwen3-1.7b" or "smollm2-135m" (PresetConfig)
	// Layers, when > 0, replaces the preset's layer count (a shallower model of the
	// same width: the memory benchmarks' second shape).
	Layers    int
	Tokenizer string // "bytes" (the default) or a tokenizer.json or a directory holding one
	Seed      uint64 // the same seed writes the same weights
	Dtype     string // "float32" (the default) or "bfloat16"
	Force     bool   // replace a non-empty directory
}

// InitStd is the standard deviation of the initial weights, transformers'
// initializer_range default.
const InitStd = 0.02

// Qwen3VocabSize is the vocab_size of the Qwen3 presets (the real models' 151,936
// embedding rows, more than their tokenizer's ids).
const Qwen3VocabSize = 151936

// Presets are the names PresetConfig takes.
var Presets = []string{"tiny", "small", "qwen3-tiny", "qwen3-0.6b", "qwen3-1.7b", "smollm2-135m"}

// SmolLM2VocabSize is the vocab_size of the smollm2-135m preset (SmolLM2's tokenizer).
const SmolLM2VocabSize = 49152

// PresetConfig returns the config of a preset for a tokenizer of vocabSize ids.
// With the byte tokenizer (265 ids) "tiny" has about 91k parameters and "small"
// about 3.0M; a large vocabulary adds vocabSize × hidden_size.
//
//	tiny:  llama, 2 layers, hidden 64, 4 heads (2 KV heads) of 16, intermediate 128
//	small: llama, 4 layers, hidden 256, 8 heads (4 KV heads) of 32, intermediate 704
//
// Both tie the embeddings, use RoPE θ = 500000 without scaling and allow 131072
// positions, so long rollouts fit.
//
// The qwen3 presets are shaped like the released Qwen3 models (qk-norm, tied
// embeddings, head_dim 128 apart from hidden/heads, RoPE θ = 1e6, rms_norm_eps
// 1e-6), with random weights:
//
//	qwen3-0.6b: 28 layers, hidden 1024, 16 heads (8 KV heads) of 128, intermediate
//	            3072, vocab 151936: 596,049,920 parameters (Qwen/Qwen3-0.6B config.json)
//	qwen3-1.7b: 28 layers, hidden 2048, 16 heads (8 KV heads) of 128, intermediate
//	            6144, vocab 151936: 1,720,574,976 parameters (Qwen/Qwen3-1.7B config.json)
//	qwen3-tiny: the same architecture at test size: 2 layers, hidden 64, 4 heads
//	            (2 KV heads) of 32, intermediate 128, the tokenizer's vocabulary
//
//	smollm2-135m: llama, 30 layers, hidden 576, 9 heads (3 KV heads) of 64,
//	            intermediate 1536, vocab 49152, RoPE θ = 100000: 134,515,008
//	            parameters (HuggingFaceTB/SmolLM2-135M-Instruct config.json)
//
// They allow 131072 positions: the released configs say 40960 and reach 131072 by
// YaRN scaling, which hindsight does not implement; with random weights only the
// shapes matter. The 0.6b and 1.7b presets refuse a tokenizer of more than
// Qwen3VocabSize ids.
func PresetConfig(preset string, vocabSize int) (*ModelConfig, error) {
	c := &ModelConfig{
		Architectures:         []string{architectures["llama"]},
		ModelType:             "llama",
		VocabSize:             vocabSize,
		RMSNormEps:            1e-5,
		RopeTheta:             500000,
		MaxPositionEmbeddings: 131072,
		TieWordEmbeddings:     true,
		TorchDtype:            "float32",
		HiddenAct:             "silu",
		Extra: map[string]json.RawMessage{
			"initializer_range":    json.RawMessage("0.02"),
			"attention_dropout":    json.RawMessage("0.0"),
			"pretraining_tp":       json.RawMessage("1"),
			"use_cache":            json.RawMessage("true"),
			"transformers_version": json.RawMessage(`"` + TransformersVersion + `"`),
		},
	}
	qwen3 := func(vocab int) {
		c.Architectures, c.ModelType = []string{architectures["qwen3"]}, "qwen3"
		c.RMSNormEps, c.RopeTheta, c.VocabSize = 1e-6, 1e6, vocab
		delete(c.Extra, "pretraining_tp")
	}
	switch preset {
	case "tiny":
		c.NumHiddenLayers, c.HiddenSize, c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim, c.IntermediateSize = 2, 64, 4, 2, 16, 128
	case "small":
		c.NumHiddenLayers, c.HiddenSize, c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim, c.IntermediateSize = 4, 256, 8, 4, 32, 704
	case "qwen3-tiny":
		qwen3(vocabSize)
		c.NumHiddenLayers, c.HiddenSize, c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim, c.IntermediateSize = 2, 64, 4, 2, 32, 128
	case "qwen3-0.6b", "qwen3-1.7b":
		if vocabSize > Qwen3VocabSize {
			return nil, fmt.Errorf("preset %q: the tokenizer has %d ids, more than the preset's vocab_size %d", preset, vocabSize, Qwen3VocabSize)
		}
		qwen3(Qwen3VocabSize)
		c.NumHiddenLayers, c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim = 28, 16, 8, 128
		c.HiddenSize, c.IntermediateSize = 1024, 3072
		if preset == "qwen3-1.7b" {
			c.HiddenSize, c.IntermediateSize = 2048, 6144
		}
	case "smollm2-135m":
		if vocabSize > SmolLM2VocabSize {
			return nil, fmt.Errorf("preset %q: the tokenizer has %d ids, more than the preset's vocab_size %d", preset, vocabSize, SmolLM2VocabSize)
		}
		c.VocabSize, c.RopeTheta = SmolLM2VocabSize, 100000
		c.NumHiddenLayers, c.HiddenSize, c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim, c.IntermediateSize = 30, 576, 9, 3, 64, 1536
	default:
		return nil, fmt.Errorf("preset %q: want one of %s", preset, strings.Join(Presets, ", "))
	}
	return c, c.Validate()
}

// dtypeOf maps a config torch_dtype to the safetensors dtype of the weights.
func dtypeOf(torchDtype string) (safetensors.Dtype, error) {
	switch torchDtype {
	case "float32", "":
		return safetensors.DtypeF32, nil
	case "bfloat16":
		return safetensors.DtypeBF16, nil
	case "float16":
		return safetensors.DtypeF16, nil
	}
	return "", fmt.Errorf("torch_dtype %q: want float32, bfloat16 or float16", torchDtype)
}

// InitWeights returns freshly initialised weights for c, as transformers
// initialises a Llama: projections and the embedding drawn from normal(0, InitStd),
// RMSNorm weights 1, biases 0, in c.TorchDtype. Each tensor draws from its own
// stream, seeded by seed and the tensor's name, so the values are the same for a
// seed whatever else the model holds.
func InitWeights(c *ModelConfig, seed uint64) ([]safetensors.NamedTensor, error) {
	dtype, err := dtypeOf(c.TorchDtype)
	if err != nil {
		return nil, fmt.Errorf("init weights: %w", err)
	}
	specs := c.Tensors()
	out := make([]safetensors.NamedTensor, len(specs))
	// Tensors are drawn in parallel (each from its own stream, so the values do not
	// depend on the order): a 1.7B-parameter preset is ~1.7e9 draws.
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(specs)) {
		wg.Go(func() {
			for i := range next {
				s := specs[i]
				n := 1
				for _, d := range s.Shape {
					n *= d
				}
				vals := make([]float32, n)
				switch {
				case strings.HasSuffix(s.Name, "norm.weight"):
					for j := range vals {
						vals[j] = 1
					}
				case strings.HasSuffix(s.Name, ".bias"):
				default:
					fillNormal(vals, seed, s.Name, InitStd)
				}
				out[i] = safetensors.NamedTensor{Name: s.Name, Dtype: dtype, Shape: s.Shape, Values: vals}
			}
		})
	}
	for i := range specs {
		next <- i
	}
	close(next)
	wg.Wait()
	return out, nil
}

// fillNormal fills vals with normal(0, std) draws from a PCG stream keyed by seed
// and name, by the Box–Muller transform (spelled out here, rather than
// rand.NormFloat64, so that the values are fixed by this code alone).
func fillNormal(vals []float32, seed uint64, name string, std float64) {
	h := fnv.New64a()
	h.Write([]byte(name))
	rng := rand.New(rand.NewPCG(seed, h.Sum64()))
	unit := func() float64 { return (float64(rng.Uint64()>>11) + 1) / (1 << 53) } // (0, 1]
	for i := 0; i < len(vals); i += 2 {
		r := math.Sqrt(-2*math.Log(unit())) * std
		s, c := math.Sincos(2 * math.Pi * unit())
		vals[i] = float32(r * c)
		if i+1 < len(vals) {
			vals[i+1] = float32(r * s)
		}
	}
}

// InitModel writes a new model directory dir for opts: config.json,
// model.safetensors (random weights, InitWeights), tokenizer.json (the byte
// tokenizer's, or a byte-for-byte copy of the given one, so the fingerprint
// carries over), tokenizer_config.json (copied from beside the given tokenizer.json
// when there is one, else a minimal one for transformers' PreTrainedTokenizerFast)
// and generation_config.json. The directory appears complete or not at all; a
// non-empty dir is refused unless opts.Force. It returns the model's config.
func InitModel(dir string, opts InitOptions) (*ModelConfig, error) {
	if opts.Tokenizer == "" {
		opts.Tokenizer = "bytes"
	}
	tok, err := tokenizer.Load(opts.Tokenizer)
	if err != nil {
		return nil, fmt.Errorf("init model: %w", err)
	}
	tokJSON, tokConfig, err := tokenizerFiles(opts.Tokenizer)
	if err != nil {
		return nil, fmt.Errorf("init model: %w", err)
	}
	cfg, err := PresetConfig(opts.Preset, tok.VocabSize())
	if err != nil {
		return nil, fmt.Errorf("init model: %w", err)
	}
	if opts.Dtype != "" {
		cfg.TorchDtype = opts.Dtype
	}
	if opts.Layers < 0 {
		return nil, fmt.Errorf("init model: layers %d: want ≥ 0 (0: the preset's)", opts.Layers)
	}
	if opts.Layers > 0 {
		cfg.NumHiddenLayers = opts.Layers
	}
	if cfg.TorchDtype != "float32" && cfg.TorchDtype != "bfloat16" {
		return nil, fmt.Errorf("init model: dtype %q: want float32 or bfloat16", cfg.TorchDtype)
	}
	bos, eos := specialTokens(tok, tokConfig)
	if bos.content != "" {
		cfg.BOSTokenID = []int{bos.id}
	}
	if eos.content != "" {
		cfg.EOSTokenID = []int{eos.id}
	}
	if tokConfig == nil {
		chatTemplate := ""
		if tok.Fingerprint() == tokenizer.BytesFingerprint {
			chatTemplate = tokenizer.BytesChatTemplate
		}
		tokConfig = minimalTokenizerConfig(cfg, bos, eos, chatTemplate)
	}
	weights, err := InitWeights(cfg, opts.Seed)
	if err != nil {
		return nil, fmt.Errorf("init model: %w", err)
	}
	gen := map[string]any{"_from_model_config": true, "transformers_version": TransformersVersion}
	if bos.content != "" {
		gen["bos_token_id"] = bos.id
	}
	if eos.content != "" {
		gen["eos_token_id"] = eos.id
	}
	genJSON, err := json.MarshalIndent(gen, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("init model: %w", err)
	}
	err = writeDirAtomic(dir, opts.Force, func(tmp string) error {
		if err := WriteModelConfig(filepath.Join(tmp, ConfigFileName), cfg); err != nil {
			return err
		}
		meta := map[string]string{"format": "pt", "hindsight.init": fmt.Sprintf("preset=%s seed=%d", opts.Preset, opts.Seed)}
		if err := safetensors.Write(filepath.Join(tmp, safetensors.FileName), weights, meta); err != nil {
			return err
		}
		for name, raw := range map[string][]byte{
			TokenizerFileName:        tokJSON,
			TokenizerConfigFileName:  tokConfig,
			GenerationConfigFileName: append(genJSON, '\n'),
		} {
			if err := fsutil.WriteFile(filepath.Join(tmp, name), 0o644, func(w io.Writer) error {
				_, err := w.Write(raw)
				return err
			}); err != nil {
				return fmt.Errorf("write %s: %w", name, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("init model %s: %w", dir, err)
	}
	return cfg, nil
}

// tokenizerFiles returns the tokenizer.json bytes for spec and, when spec is a path
// with a tokenizer_config.json beside its tokenizer.json, that file's bytes.
func tokenizerFiles(spec string) (tokJSON, tokConfig []byte, err error) {
	if spec == "bytes" {
		return tokenizer.BytesJSON(), nil, nil
	}
	path := spec
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		path = filepath.Join(path, TokenizerFileName)
	}
	if tokJSON, err = os.ReadFile(path); err != nil {
		return nil, nil, err
	}
	tokConfig, err = os.ReadFile(filepath.Join(filepath.Dir(path), TokenizerConfigFileName))
	if errors.Is(err, os.ErrNotExist) {
		return tokJSON, nil, nil
	}
	return tokJSON, tokConfig, err
}

type specialToken struct {
	content string
	id      int
}

// specialTokens finds the BOS and EOS tokens: the bos_token/eos_token of a
// tokenizer_config.json when given, else the first of the usual names that the
// tokenizer knows. A zero specialToken means none.
func specialTokens(tok tokenizer.Tokenizer, tokConfig []byte) (bos, eos specialToken) {
	find := func(names ...string) specialToken {
		for _, n := range names {
			if id, ok := tok.SpecialID(n); ok && n != "" {
				return specialToken{n, int(id)}
			}
		}
		return specialToken{}
	}
	var cfgBOS, cfgEOS string
	if tokConfig != nil {
		var m map[string]json.RawMessage
		if json.Unmarshal(tokConfig, &m) == nil {
			cfgBOS, cfgEOS = tokenContent(m["bos_token"]), tokenContent(m["eos_token"])
		}
	}
	bos = find(cfgBOS, "<|bos|>", "<|begin_of_text|>", "<s>", "<bos>", "<|startoftext|>")
	eos = find(cfgEOS, "<|eos|>", "<|end_of_text|>", "<|endoftext|>", "</s>", "<eos>")
	return bos, eos
}

// tokenContent reads a tokenizer_config.json token: a string or {"content": …}.
func tokenContent(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var obj struct {
		Content string `json:"content"`
	}
	json.Unmarshal(raw, &obj)
	return obj.Content
}

// minimalTokenizerConfig is a tokenizer_config.json with which transformers'
// AutoTokenizer loads tokenizer.json as a PreTrainedTokenizerFast, with chatTemplate
// as its chat_template when not empty.
func minimalTokenizerConfig(cfg *ModelConfig, bos, eos specialToken, chatTemplate string) []byte {
	m := map[string]any{
		"tokenizer_class":              "PreTrainedTokenizerFast",
		"model_max_length":             cfg.MaxPositionEmbeddings,
		"clean_up_tokenization_spaces": false,
		"bos_token":                    nil,
		"eos_token":                    nil,
	}
	if bos.content != "" {
		m["bos_token"] = bos.content
	}
	if eos.content != "" {
		m["eos_token"] = eos.content
	}
	if chatTemplate != "" {
		m["chat_template"] = chatTemplate
	}
	raw, _ := json.MarshalIndent(m, "", "  ") // strings, numbers, bools: cannot fail
	return append(raw, '\n')
}
