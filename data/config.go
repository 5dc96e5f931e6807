package data

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"slices"
	"strings"

	"github.com/hindsight-ai/hindsight/internal/fsutil"
)

// ConfigFileName is the name of a model directory's Hugging Face config.
const ConfigFileName = "config.json"

// TransformersVersion is the transformers_version written into config.json files
// hindsight makes: the release the checkpoint layout and the scorer's log-probs were
// checked against (scripts/transformers_goldens.py makes testdata/transformers's
// goldens with it; TestTransformersGoldens holds them to it). It is the newest
// release that runs on Debian 12's python3-torch (1.13); Qwen3 needs a newer one
// (TransformersVersionFor).
const TransformersVersion = "4.46.3"

// qwen3TransformersVersion is the first transformers release with Qwen3. The layout
// is not checked against it here (it needs torch ≥ 2).
const qwen3TransformersVersion = "4.51.0"

// TransformersVersionFor is the transformers_version for a config.json of
// model_type modelType: TransformersVersion, or the first release that knows the
// architecture when that is newer.
func TransformersVersionFor(modelType string) string {
	if modelType == "qwen3" {
		return qwen3TransformersVersion
	}
	return TransformersVersion
}

// architectures maps each supported model_type to its transformers class.
var architectures = map[string]string{
	"llama":   "LlamaForCausalLM",
	"mistral": "MistralForCausalLM",
	"qwen2":   "Qwen2ForCausalLM",
	"qwen3":   "Qwen3ForCausalLM",
}

// ModelConfig mirrors a Hugging Face config.json of a decoder-only model of type
// llama, mistral, qwen2 or qwen3: RMSNorm, rotary attention with grouped KV heads,
// SwiGLU MLP. LoadModelConfig fills absent optional fields with the defaults of the
// transformers class for the model type, so that the numbers here are the ones
// transformers would use.
type ModelConfig struct {
	Architectures         []string
	ModelType             string
	VocabSize             int
	HiddenSize            int
	IntermediateSize      int
	NumHiddenLayers       int
	NumAttentionHeads     int
	NumKeyValueHeads      int // default: llama num_attention_heads, mistral 8, qwen2/qwen3 32
	HeadDim               int // default: hidden_size / num_attention_heads (qwen3: 128)
	RMSNormEps            float64
	RopeTheta             float64
	RopeScaling           *RopeScaling // nil: plain RoPE
	MaxPositionEmbeddings int
	TieWordEmbeddings     bool
	// AttentionBias: q/k/v/o projections have biases (llama, qwen3). Qwen2 always has
	// q/k/v biases and no o bias, whatever the file says; mistral never has any.
	AttentionBias    bool
	MLPBias          bool   // llama only: gate/up/down projections have biases
	TorchDtype       string // float32, bfloat16, float16, or "" (unstated)
	BOSTokenID       []int  // int or list in the file; nil for null
	EOSTokenID       []int  // int or list in the file; nil for null
	SlidingWindow    *int   // nil for null
	UseSlidingWindow bool   // qwen2/qwen3: whether sliding_window applies
	HiddenAct        string
	// Extra holds the other keys of the file (initializer_range, use_cache, …),
	// written back verbatim by MarshalJSON.
	Extra map[string]json.RawMessage
}

// RopeScaling is rope_scaling of type "llama3" (Llama 3.1+), the only scaling
// hindsight implements.
type RopeScaling struct {
	RopeType                      string  `json:"rope_type"`
	Factor                        float64 `json:"factor"`
	LowFreqFactor                 float64 `json:"low_freq_factor"`
	HighFreqFactor                float64 `json:"high_freq_factor"`
	OriginalMaxPositionEmbeddings int     `json:"original_max_position_embeddings"`
}

// QKNorm reports whether attention has RMSNorms on queries and keys per head
// (q_norm, k_norm): qwen3.
func (c *ModelConfig) QKNorm() bool { return c.ModelType == "qwen3" }

// QKVBias reports whether the q, k and v projections have biases.
func (c *ModelConfig) QKVBias() bool {
	return c.ModelType == "qwen2" || (c.AttentionBias && c.ModelType != "mistral")
}

// OBias reports whether the output projection has a bias.
func (c *ModelConfig) OBias() bool {
	return c.AttentionBias && (c.ModelType == "llama" || c.ModelType == "qwen3")
}

