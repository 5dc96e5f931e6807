package data

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestModelConfigPublished loads the published configs in testdata/configs and
// checks the derived numbers against the parameter counts the model cards give.
func TestModelConfigPublished(t *testing.T) {
	tests := []struct {
		file      string
		params    int64
		headDim   int
		kvHeads   int
		qkvBias   bool
		qkNorm    bool
		tied      bool
		eos       []int
		scaling   bool
		numTensor int
	}{
		{"llama-3.2-1b.json", 1_235_814_400, 64, 8, false, false, true, []int{128001}, true, 1 + 16*9 + 1},
		{"llama-3.1-8b-instruct.json", 8_030_261_248, 128, 8, false, false, false, []int{128001, 128008, 128009}, true, 1 + 32*9 + 2},
		{"qwen2.5-0.5b.json", 494_032_768, 64, 2, true, false, true, []int{151643}, false, 1 + 24*12 + 1},
		{"qwen3-0.6b.json", 596_049_920, 128, 8, false, true, true, []int{151645}, false, 1 + 28*11 + 1},
		{"mistral-nemo-base-2407.json", 12_247_782_400, 128, 8, false, false, false, []int{2}, false, 1 + 40*9 + 2},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			c, err := LoadModelConfig(filepath.Join("testdata/configs", tt.file))
			require.NoError(t, err)
			require.Equal(t, tt.params, c.NumParameters())
			require.Equal(t, tt.headDim, c.HeadDim)
			require.Equal(t, tt.kvHeads, c.NumKeyValueHeads)
			require.Equal(t, tt.qkvBias, c.QKVBias())
			require.False(t, c.OBias())
			require.Equal(t, tt.qkNorm, c.QKNorm())
			require.Equal(t, tt.tied, c.TieWordEmbeddings)
			require.Equal(t, tt.eos, c.EOSTokenID)
			require.Equal(t, tt.scaling, c.RopeScaling != nil)
			require.Equal(t, "bfloat16", c.TorchDtype)
			require.Len(t, c.Tensors(), tt.numTensor)
			require.False(t, c.SlidingWindowActive())

			// Round trip: what we write parses to the same config, extras kept.
			raw, err := c.MarshalJSON()
			require.NoError(t, err)
			c2, err := ParseModelConfig(raw)
			require.NoError(t, err, "%s", raw)
			require.Equal(t, c, c2)
			require.Contains(t, string(raw), `"initializer_range": 0.02`)
		})
	}

	c, err := LoadModelConfig("testdata/configs/qwen2.5-0.5b.json")
	require.NoError(t, err)
	shapes := c.TensorShapes()
	require.Equal(t, []int{151936, 896}, shapes["model.embed_tokens.weight"])
	require.Equal(t, []int{128, 896}, shapes["model.layers.3.self_attn.k_proj.weight"])
	require.Equal(t, []int{128}, shapes["model.layers.3.self_attn.v_proj.bias"])
	require.NotContains(t, shapes, "model.layers.3.self_attn.o_proj.bias")
	require.NotContains(t, shapes, "lm_head.weight")

	c, err = LoadModelConfig("testdata/configs/qwen3-0.6b.json")
	require.NoError(t, err)
	shapes = c.TensorShapes()
	require.Equal(t, []int{2048, 1024}, shapes["model.layers.0.self_attn.q_proj.weight"])
	require.Equal(t, []int{1024, 2048}, shapes["model.layers.0.self_attn.o_proj.weight"])
	require.Equal(t, []int{128}, shapes["model.layers.27.self_attn.k_norm.weight"])

	c, err = LoadModelConfig("testdata/configs/llama-3.2-1b.json")
	require.NoError(t, err)
	require.Equal(t, &RopeScaling{RopeType: "llama3", Factor: 32, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 8192}, c.RopeScaling)
	require.Equal(t, 1e-5, c.RMSNormEps)
	require.Equal(t, 500000.0, c.RopeTheta)
	require.Equal(t, []int{128000}, c.BOSTokenID)
}

// base is a small valid llama config for the error table.
const baseConfig = `{"model_type": "llama", "vocab_size": 100, "hidden_size": 64, "intermediate_size": 128,
	"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "torch_dtype": "float32"}`

