package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hindsight-ai/hindsight/data/tokenizer/tokenizertest"
	"github.com/stretchr/testify/require"
)

func runTokenize(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = tokenizeCmd(args, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

// llama3Dir writes the test Llama 3 tokenizer.json into a temp directory.
func llama3Dir(t *testing.T) string { return tokenizertest.WriteDir(t, "llama3") }

func TestTokenizeBytes(t *testing.T) {
	code, out, errs := runTokenize(t, "hi<|end|>", "-tokenizer", "bytes")
	require.Equal(t, 0, code, errs)
	require.Equal(t, "[104,105,264]\n", out)

	code, out, _ = runTokenize(t, "hi<|end|>", "-tokenizer", "bytes", "-plain")
	require.Equal(t, 0, code)
	require.Equal(t, "[104,105,60,124,101,110,100,124,62]\n", out)

	code, out, _ = runTokenize(t, "", "-tokenizer", "bytes")
	require.Equal(t, 0, code)
	require.Equal(t, "[]\n", out)

	code, out, errs = runTokenize(t, "[104, 105, 264]", "-tokenizer", "bytes", "-decode")
	require.Equal(t, 0, code, errs)
	require.Equal(t, "hi<|end|>", out)
}

func TestTokenizeHF(t *testing.T) {
	dir := llama3Dir(t)
	in := "Hello <|eot_id|> world\n"
	code, ids, errs := runTokenize(t, in, "-tokenizer", dir)
	require.Equal(t, 0, code, errs)
	require.Contains(t, ids, "128009", "Encode maps <|eot_id|> to its special id")

	code, plain, errs := runTokenize(t, in, "-tokenizer", filepath.Join(dir, "tokenizer.json"), "-plain")
	require.Equal(t, 0, code, errs)
	require.NotContains(t, plain, "128009", "-plain never yields a special id")

	for _, enc := range []string{ids, plain} {
		code, text, errs := runTokenize(t, enc, "-tokenizer", dir, "-decode")
		require.Equal(t, 0, code, errs)
		require.Equal(t, in, text)
	}
}

// TestTokenizeText: -plain still matches Qwen's <think> (an added token not marked
// special), -text matches no added token; both decode back to the input.
func TestTokenizeText(t *testing.T) {
	dir := tokenizertest.WriteDir(t, "qwen3")
	in := "<think>x</think> <|im_end|>"
	code, plain, errs := runTokenize(t, in, "-tokenizer", dir, "-plain")
	require.Equal(t, 0, code, errs)
	require.Contains(t, plain, "151667", "-plain matches <think>")
	require.NotContains(t, plain, "151645", "-plain never yields <|im_end|>")
	code, text, errs := runTokenize(t, in, "-tokenizer", dir, "-text")
	require.Equal(t, 0, code, errs)
	for _, id := range []string{"151667", "151668", "151645"} {
		require.NotContains(t, text, id)
	}
	for _, enc := range []string{plain, text} {
		code, out, errs := runTokenize(t, enc, "-tokenizer", dir, "-decode")
		require.Equal(t, 0, code, errs)
		require.Equal(t, in, out)
	}
}

func TestTokenizeErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		stdin string
		args  []string
		code  int
		msg   string
	}{
		{"no tokenizer", "x", nil, 2, "hindsight tokenize: -tokenizer PATH|bytes is required"},
		{"extra argument", "x", []string{"-tokenizer", "bytes", "file"}, 2, `unexpected argument "file"`},
		{"plain with decode", "[]", []string{"-tokenizer", "bytes", "-decode", "-plain"}, 2, "give at most one of -plain, -text and -decode"},
		{"plain with text", "x", []string{"-tokenizer", "bytes", "-text", "-plain"}, 2, "give at most one of -plain, -text and -decode"},
		{"bad flag", "x", []string{"-nope"}, 2, "flag provided but not defined"},
		{"missing file", "x", []string{"-tokenizer", filepath.Join(t.TempDir(), "none.json")}, 1, "load tokenizer"},
		{"not json ids", "hello", []string{"-tokenizer", "bytes", "-decode"}, 1, "parse ids"},
		{"id out of range", "[1, 999]", []string{"-tokenizer", "bytes", "-decode"}, 1, "id 999 at position 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := runTokenize(t, tc.stdin, tc.args...)
			require.Equal(t, tc.code, code)
			require.Empty(t, out)
			require.Contains(t, errs, tc.msg)
		})
	}
	code, _, _ := runTokenize(t, "", "-h")
	require.Equal(t, 0, code)
}
