package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/credit"
	"github.com/hindsight-ai/hindsight/data"
	"github.com/hindsight-ai/hindsight/data/checkpoint"
	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/rollout"
	"github.com/hindsight-ai/hindsight/xla"
)

var updateTransformersCheckpoint = flag.Bool("update-transformers-checkpoint", false,
	"rewrite testdata/transformers/checkpoints (then run scripts/transformers_goldens.py to remake the goldens)")

// transformersTestdata holds the committed checkpoint and the log-probs that
// transformers computes for it (scripts/transformers_goldens.py).
const transformersTestdata = "../../testdata/transformers"

// transformersGoldens is what scripts/transformers_goldens.py writes.
type transformersGoldens struct {
	Transformers string `json:"transformers"` // transformers.__version__ that made them
	Torch        string `json:"torch"`
	Dtype        string `json:"dtype"` // of transformers' forward: float64 unless asked otherwise
	Model        string `json:"model"` // the model directory, relative to the goldens file unless absolute
	Sequences    []struct {
		Tokens []int32 `json:"tokens"`
		// LogProbs[t] = log p(tokens[t] | tokens[:t]) in nats; LogProbs[0] is null.
		LogProbs []*float64 `json:"logprobs"`
	} `json:"sequences"`
}

// TestTransformersGoldens: `hindsight score` on a committed trained checkpoint gives
// the per-token log-probs transformers gives (the pinned release, TransformersVersion)
// to 1e-5 nats. With HINDSIGHT_TRANSFORMERS_GOLDENS naming another goldens file (the
// live check, scripts/transformers_live_check.sh) it compares that file's model instead.
func TestTransformersGoldens(t *testing.T) {
	t.Setenv("GOMLX_BACKEND", "")
	path := os.Getenv("HINDSIGHT_TRANSFORMERS_GOLDENS")
	live := path != ""
	if !live {
		path = filepath.Join(transformersTestdata, "goldens.json")
	}
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	var g transformersGoldens
	require.NoError(t, json.Unmarshal(raw, &g))
	if !live {
		require.Equal(t, data.TransformersVersion, g.Transformers, "the goldens are of the release config.json names")
	}
	modelDir := g.Model
	if !filepath.IsAbs(modelDir) {
		modelDir = filepath.Join(filepath.Dir(path), modelDir)
	}
	md, err := data.OpenModelDir(modelDir)
	require.NoError(t, err)
	fingerprint := md.Tokenizer.Fingerprint()
	md.Close()

	dir := t.TempDir()
	var rs []*rollout.Rollout
	for i, s := range g.Sequences {
		require.Len(t, s.LogProbs, len(s.Tokens))
		rs = append(rs, &rollout.Rollout{ID: fmt.Sprint(i), Tokens: s.Tokens, LogProbs: make([]float32, len(s.Tokens)), Tokenizer: fingerprint})
	}
	in, out := filepath.Join(dir, "in.arrow"), filepath.Join(dir, "scores.arrow")
	require.NoError(t, rollout.WriteFile(in, rs, rollout.WriteOptions{}))
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"score", "-model", modelDir, "-in", in, "-out", out, "-chunk", "64"}, &stdout, &stderr)
	require.Equal(t, 0, code, stderr.String())

	f, err := os.Open(out)
	require.NoError(t, err)
	defer f.Close()
	r, err := ipc.NewFileReader(f)
	require.NoError(t, err)
	defer r.Close()
	rec, err := r.Record(0)
	require.NoError(t, err)
	require.EqualValues(t, len(g.Sequences), rec.NumRows())
	lists := rec.Column(1).(*array.LargeList)
	vals := lists.ListValues().(*array.Float32)
	worst, n := 0.0, 0
	for i, s := range g.Sequences {
		start, end := lists.ValueOffsets(i)
		require.EqualValues(t, len(s.Tokens), end-start)
		require.Nil(t, s.LogProbs[0])
		for j := 1; j < len(s.Tokens); j++ {
			require.NotNil(t, s.LogProbs[j], "sequence %d position %d", i, j)
			got := float64(vals.Value(int(start) + j))
			d := math.Abs(got - *s.LogProbs[j])
			worst = max(worst, d)
			n++
			require.LessOrEqual(t, d, 1e-5, "sequence %d position %d: hindsight %v, transformers %v", i, j, got, *s.LogProbs[j])
		}
	}
	t.Logf("%s: %d log-probs, max |hindsight score − transformers %s (%s)| = %.2g nats", modelDir, n, g.Transformers, g.Dtype, worst)
}

// TestMakeTransformersCheckpoint rewrites testdata/transformers/checkpoints with
// -update-transformers-checkpoint: a tiny byte-tokenizer model trained a few steps
// (so its weights are not the initializer's), checkpointed as the daemon does.
func TestMakeTransformersCheckpoint(t *testing.T) {
	if !*updateTransformersCheckpoint {
		t.Skip("run with -update-transformers-checkpoint to rewrite the committed checkpoint")
	}
	t.Setenv("GOMLX_BACKEND", "")
	modelDir := filepath.Join(t.TempDir(), "model")
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, run(t.Context(), []string{"init-model", "-out", modelDir, "-seed", "14"}, &stdout, &stderr), stderr.String())
	m, err := xla.Open(modelDir, xla.OpenOptions{})
	require.NoError(t, err)
	b, err := xla.NewBackend(xla.DefaultBackend)
	require.NoError(t, err)
	cfg := credit.DefaultConfig()
	tr, err := xla.NewTrainer(b, m, xla.TrainerOptions{Budget: 256, Chunk: 64, Scorer: xla.ScorerOptions{Chunk: 64}, Credit: cfg, Seed: 1,
		Optimizer:    xla.AdamWConfig{LR: 3e-2, MinLR: 3e-2, Beta1: 0.9, Beta2: 0.99, Eps: 1e-8, ClipNorm: 1, TotalSteps: 100},
		TeacherModel: xla.TeacherModelConfig{Mode: xla.TeacherLive}})
	require.NoError(t, err)
	texts := []string{"the grep call failed because the path was wrong", "search_code finds the function in one call", "ok", "the tests pass now"}
	for step := range 4 {
		var batch []credit.Sequence
		for i, s := range texts {
			toks := append([]int32{tokenizer.BytesBOS}, []int32(nil)...)
			for _, c := range []byte(s) {
				toks = append(toks, int32(c))
			}
			r := credit.Sequence{ID: fmt.Sprintf("s%d-%d", step, i), TaskID: "t", Tokens: toks, Sampler: make([]float64, len(toks)),
				Trainable: make([]bool, len(toks)), Reward: float64(i % 2), HasReward: true}
			for j := range toks {
				r.Sampler[j] = -5
				r.Trainable[j] = j > 0
			}
			batch = append(batch, r)
		}
		_, err := tr.Step(t.Context(), batch)
		require.NoError(t, err)
	}
	files, err := checkpoint.ModelFiles(modelDir)
	require.NoError(t, err)
	root := filepath.Join(transformersTestdata, "checkpoints")
	require.NoError(t, os.RemoveAll(root))
	_, err = tr.SaveCheckpoint(root, files, checkpoint.TrainerState{CodeVersion: "TestMakeTransformersCheckpoint"}, 1)
	require.NoError(t, err)
}
