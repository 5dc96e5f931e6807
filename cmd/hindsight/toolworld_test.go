package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/rollout"
)

func runToolworld(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = toolworldCmd(args, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

func TestToolworldPlay(t *testing.T) {
	for _, tc := range []struct {
		name  string
		stdin string
		want  []string
	}{
		{"solved after an error", "ls tmp\ncat tmp/fox\ncat tmp/fox.txt\nanswer 10\n", []string{
			"user: Give the number in the only file in tmp/.",
			"> fox.txt\n",
			"> cat: tmp/fox: No such file or directory (error)\n",
			"> 10\n",
			"reward 1 (answered; 3 calls, 1 failed;",
		}},
		{"wrong answer", "answer 11\n", []string{"reward 0 (answered; 0 calls, 0 failed;"}},
		{"unknown tool, then stdin ends", "rm -rf /\n", []string{"> rm: unknown tool (error)\n", "reward 0 (no answer; 1 calls, 1 failed;"}},
	} {
		code, out, errs := runToolworld(t, tc.stdin, "-play", "-split", "heldout", "-task", "3")
		require.Equal(t, 0, code, errs)
		for _, w := range tc.want {
			require.Contains(t, out, w, tc.name)
		}
	}
}

func TestToolworldAgentsWriteRollouts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "demos.arrow")
	code, out, errs := runToolworld(t, "", "-play", "-agent", "oracle", "-split", "validation", "-n", "6", "-out", path)
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "oracle on validation[0:6]: 6/6 solved")
	r, err := rollout.OpenReader(path, rollout.ReadOptions{VocabSize: tokenizer.BytesVocabSize, Tokenizer: tokenizer.BytesFingerprint})
	require.NoError(t, err)
	defer r.Close()
	n := 0
	for r.Next() {
		require.Empty(t, r.Problems())
		ro := r.Rollout()
		require.Equal(t, float32(1), ro.Reward)
		require.True(t, strings.HasPrefix(ro.ID, ro.TaskID+"-oracle-"), ro.ID)
		n++
	}
	require.NoError(t, r.Err())
	require.Equal(t, 6, n)

	code, out, errs = runToolworld(t, "", "-play", "-agent", "random", "-n", "20")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "random on heldout[0:20]: 0/20 solved")
}

func TestToolworldListShow(t *testing.T) {
	code, out, errs := runToolworld(t, "", "-list", "-split", "validation")
	require.Equal(t, 0, code, errs)
	require.Len(t, strings.Split(strings.TrimSpace(out), "\n"), 200)
	code, out, _ = runToolworld(t, "", "-list", "-split", "train")
	require.Equal(t, 0, code)
	require.Len(t, strings.Split(strings.TrimSpace(out), "\n"), 20)

	code, out, errs = runToolworld(t, "", "-show", "-task", "3")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "task heldout-0003 (read, 2 calls)")
	require.Contains(t, out, "solution:\n  ls tmp\n  cat tmp/fox.txt\n  answer 10\n")
}

func TestToolworldErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-list", "-play"}, 2, "hindsight toolworld: give one of -list, -show and -play"},
		{[]string{}, 2, "hindsight toolworld: give one of -list, -show and -play"},
		{[]string{"-show", "-split", "dev"}, 1, `unknown split "dev"`},
		{[]string{"-show", "-task", "999"}, 1, "index 999 outside split heldout of 250 tasks"},
		{[]string{"-play", "-agent", "smart"}, 2, `-agent "smart": want oracle, noisy or random`},
		{[]string{"-play", "-tokenizer", "/nonexistent"}, 1, "load tokenizer"},
	} {
		code, _, errs := runToolworld(t, "", tc.args...)
		require.Equal(t, tc.code, code, "%v", tc.args)
		require.Contains(t, errs, tc.want, "%v", tc.args)
	}
}
