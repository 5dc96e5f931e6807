package xla

import (
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
	"sync"

	"github.com/gomlx/gomlx/backends"

	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/hindsight-ai/hindsight/data"
	"github.com/hindsight-ai/hindsight/data/safetensors"
	"github.com/hindsight-ai/hindsight/data/tokenizer"
)

// Weights is where Load reads tensors from, by Hugging Face name.
// *safetensors.Dir (a model directory's weights) is one.
type Weights interface {
	Names() []string
	Tensor(name string) (safetensors.TensorView, error)
}

// Model is a loaded Llama-family decoder: its Config and its weights, held as
// variables of a GoMLX context whose scopes are the checkpoint's tensor names
// (HFScope), in its Precision's dtype: float32 by default (BF16 and F16
// checkpoints widened at load, so the variables are the float32 weights training
// updates), or bfloat16 (OpenOptions.Precision; a BF16 checkpoint kept as it is).
type Model struct {
	Config    Config
	precision Precision // "": f32
	ctx       *context.Context
	lora      *LoRAConfig         // adapters in ctx (lora.go); nil: every weight trains
	tok       tokenizer.Tokenizer // the tokenizer Open read (Tokenizer); nil after Load
	hf        *data.ModelConfig   // the config.json the model was built from (HFConfig)
	placeMu   sync.Mutex          // serialises place
	// replicas are the weights' copies on devices other than 0 (devices.go).
	replicas replicas
}

// OpenOptions say how Open reads a model: every field may be left zero.
type OpenOptions struct {
	// Precision is the weights' dtype in memory ("": f32); an adapter directory's
	// base is loaded in it, its adapters in float32.
	Precision Precision
	// Tokenizer, already loaded, stands for the directory's: its tokenizer.json is
	// checked against the fingerprint, not parsed again (data.OpenModelDirWith).
	// nil: parsed.
	Tokenizer tokenizer.Tokenizer
	// Base is a PEFT adapter directory's base model directory; "": the adapter's
	// base_model_name_or_path (AdapterBase).
	Base string
}

// Open loads the model directory dir (config.json, safetensors, tokenizer) through
// data.OpenModelDirWith and Load; dir may also be a PEFT adapter directory
// (IsAdapterDir): its base with the adapters on top, unmerged (the policy a LoRA run
// trained, at the base's cost plus 2·r·(in + out) flops per adapted projection and
// token). The model keeps the tokenizer and config.json it was opened with
// (Tokenizer, HFConfig; an adapter's are its base's).
func Open(dir string, o OpenOptions) (*Model, error) {
	if IsAdapterDir(dir) {
		return openAdapter(dir, o)
	}
	md, err := data.OpenModelDirWith(dir, o.Tokenizer)
	if err != nil {
		return nil, err
	}
	defer md.Close()
	m, err := Load(md.Config, md.Weights, o.Precision)
	if err != nil {
		return nil, err
	}
	m.tok = md.Tokenizer
	return m, nil
}

// Tokenizer is the tokenizer the model was opened with (Open); nil after Load.
func (m *Model) Tokenizer() tokenizer.Tokenizer { return m.tok }

// HFConfig is the config.json the model was built from (Open, Load).
func (m *Model) HFConfig() *data.ModelConfig { return m.hf }

// Load builds the model of mc and copies its weights from w, in precision p ("":
// f32; Precision). The name table is mc.Tensors(): a missing, mis-shaped,
// non-float or unexpected tensor is an error naming it (every problem, not just
// the first). The weights are copied, so w may be closed afterwards.
func Load(mc *data.ModelConfig, w Weights, p Precision) (*Model, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("load model: precision: %w", err)
	}
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
		t, err := weightTensor(v, p.DType())
		if err != nil {
			problems = append(problems, fmt.Errorf("tensor %s: %w", spec.Name, err))
			continue
		}
		scope, name := HFScope(spec.Name)
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
	return &Model{Config: cfg, precision: p, ctx: ctx, hf: mc}, nil
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

// place moves every weight onto backend's device 0 (a shared buffer where the
// backend has them, e.g. XLA CPU's, as the first execution would) and drops the
// host copy Load made, then returns the freed memory to the OS. Without it
// the host copy stays next to the device copy on a backend without shared buffers
// (a GPU: 2.4 GB of f32 host RAM per 0.6B model, for nothing), and on one with them
// it lingers as Go garbage through the first passes. A weight whose host copy is
// needed again (a checkpoint save, a teacher clone) is copied back from the device,
// and the next call drops that copy again. Scorer.run and Sampler.Generate call it
// before they execute (not when they are made, so that, as before, the backend
// that first runs the model is the one its weights live on); it is cheap when the
// weights are already there.
func (m *Model) place(b backends.Backend) error {
	m.placeMu.Lock()
	defer m.placeMu.Unlock()
	freed := false
	for v := range m.ctx.IterVariables() {
		t, err := v.Value()
		if err != nil {
			return fmt.Errorf("place weights: %s: %w", v.ScopeAndName(), err)
		}
		if t.IsOnDevice(0) && !t.HasLocal() {
			continue
		}
		if err := t.MaterializeOnDevice(b, true, 0); err != nil {
			return fmt.Errorf("place weights: %s: %w", v.ScopeAndName(), err)
		}
		t.FinalizeLocal() // a no-op for a shared buffer, whose memory is the device's
		freed = true
	}
	if freed {
		debug.FreeOSMemory()
	}
	return nil
}
