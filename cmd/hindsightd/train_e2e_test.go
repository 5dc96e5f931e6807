package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"

	hindsightv1 "github.com/hindsight-ai/hindsight/api/hindsight/v1"
	"github.com/hindsight-ai/hindsight/data/checkpoint"
	"github.com/hindsight-ai/hindsight/data/creditfile"
	"github.com/hindsight-ai/hindsight/data/safetensors"
	"github.com/hindsight-ai/hindsight/internal/fsutil"
	"github.com/hindsight-ai/hindsight/internal/fusetest"
	"github.com/hindsight-ai/hindsight/rollout"
)

// trainConfig writes a config for a small, quick training run on data.
func trainConfig(t *testing.T, dataDir string) string { return trainConfigSteps(t, dataDir, 256, 2) }

// trainConfigSteps is trainConfig with a step every budget trainable tokens and a
// checkpoint every every steps.
func trainConfigSteps(t *testing.T, dataDir string, budget, every int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "train.yaml")
	cfg := fmt.Sprintf(`data_dir: %s
listen: 127.0.0.1:0
train:
  token_budget: %d
  idle_flush: 700ms
  seed: 7
  optimizer:
    lr: 0.001
    warmup_steps: 1
  checkpoint:
    every_steps: %d
    keep: 2
`, dataDir, budget, every)
	require.NoError(t, os.WriteFile(path, []byte(cfg), 0o644))
	return path
}

func statusOf(t *testing.T, addr string) *hindsightv1.Status {
	t.Helper()
	out, stderr, code := runCLI(t, "status", "-json", "-addr", addr)
	require.Equal(t, 0, code, stderr)
	st := &hindsightv1.Status{}
	require.NoError(t, protojson.Unmarshal([]byte(out), st), out)
	return st
}

// waitTrained polls status until n rollouts are trained and nothing waits in the spool.
func waitTrained(t *testing.T, p *proc, addr string, n int64) *hindsightv1.Status {
	t.Helper()
	var st *hindsightv1.Status
	p.waitFor(t, 10*time.Minute, fmt.Sprintf("%d rollouts trained and the spool empty", n), func() bool {
		st = statusOf(t, addr)
		time.Sleep(200 * time.Millisecond) // one status query at a time, not a busy loop of them
		return st.GetTraining().GetRolloutsTrained() >= n && st.GetSpool().GetIncoming() == 0 && st.GetSpool().GetProcessing() == 0
	})
	return st
}

func synthInto(t *testing.T, dir string, n, perFile int) {
	t.Helper()
	_, stderr, code := runCLI(t, "synth", "-out", dir, "-n", fmt.Sprint(n), "-tokens", "256", "-per-file", fmt.Sprint(perFile), "-seed", "3", "-prefix", "tr")
	require.Equal(t, 0, code, stderr)
}

// stagedRollouts synthesizes n rollouts, perFile to a file, once, and returns a
// the files' names and a function that copies the same files into a data directory's
// spool/incoming/, so runs that must see identical input (a clean run and a crashed
// one) get it.
func stagedRollouts(t *testing.T, n, perFile int) ([]string, func(dataDir string)) {
	t.Helper()
	stage := t.TempDir()
	synthInto(t, stage, n, perFile)
	names := listDir(t, stage)
	return names, func(dataDir string) {
		in := filepath.Join(dataDir, "spool", "incoming")
		require.NoError(t, os.MkdirAll(in, 0o755))
		for _, n := range names {
			b, err := os.ReadFile(filepath.Join(stage, n))
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(in, n), b, 0o644))
		}
	}
}

// spoolWithRollouts makes a data directory whose incoming/ holds n synthetic
// rollouts, perFile to a file, and a config for it with the given train: lines
// (indented by two spaces); it returns the data directory and the config's path.
func spoolWithRollouts(t *testing.T, n, perFile int, train string) (dataDir, cfgPath string) {
	t.Helper()
	dataDir = t.TempDir()
	incoming := filepath.Join(dataDir, "spool", "incoming")
	require.NoError(t, os.MkdirAll(incoming, 0o755))
	synthInto(t, incoming, n, perFile)
	cfgPath = filepath.Join(t.TempDir(), "train.yaml")
	cfg := fmt.Sprintf("data_dir: %s\nlisten: 127.0.0.1:0\ntrain:\n%s", dataDir, train)
	require.NoError(t, os.WriteFile(cfgPath, []byte(cfg), 0o644))
	return dataDir, cfgPath
}

