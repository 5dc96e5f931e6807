package data

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hindsight-ai/hindsight/data/safetensors"
	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/data/tokenizer/tokenizertest"
	"github.com/stretchr/testify/require"
)

// tinyModel writes a tiny model directory and returns it.
func tinyModel(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "model")
	_, err := InitModel(dir, InitOptions{Preset: "tiny", Seed: 1})
	require.NoError(t, err)
	return dir
}

// readWeights returns a copy of every tensor of dir's model.safetensors.
func readWeights(t *testing.T, dir string) []safetensors.NamedTensor {
	t.Helper()
	f, err := safetensors.Open(filepath.Join(dir, safetensors.FileName))
	require.NoError(t, err)
	var tensors []safetensors.NamedTensor
	for _, n := range f.Names() {
		v, err := f.Tensor(n)
		require.NoError(t, err)
		tensors = append(tensors, safetensors.NamedTensor{Name: n, Dtype: v.Dtype, Shape: v.Shape, Raw: append([]byte(nil), v.Data...)})
	}
	require.NoError(t, f.Close())
	return tensors
}

// rewriteWeights replaces dir's model.safetensors with edit applied to its tensors.
func rewriteWeights(t *testing.T, dir string, edit func([]safetensors.NamedTensor) []safetensors.NamedTensor) {
	t.Helper()
	tensors := readWeights(t, dir)
	require.NoError(t, safetensors.Write(filepath.Join(dir, safetensors.FileName), edit(tensors), map[string]string{"format": "pt"}))
}

func TestOpenModelDir(t *testing.T) {
	dir := tinyModel(t)
	m, err := OpenModelDir(dir)
	require.NoError(t, err)
	require.Equal(t, "llama", m.Config.ModelType)
	require.Equal(t, tokenizer.BytesFingerprint, m.Tokenizer.Fingerprint())
	require.Equal(t, m.Config.VocabSize, m.Tokenizer.VocabSize())
	require.Len(t, m.Weights.Names(), len(m.Config.Tensors()))
	require.NoError(t, m.Close())
}

// TestOpenModelDirWith: a tokenizer already loaded is used when the directory's
// tokenizer.json has its fingerprint, and refused, naming both, when not.
func TestOpenModelDirWith(t *testing.T) {
	dir := tinyModel(t)
	m, err := OpenModelDirWith(dir, tokenizer.NewBytes())
	require.NoError(t, err)
	require.Equal(t, tokenizer.BytesFingerprint, m.Tokenizer.Fingerprint())
	require.NoError(t, m.Close())

	qwen := tokenizertest.Load(t, "qwen3")
	_, err = OpenModelDirWith(dir, qwen)
	require.ErrorContains(t, err, "tokenizer.json: fingerprint bytes-v1, want "+qwen.Fingerprint())
}

func TestOpenModelDirErrors(t *testing.T) {
	drop := func(name string) func([]safetensors.NamedTensor) []safetensors.NamedTensor {
		return func(ts []safetensors.NamedTensor) []safetensors.NamedTensor {
			var out []safetensors.NamedTensor
			for _, x := range ts {
				if x.Name != name {
					out = append(out, x)
				}
			}
			return out
		}
	}
	tests := []struct {
		name string
		edit func(t *testing.T, dir string)
		want []string
	}{
		{"missing tensor", func(t *testing.T, dir string) {
			rewriteWeights(t, dir, drop("model.layers.1.mlp.up_proj.weight"))
		}, []string{"tensor model.layers.1.mlp.up_proj.weight: missing (want shape [128, 64]; weights: model.safetensors)"}},
		{"unexpected tensor", func(t *testing.T, dir string) {
			rewriteWeights(t, dir, func(ts []safetensors.NamedTensor) []safetensors.NamedTensor {
				return append(ts, safetensors.NamedTensor{Name: "lm_head.weight", Dtype: safetensors.DtypeF32, Shape: []int{265, 64}, Values: make([]float32, 265*64)},
					safetensors.NamedTensor{Name: "model.layers.2.input_layernorm.weight", Dtype: safetensors.DtypeF32, Shape: []int{64}, Values: make([]float32, 64)})
			})
		}, []string{"tensor lm_head.weight: unexpected for llama with 2 layers (tie_word_embeddings is true: the embedding is the lm_head)",
			"tensor model.layers.2.input_layernorm.weight: unexpected"}},
		{"mis-shaped tensor", func(t *testing.T, dir string) {
			rewriteWeights(t, dir, func(ts []safetensors.NamedTensor) []safetensors.NamedTensor {
				for i := range ts {
					if ts[i].Name == "model.layers.0.self_attn.k_proj.weight" {
						ts[i].Shape = []int{64, 32}
					}
				}
				return ts
			})
		}, []string{"tensor model.layers.0.self_attn.k_proj.weight: shape [64, 32], want [32, 64]"}},
		{"int tensor", func(t *testing.T, dir string) {
			rewriteWeights(t, dir, func(ts []safetensors.NamedTensor) []safetensors.NamedTensor {
				for i := range ts {
					if ts[i].Name == "model.norm.weight" {
						ts[i].Dtype = safetensors.DtypeI32
					}
				}
				return ts
			})
		}, []string{"tensor model.norm.weight: dtype I32, want F32, BF16 or F16"}},
		{"vocab too small", func(t *testing.T, dir string) {
			c, err := LoadModelConfig(filepath.Join(dir, ConfigFileName))
			require.NoError(t, err)
			c.VocabSize = 200
			c.EOSTokenID, c.BOSTokenID = nil, nil
			require.NoError(t, WriteModelConfig(filepath.Join(dir, ConfigFileName), c))
			rewriteWeights(t, dir, func(ts []safetensors.NamedTensor) []safetensors.NamedTensor {
				ts[0] = safetensors.NamedTensor{Name: "model.embed_tokens.weight", Dtype: safetensors.DtypeF32, Shape: []int{200, 64}, Values: make([]float32, 200*64)}
				return ts
			})
		}, []string{"config.json: vocab_size: 200 is smaller than the tokenizer's 265 ids"}},
		{"bad config", func(t *testing.T, dir string) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, ConfigFileName), []byte(`{"model_type": "bert"}`), 0o644))
		}, []string{"config.json: model_type: \"bert\" is not supported"}},
		{"no tokenizer", func(t *testing.T, dir string) {
			require.NoError(t, os.Remove(filepath.Join(dir, TokenizerFileName)))
		}, []string{"tokenizer.json"}},
		{"no weights", func(t *testing.T, dir string) {
			require.NoError(t, os.Remove(filepath.Join(dir, safetensors.FileName)))
		}, []string{"neither model.safetensors nor model.safetensors.index.json exists"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := tinyModel(t)
			tt.edit(t, dir)
			_, err := OpenModelDir(dir)
			require.Error(t, err)
			require.True(t, strings.HasPrefix(err.Error(), "open model dir "+dir+": "), err.Error())
			for _, w := range tt.want {
				require.ErrorContains(t, err, w)
			}
		})
	}
}

func TestOpenModelDirSharded(t *testing.T) {
	dir := tinyModel(t)
	tensors := readWeights(t, dir)
	require.NoError(t, os.Remove(filepath.Join(dir, safetensors.FileName)))
	idx, err := safetensors.WriteSharded(dir, tensors, map[string]string{"format": "pt"}, 100_000)
	require.NoError(t, err)
	require.Greater(t, len(idx.Files), 1)
	m, err := OpenModelDir(dir)
	require.NoError(t, err)
	require.Len(t, m.Weights.Files(), len(idx.Files))
	require.NoError(t, m.Close())
}
