// Package tokenizertest gives other packages' tests the real tokenizers committed as
// fixtures under data/tokenizer/testdata/tokenizers (Qwen3, Llama 3, Mistral Nemo,
// DeepSeek V3, the byte tokenizer), found from this file's own location so a test in
// any folder names a fixture by its name alone.
package tokenizertest

import (
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/data/tokenizer"
)

// Dir returns the folder of the fixture tokenizers.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "testdata", "tokenizers")
}

// JSON returns the tokenizer.json bytes of fixture name ("qwen3", "llama3", …),
// gunzipped when the fixture is stored as tokenizer.json.gz.
func JSON(t testing.TB, name string) []byte {
	t.Helper()
	dir := filepath.Join(Dir(), name)
	if raw, err := os.ReadFile(filepath.Join(dir, "tokenizer.json")); err == nil {
		return raw
	}
	f, err := os.Open(filepath.Join(dir, "tokenizer.json.gz"))
	require.NoError(t, err)
	defer f.Close()
	zr, err := gzip.NewReader(f)
	require.NoError(t, err)
	raw, err := io.ReadAll(zr)
	require.NoError(t, err)
	return raw
}

// Load parses fixture name.
func Load(t testing.TB, name string) tokenizer.Tokenizer {
	t.Helper()
	tok, err := tokenizer.ParseJSON(JSON(t, name))
	require.NoError(t, err)
	return tok
}

// WriteDir writes fixture name's tokenizer.json into a new temp folder and returns
// the folder, for code that loads a tokenizer from a model directory.
func WriteDir(t testing.TB, name string) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tokenizer.json"), JSON(t, name), 0o644))
	return dir
}
