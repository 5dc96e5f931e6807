package train

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/credit"
	"github.com/hindsight-ai/hindsight/data/checkpoint"
	"github.com/hindsight-ai/hindsight/data/safetensors"
	"github.com/hindsight-ai/hindsight/rollout"
	"github.com/hindsight-ai/hindsight/xla"
)

// loopRun is what runFile saw: the steps, the log and the model directory and
// checkpoint the run started from and wrote.
type loopRun struct {
	steps      []xla.Metrics
	log        string
	model      string // the model directory
	checkpoint string // the step directory written
}

// runFile runs the loop, as the daemon does (spool, ledger, Open, Run), over one file
// of rollouts rs with credit config cc, until the file is done. extra are files added
// to the model directory.
func runFile(t *testing.T, rs []*rollout.Rollout, cc credit.Config, extra map[string]string) loopRun {
	t.Helper()
	fx := newLoopFixture(t, func(dir string) {
		for n, b := range extra {
			require.NoError(t, os.WriteFile(filepath.Join(dir, n), []byte(b), 0o644))
		}
	}, func(incoming string) {
		require.NoError(t, rollout.WriteFile(filepath.Join(incoming, "demos.arrow"), rs, rollout.WriteOptions{}))
	})
	require.Equal(t, len(rs), fx.rep.Accepted, "%v", fx.rep.Problems)
	modelDir := fx.modelDir

	var logs bytes.Buffer
	var dirs []string
	lp, err := Open(Options{Config: idleConfig(), Credit: cc, Backend: xla.ResolveBackend("", ""),
		ModelDir: modelDir, CheckpointDir: filepath.Join(fx.root, "checkpoints"), ResumeFrom: -1,
		Ledger: fx.ledger, Pause: never{}, Log: zerolog.New(&logs),
		AfterCheckpoint: func(_ context.Context, c Checkpoint) error {
			dirs = append(dirs, c.Dir)
			return nil
		}})
	require.NoError(t, err)
	obs := fx.run(t, lp, nil)
	require.Len(t, dirs, 1)
	return loopRun{steps: obs.steps, log: logs.String(), model: modelDir, checkpoint: dirs[0]}
}

// demos returns n synthetic rollouts of one task without sampler log-probs (a null
// list, as a recorder of demonstrations writes), rewards alternating 1 and 0 so that
// each has an outcome advantage.
func demos(n int) []*rollout.Rollout {
	rs := make([]*rollout.Rollout, n)
	for i := range rs {
		r := rollout.Synthesize(rollout.SynthOptions{Tokens: 256, Seed: 5, GroupSize: n, IDPrefix: "demo"}, i)
		r.LogProbs = nil
		r.SetLogProbValidity(nil, 0)
		r.Reward, r.HasReward = float32(1-i%2), true
		rs[i] = r
	}
	return rs
}

// changedTensors counts the tensors of the checkpoint's model.safetensors that differ
// from the model directory's.
func changedTensors(t *testing.T, run loopRun) int {
	t.Helper()
	before, err := safetensors.OpenDir(run.model)
	require.NoError(t, err)
	defer before.Close()
	after, err := safetensors.Open(filepath.Join(run.checkpoint, safetensors.FileName))
	require.NoError(t, err)
	defer after.Close()
	changed := 0
	for _, name := range before.Names() {
		b, err := before.Tensor(name)
		require.NoError(t, err)
		a, err := after.Tensor(name)
		require.NoError(t, err)
		bv, err := b.Float32s()
		require.NoError(t, err)
		av, err := a.Float32s()
		require.NoError(t, err)
		if !equalFloats(bv, av) {
			changed++
		}
	}
	return changed
}

func equalFloats(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestLoopTrainsRolloutsWithoutLogProbsWhenAllowed: with credit.allow_no_sampler the
// daemon's loop trains rollouts that have no sampler log-prob at all (their outcome
// advantages are ±0.67): the step updates and the checkpoint's weights differ from
// the model's. Without it the same rollouts train nothing, the weights stay, and the
// step's log line names the rollouts and the reason, not a missing signal.
func TestLoopTrainsRolloutsWithoutLogProbsWhenAllowed(t *testing.T) {
	rs := demos(4)

	cc := credit.DefaultConfig()
	cc.AllowNoSampler = true
	run := runFile(t, rs, cc, nil)
	require.Len(t, run.steps, 1)
	met := run.steps[0]
	require.True(t, met.Updated, run.log)
	require.Positive(t, met.Credit.Tokens)
	require.Equal(t, 4, met.Credit.NoSampler)
	require.Zero(t, met.Credit.Skipped)
	require.InDelta(t, 2.0/3, met.Credit.AOutAbsMean, 1e-6)
	require.Positive(t, changedTensors(t, run), "the weights moved")
	require.NotContains(t, run.log, "step without update")

	run = runFile(t, rs, credit.DefaultConfig(), nil)
	require.Len(t, run.steps, 1)
	require.False(t, run.steps[0].Updated)
	require.Zero(t, changedTensors(t, run), "no update: the weights stay")
	require.Contains(t, run.log, `"level":"warn"`)
	require.Contains(t, run.log, "step without update, weights unchanged: no trainable token in the batch: "+
		"4 rollouts (demo-000000, demo-000001, demo-000002, demo-000003): no sampler log-probs, and credit.allow_no_sampler is false")
	require.NotContains(t, run.log, "no hint credit")
}

// TestLoopCheckpointKeepsTheModelsFiles: the loop's checkpoint holds every file of a
// transformers 5 model directory that is not weights, byte for byte (the chat
// template in chat_template.jinja, the special-token maps, a SentencePiece model),
// and no weights but its own model.safetensors.
func TestLoopCheckpointKeepsTheModelsFiles(t *testing.T) {
	extra := map[string]string{
		"chat_template.jinja":          "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}",
		"special_tokens_map.json":      `{"eos_token": "<|end|>"}`,
		"added_tokens.json":            `{"<|end|>": 264}`,
		"tokenizer.model":              "sentencepiece bytes",
		"pytorch_model.bin":            "old weights",
		"model.safetensors.index.json": `{"weight_map": {"lm_head.weight": "model-00001-of-00002.safetensors"}}`,
		"model.gguf":                   "GGUF",
	}
	run := runFile(t, demos(2), credit.DefaultConfig(), extra)
	entries, err := os.ReadDir(run.model)
	require.NoError(t, err)
	for _, e := range entries {
		n := e.Name()
		if n == safetensors.FileName {
			continue // the checkpoint's own weights
		}
		if checkpoint.IsWeightFile(n) {
			require.NoFileExists(t, filepath.Join(run.checkpoint, n))
			continue
		}
		want, err := os.ReadFile(filepath.Join(run.model, n))
		require.NoError(t, err)
		got, err := os.ReadFile(filepath.Join(run.checkpoint, n))
		require.NoError(t, err, n)
		require.Equal(t, string(want), string(got), n)
	}
	require.FileExists(t, filepath.Join(run.checkpoint, "chat_template.jinja"))
	weights, err := filepath.Glob(filepath.Join(run.checkpoint, "*.safetensors"))
	require.NoError(t, err)
	require.Equal(t, []string{filepath.Join(run.checkpoint, safetensors.FileName)}, weights)
	_, err = checkpoint.Verify(run.checkpoint)
	require.NoError(t, err, "the manifest lists the copied files")
}