func TestTrainEndToEnd(t *testing.T) {
	dataDir := t.TempDir()
	incoming := filepath.Join(dataDir, "spool", "incoming")
	require.NoError(t, os.MkdirAll(incoming, 0o755))
	synthInto(t, incoming, 8, 2)

	p := startDaemon(t, "-config", trainConfig(t, dataDir))
	addr := p.waitReady(t)
	st := waitTrained(t, p, addr, 8)
	require.Positive(t, st.Training.Step)
	require.NotEmpty(t, st.Backend.GetName())
	out, _, code := runCLI(t, "status", "-addr", addr)
	require.Equal(t, 0, code)
	require.Contains(t, out, "optimizer step")

	p.stop(t, 60*time.Second)

	require.Len(t, listDir(t, filepath.Join(dataDir, "spool", "done")), 4)
	credits := listDir(t, filepath.Join(dataDir, "outputs"))
	require.Len(t, credits, 4)
	rows := 0
	for _, n := range credits {
		rs, err := creditfile.Read(filepath.Join(dataDir, "outputs", n))
		require.NoError(t, err)
		for _, r := range rs {
			require.Len(t, r.Student, len(r.Tokens))
			require.Positive(t, r.Step)
		}
		rows += len(rs)
	}
	require.Equal(t, 8, rows)
	dir, state, err := checkpoint.Latest(filepath.Join(dataDir, "checkpoints"), zerolog.Nop())
	require.NoError(t, err)
	require.NotEmpty(t, dir)
	require.EqualValues(t, 8, state.TrainedTotal)
	first := map[string]bool{}
	for _, id := range state.Trained {
		first[id] = true
	}

	// A second run trains four more rollouts. Its checkpoints list only rollouts of
	// files not yet finished when they were written: none of the first run's.
	_, stderr, code := runCLI(t, "synth", "-out", incoming, "-n", "4", "-tokens", "256", "-per-file", "2", "-seed", "4", "-prefix", "second")
	require.Equal(t, 0, code, stderr)
	p = startDaemon(t, "-config", trainConfig(t, dataDir))
	addr = p.waitReady(t)
	waitTrained(t, p, addr, 12)
	p.stop(t, 60*time.Second)
	_, state, err = checkpoint.Latest(filepath.Join(dataDir, "checkpoints"), zerolog.Nop())
	require.NoError(t, err)
	require.EqualValues(t, 12, state.TrainedTotal)
	require.LessOrEqual(t, len(state.Trained), 4)
	for _, id := range state.Trained {
		require.False(t, first[id], "%s was trained and its file finished in the first run", id)
	}
}

// TestSIGKILLWhileTraining kills the daemon at random moments while it trains,
// restarts it, and checks that every rollout is in the final checkpoint exactly once
// and that the weights equal those of a run that was never killed.
func TestSIGKILLWhileTraining(t *testing.T) { sigkillWhileTraining(t, crashRun{}) }

// TestSIGKILLWhileTrainingLoRA is TestSIGKILLWhileTraining for a LoRA run: the
// merged root and the adapter equal the crash-free run's.
func TestSIGKILLWhileTrainingLoRA(t *testing.T) {
	sigkillWhileTraining(t, crashRun{extra: "  lora:\n    rank: 4\n    alpha: 8\n    targets: [q_proj, v_proj, down_proj]\n"})
}

// TestSIGKILLWhileTrainingFallback is TestSIGKILLWhileTraining with renameat2's
// RENAME_NOREPLACE refused (EPERM, injected at the system call seam by a binary built
// with the fsfault tag, as TestMain builds them): every claim, checkpoint, credit publish and done/ move goes
// through the check-then-rename fallback.
func TestSIGKILLWhileTrainingFallback(t *testing.T) {
	sigkillWhileTraining(t, crashRun{env: []string{fsutil.FaultEnv + "=EPERM"}, fallback: true})
}

// TestSIGKILLWhileTrainingBindfs is TestSIGKILLWhileTraining with both data
// directories on bindfs, a real FUSE file system without RENAME_NOREPLACE.
func TestSIGKILLWhileTrainingBindfs(t *testing.T) {
	sigkillWhileTraining(t, crashRun{dir: fusetest.Bindfs, fallback: true})
}

// crashRun varies the SIGKILL test.
type crashRun struct {
	extra    string                  // appended to the train: section of the config
	env      []string                // added to the daemon's environment
	dir      func(testing.TB) string // makes a data directory; nil: t.TempDir
	fallback bool                    // the daemon must report the check-then-rename fallback
}