// with returns baseConfig with key set to the JSON value v ("" deletes key).
func with(t *testing.T, src string, kv ...string) []byte {
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(src), &m))
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] == "" {
			delete(m, kv[i])
		} else {
			m[kv[i]] = json.RawMessage(kv[i+1])
		}
	}
	raw, err := json.Marshal(m)
	require.NoError(t, err)
	return raw
}

func TestModelConfigDefaults(t *testing.T) {
	c, err := ParseModelConfig([]byte(baseConfig))
	require.NoError(t, err)
	require.Equal(t, 16, c.HeadDim)
	require.Equal(t, 1e-6, c.RMSNormEps)
	require.Equal(t, 10000.0, c.RopeTheta)
	require.Equal(t, 2048, c.MaxPositionEmbeddings)
	require.Equal(t, "silu", c.HiddenAct)
	require.False(t, c.TieWordEmbeddings)
	require.Nil(t, c.BOSTokenID)

	c, err = ParseModelConfig(with(t, baseConfig, "num_key_value_heads", ""))
	require.NoError(t, err)
	require.Equal(t, 4, c.NumKeyValueHeads, "llama: num_key_value_heads defaults to num_attention_heads")

	c, err = ParseModelConfig(with(t, baseConfig, "model_type", `"qwen3"`, "num_attention_heads", "32", "num_key_value_heads", ""))
	require.NoError(t, err)
	require.Equal(t, 128, c.HeadDim, "qwen3: head_dim defaults to 128")
	require.Equal(t, 32, c.NumKeyValueHeads, "qwen3: num_key_value_heads defaults to 32")

	c, err = ParseModelConfig(with(t, baseConfig, "model_type", `"qwen2"`, "attention_bias", "false"))
	require.NoError(t, err)
	require.True(t, c.QKVBias(), "qwen2 always has q/k/v biases")
	require.False(t, c.OBias())

	c, err = ParseModelConfig(with(t, baseConfig, "attention_bias", "true", "mlp_bias", "true"))
	require.NoError(t, err)
	shapes := c.TensorShapes()
	require.Equal(t, []int{64}, shapes["model.layers.1.self_attn.o_proj.bias"])
	require.Equal(t, []int{128}, shapes["model.layers.1.mlp.up_proj.bias"])

	c, err = ParseModelConfig(with(t, baseConfig, "model_type", `"mistral"`, "attention_bias", "true", "sliding_window", "null"))
	require.NoError(t, err)
	require.False(t, c.QKVBias(), "mistral has no attention biases")

	c, err = ParseModelConfig(with(t, baseConfig, "rope_scaling", `{"type": "default"}`, "dtype", `"bfloat16"`, "torch_dtype", ""))
	require.NoError(t, err)
	require.Nil(t, c.RopeScaling)
	require.Equal(t, "bfloat16", c.TorchDtype, `"dtype" is read when "torch_dtype" is absent`)

	c, err = ParseModelConfig(with(t, baseConfig, "rope_parameters",
		`{"rope_type": "llama3", "rope_theta": 500000, "factor": 8, "low_freq_factor": 1, "high_freq_factor": 4, "original_max_position_embeddings": 8192}`))
	require.NoError(t, err)
	require.Equal(t, 500000.0, c.RopeTheta)
	require.Equal(t, 8.0, c.RopeScaling.Factor)
}

func TestModelConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		raw  []byte
		want string
	}{
		{"heads do not divide", with(t, baseConfig, "num_attention_heads", "7", "num_key_value_heads", "7"), "num_attention_heads: 7 does not divide hidden_size 64"},
		{"kv heads", with(t, baseConfig, "num_key_value_heads", "3"), "num_key_value_heads: 3 does not divide num_attention_heads 4"},
		{"model type", with(t, baseConfig, "model_type", `"gpt2"`), `model_type: "gpt2" is not supported (want llama, mistral, qwen2, qwen3)`},
		{"no model type", with(t, baseConfig, "model_type", ""), `model_type: "" is not supported`},
		{"missing", with(t, baseConfig, "hidden_size", ""), "hidden_size: missing"},
		{"wrong type", with(t, baseConfig, "vocab_size", `"100"`), `vocab_size: "100" is not an integer`},
		{"zero layers", with(t, baseConfig, "num_hidden_layers", "0"), "num_hidden_layers: 0, want a positive integer"},
		{"act", with(t, baseConfig, "hidden_act", `"gelu"`), `hidden_act: "gelu" is not supported (want silu)`},
		{"dtype", with(t, baseConfig, "torch_dtype", `"float64"`), `torch_dtype: "float64" is not supported`},
		{"yarn", with(t, baseConfig, "rope_scaling", `{"rope_type": "yarn", "factor": 4}`), `rope_scaling: rope type "yarn" is not supported (want llama3, default, or null)`},
		{"llama3 incomplete", with(t, baseConfig, "rope_scaling", `{"rope_type": "llama3", "factor": 4}`), "rope_scaling.low_freq_factor: missing"},
		{"architectures", with(t, baseConfig, "architectures", `["LlamaForSequenceClassification"]`), `architectures: ["LlamaForSequenceClassification"], want ["LlamaForCausalLM"] for model_type llama`},
		{"eos range", with(t, baseConfig, "eos_token_id", "[1, 100]"), "eos_token_id: 100 is outside the vocabulary [0, 100)"},
		{"eos type", with(t, baseConfig, "eos_token_id", `"eos"`), `eos_token_id: "eos" is not a token id, a list of them, or null`},
		{"mistral window", with(t, baseConfig, "model_type", `"mistral"`, "sliding_window", "4096"), "sliding_window: 4096: sliding-window attention is not supported"},
		{"qwen window", with(t, baseConfig, "model_type", `"qwen2"`, "sliding_window", "4096", "use_sliding_window", "true"), "sliding_window: 4096"},
		{"odd head", with(t, baseConfig, "head_dim", "15"), "head_dim: 15 is odd"},
		{"mlp bias", with(t, baseConfig, "model_type", `"qwen3"`, "mlp_bias", "true"), ""},
		{"not json", []byte("{"), "parse: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseModelConfig(tt.raw)
			if tt.want == "" {
				require.NoError(t, err) // mlp_bias is a llama key: kept as an extra elsewhere
				return
			}
			require.ErrorContains(t, err, tt.want)
		})
	}
	// qwen2 with the window set but off is fine.
	_, err := ParseModelConfig(with(t, baseConfig, "model_type", `"qwen2"`, "sliding_window", "4096", "use_sliding_window", "false"))
	require.NoError(t, err)

	path := filepath.Join(t.TempDir(), "config.json")
	require.NoError(t, os.WriteFile(path, with(t, baseConfig, "num_attention_heads", "7", "num_key_value_heads", "7"), 0o644))
	_, err = LoadModelConfig(path)
	require.ErrorContains(t, err, path+": num_attention_heads: 7 does not divide hidden_size 64")
	// Every problem is reported, one per line.
	_, err = ParseModelConfig(with(t, baseConfig, "hidden_act", `"gelu"`, "torch_dtype", `"int8"`))
	require.Len(t, strings.Split(err.Error(), "\n"), 2)
}

func TestWriteModelConfig(t *testing.T) {
	c, err := ParseModelConfig(with(t, baseConfig, "bos_token_id", "1", "eos_token_id", "[2, 3]"))
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "config.json")
	require.NoError(t, WriteModelConfig(path, c))
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(raw, &m))
	require.Equal(t, []any{"LlamaForCausalLM"}, m["architectures"])
	require.Equal(t, TransformersVersion, m["transformers_version"])
	require.Equal(t, 1.0, m["bos_token_id"])
	require.Equal(t, []any{2.0, 3.0}, m["eos_token_id"])
	require.Equal(t, 16.0, m["head_dim"])
	require.Nil(t, m["rope_scaling"])
	require.Contains(t, m, "rope_scaling")
	back, err := LoadModelConfig(path)
	require.NoError(t, err)
	c.Architectures = []string{"LlamaForCausalLM"}
	c.Extra["transformers_version"] = json.RawMessage(`"` + TransformersVersion + `"`)
	require.Equal(t, c, back)
}
