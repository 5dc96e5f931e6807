package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	hindsightv1 "github.com/hindsight-ai/hindsight/api/hindsight/v1"
	"github.com/hindsight-ai/hindsight/data/checkpoint"
	"github.com/hindsight-ai/hindsight/eval"
	"github.com/hindsight-ai/hindsight/internal/testwait"
	"github.com/hindsight-ai/hindsight/rollout"
)

// TestLoopEndToEnd runs the inner loop in the real binary on pure Go: the collector
// samples task-world rollouts with the newest checkpoint into the spool, the daemon
// trains and checkpoints after every step, the collector reloads the checkpoint, and
// every checkpoint is evaluated: evals.jsonl, status and /metrics show it.
func TestLoopEndToEnd(t *testing.T) {
	dataDir := t.TempDir()
	p, addr := startConfigured(t, dataDir, `train:
  token_budget: 384
  idle_flush: 500ms
  seed: 3
  optimizer: {lr: 0.001, warmup_steps: 1}
  checkpoint: {every_steps: 1, keep: 20}
eval:
  budget: 0
  suites:
    - {name: heldout, kind: toolworld, tasks: 6, max_turn_tokens: 16}
    - {name: ext, kind: command, command: ["sh", "-c", "echo \"{\\\"score\\\": $HINDSIGHT_STEP}\""]}
`, "-loop", "-loop-group", "4")

	// Wait for the evals of at least two checkpoints.
	var st *hindsightv1.Status
	deadline := time.Now().Add(testwait.Guard(15 * time.Minute))
	for {
		st = statusOf(t, addr)
		// ...and for a rollout file the collector sampled from a checkpoint (on a fast
		// machine the evals of step 2 come before the collector's first reload).
		if len(st.GetEvals()) == 2 && st.GetEvals()[0].GetStep() >= 2 && st.GetEvals()[1].GetStep() >= 2 &&
			spoolPolicyVersion(t, dataDir, false) >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no eval of step 2 in time; status evals %v\n%s", st.GetEvals(), p.log())
		}
		select {
		case <-p.done:
			t.Fatalf("hindsightd exited: %v\n%s", p.err, p.log())
		case <-time.After(500 * time.Millisecond):
		}
	}
	byName := map[string]*hindsightv1.EvalResult{}
	for _, e := range st.GetEvals() {
		byName[e.GetSuite()] = e
	}
	hw := byName["heldout"]
	require.Empty(t, hw.GetError())
	require.Equal(t, float64(6), hw.GetMetrics()["episodes"])
	require.Contains(t, hw.GetMetrics(), "success")
	require.Equal(t, float64(byName["ext"].GetStep()), byName["ext"].GetMetrics()["score"])
	require.Len(t, st.GetBestEvals(), 2)

	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Contains(t, string(body), `hindsight_eval{metric="success",suite="heldout"}`)
	require.Contains(t, string(body), `hindsight_eval{metric="score",suite="ext"}`)
	require.Contains(t, string(body), `hindsight_eval_step{suite="heldout"}`)
	out, _, code := runCLI(t, "status", "-addr", addr)
	require.Equal(t, 0, code)
	require.Regexp(t, `(?m)^eval heldout +step \d+: success `, out)

	p.stop(t, 2*time.Minute)

	// Every checkpoint on disk has its evals, one line per suite.
	evals := map[string]map[int64]eval.Result{}
	f, err := os.Open(filepath.Join(dataDir, "evals.jsonl"))
	require.NoError(t, err)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r eval.Result
		require.NoError(t, json.Unmarshal(sc.Bytes(), &r))
		if evals[r.Suite] == nil {
			evals[r.Suite] = map[int64]eval.Result{}
		}
		_, dup := evals[r.Suite][r.Step]
		require.False(t, dup, "suite %s evaluated step %d twice", r.Suite, r.Step)
		evals[r.Suite][r.Step] = r
	}
	f.Close()
	steps, err := filepath.Glob(filepath.Join(dataDir, "checkpoints", "step-*"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(steps), 2)
	// A command eval still running when the stop's grace ran out (a loaded machine) is
	// recorded as stopped at shutdown, and the daemon says it stopped it; any other
	// error fails.
	stopped := strings.Contains(p.log(), "stopping command evals still running")
	for _, dir := range steps {
		ts, err := checkpoint.Verify(dir)
		require.NoError(t, err)
		for _, suite := range []string{"heldout", "ext"} {
			r, ok := evals[suite][ts.Step]
			require.True(t, ok, "no %s eval of %s", suite, dir)
			if suite == "ext" && stopped && strings.HasSuffix(r.Error, eval.ErrStoppedAtShutdown.Error()) {
				t.Logf("the ext eval of %s was stopped at shutdown", dir)
			} else {
				require.Empty(t, r.Error, "%s eval of %s", suite, dir)
			}
			require.Equal(t, dir, r.Checkpoint)
		}
	}

	// The collector reloaded: later rollouts were sampled from a checkpoint (they may
	// still wait in the spool).
	require.GreaterOrEqual(t, spoolPolicyVersion(t, dataDir, true), int64(1), "no rollout sampled from a checkpoint")
}

// spoolPolicyVersion returns the highest policy version of the rollouts in the spool's
// files, checking each rollout. With strict false (polling a running daemon) a file that
// moves between the listing and the open is passed over.
func spoolPolicyVersion(t *testing.T, dataDir string, strict bool) int64 {
	t.Helper()
	var maxVersion int64
	files, err := filepath.Glob(filepath.Join(dataDir, "spool", "*", "*.arrow"))
	require.NoError(t, err)
	if strict {
		require.NotEmpty(t, files)
	}
	for _, path := range files {
		r, err := rollout.OpenReader(path, rollout.ReadOptions{})
		if err != nil && !strict && errors.Is(err, fs.ErrNotExist) {
			continue
		}
		require.NoError(t, err)
		for r.Next() {
			require.Empty(t, r.Problems())
			require.True(t, strings.HasPrefix(r.Rollout().TaskID, "train-"))
			maxVersion = max(maxVersion, r.Rollout().PolicyVersion)
		}
		require.NoError(t, r.Close())
	}
	return maxVersion
}
