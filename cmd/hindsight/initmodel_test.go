package main

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/data"
	"github.com/hindsight-ai/hindsight/data/tokenizer"
)

func TestInitModelCmd(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tiny")
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"init-model", "-out", dir, "-preset", "tiny", "-seed", "3"}, &stdout, &stderr)
	require.Equal(t, 0, code, stderr.String())
	require.Equal(t, dir+": tiny llama, 91008 parameters (2 layers, hidden 64, 4 heads / 2 KV heads, vocab 265), float32, seed 3\n", stdout.String())

	m, err := data.OpenModelDir(dir)
	require.NoError(t, err)
	require.Equal(t, tokenizer.BytesFingerprint, m.Tokenizer.Fingerprint())
	require.NoError(t, m.Close())

	stdout.Reset()
	stderr.Reset()
	code = run(t.Context(), []string{"init-model", "-out", dir, "-preset", "small"}, &stdout, &stderr)
	require.Equal(t, 1, code)
	require.Contains(t, stderr.String(), "is not empty")

	stderr.Reset()
	code = run(t.Context(), []string{"init-model", "-out", dir, "-preset", "small", "-dtype", "bfloat16", "-force"}, &stdout, &stderr)
	require.Equal(t, 0, code, stderr.String())

	for _, args := range [][]string{
		{"init-model"},
		{"init-model", "-out", dir, "-preset", "huge"},
		{"init-model", "-out", dir, "-dtype", "float64"},
		{"init-model", "-out", dir, "extra"},
	} {
		stderr.Reset()
		require.Equal(t, 2, run(t.Context(), args, &stdout, &stderr), "%v", args)
	}
}