// sigkillWhileTraining runs the SIGKILL test as cr says.
func sigkillWhileTraining(t *testing.T, cr crashRun) {
	extra := cr.extra
	if cr.dir == nil {
		cr.dir = func(tb testing.TB) string { return tb.TempDir() }
	}
	start := func(args ...string) *proc {
		return startDaemonBin(t, binDir, append([]string{"NOTIFY_SOCKET="}, cr.env...), args...)
	}
	_, seed := stagedRollouts(t, 12, 2)
	cfg := func(dataDir string) string {
		path := trainConfigSteps(t, dataDir, 128, 1)
		if extra != "" {
			f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
			require.NoError(t, err)
			_, err = f.WriteString(extra)
			require.NoError(t, err)
			require.NoError(t, f.Close())
		}
		return path
	}
	run := func(dataDir string) {
		p := start("-config", cfg(dataDir))
		addr := p.waitReady(t)
		waitTrained(t, p, addr, 12)
		st := statusOf(t, addr).GetStorage()
		require.NotNil(t, st, "status reports the storage features")
		require.NotEmpty(t, st.FsType)
		require.Equal(t, st.RenameNoreplace, st.RenameMode == "renameat2", "%v", st)
		p.stop(t, 60*time.Second)
		requireRenameMode(t, p.log(), cr.fallback)
		if cr.fallback {
			require.Equal(t, "check-then-rename", st.RenameMode, "status says what the log says")
		}
	}

	ref := cr.dir(t)
	seed(ref)
	run(ref)

	crash := cr.dir(t)
	seed(crash)
	rng := rand.New(rand.NewPCG(3, 4))
	const kills = 10
	midTraining := 0
	for k := 0; k < kills; k++ {
		p := start("-config", cfg(crash))
		p.waitReady(t)
		// The kill point comes from this run's progress, not from a delay: after its
		// first or second checkpoint (or once nothing is left to train: a kill then
		// tests a restart with nothing to do), a random moment into what follows: the
		// next step, its staging, checkpoint, publish and finish.
		want := 1 + rng.IntN(2)
		p.waitFor(t, 10*time.Minute, fmt.Sprintf("checkpoint %d of this run, or an empty spool", want), func() bool {
			return p.count("checkpoint") >= want || spoolEmpty(t, filepath.Join(crash, "spool"))
		})
		time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
		p.wait(t, 10*time.Second)
		if _, st, err := checkpoint.Latest(filepath.Join(crash, "checkpoints"), zerolog.Nop()); err == nil && st != nil && st.TrainedTotal < 12 {
			midTraining++
		}
	}
	t.Logf("%d of %d kills left a checkpoint with part of the rollouts trained", midTraining, kills)
	require.Positive(t, midTraining, "some kill must land in the middle of training, or this test proves nothing")
	run(crash)
	requireNoTemps(t, crash)
	requireLikeCleanRun(t, ref, crash, 12, extra != "")
}

// requireLikeCleanRun checks that the data directory got, whatever stopped it on the
// way, what the clean run's (ref) got from the same n rollouts: the journal accepts
// each once, the final checkpoint counts n trained at the same step, one credit row
// each, and the weights (and the adapter, with lora) equal ref's: no rollout was
// trained twice or left out.
func requireLikeCleanRun(t *testing.T, ref, got string, n int, lora bool) {
	t.Helper()
	journal, _ := journalEntries(t, got)
	accepted := map[string]int{}
	for _, e := range journal {
		for _, r := range e.Rows {
			if r.Accepted && e.Op == rollout.OpDecide {
				accepted[r.ID]++
			}
		}
	}
	require.Len(t, accepted, n)
	for id, c := range accepted {
		require.Equal(t, 1, c, "journal accepts %s once", id)
	}
	refDir, refState, err := checkpoint.Latest(filepath.Join(ref, "checkpoints"), zerolog.Nop())
	require.NoError(t, err)
	gotDir, gotState, err := checkpoint.Latest(filepath.Join(got, "checkpoints"), zerolog.Nop())
	require.NoError(t, err)
	require.EqualValues(t, n, gotState.TrainedTotal)
	require.Equal(t, refState.Step, gotState.Step)
	require.Equal(t, refState.TrainedTotal, gotState.TrainedTotal)
	credited := map[string]int{}
	for _, name := range listDir(t, filepath.Join(got, "outputs")) {
		rs, err := creditfile.Read(filepath.Join(got, "outputs", name))
		require.NoError(t, err)
		for _, r := range rs {
			credited[r.RolloutID]++
		}
	}
	for id := range accepted {
		require.Equal(t, 1, credited[id], "one credit row for %s", id)
	}
	files := []string{safetensors.FileName}
	if lora {
		files = append(files, checkpoint.AdapterModelFileName)
	}
	for _, f := range files {
		worst := maxTensorDiff(t, filepath.Join(refDir, f), filepath.Join(gotDir, f))
		t.Logf("final step %d; %s: largest difference from the clean run %.3g", gotState.Step, f, worst)
		require.Less(t, worst, 1e-5)
	}
}

