package train

import (
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/credit"
	"github.com/hindsight-ai/hindsight/rollout"
	"github.com/hindsight-ai/hindsight/xla"
)

// TestLoopBF16: the loop opened with model.precision bf16 computes in bf16, trains
// a file to its checkpoint, and a second loop resumes that checkpoint in bf16 and
// in f32 (a checkpoint moves between precisions: its model file, F32 for the tiny
// preset, is the float32 masters).
func TestLoopBF16(t *testing.T) {
	fx := newLoopFixture(t, nil, func(incoming string) {
		_, err := rollout.WriteSynth(incoming, rollout.SynthOptions{N: 2, PerFile: 2, Tokens: 96, Seed: 5, IDPrefix: "bf16"})
		require.NoError(t, err)
	})
	cc := credit.DefaultConfig()
	cc.Baseline = credit.BaselineNone // the rewards are the advantages: the step updates
	open := func(p xla.Precision) *Loop {
		lp, err := Open(Options{Config: idleConfig(), Credit: cc, Backend: xla.ResolveBackend("", ""),
			ModelDir: fx.modelDir, Precision: p, Tokenizer: fx.md.Tokenizer, CheckpointDir: filepath.Join(fx.root, "checkpoints"),
			ResumeFrom: -1, Ledger: fx.ledger, Pause: never{}, Log: zerolog.Nop()})
		require.NoError(t, err)
		return lp
	}
	lp := open(xla.PrecisionBF16)
	require.Equal(t, xla.PrecisionBF16, lp.tr.Model().Precision())
	obs := fx.run(t, lp, nil)
	require.Len(t, obs.steps, 1)
	require.True(t, obs.steps[0].Updated)
	require.Equal(t, []int64{1}, obs.ckpts)

	for _, p := range []xla.Precision{xla.PrecisionBF16, xla.PrecisionF32} {
		again := open(p)
		require.EqualValues(t, 1, again.Info().Step, "resumed in %s", p)
		require.NotEmpty(t, again.Info().Checkpoint)
		require.Equal(t, p, again.tr.Model().Precision())
	}
}
