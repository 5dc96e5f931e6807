package train

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/credit"
	"github.com/hindsight-ai/hindsight/data/creditfile"
	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/rollout"
	"github.com/hindsight-ai/hindsight/teacher"
	"github.com/hindsight-ai/hindsight/xla"
)

// TestLoopScoresSiblings runs the loop on a tiny model over one step of three attempts
// at the same task, one of them a success: each failed attempt is scored with the
// success in its teacher's context (over its whole response, since it has no other
// selection), and its credit row carries the hint as scored; the success has none.
func TestLoopScoresSiblings(t *testing.T) {
	fx := newLoopFixture(t, nil, func(incoming string) {
		_, err := rollout.WriteSynth(incoming, rollout.SynthOptions{N: 3, PerFile: 3, Tokens: 256, Seed: 4, IDPrefix: "sib"})
		require.NoError(t, err)
	})

	tcfg := teacher.DefaultConfig()
	tcfg.Template = teacher.Template{Preset: "bytes", Label: "Hint: "}
	tcfg.Context.Sources = []string{teacher.ContextSibling}
	tcfg.Context.Sibling.MaxTokens = 0
	h, err := teacher.New(tcfg, teacher.Deps{Tokenizer: fx.md.Tokenizer, Logger: zerolog.Nop()})
	require.NoError(t, err)

	ccfg := credit.DefaultConfig()
	ccfg.Normalize = credit.NormalizeSeparate
	lp, err := Open(Options{Config: idleConfig(), Credit: ccfg, Backend: xla.ResolveBackend("", ""),
		ModelDir: fx.modelDir, Tokenizer: fx.md.Tokenizer, CheckpointDir: filepath.Join(fx.root, "checkpoints"), ResumeFrom: -1,
		Ledger: fx.ledger, Pause: never{}, Log: zerolog.Nop(), Siblings: h.Siblings})
	require.NoError(t, err)

	ids := map[string]float32{}
	obs := fx.run(t, lp, func(row int, r *rollout.Rollout) {
		r.TaskID, r.HasReward, r.Reward = "one-task", true, 0
		if row == 1 {
			r.Reward = 1
		}
		ids[r.ID] = r.Reward
	})

	require.Len(t, obs.steps, 1)
	st := obs.steps[0].Credit
	require.Positive(t, st.DistillTokens, "the failed attempts' responses are scored with the sibling")
	require.Positive(t, st.DistillWeightAbs)
	rows, err := creditfile.Read(obs.done[0].CreditFile)
	require.NoError(t, err)
	require.Len(t, rows, 3)
	bytes := tokenizer.NewBytes()
	for _, row := range rows {
		if ids[row.RolloutID] == 1 {
			require.Empty(t, row.Hints, "the success has no sibling")
			continue
		}
		require.Len(t, row.Hints, 1, row.RolloutID)
		hint := row.Hints[0]
		require.Equal(t, "context", hint.Source)
		require.Equal(t, string(teacher.ReasonSibling), hint.Reason)
		text, err := bytes.Decode(hint.Tokens)
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(text, "<|user|>A correct attempt:\n"), text[:min(len(text), 80)])
	}
}
