package xla

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/hindsight-ai/hindsight/data"
)

// Weights is where LoadModel reads tensors from, by Hugging Face name.
// *data.SafetensorsDir (a model directory's weights) is one.
type Weights interface {
	Names() []string
	Tensor(name string) (data.TensorView, error)
}

// Model is a loaded Llama-family decoder: its Config and its weights, held as
// float32 variables of a GoMLX context whose scopes are the checkpoint's tensor
// names (HFScope). BF16 and F16 checkpoints are widened to float32 at load, so the
// variables are the float32 master copy training will update.
type Model struct {
	Config Config
	ctx    *context.Context
	lora   *LoRAConfig // adapters in ctx (lora.go); nil: every weight trains
}

// OpenModel loads the model directory dir (config.json, safetensors, tokenizer)
// through data.OpenModelDir and LoadModel.
func OpenModel(dir string) (*Model, error) { return OpenModelWith(dir, nil) }

// OpenModelWith is OpenModel with tok, already loaded, for the tokenizer: dir's
// tokenizer.json is checked against tok's fingerprint, not parsed again
// (data.OpenModelDirWith). A nil tok parses it.
func OpenModelWith(dir string, tok data.Tokenizer) (*Model, error) {
	md, err := data.OpenModelDirWith(dir, tok)
	if err != nil {
		return nil, err
	}
	defer md.Close()
	return LoadModel(md.Config, md.Weights)
}

// OpenPolicy loads the model directory dir once and returns its model, tokenizer
// and config (for callers that sample or tokenize as well as score). dir may also be
// a PEFT adapter directory (IsAdapterDir): its base with the adapters on top.
func OpenPolicy(dir string) (*Model, data.Tokenizer, *data.ModelConfig, error) {
	if IsAdapterDir(dir) {
		return openAdapterPolicy(dir)
	}
	md, err := data.OpenModelDir(dir)
	if err != nil {
		return nil, nil, nil, err
	}
	defer md.Close()
	m, err := LoadModel(md.Config, md.Weights)
	if err != nil {
		return nil, nil, nil, err
	}
	return m, md.Tokenizer, md.Config, nil
}

// LoadModel builds the model of mc and copies its weights from w. The name table is
// mc.Tensors(): a missing, mis-shaped, non-float or unexpected tensor is an error
// naming it (every problem, not just the first). The weights are copied, so w may
// be closed afterwards.
func LoadModel(mc *data.ModelConfig, w Weights) (*Model, error) {
	cfg, err := NewConfig(mc)
	if err != nil {
		return nil, fmt.Errorf("load model: %w", err)
	}
	specs := mc.Tensors()
	want := make(map[string]bool, len(specs))
	var problems []error
	ctx := context.New()
	for _, spec := range specs {
		want[spec.Name] = true
		v, err := w.Tensor(spec.Name)
		if err != nil {
			problems = append(problems, fmt.Errorf("tensor %s: missing (want shape %v)", spec.Name, spec.Shape))
			continue
		}
		if !slices.Equal(v.Shape, spec.Shape) {
			problems = append(problems, fmt.Errorf("tensor %s: shape %v, want %v", spec.Name, v.Shape, spec.Shape))
			continue
		}
		vals, err := v.Float32s()
		if err != nil {
			problems = append(problems, fmt.Errorf("tensor %s: %w", spec.Name, err))
			continue
		}
		scope, name := HFScope(spec.Name)
		// FromFlatDataAndDimensions copies, so a memory-mapped F32 view is not retained.
		t := tensors.FromFlatDataAndDimensions(vals, spec.Shape...)
		ctx.InAbsPath(scope).VariableWithValue(name, t)
	}
	for _, name := range w.Names() {
		if !want[name] && !strings.HasSuffix(name, ".rotary_emb.inv_freq") {
			why := ""
			if name == "lm_head.weight" && mc.TieWordEmbeddings {
				why = " (tie_word_embeddings is true: the embedding is the lm_head)"
			}
			problems = append(problems, fmt.Errorf("tensor %s: unexpected for %s with %d layers%s", name, mc.ModelType, mc.NumHiddenLayers, why))
		}
	}
	if err := errors.Join(problems...); err != nil {
		return nil, fmt.Errorf("load model: %w", err)
	}
	return &Model{Config: cfg, ctx: ctx}, nil
}

// HFScope maps a Hugging Face tensor name to the context scope and variable name
// the model keeps it under: "model.layers.3.self_attn.q_proj.weight" →
// ("/model/layers/3/self_attn/q_proj", "weight").
func HFScope(name string) (scope, variable string) {
	i := strings.LastIndexByte(name, '.')
	if i < 0 {
		return "/", name
	}
	return "/" + strings.ReplaceAll(name[:i], ".", "/"), name[i+1:]
}

// NumParameters is the number of weights the model holds (tied embeddings once).
func (m *Model) NumParameters() int { return m.ctx.NumParameters() }
