package checkpoint

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/hindsight-ai/hindsight/data"
	"github.com/stretchr/testify/require"
)

// chatTemplate is a ChatML chat template, as transformers writes it.
const chatTemplate = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}" +
	"{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"

// TestModelFiles: a checkpoint copies every non-weight file at the top of the model
// directory, links followed, and no file a loader would read as weights, no PEFT
// adapter config, nothing hidden, none of the names a checkpoint writes itself and no
// subdirectory. Two directories: transformers 5's, with the chat template in
// chat_template.jinja, and transformers 4's, with it inside tokenizer_config.json.
func TestModelFiles(t *testing.T) {
	kept := map[string]string{
		data.ConfigFileName:           `{"model_type": "llama"}`,
		data.TokenizerFileName:        `{"model": {}}`,
		data.GenerationConfigFileName: `{"eos_token_id": 2}`,
		"special_tokens_map.json":     `{"eos_token": "<|im_end|>"}`,
		"added_tokens.json":           `{"<|im_end|>": 2}`,
		"tokenizer.model":             "sentencepiece",
		"vocab.json":                  `{"a": 0}`,
		"merges.txt":                  "a b\n",
		"README.md":                   "# a model card\n",
		"LICENSE":                     "Apache-2.0\n",
	}
	dropped := []string{
		"model.safetensors", "model-00001-of-00002.safetensors", "model.safetensors.index.json",
		"pytorch_model.bin", "pytorch_model.bin.index.json", "training_args.bin", "consolidated.00.pth",
		"optimizer.pt", "model.gguf", "tf_model.h5", "flax_model.msgpack", "model.onnx", "rust_model.ot",
		"MODEL.SAFETENSORS", "adapter_config.json", "adapter_model.safetensors", TrainerStateFileName,
		ManifestFileName, ".gitattributes",
	}
	for _, tc := range []struct {
		name  string
		files map[string]string // what the template adds
	}{
		{"transformers 5: chat_template.jinja", map[string]string{
			"chat_template.jinja":        chatTemplate,
			data.TokenizerConfigFileName: `{"tokenizer_class": "GPT2Tokenizer"}`}},
		{"transformers 4: chat_template in tokenizer_config.json", map[string]string{
			data.TokenizerConfigFileName: `{"tokenizer_class": "GPT2Tokenizer", "chat_template": "` + chatTemplate + `"}`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			want := map[string][]byte{}
			for n, b := range kept {
				want[n] = []byte(b)
			}
			for n, b := range tc.files {
				want[n] = []byte(b)
			}
			for n, b := range want {
				if n == data.TokenizerFileName {
					continue
				}
				require.NoError(t, os.WriteFile(filepath.Join(dir, n), b, 0o644))
			}
			// A Hugging Face cache snapshot: the files are links to blobs.
			blob := filepath.Join(t.TempDir(), "blob")
			require.NoError(t, os.WriteFile(blob, want[data.TokenizerFileName], 0o644))
			require.NoError(t, os.Symlink(blob, filepath.Join(dir, data.TokenizerFileName)))
			for _, n := range dropped {
				require.NoError(t, os.WriteFile(filepath.Join(dir, n), []byte("weights"), 0o644))
			}
			require.NoError(t, os.MkdirAll(filepath.Join(dir, "original"), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "original", "params.json"), []byte("{}"), 0o644))
			require.NoError(t, os.Symlink("original", filepath.Join(dir, LatestLinkName)))

			got, err := ModelFiles(dir)
			require.NoError(t, err)
			require.Equal(t, slices.Sorted(maps.Keys(want)), slices.Sorted(maps.Keys(got)))
			require.Equal(t, want, got)
		})
	}
}

// TestModelFilesNeedsConfig: a directory without config.json is no model directory.
func TestModelFilesNeedsConfig(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, data.TokenizerFileName), []byte("{}"), 0o644))
	_, err := ModelFiles(dir)
	require.ErrorIs(t, err, os.ErrNotExist)
	require.ErrorContains(t, err, data.ConfigFileName)
}

// TestIsWeightFile: what loaders glob as weights, and tokenizer files that only look
// alike (tokenizer.model is SentencePiece, not weights).
func TestIsWeightFile(t *testing.T) {
	for name, want := range map[string]bool{
		"model.safetensors": true, "adapter/adapter_model.safetensors": true, "pytorch_model.bin": true,
		"model.safetensors.index.json": true, "model.gguf": true, "consolidated.00.pth": true,
		"tokenizer.model": false, "tokenizer.json": false, "chat_template.jinja": false, "config.json": false,
		"vocab.txt": false, "spiece.model": false,
	} {
		require.Equal(t, want, IsWeightFile(name), name)
	}
}