// maxTensorDiff is the largest difference between two safetensors files with the
// same tensors.
func maxTensorDiff(t *testing.T, pa, pb string) float64 {
	a, err := safetensors.Open(pa)
	require.NoError(t, err)
	defer a.Close()
	b, err := safetensors.Open(pb)
	require.NoError(t, err)
	defer b.Close()
	na, nb := a.Names(), b.Names()
	sort.Strings(na)
	sort.Strings(nb)
	require.Equal(t, na, nb)
	worst := 0.0
	for _, n := range na {
		va, err := a.Tensor(n)
		require.NoError(t, err)
		vb, err := b.Tensor(n)
		require.NoError(t, err)
		fa, err := va.Float32s()
		require.NoError(t, err)
		fb, err := vb.Float32s()
		require.NoError(t, err)
		for i := range fa {
			worst = math.Max(worst, math.Abs(float64(fa[i]-fb[i])))
		}
	}
	return worst
}

// TestBatchBounds: with a token budget no batch reaches and no idle flush, steps
// still come every max_batch_rollouts rollouts, or every max_batch_tokens tokens in
// all (here less than one rollout: each rollout is a batch of its own).
func TestBatchBounds(t *testing.T) {
	for _, tc := range []struct {
		bound string
		steps int64
	}{
		{"max_batch_rollouts: 2", 4},
		{"max_batch_tokens: 200", 8},
	} {
		t.Run(tc.bound, func(t *testing.T) {
			_, path := spoolWithRollouts(t, 8, 2, "  token_budget: 1000000\n  idle_flush: 0s\n  "+tc.bound+"\n  checkpoint:\n    every_steps: 1\n")
			p := startDaemon(t, "-config", path)
			addr := p.waitReady(t)
			st := waitTrained(t, p, addr, 8)
			require.Equal(t, tc.steps, st.GetTraining().GetStep())
			p.stop(t, 60*time.Second)
		})
	}
}

// TestPolicyLagSkips: rollouts whose policy_version lags the step by more than
// max_policy_lag are skipped, counted and logged durably in state/skipped.txt; once
// their files are finished, the next start drops them from the log.
func TestPolicyLagSkips(t *testing.T) {
	dataDir, path := spoolWithRollouts(t, 12, 2,
		"  token_budget: 1000000\n  max_batch_rollouts: 1\n  max_policy_lag: 1\n  idle_flush: 0s\n  checkpoint:\n    every_steps: 1\n")
	skipLog := filepath.Join(dataDir, "state", "skipped.txt")

	p := startDaemon(t, "-config", path)
	addr := p.waitReady(t)
	var st *hindsightv1.Status
	p.waitFor(t, 10*time.Minute, "12 rollouts trained or skipped", func() bool {
		st = statusOf(t, addr)
		time.Sleep(200 * time.Millisecond)
		tr := st.GetTraining()
		return tr.GetRolloutsTrained()+tr.GetRolloutsSkipped() == 12 && st.GetSpool().GetProcessing() == 0
	})
	skipped := st.GetTraining().GetRolloutsSkipped()
	require.Positive(t, skipped, "with a step per rollout, some policy_version must lag by more than 1")
	p.stop(t, 60*time.Second)
	b, err := os.ReadFile(skipLog)
	require.NoError(t, err)
	require.Len(t, strings.Fields(string(b)), int(skipped))

	p = startDaemon(t, "-config", path)
	p.waitReady(t)
	p.stop(t, 60*time.Second)
	b, err = os.ReadFile(skipLog)
	require.NoError(t, err)
	require.Empty(t, string(b), "every file is finished: no skip is needed again")
}

// TestTrainExactBackprop: the daemon trains with train.backprop: exact.
func TestTrainExactBackprop(t *testing.T) {
	_, path := spoolWithRollouts(t, 4, 2, "  token_budget: 256\n  chunk: 64\n  backprop: exact\n  idle_flush: 500ms\n")
	p := startDaemon(t, "-config", path)
	addr := p.waitReady(t)
	st := waitTrained(t, p, addr, 4)
	require.Positive(t, st.GetTraining().GetUpdates())
	p.stop(t, 60*time.Second)
	require.Contains(t, p.log(), `"backprop":"exact"`)
}
