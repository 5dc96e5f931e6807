package train

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/credit"
	"github.com/hindsight-ai/hindsight/data"
	"github.com/hindsight-ai/hindsight/data/creditfile"
	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/ledger"
	"github.com/hindsight-ai/hindsight/rollout"
	"github.com/hindsight-ai/hindsight/teacher"
	"github.com/hindsight-ai/hindsight/xla"
)

// TestLoopScoresSiblings runs the loop on a tiny model over one step of three attempts
// at the same task, one of them a success: each failed attempt is scored with the
// success in its teacher's context (over its whole response, since it has no other
// selection), and its credit row carries the hint as scored; the success has none.
func TestLoopScoresSiblings(t *testing.T) {
	root := t.TempDir()
	modelDir := filepath.Join(root, "model")
	_, err := data.InitModel(modelDir, data.InitOptions{Preset: "tiny", Tokenizer: "bytes"})
	require.NoError(t, err)
	md, err := data.OpenModelDir(modelDir)
	require.NoError(t, err)
	defer md.Close()
	sp, err := rollout.OpenSpool(filepath.Join(root, "spool"), filepath.Join(root, "state", "journal.jsonl"),
		rollout.ReadOptions{}, zerolog.Nop())
	require.NoError(t, err)
	defer sp.Close()
	_, err = rollout.WriteSynth(sp.Dir(rollout.DirIncoming), rollout.SynthOptions{N: 3, PerFile: 3, Tokens: 256, Seed: 4, IDPrefix: "sib"})
	require.NoError(t, err)
	names, err := sp.Pending()
	require.NoError(t, err)
	c, err := sp.Claim(names[0])
	require.NoError(t, err)
	rep, err := sp.Process(t.Context(), c)
	require.NoError(t, err)
	l, err := ledger.Open(ledger.Options{SkipLog: filepath.Join(root, "state", "skipped.txt"),
		StagingDir: filepath.Join(root, "state", "credit"), OutputDir: filepath.Join(root, "outputs"),
		Unfinished: sp.Journal().Unfinished(),
		Finish: func(_ context.Context, c *rollout.ClaimState, rep *rollout.FileReport) error {
			return sp.Finish(c, rep)
		}})
	require.NoError(t, err)
	defer l.Close()

	tcfg := teacher.DefaultConfig()
	tcfg.Template = teacher.Template{Preset: "bytes", Label: "Hint: "}
	tcfg.Context.Sources = []string{teacher.ContextSibling}
	tcfg.Context.Sibling.MaxTokens = 0
	h, err := teacher.New(tcfg, teacher.Deps{Tokenizer: md.Tokenizer, Logger: zerolog.Nop()})
	require.NoError(t, err)

	cfg := DefaultConfig()
	cfg.TokenBudget, cfg.IdleFlush, cfg.Checkpoint.EverySteps = 1<<20, 50*time.Millisecond, 0
	ccfg := credit.DefaultConfig()
	ccfg.Normalize = credit.NormalizeSeparate
	lp, err := Open(Options{Config: cfg, Credit: ccfg, Backend: xla.ResolveBackend("", ""),
		ModelDir: modelDir, Tokenizer: md.Tokenizer, CheckpointDir: filepath.Join(root, "checkpoints"), ResumeFrom: -1,
		Ledger: l, Pause: never{}, Log: zerolog.Nop(), Siblings: h.Siblings})
	require.NoError(t, err)

	in := make(chan *Item, 8)
	f := &ledger.File{Claim: c, Report: rep}
	ids := map[string]float32{}
	require.NoError(t, sp.Accepted(c, func(row int, r *rollout.Rollout) bool {
		r = r.Clone()
		r.TaskID, r.HasReward, r.Reward = "one-task", true, 0
		if row == 1 {
			r.Reward = 1
		}
		ids[r.ID] = r.Reward
		it := NewItem(f, row, r)
		it.Resolve(teacher.Result{}) // no hint of its own
		in <- it
		return true
	}))
	in <- NewEnd(f, 0)
	obs := &recorder{}
	ran := make(chan error, 1)
	go func() { ran <- lp.Run(t.Context(), t.Context(), in, obs) }()
	require.Eventually(t, func() bool { return obs.finished() == 1 }, 2*time.Minute, 20*time.Millisecond)
	close(in)
	require.NoError(t, <-ran)

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
