package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/data/checkpoint"
	"github.com/hindsight-ai/hindsight/eval"
)

// TestLoopWithConfigFile runs hindsightd -loop -loop-steps 1 with a config file that
// sets a credit option and its own eval suite but nothing about steps or checkpoints
// (issue 39 item 9): the loop's own settings (a checkpoint after every step) still
// apply under the file, the file's suite replaces the loop's, and the run stops by
// itself once step 1 is evaluated.
func TestLoopWithConfigFile(t *testing.T) {
	dataDir := t.TempDir()
	cfgPath := filepath.Join(t.TempDir(), "topk.yaml")
	require.NoError(t, os.WriteFile(cfgPath, []byte(`credit:
  distill:
    mode: topk
eval:
  suites:
    - {name: small, kind: toolworld, tasks: 4, max_turn_tokens: 16}
`), 0o644))

	// -print-config shows the layering without running anything.
	out, err := exec.Command(filepath.Join(binDir, "hindsightd"), "-loop", "-config", cfgPath, "-print-config").Output()
	require.NoError(t, err)
	require.Contains(t, string(out), "mode: topk")
	require.Contains(t, string(out), "every_steps: 1\n")
	require.Contains(t, string(out), "token_budget: 1024\n")
	require.Contains(t, string(out), "name: small")
	require.NotContains(t, string(out), "name: heldout")

	// The deadline only catches a run that never stops (the bug: still training after
	// 420 s); the test is decided by the exit code and what is on disk.
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "hindsightd"), "-loop", "-loop-steps", "1", "-loop-group", "4",
		"-config", cfgPath, "-data-dir", dataDir, "-listen", "127.0.0.1:0")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET=")
	require.NoError(t, cmd.Run(), "stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	require.Contains(t, stdout.String(), "step 1 evaluated: stopping (-loop-steps 1)")

	ts, err := checkpoint.Verify(filepath.Join(dataDir, "checkpoints", "step-000001"))
	require.NoError(t, err)
	require.Equal(t, int64(1), ts.Step)
	f, err := os.Open(filepath.Join(dataDir, "evals.jsonl"))
	require.NoError(t, err)
	defer f.Close()
	var suites []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r eval.Result
		require.NoError(t, json.Unmarshal(sc.Bytes(), &r))
		require.Empty(t, r.Error)
		if r.Step == 1 {
			suites = append(suites, r.Suite)
		}
	}
	require.Equal(t, []string{"small"}, suites)
}

// TestLoopRefusesConfigThatNeverStops: a config that turns off what -loop-steps needs
// (checkpoints, or every eval suite) is refused at start with exit 2 and a line
// saying which key, before anything is written.
func TestLoopRefusesConfigThatNeverStops(t *testing.T) {
	for name, tc := range map[string]struct{ yaml, want string }{
		"no checkpoints": {"train:\n  checkpoint: {every_steps: 0, every: 0s}\n", "turns checkpoints off (train.checkpoint.every_steps and every are 0)"},
		"no suites":      {"eval:\n  suites: []\n", "the config has no eval.suites"},
	} {
		t.Run(name, func(t *testing.T) {
			dataDir := filepath.Join(t.TempDir(), "data")
			cfgPath := filepath.Join(t.TempDir(), "c.yaml")
			require.NoError(t, os.WriteFile(cfgPath, []byte(tc.yaml), 0o644))
			cmd := exec.Command(filepath.Join(binDir, "hindsightd"), "-loop", "-loop-steps", "2", "-config", cfgPath, "-data-dir", dataDir)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			require.Error(t, err)
			require.Equal(t, 2, cmd.ProcessState.ExitCode())
			require.Contains(t, stderr.String(), "-loop-steps 2 stops once the checkpoint of step 2 is evaluated")
			require.Contains(t, stderr.String(), tc.want)
			require.NoDirExists(t, dataDir)

			// Without -loop-steps the same config runs (nothing waits for an eval).
			out, err := exec.Command(filepath.Join(binDir, "hindsightd"), "-loop", "-config", cfgPath, "-print-config").CombinedOutput()
			require.NoError(t, err, "%s", out)
		})
	}
}
