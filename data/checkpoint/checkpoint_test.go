package checkpoint

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hindsight-ai/hindsight/data/safetensors"
	"github.com/hindsight-ai/hindsight/internal/testwait"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

func testCheckpoint(step int64, n int) *Contents {
	vals := make([]float32, n)
	for i := range vals {
		vals[i] = float32(step) + float32(i)/float32(n)
	}
	return &Contents{
		Step:    step,
		Files:   map[string][]byte{"config.json": []byte(`{"model_type":"llama"}`)},
		Tensors: map[string][]safetensors.NamedTensor{"model.safetensors": {{Name: "w", Dtype: safetensors.DtypeF32, Shape: []int{n}, Values: vals}}},
		State:   TrainerState{CodeVersion: "test", Trained: []string{fmt.Sprintf("r-%d", step)}},
	}
}

func TestCheckpointWriteVerifyPrune(t *testing.T) {
	root := t.TempDir()
	for step := int64(1); step <= 4; step++ {
		dir, err := Write(root, testCheckpoint(step, 64), 2)
		require.NoError(t, err)
		require.Equal(t, filepath.Join(root, StepDirName(step)), dir)
	}
	steps, err := Steps(root)
	require.NoError(t, err)
	require.Equal(t, []int64{3, 4}, steps, "the last 2 are kept")
	dir, st, err := Latest(root, zerolog.Nop())
	require.NoError(t, err)
	require.Equal(t, filepath.Join(root, "step-000004"), dir)
	require.Equal(t, int64(4), st.Step)
	require.Equal(t, []string{"r-4"}, st.Trained)
	target, err := os.Readlink(filepath.Join(root, LatestLinkName))
	require.NoError(t, err)
	require.Equal(t, "step-000004", target, "latest is a relative link, so the tree can move")
	f, err := safetensors.Open(filepath.Join(dir, "model.safetensors"))
	require.NoError(t, err)
	defer f.Close()
	w, err := f.Tensor("w")
	require.NoError(t, err)
	vals, err := w.Float32s()
	require.NoError(t, err)
	require.Equal(t, float32(4), vals[0])

	_, err = Write(root, testCheckpoint(4, 8), 2)
	require.ErrorContains(t, err, "already exists")

	// No checkpoint yet is not an error.
	dir, st, err = Latest(filepath.Join(root, "none"), zerolog.Nop())
	require.NoError(t, err)
	require.Empty(t, dir)
	require.Nil(t, st)
}

func TestCheckpointCorruptLatestFallsBack(t *testing.T) {
	for name, corrupt := range map[string]func(dir string){
		"flipped weight byte": func(dir string) {
			p := filepath.Join(dir, "model.safetensors")
			b, _ := os.ReadFile(p)
			b[len(b)-1] ^= 0xff
			os.WriteFile(p, b, 0o644)
		},
		"truncated state":  func(dir string) { os.Truncate(filepath.Join(dir, TrainerStateFileName), 3) },
		"missing manifest": func(dir string) { os.Remove(filepath.Join(dir, ManifestFileName)) },
		"missing file":     func(dir string) { os.Remove(filepath.Join(dir, "config.json")) },
	} {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			for step := int64(1); step <= 3; step++ {
				_, err := Write(root, testCheckpoint(step, 32), 0)
				require.NoError(t, err)
			}
			corrupt(filepath.Join(root, "step-000003"))
			var logs bytes.Buffer
			dir, st, err := Latest(root, zerolog.New(&logs))
			require.NoError(t, err)
			require.Equal(t, filepath.Join(root, "step-000002"), dir)
			require.Equal(t, int64(2), st.Step)
			require.Contains(t, logs.String(), `"level":"error"`)
			require.Contains(t, logs.String(), "step-000003")
		})
	}
	root := t.TempDir()
	_, err := Write(root, testCheckpoint(1, 8), 0)
	require.NoError(t, err)
	os.Remove(filepath.Join(root, "step-000001", ManifestFileName))
	_, _, err = Latest(root, zerolog.Nop())
	require.ErrorContains(t, err, "none of the 1 checkpoints")
}

