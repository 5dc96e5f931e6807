package xla

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gomlx/gomlx/backends"
	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/hindsight-ai/hindsight/data/checkpoint"
	"github.com/hindsight-ai/hindsight/data/safetensors"
)

// A LoRA run's checkpoint is a full training checkpoint whose root holds the merged
// policy (W + (α/r)·B·A in config.json's dtype), so what servers load from the root
// is unchanged, plus the adapter as PEFT's save_pretrained writes it:
//
//	adapter/adapter_model.safetensors  base_model.model.<module>.lora_A.weight [r, in]
//	                                   and .lora_B.weight [out, r], F32 (the master copy)
//	adapter/adapter_config.json        peft_type LORA, r, lora_alpha, target_modules, …
//	trainer/optimizer.safetensors      AdamW moments of the adapters only
//	trainer_state.json                 Extra["lora"]: rank, alpha, targets
//
// PEFT (peft 0.13.2 utils/save_and_load.py get_peft_model_state_dict) keeps the
// state-dict keys that contain "lora_" and removes the adapter name
// (".default"), so a key is "base_model.model." + the module's HF name +
// ".lora_A.weight"; vLLM (vllm/lora/utils.py parse_fine_tuned_lora_name) strips
// "base_model.model." and ".lora_A.weight" to find the module. A resume reads the
// base from the model directory and the adapters from adapter/.

// PEFTPrefix is the prefix of every tensor name in a PEFT adapter of a causal LM.
const PEFTPrefix = "base_model.model."

// peftName is the PEFT tensor name of an adapter variable:
// "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight".
func peftName(scope, variable string) string {
	return PEFTPrefix + HFName(scope, variable) + ".weight"
}

// adapterConfig is adapter_config.json with the fields PEFT 0.13.2's LoraConfig
// writes (save_pretrained), in its key order.
type adapterConfig struct {
	AlphaPattern        map[string]any `json:"alpha_pattern"`
	AutoMapping         any            `json:"auto_mapping"`
	BaseModelNameOrPath string         `json:"base_model_name_or_path"`
	Bias                string         `json:"bias"`
	FanInFanOut         bool           `json:"fan_in_fan_out"`
	InferenceMode       bool           `json:"inference_mode"`
	InitLoraWeights     any            `json:"init_lora_weights"`
	LayerReplication    any            `json:"layer_replication"`
	LayersPattern       any            `json:"layers_pattern"`
	LayersToTransform   any            `json:"layers_to_transform"`
	LoftqConfig         map[string]any `json:"loftq_config"`
	LoraAlpha           float64        `json:"lora_alpha"`
	LoraDropout         float64        `json:"lora_dropout"`
	MegatronConfig      any            `json:"megatron_config"`
	MegatronCore        string         `json:"megatron_core"`
	ModulesToSave       any            `json:"modules_to_save"`
	PeftType            string         `json:"peft_type"`
	R                   int            `json:"r"`
	RankPattern         map[string]any `json:"rank_pattern"`
	Revision            any            `json:"revision"`
	TargetModules       any            `json:"target_modules"` // a list, or a regex string
	TaskType            string         `json:"task_type"`
	UseDora             bool           `json:"use_dora"`
	UseRSLoRA           bool           `json:"use_rslora"`
}

// adapterConfigJSON is adapter_config.json for cfg: inference_mode true, as PEFT
// writes it for a model saved for inference.
func adapterConfigJSON(cfg LoRAConfig) []byte {
	targets := slices.Clone(cfg.Targets)
	slices.Sort(targets)
	ac := adapterConfig{AlphaPattern: map[string]any{}, BaseModelNameOrPath: cfg.BaseModel, Bias: "none",
		InferenceMode: true, InitLoraWeights: true, LoftqConfig: map[string]any{}, LoraAlpha: cfg.Alpha,
		LoraDropout: cfg.Dropout, MegatronCore: "megatron.core", PeftType: "LORA", R: cfg.Rank,
		RankPattern: map[string]any{}, TargetModules: targets, TaskType: "CAUSAL_LM"}
	b, _ := json.MarshalIndent(ac, "", "  ")
	return append(b, '\n')
}

