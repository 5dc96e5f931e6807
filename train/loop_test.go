package train

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/credit"
	"github.com/hindsight-ai/hindsight/data/creditfile"
	"github.com/hindsight-ai/hindsight/ledger"
	"github.com/hindsight-ai/hindsight/rollout"
	"github.com/hindsight-ai/hindsight/teacher"
	"github.com/hindsight-ai/hindsight/xla"
)

// recorder is an Observer that keeps what it is told.
type recorder struct {
	mu    sync.Mutex
	steps []xla.Metrics
	done  []ledger.Finished
	ckpts []int64
}

func (r *recorder) Heartbeat()           {}
func (r *recorder) Batch(int, int)       {}
func (r *recorder) Hints([]teacher.Hint) {}
func (r *recorder) Skipped()             {}
func (r *recorder) Failed(error, string) {}
func (r *recorder) Awaiting(int64)       {}
func (r *recorder) Stepped(m xla.Metrics, _ int64) {
	r.mu.Lock()
	r.steps = append(r.steps, m)
	r.mu.Unlock()
}
func (r *recorder) FileDone(f ledger.Finished) {
	r.mu.Lock()
	r.done = append(r.done, f)
	r.mu.Unlock()
}
func (r *recorder) Checkpointed(step int64, _ string, _ time.Time, _, _ int64) {
	r.mu.Lock()
	r.ckpts = append(r.ckpts, step)
	r.mu.Unlock()
}

func (r *recorder) finished() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.done)
}

// never is a Pauser that never pauses.
type never struct{}

func (never) Paused() (bool, <-chan struct{}) { return false, nil }
func (never) DiskFull() bool                  { return false }

// TestLoopTrainsAFileToDone runs the loop on its own (no daemon) over one file of
// three rollouts: a partial batch is stepped once the loop is idle, the checkpoint
// is written, the after-checkpoint hook sees its weights on the device goroutine, and
// the ledger finishes the file, which the Observer hears as a file-done event.
func TestLoopTrainsAFileToDone(t *testing.T) {
	fx := newLoopFixture(t, nil, func(incoming string) {
		_, err := rollout.WriteSynth(incoming, rollout.SynthOptions{N: 3, PerFile: 3, Tokens: 256, Seed: 4, IDPrefix: "loop"})
		require.NoError(t, err)
	})
	require.Equal(t, 3, fx.rep.Accepted)
	root, md, sp, c, rep := fx.root, fx.md, fx.sp, fx.claim, fx.rep

	var hooked []Checkpoint
	lp, err := Open(Options{Config: idleConfig(), Credit: credit.DefaultConfig(), Backend: xla.ResolveBackend("", ""),
		ModelDir: fx.modelDir, Tokenizer: md.Tokenizer, CheckpointDir: filepath.Join(root, "checkpoints"), ResumeFrom: -1,
		Ledger: fx.ledger, Pause: never{}, Log: zerolog.Nop(),
		AfterCheckpoint: func(_ context.Context, c Checkpoint) error {
			require.Equal(t, c.Step, c.Trainer.StepCount())
			hooked = append(hooked, c)
			return nil
		}})
	require.NoError(t, err)
	require.Zero(t, lp.Info().Step)

	obs := fx.run(t, lp, nil)

	require.Len(t, obs.steps, 1, "one idle step for the partial batch")
	require.Equal(t, 3, obs.steps[0].Rollouts)
	require.Equal(t, []int64{1}, obs.ckpts)
	require.Len(t, hooked, 1)
	require.DirExists(t, hooked[0].Dir)
	done := obs.done[0]
	require.Equal(t, 3, done.Rows)
	require.Equal(t, rollout.OutcomeDone, done.Report.Outcome)
	rows, err := creditfile.Read(done.CreditFile)
	require.NoError(t, err)
	require.Len(t, rows, 3)
	require.EqualValues(t, 1, rows[0].Step)
	for _, r := range rows { // schema v2: the trainer's ρ and μ, the rollout's segments and tokenizer
		T := len(r.Tokens)
		require.Len(t, r.Rho, T)
		require.Len(t, r.Sampler, T)
		require.Len(t, r.Delta, T)
		require.NotEmpty(t, r.Segments)
		require.EqualValues(t, T, r.Segments[len(r.Segments)-1].End)
		require.Equal(t, md.Tokenizer.Fingerprint(), r.Tokenizer)
		for i := range T {
			require.Equal(t, r.LossMask[i], r.Rho[i] > 0, "token %d: ρ > 0 exactly where trained", i)
		}
	}
	require.Nil(t, sp.Journal().Open(c.Seq), "finished in the journal")
	require.NoDirExists(t, filepath.Join(root, "state", "credit", strings.TrimSuffix(rep.Claimed, ".arrow")), "staging removed")
	require.NoFileExists(t, filepath.Join(sp.Dir(rollout.DirProcessing), rep.Claimed))
}
