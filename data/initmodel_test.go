package data

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/hindsight-ai/hindsight/data/safetensors"
	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/data/tokenizer/tokenizertest"
	"github.com/stretchr/testify/require"
)

func TestPresetConfig(t *testing.T) {
	tiny, err := PresetConfig("tiny", tokenizer.BytesVocabSize)
	require.NoError(t, err)
	require.LessOrEqual(t, tiny.NumParameters(), int64(500_000))
	require.Equal(t, int64(91_008), tiny.NumParameters())
	small, err := PresetConfig("small", tokenizer.BytesVocabSize)
	require.NoError(t, err)
	require.GreaterOrEqual(t, small.NumParameters(), int64(2_000_000))
	require.LessOrEqual(t, small.NumParameters(), int64(5_000_000))
	_, err = PresetConfig("huge", tokenizer.BytesVocabSize)
	require.ErrorContains(t, err, `preset "huge": want one of tiny, small, qwen3-tiny, qwen3-0.6b, qwen3-1.7b`)
}

// TestQwen3Presets checks the qwen3 presets against the released models' config.json
// (huggingface.co/Qwen/Qwen3-0.6B and Qwen/Qwen3-1.7B, files config.json:
// hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
// num_key_value_heads, head_dim, vocab_size, tie_word_embeddings, rope_theta,
// rms_norm_eps) and the parameter counts those shapes give (the model cards say
// 0.6B with 0.44B non-embedding and 1.7B with 1.4B non-embedding).
func TestQwen3Presets(t *testing.T) {
	for _, tt := range []struct {
		preset                                   string
		layers, hidden, inter, heads, kv, params int
	}{
		{"qwen3-0.6b", 28, 1024, 3072, 16, 8, 596_049_920},
		{"qwen3-1.7b", 28, 2048, 6144, 16, 8, 1_720_574_976},
	} {
		t.Run(tt.preset, func(t *testing.T) {
			c, err := PresetConfig(tt.preset, tokenizer.BytesVocabSize)
			require.NoError(t, err)
			require.Equal(t, "qwen3", c.ModelType)
			require.Equal(t, []string{"Qwen3ForCausalLM"}, c.Architectures)
			require.Equal(t, tt.layers, c.NumHiddenLayers)
			require.Equal(t, tt.hidden, c.HiddenSize)
			require.Equal(t, tt.inter, c.IntermediateSize)
			require.Equal(t, tt.heads, c.NumAttentionHeads)
			require.Equal(t, tt.kv, c.NumKeyValueHeads)
			require.Equal(t, 128, c.HeadDim)
			require.Equal(t, 151936, c.VocabSize)
			require.True(t, c.TieWordEmbeddings)
			require.True(t, c.QKNorm())
			require.False(t, c.QKVBias())
			require.Equal(t, 1e6, c.RopeTheta)
			require.Equal(t, 1e-6, c.RMSNormEps)
			require.Equal(t, int64(tt.params), c.NumParameters())
			shapes := c.TensorShapes()
			require.Equal(t, []int{128}, shapes["model.layers.27.self_attn.q_norm.weight"])
			require.Equal(t, []int{tt.heads * 128, tt.hidden}, shapes["model.layers.0.self_attn.q_proj.weight"])
			require.Equal(t, []int{tt.kv * 128, tt.hidden}, shapes["model.layers.0.self_attn.k_proj.weight"])
			require.NotContains(t, shapes, "lm_head.weight", "tied embeddings")
			require.Len(t, shapes, 1+1+tt.layers*11)
		})
	}
	_, err := PresetConfig("qwen3-0.6b", Qwen3VocabSize+1)
	require.ErrorContains(t, err, "more than the preset's vocab_size 151936")
	tiny, err := PresetConfig("qwen3-tiny", tokenizer.BytesVocabSize)
	require.NoError(t, err)
	require.True(t, tiny.QKNorm())
	require.Equal(t, tokenizer.BytesVocabSize, tiny.VocabSize)
	require.Less(t, tiny.NumParameters(), int64(200_000))
}

