package train

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/data"
	"github.com/hindsight-ai/hindsight/internal/testwait"
	"github.com/hindsight-ai/hindsight/ledger"
	"github.com/hindsight-ai/hindsight/rollout"
	"github.com/hindsight-ai/hindsight/teacher"
)

// loopFixture is what the loop needs to run on its own, as the daemon runs it: a tiny
// model directory, a spool with one claimed and decided file, and a ledger that
// finishes the file in the spool.
type loopFixture struct {
	root, modelDir string
	md             *data.ModelDir
	sp             *rollout.Spool
	claim          *rollout.ClaimState
	rep            *rollout.FileReport
	ledger         *ledger.Ledger
}

// newLoopFixture makes the model (then calls model, when set, to add files to its
// directory), has write drop the file into the spool's incoming/ folder, and claims
// and decides it. Everything is closed when the test ends.
func newLoopFixture(t *testing.T, model func(dir string), write func(incoming string)) *loopFixture {
	t.Helper()
	fx := &loopFixture{root: t.TempDir()}
	fx.modelDir = filepath.Join(fx.root, "model")
	_, err := data.InitModel(fx.modelDir, data.InitOptions{Preset: "tiny", Tokenizer: "bytes"})
	require.NoError(t, err)
	if model != nil {
		model(fx.modelDir)
	}
	fx.md, err = data.OpenModelDir(fx.modelDir)
	require.NoError(t, err)
	t.Cleanup(func() { fx.md.Close() })
	fx.sp, err = rollout.OpenSpool(filepath.Join(fx.root, "spool"), filepath.Join(fx.root, "state", "journal.jsonl"),
		rollout.ReadOptions{}, zerolog.Nop())
	require.NoError(t, err)
	t.Cleanup(func() { fx.sp.Close() })
	write(fx.sp.Dir(rollout.DirIncoming))
	names, err := fx.sp.Pending()
	require.NoError(t, err)
	fx.claim, err = fx.sp.Claim(names[0])
	require.NoError(t, err)
	fx.rep, err = fx.sp.Process(t.Context(), fx.claim)
	require.NoError(t, err)
	fx.ledger, err = ledger.Open(ledger.Options{SkipLog: filepath.Join(fx.root, "state", "skipped.txt"),
		StagingDir: filepath.Join(fx.root, "state", "credit"), OutputDir: filepath.Join(fx.root, "outputs"),
		Unfinished: fx.sp.Journal().Unfinished(),
		Finish: func(_ context.Context, c *rollout.ClaimState, rep *rollout.FileReport) error {
			return fx.sp.Finish(c, rep)
		}})
	require.NoError(t, err)
	t.Cleanup(func() { fx.ledger.Close() })
	return fx
}

// idleConfig is a loop config that steps a partial batch once idle (50 ms) and
// checkpoints only then.
func idleConfig() Config {
	cfg := DefaultConfig()
	cfg.TokenBudget, cfg.IdleFlush, cfg.Checkpoint.EverySteps = 1<<20, 50*time.Millisecond, 0
	return cfg
}

// run feeds the file's accepted rollouts to lp, each (after edit, when set, on its own
// copy) resolved without hints, then the file's end, and runs lp until the ledger has
// finished the file. It returns what the loop reported.
func (fx *loopFixture) run(t *testing.T, lp *Loop, edit func(row int, r *rollout.Rollout)) *recorder {
	t.Helper()
	in := make(chan *Item, fx.rep.Accepted+1)
	f := &ledger.File{Claim: fx.claim, Report: fx.rep}
	require.NoError(t, fx.sp.Accepted(fx.claim, func(row int, r *rollout.Rollout) bool {
		r = r.Clone()
		if edit != nil {
			edit(row, r)
		}
		it := NewItem(f, row, r)
		it.Resolve(teacher.Result{})
		in <- it
		return true
	}))
	in <- NewEnd(f, 0)
	obs := &recorder{}
	ran := make(chan error, 1)
	go func() { ran <- lp.Run(t.Context(), t.Context(), in, obs) }()
	require.Eventually(t, func() bool { return obs.finished() == 1 }, testwait.Guard(5*time.Minute), 20*time.Millisecond)
	close(in)
	require.NoError(t, <-ran)
	return obs
}