// TestCheckpointSIGKILL kills a real process (this test binary re-executed) while it
// writes checkpoints in a loop, many times, and checks that whatever is on disk then
// loads as a complete checkpoint or not at all. Each kill point is chosen from the
// child's own progress, never from a delay alone: the child says when it starts and
// finishes each write, and the parent kills after a random number of finished writes
// (one at least in the first round, so some checkpoint surely completes), a random
// moment after the next write started.
func TestCheckpointSIGKILL(t *testing.T) {
	if os.Getenv("HINDSIGHT_CKPT_CHILD") != "" {
		t.Skip("child")
	}
	root := t.TempDir()
	rng := rand.New(rand.NewPCG(3, 4))
	lastGood := int64(0)
	midWrite := 0
	for round := 0; round < 12; round++ {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestCheckpointChild$", "-test.timeout", testwait.Guard(10*time.Minute).String())
		cmd.Env = append(os.Environ(), "HINDSIGHT_CKPT_CHILD="+root, "HINDSIGHT_CKPT_FROM="+strconv.FormatInt(lastGood+1, 10))
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		finished := rng.IntN(3) // whole writes before the one the kill lands in
		if round == 0 {
			finished = 1
		}
		lines := bufio.NewScanner(out)
		writing := false
		for !writing && lines.Scan() {
			switch {
			case strings.HasPrefix(lines.Text(), "wrote "):
				finished--
			case strings.HasPrefix(lines.Text(), "writing ") && finished <= 0:
				writing = true
			}
		}
		require.True(t, writing, "round %d: the child stopped before its write: %v", round, lines.Err())
		time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		io.Copy(io.Discard, out) // what the child wrote before it died; EOF once it is gone
		cmd.Wait()
		if tmps, _ := filepath.Glob(filepath.Join(root, ".tmp-*")); len(tmps) > 0 {
			midWrite++
		}

		dir, st, err := Latest(root, zerolog.Nop())
		require.NoError(t, err, "round %d", round)
		if dir == "" {
			continue
		}
		require.GreaterOrEqual(t, st.Step, lastGood, "a later kill never loses a completed checkpoint")
		f, err := safetensors.Open(filepath.Join(dir, "model.safetensors"))
		require.NoError(t, err)
		w, err := f.Tensor("w")
		require.NoError(t, err)
		vals, err := w.Float32s()
		require.NoError(t, err)
		require.Equal(t, float32(st.Step), vals[0], "weights belong to the step the state names")
		f.Close()
		lastGood = st.Step
	}
	require.Positive(t, lastGood, "some checkpoint completed")
	t.Logf("last complete step after 12 kills: %d; %d kills left a write half done", lastGood, midWrite)
}

// TestCheckpointChild is the body of the process TestCheckpointSIGKILL kills. It
// says on stdout when each write starts and when it is durable.
func TestCheckpointChild(t *testing.T) {
	root := os.Getenv("HINDSIGHT_CKPT_CHILD")
	if root == "" {
		t.Skip("only run as TestCheckpointSIGKILL's child")
	}
	from, _ := strconv.ParseInt(os.Getenv("HINDSIGHT_CKPT_FROM"), 10, 64)
	for step := from; ; step++ {
		fmt.Printf("writing %d\n", step)
		if _, err := Write(root, testCheckpoint(step, 1<<18), 3); err != nil {
			t.Fatal(err)
		}
		fmt.Printf("wrote %d\n", step)
	}
}

func TestCheckpointStaleLatestIsRepaired(t *testing.T) {
	root := t.TempDir()
	for step := int64(1); step <= 2; step++ {
		_, err := Write(root, testCheckpoint(step, 8), 0)
		require.NoError(t, err)
	}
	// A crash after step 2's rename, before the link moved; and a leftover temp dir.
	require.NoError(t, pointLatest(root, "step-000001"))
	require.NoError(t, os.Mkdir(filepath.Join(root, ".tmp-step-000003-123"), 0o755))
	dir, st, err := Latest(root, zerolog.Nop())
	require.NoError(t, err)
	require.Equal(t, int64(2), st.Step)
	require.Equal(t, filepath.Join(root, "step-000002"), dir)
	target, err := os.Readlink(filepath.Join(root, LatestLinkName))
	require.NoError(t, err)
	require.Equal(t, "step-000002", target)
	require.NoDirExists(t, filepath.Join(root, ".tmp-step-000003-123"), "an interrupted write is cleaned up")
}