// LoadModelConfig reads and validates a config.json. Errors name the file and the
// field: "x/config.json: num_attention_heads: 7 does not divide hidden_size 64".
func LoadModelConfig(path string) (*ModelConfig, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load model config: %w", err)
	}
	c, err := ParseModelConfig(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// ParseModelConfig decodes config.json bytes, fills defaults and validates.
func ParseModelConfig(raw []byte) (*ModelConfig, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	if fields == nil {
		return nil, errors.New("parse: not a JSON object")
	}
	c := &ModelConfig{Extra: map[string]json.RawMessage{}}
	var errs []error
	// take decodes field key into dst if present and not null, reporting whether it
	// was; the key leaves Extra.
	take := func(key string, dst any) bool {
		v, ok := fields[key]
		if !ok {
			return false
		}
		delete(fields, key)
		if string(bytes.TrimSpace(v)) == "null" {
			return false
		}
		if err := json.Unmarshal(v, dst); err != nil {
			errs = append(errs, fmt.Errorf("%s: %s is not %s", key, v, jsonKind(dst)))
			return false
		}
		return true
	}
	take("model_type", &c.ModelType)
	if _, ok := architectures[c.ModelType]; !ok {
		return nil, fmt.Errorf("model_type: %q is not supported (want %s)", c.ModelType, strings.Join(slices.Sorted(maps.Keys(architectures)), ", "))
	}
	take("architectures", &c.Architectures)
	for _, k := range []struct {
		key string
		dst *int
	}{{"vocab_size", &c.VocabSize}, {"hidden_size", &c.HiddenSize}, {"intermediate_size", &c.IntermediateSize},
		{"num_hidden_layers", &c.NumHiddenLayers}, {"num_attention_heads", &c.NumAttentionHeads}} {
		if v, ok := fields[k.key]; !ok || string(bytes.TrimSpace(v)) == "null" {
			errs = append(errs, fmt.Errorf("%s: missing", k.key))
		}
		take(k.key, k.dst)
	}
	d := typeDefaults[c.ModelType]
	if !take("num_key_value_heads", &c.NumKeyValueHeads) {
		c.NumKeyValueHeads = d.kvHeads
		if c.NumKeyValueHeads == 0 {
			c.NumKeyValueHeads = c.NumAttentionHeads
		}
	}
	if !take("head_dim", &c.HeadDim) {
		c.HeadDim = d.headDim
		if c.HeadDim == 0 && c.NumAttentionHeads > 0 {
			c.HeadDim = c.HiddenSize / c.NumAttentionHeads
			if c.HiddenSize%c.NumAttentionHeads != 0 {
				errs = append(errs, fmt.Errorf("num_attention_heads: %d does not divide hidden_size %d (and head_dim is not given)", c.NumAttentionHeads, c.HiddenSize))
			}
		}
	}
	c.RMSNormEps, c.RopeTheta, c.MaxPositionEmbeddings = 1e-6, 10000, d.maxPos
	take("rms_norm_eps", &c.RMSNormEps)
	take("max_position_embeddings", &c.MaxPositionEmbeddings)
	take("tie_word_embeddings", &c.TieWordEmbeddings)
	take("attention_bias", &c.AttentionBias)
	if c.ModelType == "llama" {
		take("mlp_bias", &c.MLPBias)
	}
	if c.ModelType == "mistral" {
		c.AttentionBias = false // MistralAttention has no biases, whatever the file says
	}
	if !take("torch_dtype", &c.TorchDtype) {
		take("dtype", &c.TorchDtype) // transformers ≥ 4.56 writes "dtype"
	}
	c.BOSTokenID = takeTokenIDs(fields, "bos_token_id", &errs)
	c.EOSTokenID = takeTokenIDs(fields, "eos_token_id", &errs)
	var sw int
	if take("sliding_window", &sw) {
		c.SlidingWindow = &sw
	}
	take("use_sliding_window", &c.UseSlidingWindow)
	c.HiddenAct = "silu"
	take("hidden_act", &c.HiddenAct)

	// RoPE: rope_theta and rope_scaling, or transformers v5's rope_parameters.
	take("rope_theta", &c.RopeTheta)
	var scaling map[string]json.RawMessage
	if take("rope_scaling", &scaling) {
		c.RopeScaling = parseRopeScaling("rope_scaling", scaling, &errs)
	}
	if take("rope_parameters", &scaling) {
		if v, ok := scaling["rope_theta"]; ok {
			if err := json.Unmarshal(v, &c.RopeTheta); err != nil {
				errs = append(errs, fmt.Errorf("rope_parameters.rope_theta: %s is not a number", v))
			}
		}
		c.RopeScaling = parseRopeScaling("rope_parameters", scaling, &errs)
	}
	maps.Copy(c.Extra, fields)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return c, c.Validate()
}

// typeDefaults are the transformers config classes' defaults that matter when a
// key is absent (0: derived, see ModelConfig).
var typeDefaults = map[string]struct{ kvHeads, headDim, maxPos int }{
	"llama":   {0, 0, 2048},
	"mistral": {8, 0, 131072},
	"qwen2":   {32, 0, 32768},
	"qwen3":   {32, 128, 32768},
}

// takeTokenIDs decodes a token id field that is an int, a list of ints, or null.
func takeTokenIDs(fields map[string]json.RawMessage, key string, errs *[]error) []int {
	v, ok := fields[key]
	if !ok {
		return nil
	}
	delete(fields, key)
	var one int
	if json.Unmarshal(v, &one) == nil {
		return []int{one}
	}
	var list []int
	if err := json.Unmarshal(v, &list); err != nil {
		*errs = append(*errs, fmt.Errorf("%s: %s is not a token id, a list of them, or null", key, v))
	}
	return list
}

// parseRopeScaling reads a rope_scaling (or rope_parameters) object: nil for rope
// type "default", the parameters for "llama3", an error for any other type.
func parseRopeScaling(key string, m map[string]json.RawMessage, errs *[]error) *RopeScaling {
	var typ string
	for _, k := range []string{"rope_type", "type"} { // "type" is the legacy spelling
		if v, ok := m[k]; ok {
			json.Unmarshal(v, &typ)
			break
		}
	}
	switch typ {
	case "default":
		return nil
	case "llama3":
	default:
		*errs = append(*errs, fmt.Errorf("%s: rope type %q is not supported (want llama3, default, or null)", key, typ))
		return nil
	}
	s := &RopeScaling{RopeType: typ}
	for _, f := range []struct {
		k   string
		dst any
	}{{"factor", &s.Factor}, {"low_freq_factor", &s.LowFreqFactor}, {"high_freq_factor", &s.HighFreqFactor},
		{"original_max_position_embeddings", &s.OriginalMaxPositionEmbeddings}} {
		v, ok := m[f.k]
		if !ok {
			*errs = append(*errs, fmt.Errorf("%s.%s: missing (llama3 needs factor, low_freq_factor, high_freq_factor, original_max_position_embeddings)", key, f.k))
			continue
		}
		if err := json.Unmarshal(v, f.dst); err != nil {
			*errs = append(*errs, fmt.Errorf("%s.%s: %s is not %s", key, f.k, v, jsonKind(f.dst)))
		}
	}
	return s
}

func jsonKind(dst any) string {
	switch dst.(type) {
	case *int:
		return "an integer"
	case *float64:
		return "a number"
	case *bool:
		return "true or false"
	case *string:
		return "a string"
	case *[]string:
		return "a list of strings"
	default:
		return "an object"
	}
}

// Validate checks the config for a model hindsight can build; each error names its
// field.
func (c *ModelConfig) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{field}, args...)...))
	}
	arch, ok := architectures[c.ModelType]
	if !ok {
		return fmt.Errorf("model_type: %q is not supported (want %s)", c.ModelType, strings.Join(slices.Sorted(maps.Keys(architectures)), ", "))
	}
	if c.Architectures != nil && !slices.Equal(c.Architectures, []string{arch}) {
		bad("architectures", "%q, want [%q] for model_type %s", c.Architectures, arch, c.ModelType)
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"vocab_size", c.VocabSize}, {"hidden_size", c.HiddenSize}, {"intermediate_size", c.IntermediateSize},
		{"num_hidden_layers", c.NumHiddenLayers}, {"num_attention_heads", c.NumAttentionHeads},
		{"num_key_value_heads", c.NumKeyValueHeads}, {"head_dim", c.HeadDim}, {"max_position_embeddings", c.MaxPositionEmbeddings}} {
		if f.v <= 0 {
			bad(f.name, "%d, want a positive integer", f.v)
		}
	}
	if c.NumKeyValueHeads > 0 && c.NumAttentionHeads%c.NumKeyValueHeads != 0 {
		bad("num_key_value_heads", "%d does not divide num_attention_heads %d", c.NumKeyValueHeads, c.NumAttentionHeads)
	}
	if c.HeadDim%2 != 0 {
		bad("head_dim", "%d is odd; rotary embeddings need an even head_dim", c.HeadDim)
	}
	if !(c.RMSNormEps > 0) || math.IsInf(c.RMSNormEps, 0) {
		bad("rms_norm_eps", "%g, want a positive number", c.RMSNormEps)
	}
	if !(c.RopeTheta > 0) || math.IsInf(c.RopeTheta, 0) {
		bad("rope_theta", "%g, want a positive number", c.RopeTheta)
	}
	if s := c.RopeScaling; s != nil {
		if s.RopeType != "llama3" {
			bad("rope_scaling", "rope type %q is not supported (want llama3, default, or null)", s.RopeType)
		} else {
			if !(s.Factor >= 1) {
				bad("rope_scaling.factor", "%g, want ≥ 1", s.Factor)
			}
			if !(s.LowFreqFactor > 0) || !(s.HighFreqFactor > s.LowFreqFactor) {
				bad("rope_scaling.high_freq_factor", "%g must exceed low_freq_factor %g > 0", s.HighFreqFactor, s.LowFreqFactor)
			}
			if s.OriginalMaxPositionEmbeddings <= 0 {
				bad("rope_scaling.original_max_position_embeddings", "%d, want a positive integer", s.OriginalMaxPositionEmbeddings)
			}
		}
	}
	if c.HiddenAct != "silu" {
		bad("hidden_act", "%q is not supported (want silu)", c.HiddenAct)
	}
	switch c.TorchDtype {
	case "", "float32", "bfloat16", "float16":
	default:
		bad("torch_dtype", "%q is not supported (want float32, bfloat16 or float16)", c.TorchDtype)
	}
	if c.MLPBias && c.ModelType != "llama" {
		bad("mlp_bias", "only llama has MLP biases")
	}
	for _, f := range []struct {
		name string
		ids  []int
	}{{"bos_token_id", c.BOSTokenID}, {"eos_token_id", c.EOSTokenID}} {
		for _, id := range f.ids {
			if id < 0 || (c.VocabSize > 0 && id >= c.VocabSize) {
				bad(f.name, "%d is outside the vocabulary [0, %d)", id, c.VocabSize)
			}
		}
	}
	if c.SlidingWindowActive() {
		bad("sliding_window", "%d: sliding-window attention is not supported (use_sliding_window must be false, or sliding_window null)", *c.SlidingWindow)
	}
	return errors.Join(errs...)
}