func TestInitModel(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "m")
	cfg, err := InitModel(dir, InitOptions{Preset: "tiny", Seed: 7})
	require.NoError(t, err)
	require.Equal(t, []int{int(tokenizer.BytesBOS)}, cfg.BOSTokenID)
	require.Equal(t, []int{int(tokenizer.BytesEOS)}, cfg.EOSTokenID)

	entries, err := os.ReadDir(root)
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temp directory is left beside the model")
	for _, name := range []string{ConfigFileName, safetensors.FileName, TokenizerFileName, TokenizerConfigFileName, GenerationConfigFileName} {
		require.FileExists(t, filepath.Join(dir, name))
	}
	tokJSON, err := os.ReadFile(filepath.Join(dir, TokenizerFileName))
	require.NoError(t, err)
	require.True(t, bytes.Equal(tokenizer.BytesJSON(), tokJSON))
	var tc map[string]any
	raw, err := os.ReadFile(filepath.Join(dir, TokenizerConfigFileName))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &tc))
	require.Equal(t, "PreTrainedTokenizerFast", tc["tokenizer_class"])
	require.Equal(t, "<|eos|>", tc["eos_token"])
	require.Equal(t, tokenizer.BytesChatTemplate, tc["chat_template"], "the byte tokenizer's chat format")
	var gc map[string]any
	raw, err = os.ReadFile(filepath.Join(dir, GenerationConfigFileName))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &gc))
	require.Equal(t, float64(tokenizer.BytesBOS), gc["bos_token_id"])
	require.Equal(t, float64(tokenizer.BytesEOS), gc["eos_token_id"])

	m, err := OpenModelDir(dir)
	require.NoError(t, err)
	defer m.Close()
	require.Equal(t, cfg, m.Config)
	require.Equal(t, "pt", m.Weights.Metadata()["format"])
	norm, err := m.Weights.Tensor("model.layers.1.post_attention_layernorm.weight")
	require.NoError(t, err)
	nv, err := norm.Float32s()
	require.NoError(t, err)
	for _, v := range nv {
		require.Equal(t, float32(1), v)
	}
	emb, err := m.Weights.Tensor("model.embed_tokens.weight")
	require.NoError(t, err)
	require.Equal(t, safetensors.DtypeF32, emb.Dtype)
	ev, err := emb.Float32s()
	require.NoError(t, err)
	var sum, sq float64
	for _, v := range ev {
		sum += float64(v)
		sq += float64(v) * float64(v)
	}
	mean := sum / float64(len(ev))
	std := math.Sqrt(sq/float64(len(ev)) - mean*mean)
	require.InDelta(t, 0, mean, 0.001)
	require.InDelta(t, InitStd, std, 0.0005)

	// The same seed writes the same bytes; another seed other weights.
	again := filepath.Join(root, "again")
	_, err = InitModel(again, InitOptions{Preset: "tiny", Seed: 7})
	require.NoError(t, err)
	other := filepath.Join(root, "other")
	_, err = InitModel(other, InitOptions{Preset: "tiny", Seed: 8})
	require.NoError(t, err)
	w1, _ := os.ReadFile(filepath.Join(dir, safetensors.FileName))
	w2, _ := os.ReadFile(filepath.Join(again, safetensors.FileName))
	w3, _ := os.ReadFile(filepath.Join(other, safetensors.FileName))
	require.True(t, bytes.Equal(w1, w2))
	require.False(t, bytes.Equal(w1[len(w1)-1000:], w3[len(w3)-1000:]))
}

func TestInitModelRefusesNonEmpty(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "m")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	_, err := InitModel(dir, InitOptions{Preset: "tiny"}) // empty: fine
	require.NoError(t, err)
	_, err = InitModel(dir, InitOptions{Preset: "small"})
	require.ErrorContains(t, err, "is not empty (5 entries); refusing to overwrite it")
	cfg, err := InitModel(dir, InitOptions{Preset: "small", Force: true, Dtype: "bfloat16"})
	require.NoError(t, err)
	m, err := OpenModelDir(dir)
	require.NoError(t, err)
	defer m.Close()
	require.Equal(t, 256, m.Config.HiddenSize)
	require.Equal(t, "bfloat16", cfg.TorchDtype)
	v, err := m.Weights.Tensor("model.layers.3.mlp.down_proj.weight")
	require.NoError(t, err)
	require.Equal(t, safetensors.DtypeBF16, v.Dtype)
	entries, err := os.ReadDir(filepath.Dir(dir))
	require.NoError(t, err)
	require.Len(t, entries, 1, "the replaced directory is gone")

	_, err = InitModel(filepath.Join(t.TempDir(), "x"), InitOptions{Preset: "tiny", Dtype: "float16"})
	require.ErrorContains(t, err, `dtype "float16": want float32 or bfloat16`)
}

