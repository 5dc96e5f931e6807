package data

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPresetConfig(t *testing.T) {
	tiny, err := PresetConfig("tiny", BytesVocabSize)
	require.NoError(t, err)
	require.LessOrEqual(t, tiny.NumParameters(), int64(500_000))
	require.Equal(t, int64(91_008), tiny.NumParameters())
	small, err := PresetConfig("small", BytesVocabSize)
	require.NoError(t, err)
	require.GreaterOrEqual(t, small.NumParameters(), int64(2_000_000))
	require.LessOrEqual(t, small.NumParameters(), int64(5_000_000))
	_, err = PresetConfig("huge", BytesVocabSize)
	require.ErrorContains(t, err, `preset "huge": want tiny or small`)
}

func TestInitModel(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "m")
	cfg, err := InitModel(dir, InitOptions{Preset: "tiny", Seed: 7})
	require.NoError(t, err)
	require.Equal(t, []int{int(BytesBOS)}, cfg.BOSTokenID)
	require.Equal(t, []int{int(BytesEOS)}, cfg.EOSTokenID)

	entries, err := os.ReadDir(root)
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temp directory is left beside the model")
	for _, name := range []string{ConfigFileName, SafetensorsFileName, TokenizerFileName, TokenizerConfigFileName, GenerationConfigFileName} {
		require.FileExists(t, filepath.Join(dir, name))
	}
	tokJSON, err := os.ReadFile(filepath.Join(dir, TokenizerFileName))
	require.NoError(t, err)
	require.True(t, bytes.Equal(BytesTokenizerJSON(), tokJSON))
	var tc map[string]any
	raw, err := os.ReadFile(filepath.Join(dir, TokenizerConfigFileName))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &tc))
	require.Equal(t, "PreTrainedTokenizerFast", tc["tokenizer_class"])
	require.Equal(t, "<|eos|>", tc["eos_token"])
	require.Equal(t, BytesChatTemplate, tc["chat_template"], "the byte tokenizer's chat format")
	var gc map[string]any
	raw, err = os.ReadFile(filepath.Join(dir, GenerationConfigFileName))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &gc))
	require.Equal(t, float64(BytesBOS), gc["bos_token_id"])
	require.Equal(t, float64(BytesEOS), gc["eos_token_id"])

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
	require.Equal(t, DtypeF32, emb.Dtype)
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
	w1, _ := os.ReadFile(filepath.Join(dir, SafetensorsFileName))
	w2, _ := os.ReadFile(filepath.Join(again, SafetensorsFileName))
	w3, _ := os.ReadFile(filepath.Join(other, SafetensorsFileName))
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
	require.Equal(t, DtypeBF16, v.Dtype)
	entries, err := os.ReadDir(filepath.Dir(dir))
	require.NoError(t, err)
	require.Len(t, entries, 1, "the replaced directory is gone")

	_, err = InitModel(filepath.Join(t.TempDir(), "x"), InitOptions{Preset: "tiny", Dtype: "float16"})
	require.ErrorContains(t, err, `dtype "float16": want float32 or bfloat16`)
}

func TestInitModelTokenizerPath(t *testing.T) {
	src := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(src, TokenizerFileName), BytesTokenizerJSON(), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(src, TokenizerConfigFileName), []byte(`{"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": {"content": "<|bos|>"}, "eos_token": "<|end|>"}`), 0o644))
	dir := filepath.Join(t.TempDir(), "m")
	cfg, err := InitModel(dir, InitOptions{Preset: "tiny", Tokenizer: src})
	require.NoError(t, err)
	require.Equal(t, []int{int(BytesEnd)}, cfg.EOSTokenID, "eos_token of the given tokenizer_config.json")
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
		{"bytes tokenizer.json", BytesTokenizerJSON(), BytesChatTemplate},
		{"qwen3 tokenizer.json", rawTokenizerJSON(t, "qwen3"), nil},
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
