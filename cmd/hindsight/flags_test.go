package main

import (
	"bytes"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/rollout"
)

// TestFlagsAfterArguments runs the commands in the order the README, docs/cli.md and
// the usage lines show them, flags after the files (issue 39 item 4), and `--`
// ending the flags.
func TestFlagsAfterArguments(t *testing.T) {
	credit := writeInspectCredit(t)
	out := filepath.Join(t.TempDir(), "credit.html")
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, run(t.Context(), []string{"inspect", credit, "-html", out}, &stdout, &stderr), stderr.String())
	require.Contains(t, stdout.String(), "wrote "+out+": 1 rollouts")
	require.FileExists(t, out)

	paths, err := rollout.WriteSynth(t.TempDir(), rollout.SynthOptions{N: 2, Tokens: 256, PerFile: 2})
	require.NoError(t, err)
	stdout.Reset()
	stderr.Reset()
	require.Equal(t, 0, run(t.Context(), []string{"validate", paths[0], "-v"}, &stdout, &stderr), stderr.String())
	require.Equal(t, paths[0]+": ok (2 rollouts)\n", stdout.String())

	// Flags between files, a value flag after them.
	stdout.Reset()
	require.Equal(t, 0, run(t.Context(), []string{"validate", paths[0], "-v", paths[0], "-vocab", "512"}, &stdout, &stderr), stderr.String())
	require.Equal(t, 2, strings.Count(stdout.String(), ": ok (2 rollouts)"))

	// After --, -v is a file name.
	stdout.Reset()
	stderr.Reset()
	dir := t.TempDir()
	t.Chdir(dir)
	require.Equal(t, 1, run(t.Context(), []string{"validate", "--", "-v"}, &stdout, &stderr))
	require.True(t, strings.HasPrefix(stdout.String(), "-v: "), stdout.String())
	require.Contains(t, stderr.String(), "1 of 1 files invalid")
}

// TestEveryCommandBadFlagOneLine: every command of the usage text parses its flags
// through the one helper, so a wrong flag anywhere on the line is one line on stderr
// naming it, and exit 2.
func TestEveryCommandBadFlagOneLine(t *testing.T) {
	var cmds []string
	for _, m := range regexp.MustCompile(`(?m)^  ([a-z][a-z-]+)`).FindAllStringSubmatch(usage, -1) {
		if m[1] != "version" {
			cmds = append(cmds, m[1])
		}
	}
	require.Len(t, cmds, 16)
	for _, cmd := range cmds {
		if cmd == "bench-gpu" {
			continue // runs bench/gpu's own program: TestBenchGPULauncher checks its bad flag, through this command
		}
		for _, args := range [][]string{{cmd, "-no-such-flag"}, {cmd, "some-file", "-no-such-flag"}} {
			var stdout, stderr bytes.Buffer
			require.Equal(t, 2, run(t.Context(), args, &stdout, &stderr), "%v", args)
			require.Empty(t, stdout.String(), "%v", args)
			require.Equal(t, "hindsight "+cmd+": flag provided but not defined: -no-such-flag (hindsight "+cmd+" -h lists the flags)\n",
				stderr.String(), "%v", args)
		}
	}
}