func TestInitModelTokenizerPath(t *testing.T) {
	src := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(src, TokenizerFileName), tokenizer.BytesJSON(), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(src, TokenizerConfigFileName), []byte(`{"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": {"content": "<|bos|>"}, "eos_token": "<|end|>"}`), 0o644))
	dir := filepath.Join(t.TempDir(), "m")
	cfg, err := InitModel(dir, InitOptions{Preset: "tiny", Tokenizer: src})
	require.NoError(t, err)
	require.Equal(t, []int{int(tokenizer.BytesEnd)}, cfg.EOSTokenID, "eos_token of the given tokenizer_config.json")
	raw, err := os.ReadFile(filepath.Join(dir, TokenizerConfigFileName))
	require.NoError(t, err)
	require.Contains(t, string(raw), `"<|end|>"`, "tokenizer_config.json is copied")
	require.NotContains(t, string(raw), "chat_template", "a given tokenizer_config.json is copied as is")
	m, err := OpenModelDir(dir)
	require.NoError(t, err)
	require.NoError(t, m.Close())
}

func TestInitModelChatTemplateOnlyForBytes(t *testing.T) {
	for _, tc := range []struct {
		name     string
		tokJSON  []byte
		template any
	}{
		{"bytes tokenizer.json", tokenizer.BytesJSON(), tokenizer.BytesChatTemplate},
		{"qwen3 tokenizer.json", tokenizertest.JSON(t, "qwen3"), nil},
	} {
		src := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(src, TokenizerFileName), tc.tokJSON, 0o644))
		dir := filepath.Join(t.TempDir(), "m")
		_, err := InitModel(dir, InitOptions{Preset: "tiny", Tokenizer: src})
		require.NoError(t, err, tc.name)
		raw, err := os.ReadFile(filepath.Join(dir, TokenizerConfigFileName))
		require.NoError(t, err)
		var cfg map[string]any
		require.NoError(t, json.Unmarshal(raw, &cfg))
		require.Equal(t, tc.template, cfg["chat_template"], tc.name)
	}
}

// TestInitWeightsDeterministic: the parallel draw gives the same values every time.
func TestInitWeightsDeterministic(t *testing.T) {
	c, err := PresetConfig("qwen3-tiny", tokenizer.BytesVocabSize)
	require.NoError(t, err)
	a, err := InitWeights(c, 3)
	require.NoError(t, err)
	b, err := InitWeights(c, 3)
	require.NoError(t, err)
	require.Equal(t, a, b)
	require.Len(t, a, len(c.Tensors()))
	for i, s := range c.Tensors() {
		require.Equal(t, s.Name, a[i].Name, "in the config's order")
	}
}

// TestSmolLM2Preset checks the smollm2-135m preset against the released model's
// config.json (HuggingFaceTB/SmolLM2-135M-Instruct: 30 layers, hidden 576, 9 heads,
// 3 KV heads, intermediate 1536, vocab 49152, rope_theta 100000, tied embeddings;
// 134,515,008 parameters) and InitOptions.Layers' shallower copy.
func TestSmolLM2Preset(t *testing.T) {
	c, err := PresetConfig("smollm2-135m", tokenizer.BytesVocabSize)
	require.NoError(t, err)
	require.Equal(t, "llama", c.ModelType)
	require.Equal(t, []int{30, 576, 9, 3, 64, 1536, 49152}, []int{c.NumHiddenLayers, c.HiddenSize, c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim, c.IntermediateSize, c.VocabSize})
	require.Equal(t, 100000.0, c.RopeTheta)
	require.True(t, c.TieWordEmbeddings)
	require.Equal(t, int64(134_515_008), c.NumParameters())
	_, err = PresetConfig("smollm2-135m", SmolLM2VocabSize+1)
	require.ErrorContains(t, err, "more than the preset's vocab_size 49152")

	dir := filepath.Join(t.TempDir(), "m")
	got, err := InitModel(dir, InitOptions{Preset: "tiny", Layers: 1})
	require.NoError(t, err)
	require.Equal(t, 1, got.NumHiddenLayers)
	back, err := LoadModelConfig(filepath.Join(dir, ConfigFileName))
	require.NoError(t, err)
	require.Equal(t, 1, back.NumHiddenLayers)
	_, err = InitModel(filepath.Join(t.TempDir(), "n"), InitOptions{Preset: "tiny", Layers: -1})
	require.ErrorContains(t, err, "layers -1")
}