// SlidingWindowActive reports whether transformers would use sliding-window
// attention: mistral whenever sliding_window is set; qwen2/qwen3 when
// use_sliding_window is also true. hindsight does not implement it, so Validate
// rejects such configs.
func (c *ModelConfig) SlidingWindowActive() bool {
	if c.SlidingWindow == nil {
		return false
	}
	switch c.ModelType {
	case "mistral":
		return true
	case "qwen2", "qwen3":
		return c.UseSlidingWindow
	}
	return false
}

// MarshalJSON writes the config as transformers writes config.json: every field
// explicit (defaults included), keys sorted, Extra's keys kept.
func (c *ModelConfig) MarshalJSON() ([]byte, error) {
	m := make(map[string]any, len(c.Extra)+32)
	for k, v := range c.Extra {
		m[k] = v
	}
	arch := c.Architectures
	if arch == nil {
		arch = []string{architectures[c.ModelType]}
	}
	m["architectures"] = arch
	m["model_type"] = c.ModelType
	m["vocab_size"] = c.VocabSize
	m["hidden_size"] = c.HiddenSize
	m["intermediate_size"] = c.IntermediateSize
	m["num_hidden_layers"] = c.NumHiddenLayers
	m["num_attention_heads"] = c.NumAttentionHeads
	m["num_key_value_heads"] = c.NumKeyValueHeads
	m["head_dim"] = c.HeadDim
	m["rms_norm_eps"] = c.RMSNormEps
	m["rope_theta"] = c.RopeTheta
	if c.RopeScaling != nil {
		m["rope_scaling"] = c.RopeScaling
	} else {
		m["rope_scaling"] = nil
	}
	m["max_position_embeddings"] = c.MaxPositionEmbeddings
	m["tie_word_embeddings"] = c.TieWordEmbeddings
	if c.ModelType != "mistral" {
		m["attention_bias"] = c.AttentionBias
	}
	if c.ModelType == "llama" {
		m["mlp_bias"] = c.MLPBias
	}
	if c.TorchDtype != "" {
		m["torch_dtype"] = c.TorchDtype
	}
	m["bos_token_id"] = tokenIDsJSON(c.BOSTokenID)
	m["eos_token_id"] = tokenIDsJSON(c.EOSTokenID)
	if c.ModelType != "llama" {
		m["sliding_window"] = c.SlidingWindow
	}
	if c.ModelType == "qwen2" || c.ModelType == "qwen3" {
		m["use_sliding_window"] = c.UseSlidingWindow
	}
	m["hidden_act"] = c.HiddenAct
	if _, ok := m["transformers_version"]; !ok {
		m["transformers_version"] = TransformersVersionFor(c.ModelType)
	}
	return json.MarshalIndent(m, "", "  ")
}

