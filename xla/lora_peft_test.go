package xla

import (
	"encoding/json"
	"flag"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/data/checkpoint"
	"github.com/hindsight-ai/hindsight/data/safetensors"
)

var updatePEFTAdapter = flag.Bool("update-peft-adapter", false,
	"rewrite ../testdata/lora/adapter (then run scripts/peft_goldens.py to remake ../testdata/lora/peft_goldens.json)")

// The committed tiny adapter and what PEFT makes of it (scripts/peft_goldens.py).
const (
	peftTestdata   = "../testdata/lora"
	peftAdapterDir = peftTestdata + "/adapter"
	// peftBase is the base, relative to the adapter directory as its
	// adapter_config.json says: the committed transformers checkpoint.
	peftBase = "../../transformers/checkpoints/step-000004"
)

// peftGoldens is what scripts/peft_goldens.py writes.
type peftGoldens struct {
	PEFT         string `json:"peft"`
	Transformers string `json:"transformers"`
	Torch        string `json:"torch"`
	Loaded       int    `json:"loaded_adapter_tensors"` // lora_A/lora_B tensors PEFT loaded from the file
	Sequences    []struct {
		Tokens   []int32    `json:"tokens"`
		LogProbs []*float64 `json:"logprobs"` // [t] = log p(tokens[t] | tokens[:t]); [0] null
	} `json:"sequences"`
	// Merged summarises merge_and_unload()'s weights of every adapted projection:
	// Σ, Σx² and the values at Stride·i.
	Merged map[string]struct {
		Sum     float64   `json:"sum"`
		SumSq   float64   `json:"sumsq"`
		Stride  int       `json:"stride"`
		Samples []float64 `json:"samples"`
	} `json:"merged"`
}

// TestPEFTGoldens: the committed adapter (hindsight's own checkpoint writer made it:
// adapter/ of a LoRA checkpoint of the committed transformers checkpoint) opened as
// a policy (Open of the adapter directory) gives the per-token log-probs that
// peft 0.13.2 + transformers 4.46.3 give for PeftModel.from_pretrained(base, adapter),
// and its merged weights are merge_and_unload()'s.
func TestPEFTGoldens(t *testing.T) {
	if *updatePEFTAdapter {
		writePEFTAdapter(t)
	}
	raw, err := os.ReadFile(filepath.Join(peftTestdata, "peft_goldens.json"))
	require.NoError(t, err, "run: /work/venvs/tf/bin/python scripts/peft_goldens.py (from the repository root)")
	var g peftGoldens
	require.NoError(t, json.Unmarshal(raw, &g))
	require.Equal(t, "0.13.2", g.PEFT)
	m, err := Open(peftAdapterDir, OpenOptions{})
	require.NoError(t, err)
	require.NotNil(t, m.LoRA())
	require.Equal(t, len(trainables(m)), g.Loaded, "PEFT loaded every adapter tensor of the file")

	s, err := NewScorer(newTestBackend(t), m, ScorerOptions{Chunk: 32})
	require.NoError(t, err)
	worst, n := 0.0, 0
	for _, seq := range g.Sequences {
		full := fullLogProbs(t, m, seq.Tokens)
		chunked, cache, err := s.Score(t.Context(), seq.Tokens)
		require.NoError(t, err)
		cache.Close()
		for i := 1; i < len(seq.Tokens); i++ {
			want := *seq.LogProbs[i]
			worst = math.Max(worst, math.Abs(want-float64(full[i-1])))
			require.InDelta(t, want, full[i-1], 2e-5, "unchunked, position %d", i)
			require.InDelta(t, want, chunked[i], 2e-5, "chunked, position %d", i)
			n++
		}
	}
	t.Logf("max |hindsight − PEFT| = %.2g nats over %d log-probs", worst, n)

	merged, err := mergedTensors(newTestBackend(t), m, safetensors.DtypeF32)
	require.NoError(t, err)
	seen := 0
	for _, nt := range merged {
		want, ok := g.Merged[nt.Name]
		if !ok {
			continue
		}
		seen++
		var sum, sq float64
		for _, x := range nt.Values {
			sum += float64(x)
			sq += float64(x) * float64(x)
		}
		require.InDelta(t, want.Sum, sum, 1e-4, nt.Name)
		require.InDelta(t, want.SumSq, sq, 1e-5*want.SumSq, nt.Name)
		for i, v := range want.Samples {
			require.InDelta(t, v, nt.Values[i*want.Stride], 1e-6, "%s[%d]", nt.Name, i*want.Stride)
		}
	}
	require.Equal(t, len(g.Merged), seen)
	require.Equal(t, len(loraModules(m.Config, m.LoRA().Targets)), seen)
}

// writePEFTAdapter trains rank-4 adapters on every projection of the committed
// transformers checkpoint for a few steps (a large learning rate, so the adapter
// moves the log-probs visibly) and copies the checkpoint's adapter/ into
// peftAdapterDir with base_model_name_or_path relative to it.
func writePEFTAdapter(t *testing.T) {
	base := filepath.Join(peftAdapterDir, peftBase)
	m, err := Open(base, OpenOptions{})
	require.NoError(t, err)
	opts := loraOptions(nil)
	opts.Credit.KLBeta = 0
	opts.Optimizer.LR, opts.Optimizer.WarmupSteps, opts.Optimizer.TotalSteps = 0.05, 0, 0
	opts.LoRA.BaseModel = peftBase
	tr, err := NewTrainer(newTestBackend(t), m, opts)
	require.NoError(t, err)
	trainSteps(t, tr, rolloutPool(6, 77), 6)
	files, err := checkpoint.ModelFiles(base)
	require.NoError(t, err)
	ck, err := tr.SaveCheckpoint(t.TempDir(), files, checkpoint.TrainerState{}, 1)
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(peftAdapterDir, 0o755))
	for _, n := range []string{checkpoint.AdapterModelFileName, checkpoint.AdapterConfigFileName} {
		b, err := os.ReadFile(filepath.Join(ck, n))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(peftAdapterDir, filepath.Base(n)), b, 0o644))
	}
}
