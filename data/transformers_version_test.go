package data

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/stretchr/testify/require"
)

// TestTransformersVersionFor: config.json names the checked release, or for Qwen3
// the first release that has it; a transformers_version already there is kept.
func TestTransformersVersionFor(t *testing.T) {
	for _, tc := range []struct{ modelType, want string }{
		{"llama", TransformersVersion}, {"qwen2", TransformersVersion}, {"mistral", TransformersVersion}, {"qwen3", "4.51.0"},
	} {
		c, err := PresetConfig("tiny", tokenizer.BytesVocabSize)
		require.NoError(t, err)
		c.ModelType = tc.modelType
		c.Architectures = []string{architectures[tc.modelType]}
		delete(c.Extra, "transformers_version")
		path := filepath.Join(t.TempDir(), "config.json")
		require.NoError(t, WriteModelConfig(path, c))
		raw, err := os.ReadFile(path)
		require.NoError(t, err)
		var m map[string]any
		require.NoError(t, json.Unmarshal(raw, &m))
		require.Equal(t, tc.want, m["transformers_version"], tc.modelType)
	}
}
