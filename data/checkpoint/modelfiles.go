package checkpoint

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hindsight-ai/hindsight/data"
)

// weightSuffixes end the names of files that some loader reads as weights: the
// formats of transformers (safetensors, PyTorch, TensorFlow, Flax), of the original
// releases (consolidated.00.pth), llama.cpp, ONNX, NumPy and pickles. A checkpoint's
// weights are its own model.safetensors; another weights file beside it would be
// loaded with it (vLLM and SGLang glob *.safetensors) or instead of it.
var weightSuffixes = []string{
	".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".ggml", ".h5", ".keras", ".msgpack",
	".onnx", ".onnx_data", ".npz", ".npy", ".pkl", ".pickle", ".ot", ".tflite", ".mlmodel",
	".index.json", // the shard index of any of them: model.safetensors.index.json, pytorch_model.bin.index.json
}

// notCopied are non-weight files a model directory may hold that a checkpoint must
// not copy: a PEFT adapter's config (transformers would load the directory as an
// adapter) and the names a checkpoint writes itself.
var notCopied = []string{filepath.Base(AdapterConfigFileName), ManifestFileName, TrainerStateFileName,
	LatestLinkName, TrainerDirName, AdapterDirName}

// IsWeightFile reports whether a loader would read a file named name as weights
// (weightSuffixes).
func IsWeightFile(name string) bool {
	name = strings.ToLower(name)
	for _, s := range weightSuffixes {
		if strings.HasSuffix(name, s) {
			return true
		}
	}
	return false
}

// ModelFiles reads the files of model directory dir that a checkpoint of its policy
// copies beside the new weights: every regular file at the top level (symbolic links
// followed, as in a Hugging Face cache snapshot) that is not weights (IsWeightFile),
// not hidden, and not one of notCopied. So the checkpoint keeps config.json
// (required), the tokenizer (tokenizer.json, tokenizer.model, vocab.json,
// merges.txt, …), its config and special-token maps (tokenizer_config.json,
// special_tokens_map.json, added_tokens.json), the chat template
// (chat_template.jinja, where transformers ≥ 4.43 keeps it), the generation config,
// and the model card and licence. Subdirectories are not copied.
func ModelFiles(dir string) (map[string][]byte, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("model files: %w", err)
	}
	files := map[string][]byte{}
	for _, e := range entries {
		n := e.Name()
		if strings.HasPrefix(n, ".") || IsWeightFile(n) || slices.Contains(notCopied, n) {
			continue
		}
		p := filepath.Join(dir, n)
		st, err := os.Stat(p) // follows a link
		if err != nil {
			return nil, fmt.Errorf("model files: %w", err)
		}
		if !st.Mode().IsRegular() {
			continue
		}
		if files[n], err = os.ReadFile(p); err != nil {
			return nil, fmt.Errorf("model files: %w", err)
		}
	}
	if _, ok := files[data.ConfigFileName]; !ok {
		return nil, fmt.Errorf("model files: %s: %w", filepath.Join(dir, data.ConfigFileName), os.ErrNotExist)
	}
	return files, nil
}