// ReadAdapterConfig reads adapter_config.json of PEFT adapter directory dir as a
// LoRAConfig (BaseModel: base_model_name_or_path). Features hindsight does not
// compute are errors naming the field: another peft_type, DoRA, rsLoRA, trained
// biases, modules_to_save, per-layer rank or alpha patterns, a layer subset, a
// regex target_modules, fan_in_fan_out.
func ReadAdapterConfig(dir string) (LoRAConfig, error) {
	path := filepath.Join(dir, filepath.Base(checkpoint.AdapterConfigFileName))
	raw, err := os.ReadFile(path)
	if err != nil {
		return LoRAConfig{}, fmt.Errorf("read adapter config: %w", err)
	}
	var ac adapterConfig
	if err := json.Unmarshal(raw, &ac); err != nil {
		return LoRAConfig{}, fmt.Errorf("read adapter config %s: %w", path, err)
	}
	fail := func(field, format string, a ...any) (LoRAConfig, error) {
		return LoRAConfig{}, fmt.Errorf("read adapter config %s: %s: %s", path, field, fmt.Sprintf(format, a...))
	}
	switch {
	case ac.PeftType != "LORA":
		return fail("peft_type", "%q, want LORA", ac.PeftType)
	case ac.UseDora:
		return fail("use_dora", "DoRA is not supported")
	case ac.UseRSLoRA:
		return fail("use_rslora", "rsLoRA (scale α/√r) is not supported")
	case ac.Bias != "" && ac.Bias != "none":
		return fail("bias", "%q, want none", ac.Bias)
	case ac.ModulesToSave != nil:
		return fail("modules_to_save", "%v, want null", ac.ModulesToSave)
	case len(ac.RankPattern) > 0 || len(ac.AlphaPattern) > 0:
		return fail("rank_pattern", "per-module ranks or alphas are not supported")
	case ac.LayersToTransform != nil:
		return fail("layers_to_transform", "%v, want null (every layer)", ac.LayersToTransform)
	case ac.FanInFanOut:
		return fail("fan_in_fan_out", "true is not supported")
	}
	list, ok := ac.TargetModules.([]any)
	if !ok {
		return fail("target_modules", "%v, want a list of module names", ac.TargetModules)
	}
	cfg := LoRAConfig{Rank: ac.R, Alpha: ac.LoraAlpha, Dropout: ac.LoraDropout, BaseModel: ac.BaseModelNameOrPath}
	for _, t := range list {
		s, ok := t.(string)
		if !ok {
			return fail("target_modules", "%v is not a name", t)
		}
		cfg.Targets = append(cfg.Targets, s)
	}
	// Dropout only acts in training; an adapter trained with it loads as any other.
	check := cfg
	check.Dropout = 0
	if err := check.Validate(); err != nil {
		return LoRAConfig{}, fmt.Errorf("read adapter config %s: %w", path, err)
	}
	return cfg, nil
}

// adapterTensors returns m's adapters under PEFT names, F32.
func adapterTensors(m *Model) ([]safetensors.NamedTensor, error) {
	var out []safetensors.NamedTensor
	for _, v := range trainables(m) {
		t, err := v.Value()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", v.ScopeAndName(), err)
		}
		out = append(out, tensorNamed(peftName(v.Scope(), v.Name()), t, safetensors.DtypeF32))
	}
	return out, nil
}

// loadAdapter sets m's adapters (added by AddLoRA with the adapter's config) to
// the tensors of PEFT adapter directory dir. A missing, mis-shaped or unexpected
// tensor is an error naming it (every problem, not just the first).
func loadAdapter(m *Model, dir string) error {
	if m.lora == nil {
		return errors.New("load adapter: the model has no adapters")
	}
	path := filepath.Join(dir, filepath.Base(checkpoint.AdapterModelFileName))
	f, err := safetensors.Open(path)
	if err != nil {
		return fmt.Errorf("load adapter: %w", err)
	}
	defer f.Close()
	want := map[string]bool{}
	var problems []error
	for _, v := range trainables(m) {
		name := peftName(v.Scope(), v.Name())
		want[name] = true
		view, err := f.Tensor(name)
		if err != nil {
			problems = append(problems, fmt.Errorf("tensor %s: missing (want shape %v)", name, v.Shape().Dimensions))
			continue
		}
		if !slices.Equal(view.Shape, v.Shape().Dimensions) {
			problems = append(problems, fmt.Errorf("tensor %s: shape %v, want %v", name, view.Shape, v.Shape().Dimensions))
			continue
		}
		vals, err := view.Float32s()
		if err != nil {
			problems = append(problems, fmt.Errorf("tensor %s: %w", name, err))
			continue
		}
		if err := v.SetValue(tensors.FromFlatDataAndDimensions(vals, view.Shape...)); err != nil {
			problems = append(problems, fmt.Errorf("tensor %s: %w", name, err))
		}
	}
	for _, n := range f.Names() {
		if !want[n] {
			problems = append(problems, fmt.Errorf("tensor %s: unexpected for rank %d adapters of %s", n, m.lora.Rank, strings.Join(m.lora.Targets, ", ")))
		}
	}
	if err := errors.Join(problems...); err != nil {
		return fmt.Errorf("load adapter %s: %w", path, err)
	}
	return nil
}

