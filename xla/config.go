package xla

import (
	"errors"
	"fmt"

	"github.com/hindsight-ai/hindsight/data"
)

// Config is the architecture of a Llama-family decoder (llama, mistral, qwen2,
// qwen3), taken from a Hugging Face config.json read by data.ModelConfig. The JSON
// names are the config.json keys each field comes from.
type Config struct {
	ModelType             string            `json:"model_type"`
	VocabSize             int               `json:"vocab_size"`
	HiddenSize            int               `json:"hidden_size"`
	IntermediateSize      int               `json:"intermediate_size"`
	NumHiddenLayers       int               `json:"num_hidden_layers"`
	NumAttentionHeads     int               `json:"num_attention_heads"`
	NumKeyValueHeads      int               `json:"num_key_value_heads"`
	HeadDim               int               `json:"head_dim"`
	RMSNormEps            float64           `json:"rms_norm_eps"`
	RopeTheta             float64           `json:"rope_theta"`
	RopeScaling           *data.RopeScaling `json:"rope_scaling"`
	MaxPositionEmbeddings int               `json:"max_position_embeddings"`
	TieWordEmbeddings     bool              `json:"tie_word_embeddings"`

	// Derived from model_type and attention_bias/mlp_bias as transformers does
	// (data.ModelConfig.QKVBias, OBias, QKNorm).
	QKVBias bool `json:"-"` // q, k, v projections have biases (qwen2)
	OBias   bool `json:"-"` // o projection has a bias
	MLPBias bool `json:"mlp_bias"`
	QKNorm  bool `json:"-"` // per-head RMSNorm of q and k before RoPE (qwen3)
}

// NewConfig takes the architecture from a validated model config.
func NewConfig(mc *data.ModelConfig) (Config, error) {
	c := Config{
		ModelType:             mc.ModelType,
		VocabSize:             mc.VocabSize,
		HiddenSize:            mc.HiddenSize,
		IntermediateSize:      mc.IntermediateSize,
		NumHiddenLayers:       mc.NumHiddenLayers,
		NumAttentionHeads:     mc.NumAttentionHeads,
		NumKeyValueHeads:      mc.NumKeyValueHeads,
		HeadDim:               mc.HeadDim,
		RMSNormEps:            mc.RMSNormEps,
		RopeTheta:             mc.RopeTheta,
		RopeScaling:           mc.RopeScaling,
		MaxPositionEmbeddings: mc.MaxPositionEmbeddings,
		TieWordEmbeddings:     mc.TieWordEmbeddings,
		QKVBias:               mc.QKVBias(),
		OBias:                 mc.OBias(),
		MLPBias:               mc.MLPBias,
		QKNorm:                mc.QKNorm(),
	}
	if mc.SlidingWindowActive() {
		return c, errors.New("model config: sliding-window attention is not supported")
	}
	if mc.HiddenAct != "" && mc.HiddenAct != "silu" {
		return c, fmt.Errorf("model config: hidden_act: %q is not supported (want silu)", mc.HiddenAct)
	}
	return c, c.Validate()
}

// Validate checks that the decoder can be built; each error names its config.json
// field.
func (c Config) Validate() error {
	var errs []error
	for _, f := range []struct {
		name string
		v    int
	}{{"vocab_size", c.VocabSize}, {"hidden_size", c.HiddenSize}, {"intermediate_size", c.IntermediateSize},
		{"num_hidden_layers", c.NumHiddenLayers}, {"num_attention_heads", c.NumAttentionHeads},
		{"num_key_value_heads", c.NumKeyValueHeads}, {"head_dim", c.HeadDim},
		{"max_position_embeddings", c.MaxPositionEmbeddings}} {
		if f.v <= 0 {
			errs = append(errs, fmt.Errorf("%s: %d, want a positive integer", f.name, f.v))
		}
	}
	if c.NumKeyValueHeads > 0 && c.NumAttentionHeads%c.NumKeyValueHeads != 0 {
		errs = append(errs, fmt.Errorf("num_key_value_heads: %d does not divide num_attention_heads %d", c.NumKeyValueHeads, c.NumAttentionHeads))
	}
	if c.HeadDim%2 != 0 {
		errs = append(errs, fmt.Errorf("head_dim: %d is odd; rotary embeddings need an even head_dim", c.HeadDim))
	}
	if !(c.RMSNormEps > 0) {
		errs = append(errs, fmt.Errorf("rms_norm_eps: %g, want a positive number", c.RMSNormEps))
	}
	if !(c.RopeTheta > 0) {
		errs = append(errs, fmt.Errorf("rope_theta: %g, want a positive number", c.RopeTheta))
	}
	if s := c.RopeScaling; s != nil && s.RopeType != "llama3" {
		errs = append(errs, fmt.Errorf("rope_scaling: rope type %q is not supported (want llama3)", s.RopeType))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("model config: %w", err)
	}
	return nil
}

// groups is the number of query heads that share one KV head.
func (c Config) groups() int { return c.NumAttentionHeads / c.NumKeyValueHeads }
