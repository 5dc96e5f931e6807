package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/xla"
)

func TestGenerateCmd(t *testing.T) {
	t.Setenv("GOMLX_BACKEND", "")
	dir := t.TempDir()
	modelDir := filepath.Join(dir, "model")
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, run(t.Context(), []string{"init-model", "-out", modelDir, "-seed", "2"}, &stdout, &stderr), stderr.String())

	stdout.Reset()
	stderr.Reset()
	code := run(t.Context(), []string{"generate", "-model", modelDir, "-prompt", "hi", "-n", "2", "-max-new", "10",
		"-seed", "3", "-top-k", "40", "-stop", "none", "-json"}, &stdout, &stderr)
	require.Equal(t, 0, code, stderr.String())
	require.Contains(t, stderr.String(), "generated 2 samples, 20 tokens")
	var got []generateOutput
	for _, line := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		var o generateOutput
		require.NoError(t, json.Unmarshal([]byte(line), &o))
		got = append(got, o)
	}
	require.Len(t, got, 2)

	// Reference: the same prompt (BOS + "hi") and options through the package.
	m, err := xla.Open(modelDir, xla.OpenOptions{})
	require.NoError(t, err)
	b, err := xla.NewBackend(xla.DefaultBackend)
	require.NoError(t, err)
	s, err := xla.NewSampler(b, m, 0)
	require.NoError(t, err)
	p := []int32{tokenizer.BytesBOS, 'h', 'i'}
	want, err := s.Generate(t.Context(), [][]int32{p, p}, xla.SampleOptions{MaxNew: 10, Temperature: 1, TopK: 40, Seed: 3})
	require.NoError(t, err)
	for i, o := range got {
		require.Equal(t, 0, o.Prompt)
		require.Equal(t, i, o.Sample)
		require.Equal(t, 3, o.PromptTokens)
		require.Equal(t, want[i].Tokens, o.Tokens)
		require.Equal(t, want[i].LogProbs, o.LogProbs)
		require.Equal(t, want[i].PolicyLogProbs, o.PolicyLogProbs)
		require.Equal(t, xla.StopLength, o.Reason)
		text, err := tokenizer.NewBytes().Decode(o.Tokens)
		require.NoError(t, err)
		require.Equal(t, text, o.Text)
	}

	// -in: a text prompt and a token prompt, greedy, plain output.
	in := filepath.Join(dir, "prompts.jsonl")
	require.NoError(t, os.WriteFile(in, []byte("{\"prompt\": \"ok\"}\n\n{\"tokens\": [7, 8, 9]}\n"), 0o644))
	stdout.Reset()
	stderr.Reset()
	code = run(t.Context(), []string{"generate", "-model", modelDir, "-in", in, "-temperature", "0", "-max-new", "5"}, &stdout, &stderr)
	require.Equal(t, 0, code, stderr.String())
	require.Contains(t, stdout.String(), "=== prompt 0, sample 0: ")
	require.Contains(t, stdout.String(), "=== prompt 1, sample 0: ")

	for _, tc := range []struct {
		name, body, want string
	}{
		{"both", `{"prompt": "a", "tokens": [1]}`, "line 1: want exactly one of"},
		{"unknown field", `{"text": "a"}`, `line 1: json: unknown field "text"`},
		{"out of vocab", `{"tokens": [1, 99999]}`, "prompt 0: token 99999 at position 1"},
	} {
		bad := filepath.Join(dir, tc.name+".jsonl")
		require.NoError(t, os.WriteFile(bad, []byte(tc.body+"\n"), 0o644))
		stderr.Reset()
		require.Equal(t, 1, run(t.Context(), []string{"generate", "-model", modelDir, "-in", bad}, &stdout, &stderr), tc.name)
		require.Contains(t, stderr.String(), tc.want, tc.name)
	}
	require.Equal(t, 2, run(t.Context(), []string{"generate", "-model", modelDir}, &stdout, &stderr))
	require.Equal(t, 1, run(t.Context(), []string{"generate", "-model", modelDir, "-prompt", "x", "-stop", "a"}, &stdout, &stderr))
	require.Contains(t, stderr.String(), `-stop: "a" is not a token id`)
}