func tokenIDsJSON(ids []int) any {
	switch len(ids) {
	case 0:
		return nil
	case 1:
		return ids[0]
	}
	return ids
}

// WriteModelConfig writes c as path (config.json), atomically.
func WriteModelConfig(path string, c *ModelConfig) error {
	raw, err := c.MarshalJSON()
	if err != nil {
		return fmt.Errorf("write model config %s: %w", path, err)
	}
	err = fsutil.WriteFile(path, 0o644, func(w io.Writer) error {
		_, err := w.Write(append(raw, '\n'))
		return err
	})
	if err != nil {
		return fmt.Errorf("write model config %s: %w", path, err)
	}
	return nil
}

// TensorSpec is one weight of the model: its Hugging Face name and shape.
type TensorSpec struct {
	Name  string
	Shape []int
}

// Tensors lists every weight the architecture has, in the order of the model
// (embedding, layer by layer, final norm, lm_head), with transformers' names and
// shapes ([out, in] for projections). It is the strict name table for loading and
// saving: a checkpoint holds exactly these tensors.
func (c *ModelConfig) Tensors() []TensorSpec {
	h, q, kv, ff := c.HiddenSize, c.NumAttentionHeads*c.HeadDim, c.NumKeyValueHeads*c.HeadDim, c.IntermediateSize
	specs := []TensorSpec{{"model.embed_tokens.weight", []int{c.VocabSize, h}}}
	for i := range c.NumHiddenLayers {
		p := fmt.Sprintf("model.layers.%d.", i)
		add := func(name string, shape ...int) { specs = append(specs, TensorSpec{p + name, shape}) }
		add("input_layernorm.weight", h)
		add("self_attn.q_proj.weight", q, h)
		add("self_attn.k_proj.weight", kv, h)
		add("self_attn.v_proj.weight", kv, h)
		if c.QKVBias() {
			add("self_attn.q_proj.bias", q)
			add("self_attn.k_proj.bias", kv)
			add("self_attn.v_proj.bias", kv)
		}
		if c.QKNorm() {
			add("self_attn.q_norm.weight", c.HeadDim)
			add("self_attn.k_norm.weight", c.HeadDim)
		}
		add("self_attn.o_proj.weight", h, q)
		if c.OBias() {
			add("self_attn.o_proj.bias", h)
		}
		add("post_attention_layernorm.weight", h)
		add("mlp.gate_proj.weight", ff, h)
		add("mlp.up_proj.weight", ff, h)
		add("mlp.down_proj.weight", h, ff)
		if c.MLPBias {
			add("mlp.gate_proj.bias", ff)
			add("mlp.up_proj.bias", ff)
			add("mlp.down_proj.bias", h)
		}
	}
	specs = append(specs, TensorSpec{"model.norm.weight", []int{h}})
	if !c.TieWordEmbeddings {
		specs = append(specs, TensorSpec{"lm_head.weight", []int{c.VocabSize, h}})
	}
	return specs
}

// TensorShapes is Tensors as a map from name to shape.
func (c *ModelConfig) TensorShapes() map[string][]int {
	specs := c.Tensors()
	m := make(map[string][]int, len(specs))
	for _, s := range specs {
		m[s.Name] = s.Shape
	}
	return m
}

// NumParameters is the number of weights (tied embeddings counted once), the
// number transformers' num_parameters() reports.
func (c *ModelConfig) NumParameters() int64 {
	var n int64
	for _, s := range c.Tensors() {
		p := int64(1)
		for _, d := range s.Shape {
			p *= int64(d)
		}
		n += p
	}
	return n
}
