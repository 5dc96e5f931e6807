package xla

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/data"
	"github.com/hindsight-ai/hindsight/data/checkpoint"
	"github.com/hindsight-ai/hindsight/data/safetensors"
)

// TestLoRAMergeAndOpenAdapter: WriteMerged of a LoRA checkpoint writes the root's
// merged policy again (bit for bit, from base + adapter), durable and refusing to
// overwrite; Open of the adapter directory (base + unmerged adapters) scores
// as the merged model does.
func TestLoRAMergeAndOpenAdapter(t *testing.T) {
	backend := newTestBackend(t)
	dir := tinyModelDir(t)
	m, err := Open(dir, OpenOptions{})
	require.NoError(t, err)
	opts := loraOptions(nil)
	opts.Credit.KLBeta = 0
	opts.LoRA.BaseModel = dir
	tr, err := NewTrainer(backend, m, opts)
	require.NoError(t, err)
	trainSteps(t, tr, rolloutPool(3, 21), 2)
	randomizeB(t, m, 9, 0.05) // a visible update, beyond two small steps
	files, err := checkpoint.ModelFiles(dir)
	require.NoError(t, err)
	ck, err := tr.SaveCheckpoint(t.TempDir(), files, checkpoint.TrainerState{}, 1)
	require.NoError(t, err)

	out := filepath.Join(t.TempDir(), "merged")
	require.NoError(t, WriteMerged(backend, ck, "", out))
	for _, n := range []string{data.ConfigFileName, data.TokenizerFileName, safetensors.FileName} {
		_, err := os.Stat(filepath.Join(out, n))
		require.NoError(t, err, n)
	}
	ents, err := os.ReadDir(filepath.Dir(out))
	require.NoError(t, err)
	require.Len(t, ents, 1, "no temp directory left")
	worst := maxFileDiff(t, filepath.Join(ck, safetensors.FileName), filepath.Join(out, safetensors.FileName))
	require.Zero(t, worst, "merge writes the checkpoint's root")
	require.ErrorContains(t, WriteMerged(backend, ck, "", out), "exists")
	require.ErrorContains(t, WriteMerged(backend, dir, "", filepath.Join(t.TempDir(), "x")), "neither a PEFT adapter directory nor a checkpoint")

	tokens := testTokens(50, 265, 3)
	adapted, err := Open(filepath.Join(ck, checkpoint.AdapterDirName), OpenOptions{})
	require.NoError(t, err)
	require.NotNil(t, adapted.LoRA())
	merged, err := Open(out, OpenOptions{})
	require.NoError(t, err)
	require.Nil(t, merged.LoRA())
	base, err := Open(dir, OpenOptions{})
	require.NoError(t, err)
	got, want := fullLogProbs(t, adapted, tokens), fullLogProbs(t, merged, tokens)
	require.NotEqual(t, fullLogProbs(t, base, tokens), want)
	for i := range want {
		require.InDelta(t, want[i], got[i], 2e-5, "position %d", i+1)
	}
}

// maxFileDiff is the largest difference between the tensors of two safetensors
// files, which must hold the same names and shapes.
func maxFileDiff(t *testing.T, pa, pb string) float64 {
	t.Helper()
	a, err := safetensors.Open(pa)
	require.NoError(t, err)
	defer a.Close()
	b, err := safetensors.Open(pb)
	require.NoError(t, err)
	defer b.Close()
	require.ElementsMatch(t, a.Names(), b.Names())
	worst := 0.0
	for _, n := range a.Names() {
		va, err := a.Tensor(n)
		require.NoError(t, err)
		vb, err := b.Tensor(n)
		require.NoError(t, err)
		require.Equal(t, va.Shape, vb.Shape, n)
		fa, err := va.Float32s()
		require.NoError(t, err)
		fb, err := vb.Float32s()
		require.NoError(t, err)
		for i := range fa {
			worst = max(worst, float64(abs32(fa[i]-fb[i])))
		}
	}
	return worst
}
