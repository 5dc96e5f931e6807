package collect

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/data/checkpoint"
	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/rollout"
	"github.com/hindsight-ai/hindsight/xla"
)

// readRollouts reads every rollout of the .arrow files in dir, validated against the
// model's vocabulary and tokenizer.
func readRollouts(t *testing.T, dir string, tok tokenizer.Tokenizer) []*rollout.Rollout {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.arrow"))
	require.NoError(t, err)
	var out []*rollout.Rollout
	for _, p := range paths {
		r, err := rollout.OpenReader(p, rollout.ReadOptions{VocabSize: 512, Tokenizer: tok.Fingerprint()})
		require.NoError(t, err)
		for r.Next() {
			require.Empty(t, r.Problems(), "%s row %d", p, r.Row())
			out = append(out, r.Rollout().Clone())
		}
		require.NoError(t, r.Err())
		require.NoError(t, r.Close())
	}
	return out
}

func TestCollectorWritesSpoolFilesAndFollowsLatest(t *testing.T) {
	modelDir, _, _, tok := tinyPolicy(t)
	root := t.TempDir()
	ckRoot, out := filepath.Join(root, "checkpoints"), filepath.Join(root, "incoming")
	opts := Options{ModelDir: modelDir, Checkpoints: ckRoot, Out: out, RunID: "run1", TasksPerFile: 2, Files: 1,
		Episode: EpisodeOptions{Group: 3, MaxTurnTokens: 16, Temperature: 1, Seed: 1}, Log: zerolog.Nop()}
	var progress bytes.Buffer
	opts.Progress = &progress
	tot, err := Run(t.Context(), opts)
	require.NoError(t, err)
	require.Equal(t, Totals{Files: 1, Rollouts: 6, Tokens: tot.Tokens, Success: tot.Success, Reloads: 1}, tot)
	require.Contains(t, progress.String(), "run1-000000.arrow  6 rollouts")
	rs := readRollouts(t, out, tok)
	require.Len(t, rs, 6)
	ids := map[string]bool{}
	groups := map[string]int{}
	for _, r := range rs {
		ids[r.ID] = true
		groups[r.TaskID]++
		require.Equal(t, int64(0), r.PolicyVersion)
		require.True(t, r.HasReward)
	}
	require.Len(t, ids, 6)
	require.Equal(t, map[string]int{"train-0000": 3, "train-0001": 3}, groups)
	left, err := filepath.Glob(filepath.Join(out, "*.tmp"))
	require.NoError(t, err)
	require.Empty(t, left)

	// A checkpoint appears: the next file is sampled from it, with its step as the
	// policy version; the tasks go on where the first run stopped.
	b, err := xla.NewBackend(xla.DefaultBackend)
	require.NoError(t, err)
	m, err := xla.Open(modelDir, xla.OpenOptions{})
	require.NoError(t, err)
	tr, err := xla.NewTrainer(b, m, xla.TrainerOptions{Budget: 64})
	require.NoError(t, err)
	files, err := checkpoint.ModelFiles(modelDir)
	require.NoError(t, err)
	ck, err := tr.Checkpoint(files, checkpoint.TrainerState{CreatedAt: time.Now()})
	require.NoError(t, err)
	ck.Step, ck.State.Step = 5, 5 // as if five steps had been taken
	_, err = checkpoint.Write(ckRoot, ck, 2)
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Join(root, "done"), 0o755))
	require.NoError(t, os.Rename(filepath.Join(out, "run1-000000.arrow"), filepath.Join(root, "done", "run1-000000.arrow")))
	opts.StartTask = 2
	tot, err = Run(t.Context(), opts)
	require.NoError(t, err)
	require.Equal(t, int64(5), tot.PolicyVersion)
	rs = readRollouts(t, out, tok)
	require.Len(t, rs, 6)
	for _, r := range rs {
		require.Equal(t, int64(5), r.PolicyVersion)
		require.Contains(t, []string{"train-0002", "train-0003"}, r.TaskID)
	}
}

func TestCollectorWaitsForTheSpool(t *testing.T) {
	modelDir, _, _, _ := tinyPolicy(t)
	out := t.TempDir()
	// One unclaimed file already waits: with MaxPending 1 nothing is written until
	// ctx ends, which is a clean stop.
	require.NoError(t, os.WriteFile(filepath.Join(out, "waiting.arrow"), nil, 0o644))
	// The run stops once it says it waits (not after a delay, which a loaded machine
	// could spend loading the policy).
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var progress bytes.Buffer
	waiting := cancelOn{w: &progress, text: "waiting for the daemon to claim", cancel: cancel}
	tot, err := Run(ctx, Options{ModelDir: modelDir, Out: out, MaxPending: 1, Files: 1, Log: zerolog.Nop(), Progress: &waiting})
	require.NoError(t, err)
	require.Zero(t, tot.Files)
	require.Contains(t, progress.String(), "waiting for the daemon to claim: 1 unclaimed files")
	_, err = Run(t.Context(), Options{Out: out, MaxPending: 5, Log: zerolog.Nop()})
	require.ErrorContains(t, err, "no model directory")
}

// cancelOn passes writes to w and calls cancel once what was written holds text.
type cancelOn struct {
	mu     sync.Mutex
	w      io.Writer
	seen   strings.Builder
	text   string
	cancel func()
}

func (c *cancelOn) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen.Write(b)
	if strings.Contains(c.seen.String(), c.text) {
		c.cancel()
	}
	return c.w.Write(b)
}