// mergedTensors returns the base weights of m with every adapted projection
// merged, W + (α/r)·B·A, under HF names in dtype: the servable policy. The merge
// runs on the backend (one executable per projection shape).
func mergedTensors(backend backends.Backend, m *Model, dtype safetensors.Dtype) ([]safetensors.NamedTensor, error) {
	scale := float32(m.lora.Scale())
	merge, err := NewExec(backend, func(w, a, b *Node) *Node {
		// A bfloat16 base is widened: the merge is float32, rounded once when written.
		return Add(ConvertDType(w, a.DType()), MulScalar(dot(b, []int{1}, nil, a, []int{0}, nil), float64(scale)))
	})
	if err != nil {
		return nil, fmt.Errorf("merge adapters: %w", err)
	}
	merge.SetMaxCache(-1)
	defer merge.Finalize()
	var out []safetensors.NamedTensor
	for _, v := range baseVariables(m) {
		t, err := v.Value()
		if err != nil {
			return nil, fmt.Errorf("merge adapters: %s: %w", v.ScopeAndName(), err)
		}
		name := HFName(v.Scope(), v.Name())
		a := m.ctx.GetVariableByScopeAndName(v.Scope(), "lora_A")
		if v.Name() != "weight" || a == nil {
			out = append(out, tensorNamed(name, t, dtype))
			continue
		}
		b := m.ctx.GetVariableByScopeAndName(v.Scope(), "lora_B")
		res, err := merge.Exec(t, a.MustValue(), b.MustValue())
		if err != nil {
			return nil, fmt.Errorf("merge adapters: %s: %w", name, err)
		}
		out = append(out, tensorNamed(name, res[0], dtype))
		res[0].FinalizeAll()
	}
	return out, nil
}

// loraState is Extra["lora"] of a LoRA run's trainer_state.json.
type loraState struct {
	Rank    int      `json:"rank"`
	Alpha   float64  `json:"alpha"`
	Targets []string `json:"targets"`
}

// loraCheckpoint adds a LoRA run's files to ck: the merged policy as the root's
// model.safetensors, the adapter directory and Extra["lora"].
func (tr *Trainer) loraCheckpoint(ck *checkpoint.Contents, dtype safetensors.Dtype, extra map[string]json.RawMessage) error {
	cfg := *tr.model.lora
	merged, err := mergedTensors(tr.backend, tr.model, dtype)
	if err != nil {
		return err
	}
	ad, err := adapterTensors(tr.model)
	if err != nil {
		return fmt.Errorf("adapter: %w", err)
	}
	ck.Tensors[safetensors.FileName] = merged
	ck.Tensors[checkpoint.AdapterModelFileName] = ad
	files := make(map[string][]byte, len(ck.Files)+1)
	for k, v := range ck.Files {
		files[k] = v
	}
	files[checkpoint.AdapterConfigFileName] = adapterConfigJSON(cfg)
	ck.Files = files
	extra["lora"], _ = json.Marshal(loraState{Rank: cfg.Rank, Alpha: cfg.Alpha, Targets: cfg.Targets})
	return nil
}

// loraRestore checks that checkpoint dir was written by a run of the same LoRA
// config as tr's (or that neither is a LoRA run) and loads its adapters.
func (tr *Trainer) loraRestore(dir string, st *checkpoint.TrainerState) error {
	raw, has := st.Extra["lora"]
	cfg := tr.model.lora
	switch {
	case cfg == nil && !has:
		return nil
	case cfg == nil:
		return fmt.Errorf("the checkpoint was written by LoRA training (%s); set the same train.lora to resume it, or serve its merged root", raw)
	case !has:
		return errors.New("the checkpoint was written by full training and has no adapter; train.lora needs a fresh run (or a checkpoint of a LoRA run)")
	}
	var ls loraState
	if err := json.Unmarshal(raw, &ls); err != nil {
		return fmt.Errorf("lora state: %w", err)
	}
	if ls.Rank != cfg.Rank || ls.Alpha != cfg.Alpha || !slices.Equal(ls.Targets, cfg.Targets) {
		return fmt.Errorf("train.lora: rank %d, alpha %g, targets %v, but the checkpoint's adapters have rank %d, alpha %g, targets %v",
			cfg.Rank, cfg.Alpha, cfg.Targets, ls.Rank, ls.Alpha, ls.Targets)
	}
	return loadAdapter(tr.model, filepath.Join(dir, checkpoint.AdapterDirName))
}
